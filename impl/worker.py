"""The job-code API of the Worker SDK: a registry of kinds and the context a running job receives.

    registry = Registry()

    @registry.kind("summarize", queue="ai")
    def summarize(ctx: JobContext, input):
        text = ctx.step("fetch", lambda: fetch(input["url"]))
        summary = ctx.step("llm", lambda: llm(text), cost=lambda r: (r["usd_micros"], r["tokens"]))
        ctx.emit({"progress": 1.0})
        return summary

A kind is a registry name (contract §12: each SDK maps it to code its own way). The job function's
return value is the `succeed` outcome; raising maps to the other §7 outcomes (see `outcome_for`).
Steps are memoized (§8.2): a journaled step never runs again, so a re-run after a crash skips what
the first run recorded. Sleeping, awaiting a signal and awaiting children park the job durably (the
park is itself the ack) and unwind the job code with `Parked`; the job runs again from the top when
it resumes, and memoized steps bring it back to where it was.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from impl.flag import Flag
from model import ops
from model import worker_ops as w
from model.cron import CronDef
from model.envelope import decode
from model.rows import Job

Cost = tuple[int, int] | Callable[[Any], tuple[int, int]] | None


# --- control flow: how job code ends other than by returning -----------------------------------------


class Parked(BaseException):
    """The job parked itself (sleep, await) with a fenced write; the runtime must not ack again.
    A BaseException so a job's broad `except Exception` cannot swallow it."""


class LeaseLost(BaseException):
    """This attempt no longer owns the job (its lease was lost or a fenced write was stale)."""


class CancelRequested(BaseException):
    """An operator asked to cancel; honoured at a step boundary (ack outcome: cancel)."""


class BudgetExceeded(Exception):
    """Durable spend crossed a budget column: the job fails with budget_exceeded, no retry (§8.2)."""


class UnknownKind(Exception):
    """No code is registered under the job's kind: fails the job at once with error unknown_kind."""


class SignalTimeout(Exception):
    """await_signal's deadline passed without the signal."""


class Snooze(Exception):
    """Raise to snooze: ready again at `until`, spending no attempt."""

    def __init__(self, until: datetime | timedelta) -> None:
        super().__init__(f"snoozed until {until}")
        self.until = until


class Fail(Exception):
    """Raise to fail without retrying (the error is recorded; attempts left are not used)."""


# --- the registry ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    name: str
    fn: Callable[..., Any]
    queue: str = "default"
    chunk_size: int | None = None  # chunk workers: fn(contexts) → {job_id: result | Exception}
    gather_ms: int = 0
    backoff: w.Backoff = w.Backoff()


def import_app(module_name: str) -> Any:
    """`--app MODULE` (`belay worker`, `replay`, `cron list`, `mcp`): the module, looked up from the working
    directory too, as celery, rq and uvicorn do — an installed `belay` is a console script, whose sys.path
    does not hold the working directory."""
    import importlib
    import os
    import sys

    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    return importlib.import_module(module_name)


class Registry:
    """Kinds by name, and static crons declared beside them (`cron`). Unknown kinds fail the job with
    error `unknown_kind` (never silently)."""

    def __init__(self) -> None:
        self.kinds: dict[str, Kind] = {}
        self.crons: dict[str, CronDef] = {}  # as declared; `static_crons()` resolves their queues
        self._cron_queue_given: set[str] = set()

    def kind(
        self, name: str, *, queue: str = "default", chunk: dict | None = None, backoff: w.Backoff = w.Backoff()
    ) -> Callable[[Callable], Callable]:
        ops.require_name(name, "kind")

        def register(fn: Callable) -> Callable:
            if name in self.kinds:
                raise ValueError(f"kind {name!r} is registered twice")
            size = gather = None
            if chunk is not None:
                unknown = sorted(set(chunk) - {"size", "gather_ms"})
                if unknown:
                    raise ValueError(f"unknown chunk options {unknown}; known: size, gather_ms")
                size, gather = int(chunk.get("size", 100)), int(chunk.get("gather_ms", 0))
                if size < 1 or gather < 0:
                    raise ValueError("chunk size must be >= 1 and gather_ms >= 0")
            self.kinds[name] = Kind(name, fn, queue, size, gather or 0, backoff)
            return fn

        return register

    def queues(self) -> set[str]:
        return {k.queue for k in self.kinds.values()}

    def cron(
        self,
        name: str,
        expression: str,
        kind: str,
        input: Any = None,
        *,
        queue: str | None = None,
        priority: int = 0,
        max_attempts: int = 20,
    ) -> CronDef:
        """Declare a static cron (§8.5): every UTC minute slot matching `expression` inserts one job of
        `kind` (exactly once per slot across the fleet). `queue` defaults to the kind's queue (or
        'default' for a kind this registry does not run). A belay_crons row of the same name (`belay
        cron put`, `Client.put_cron`) merges over it; a paused row silences it.

            registry.cron("nightly-report", "0 3 * * *", "report", {"scope": "all"})
        """
        ops.require_name(name, "cron name")
        ops.require_name(kind, "kind")
        if name in self.crons:
            raise ValueError(f"cron {name!r} is declared twice")
        declared = CronDef(name, expression, kind, input, queue or "default", priority, max_attempts)
        self.crons[name] = declared
        if queue is not None:
            self._cron_queue_given.add(name)
        return declared

    def static_crons(self) -> tuple[CronDef, ...]:
        """The declared crons, each on its queue (given, else its kind's), in name order."""
        out = []
        for name, c in sorted(self.crons.items()):
            kind = self.kinds.get(c.worker)
            if name not in self._cron_queue_given and kind is not None:
                c = replace(c, queue=kind.queue)
            out.append(c)
        return tuple(out)


def _deadline(now: datetime, timeout: timedelta | float | None) -> datetime | None:
    """`now + timeout` (seconds or a timedelta); None without a timeout."""
    if timeout is None:
        return None
    return now + (timeout if isinstance(timeout, timedelta) else timedelta(seconds=timeout))


# --- the context a job receives ---------------------------------------------------------------------------


@dataclass(init=False)
class JobContext:
    """One running attempt. `store` is the PgStore (or any store with the same vocabulary).

    The constructor is written out (the dataclass's, with three default factories, was a tenth of a
    chunked claim's Python time, issue 17); same arguments and defaults."""

    job: Job
    store: Any
    clock: Callable[[], datetime]
    lost: Flag = field(default_factory=Flag)  # threading.Event's interface, cheaper (impl/flag.py)
    # Set while a call that gives the lease up (ack, park) is in flight or done: a renewal that no
    # longer finds the lease then is this attempt's own release, not a lease lost (the fence decides).
    releasing: Flag = field(default_factory=Flag)
    steps_run: list[str] = field(default_factory=list)
    # The runtime's retrying store call (Worker.call: `call(fn, what)`), set on every context it runs: a
    # step boundary's reads and journaling retry through a database outage like the runtime's own calls.
    # Without it a crash-restart during a step surfaced as the job's own error (AdminShutdown) and, on a
    # last attempt, failed the job (two-hour soak, P9). None: the store is called directly.
    call: Callable[[Callable[[], Any], str], Any] | None = None

    def __init__(
        self,
        job: Job,
        store: Any,
        clock: Callable[[], datetime],
        lost: Flag | None = None,
        releasing: Flag | None = None,
        steps_run: list[str] | None = None,
        call: Callable[[Callable[[], Any], str], Any] | None = None,
    ) -> None:
        self.job, self.store, self.clock, self.call = job, store, clock, call
        self.lost = Flag() if lost is None else lost
        self.releasing = Flag() if releasing is None else releasing
        self.steps_run = [] if steps_run is None else steps_run

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def attempt(self) -> int:
        return self.job.attempt

    def _apply(self, op: Any, what: str) -> Any:
        """A read or an idempotent write of a step boundary (a journaled step's first write wins, a spawn
        is keyed), retried through transient faults when the runtime gave a `call`."""
        if self.call is None:
            return self.store.apply(op)
        return self.call(functools.partial(self.store.apply, op), what)

    def _boundary(self) -> w.BudgetOk:
        """A step boundary: the lease still ours, no cancel request, the budget not crossed."""
        if self.lost.is_set():
            raise LeaseLost(f"job {self.id} attempt {self.attempt}: lease lost")
        verdict = self._apply(w.Preflight(self.id), "step boundary")
        if isinstance(verdict, w.JobGone):
            raise LeaseLost(f"job {self.id} no longer exists")
        if verdict.cancel_requested:
            raise CancelRequested(f"job {self.id}: cancel requested")
        if isinstance(verdict, w.OverBudget):
            raise BudgetExceeded(f"spent {verdict.spent_usd_micros} µ$ / {verdict.spent_tokens} tokens")
        return verdict

    def check_budget(self) -> None:
        """Durable spend over a budget column ⇒ BudgetExceeded (checked before a budgeted job succeeds)."""
        verdict = self._apply(w.Preflight(self.id), "step boundary")
        if isinstance(verdict, w.OverBudget):
            raise BudgetExceeded(f"spent {verdict.spent_usd_micros} µ$ / {verdict.spent_tokens} tokens")

    def step(self, name: str, fn: Callable[[], Any], *, cost: Cost = None) -> Any:
        """Run fn once per job (memoized by name); `cost` is (usd_micros, tokens) or a function of the
        value returning them. Raising leaves the step unrecorded; returned values are memoized."""
        hit = self._apply(w.ReadStep(self.id, name), "step read")
        if isinstance(hit, w.StepHit):
            return decode(hit.value)
        self._boundary()
        value = fn()
        usd, tokens = cost(value) if callable(cost) else (cost or (0, 0))
        recorded = self._apply(w.RecordStep(self.clock(), self.id, name, value, usd, tokens), "step journal")
        if isinstance(recorded, w.JobGone):
            raise LeaseLost(f"job {self.id} no longer exists")
        self.steps_run.append(name)
        if recorded.over_budget:
            raise BudgetExceeded(
                f"step {name!r} crossed the budget: spent {recorded.spent_usd_micros} µ$ / "
                f"{recorded.spent_tokens} tokens"
            )
        return decode(recorded.value)

    def sleep(self, name: str, duration: timedelta | float) -> None:
        """Durable sleep (§9 reserved step `$sleep:<name>`): returns at once when already slept. A park
        and a resume are step boundaries: a pending cancel request is honoured here (§8.6)."""
        self._boundary()
        hit = self._apply(w.ReadStep(self.id, f"$sleep:{name}"), "step read")
        now = self.clock()
        if isinstance(hit, w.StepHit) and datetime.fromisoformat(decode(hit.value)) <= now:
            return
        until = now + (duration if isinstance(duration, timedelta) else timedelta(seconds=duration))
        self._park_result(self._releasing(w.Sleep(now, self.id, self.attempt, name, until)))

    def await_signal(self, name: str, *, scope: str | None = None, timeout: timedelta | float | None = None) -> Any:
        """Wait durably for signal `name` in `scope` (default job:<id>); return its payload, or raise
        SignalTimeout when the job resumed at its deadline without it. A step boundary (§8.6): a cancel
        requested before the park, or while parked, is honoured here — also on the resume."""
        self._boundary()
        scope = scope or f"job:{self.id}"
        found = [s for s in self._apply(ops.ReadSignals((scope,)), "signal read") if s.name == name]
        if found:
            return found[0].payload
        if (self.job.await_scope, self.job.await_name) == (scope, name):
            raise SignalTimeout(f"no signal {name!r} in {scope!r} before the deadline")
        now = self.clock()
        deadline = _deadline(now, timeout)
        result = self._releasing(w.ParkAwait(now, self.id, self.attempt, scope, name, deadline))
        self._park_result(result)

    def spawn(self, name: str, children: Sequence[ops.JobSpec]) -> tuple[int, ...]:
        """Doubly idempotent spawn (§8.4): the same call on a re-run returns the same child ids."""
        result = self._apply(w.Spawn(self.clock(), self.id, name, tuple(children)), "spawn")
        if isinstance(result, w.JobGone):
            raise LeaseLost(f"job {self.id} no longer exists")
        return result.child_ids

    def await_children(self, *, timeout: timedelta | float | None = None) -> tuple[Job, ...]:
        """Return the children once all are terminal; otherwise park until `$children` wakes the job.
        A step boundary, like every park (§8.6)."""
        self._boundary()
        now = self.clock()
        deadline = _deadline(now, timeout)
        result = self._releasing(w.AwaitChildren(now, self.id, self.attempt, deadline))
        if isinstance(result, w.ChildrenDone):
            self.releasing.clear()  # no park: the attempt runs on under its lease
            return tuple(self._apply(ops.ReadJob(i), "child read") for i in result.child_ids)
        self._park_result(result)
        raise AssertionError("unreachable")

    def emit(self, payload: Any) -> int:
        """Append an event to the job's stream; retried through transient faults when the runtime gave a
        `call` — idempotently: a retry finds the event an earlier try appended (same `now` and payload)
        and appends nothing (sdk-guide §7; a cut connection during the `slow` kind's start event failed
        the reference worker's job in a soak with partitions, seed 69)."""
        op = w.EmitEvent(self.clock(), self.id, payload, once=self.call is not None)
        result = self._apply(op, "emit")
        if isinstance(result, w.JobGone):
            raise LeaseLost(f"job {self.id} no longer exists")
        return result.seq

    def steering(self) -> Any:
        """The latest `$steer` message for this job (None when there is none)."""
        found = [s for s in self._apply(ops.ReadSignals((f"job:{self.id}",)), "signal read") if s.name == "$steer"]
        return found[0].payload if found else None

    def _releasing(self, op: Any) -> Any:
        """Apply an op that may give the lease up (a park), flagged first for the renewer (`releasing`)."""
        self.releasing.set()
        return self.store.apply(op)

    def _park_result(self, result: Any) -> None:
        if isinstance(result, w.Stale):
            raise LeaseLost(f"job {self.id} attempt {self.attempt}: stale park")
        raise Parked(f"job {self.id} parked: {result}")


_SUCCEED_NONE = w.Succeed(None)  # frozen: one for every job that returns None (a chunk of no-ops makes many)


def outcome_for(kind: Kind, ctx: JobContext, exc: BaseException | None, value: Any, now: datetime) -> w.Outcome | None:
    """Map how job code ended to the §7 ack outcome (None: nothing to ack)."""
    if exc is None:
        return _SUCCEED_NONE if value is None else w.Succeed(value)
    if isinstance(exc, (Parked, LeaseLost)):
        return None
    if isinstance(exc, CancelRequested):
        return w.CancelSelf()
    if isinstance(exc, Snooze):
        until = exc.until if isinstance(exc.until, datetime) else now + exc.until
        return w.Snooze(until)
    if isinstance(exc, BudgetExceeded):
        return w.Fail("budget_exceeded", str(exc), None)
    if isinstance(exc, UnknownKind):
        return w.Fail("unknown_kind", str(exc), None)
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, Fail):
        return w.Fail(type(exc).__name__, detail, None)
    return w.Fail(type(exc).__name__, detail, kind.backoff.retry_at(now, ctx.attempt))
