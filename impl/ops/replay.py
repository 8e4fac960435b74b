"""Replay dry-run (spec/belay-operations.txt "Day-2 tooling": `Belay.Replay.dry_run(job_id)` — "what
did it actually do?") and the non-determinism check for Belay jobs.

`history(url, job_id)` reconstructs what a job did from the database alone: its attempts and
errors, the journal in order (steps with values and costs, `$sleep:` and `$spawn:` entries, §8.2 /
§8.4), the children it spawned, the events it emitted, the signals in its scope and the one it
awaits, and its outcome — plus a timeline of all of these by time.

`dry_run(url, job_id, registry)` also re-executes the job's code against that journal without side
effects: `ReplayContext` implements the job-code API of impl/worker.py (`step`, `sleep`,
`await_signal`, `spawn`, `await_children`, `emit`, `steering`, `check_budget`), every journaled
call returns the journaled value, and no write reaches the database (everything is read in one
READ ONLY, REPEATABLE READ transaction: PostgreSQL itself refuses a write). It reports the first
point where the code diverges from the journal — Temporal's replayer check, for Belay jobs:

- `step`   the code asks for a step the journal does not have at that position (inserted or renamed),
           or the journal has a step there the code no longer asks for (removed or reordered);
- `sleep` / `spawn`  the same for `$sleep:<name>` / `$spawn:<name>` entries, and a spawn whose
           children (count, queue, kind, input) differ from the children the journal spawned;
- `await`  the code waits for a signal that was never delivered although the journal goes on past
           that point (or the job is parked on a different signal), or for children the job did not
           wait for;
- `result` the code returns a value other than the job's recorded result;
- `outcome` the code raises where the recorded job succeeded.

What the contract does not journal cannot be checked: awaits leave no journal entry (a wake clears
the job's await columns; signals are upsert-latest and expire with `signal_ttl`), so an await is
checked against the signal rows and the job's state; events are appended on every run of the code
(not memoized), so they are reported, not matched. The replay stops where the journal ends: a step
the journal does not have is never executed (the recorded run stopped there — it raised, is still
running, or parked).

Put it in your own tests — "replay every job of the last day against the new code":

    for report in dry_run_many(url, registry, since=now - timedelta(days=1)):
        assert report.clean, report.describe()
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from impl.ops.history import SLEEP, SPAWN, ReplayError, _history, _short, _Snapshot
from impl.ops.shapes import plain
from impl.store.queries import SchemaSQL
from impl.worker import Kind, Registry, SignalTimeout, import_app
from model import ops
from model.envelope import decode
from model.rows import TERMINAL, Job, Step


@dataclass(frozen=True)
class Divergence:
    """The first point where the code and the journal part."""

    kind: str  # step | sleep | spawn | await | result | outcome
    seq: int | None  # the journal position (belay_steps.seq) where they part; None past its end
    expected: str | None  # what the journal has there
    found: str | None  # what the code asked for (or did)
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "seq": self.seq,
            "expected": self.expected,
            "found": self.found,
            "message": self.message,
        }


@dataclass
class Replay:
    """A dry-run report. `clean` when the code was executed and no divergence was found."""

    job_id: int
    history: dict[str, Any]
    executed: bool = False
    divergence: Divergence | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)  # what the code asked for, in order
    ended: str | None = None  # why the re-execution stopped
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.executed and self.divergence is None

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "executed": self.executed,
            # null when nothing was re-executed (no --app): the replay could not judge, which is not unclean
            "clean": self.clean if self.executed else None,
            "divergence": self.divergence.to_json() if self.divergence else None,
            "ended": self.ended,
            "calls": self.calls,
            "notes": self.notes,
            "history": self.history,
        }

    def describe(self) -> str:
        h = self.history
        job = h["job"]
        lines = [
            f"job {self.job_id} ({job['kind']} on {job['queue']}): {job['state']} after {job['attempt']} attempt(s)"
        ]
        if self.executed:
            if self.divergence is None:
                lines.append(f"replay: clean — {self.ended}")
            else:
                d = self.divergence
                where = f"at journal position {d.seq}" if d.seq is not None else "past the end of the journal"
                lines.append(f"replay: DIVERGED ({d.kind}) {where}: {d.message}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


class _Stop(BaseException):
    """The re-execution reached a point past which the journal says nothing (a BaseException, so
    job code's `except Exception` cannot swallow it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Diverged(BaseException):
    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.message)
        self.divergence = divergence


def _describe(name: str) -> str:
    if name.startswith(SLEEP):
        return f"sleep {name[len(SLEEP) :]!r}"
    if name.startswith(SPAWN):
        return f"spawn {name[len(SPAWN) :]!r}"
    return f"step {name!r}"


def _kind_of(*names: str | None) -> str:
    for prefix, kind in ((SPAWN, "spawn"), (SLEEP, "sleep")):
        if any(n and n.startswith(prefix) for n in names):
            return kind
    return "step"


class ReplayContext:
    """The job-code API of impl/worker.py `JobContext`, served from a journal snapshot. Nothing it
    does writes: journaled calls return journaled values; a call the journal has not got stops the
    replay (its function is never run)."""

    def __init__(self, job: Job, snap: _Snapshot, steps: list[Step], now: datetime, report: Replay) -> None:
        self.job = job
        self.snap = snap
        self.journal = steps
        self.by_name = {s.name: i for i, s in enumerate(steps)}
        self.cursor = 0  # the next journal position the code is expected to ask for
        self.consumed: set[int] = set()
        self.now = now
        self.report = report
        self.lost = threading.Event()
        self.steps_run: list[str] = []
        self.emitted: list[Any] = []

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def attempt(self) -> int:
        return self.job.attempt

    def clock(self) -> datetime:
        return self.now

    # --- the journal cursor -----------------------------------------------------------------------------

    def _take(self, name: str) -> Step:
        """The journaled entry `name`, which must be the next one in journal order."""
        self.report.calls.append({"call": _describe(name), "seq": None})
        index = self.by_name.get(name)
        if index is not None and index in self.consumed:
            # The runtime memoizes by name: asking again returns the journaled value (no new entry).
            self.report.calls[-1]["seq"] = self.journal[index].seq
            return self.journal[index]
        if self.cursor >= len(self.journal):
            if index is None:
                raise _Stop(
                    f"the journal ends before the code's {_describe(name)}: the recorded execution "
                    f"stopped there (it raised, is still running, or was cancelled) — not executed"
                )
        expected = self.journal[self.cursor]
        if index == self.cursor:
            self.consumed.add(index)
            self.cursor += 1
            self.report.calls[-1]["seq"] = expected.seq
            return expected
        if index is None:
            raise _Diverged(
                Divergence(
                    _kind_of(name, expected.name),
                    expected.seq,
                    expected.name,
                    name,
                    f"the code asks for {_describe(name)} where the journal has {_describe(expected.name)} "
                    f"(#{expected.seq}): {_describe(name)} is not in the journal at all — inserted or renamed",
                )
            )
        skipped = self.journal[self.cursor]
        raise _Diverged(
            Divergence(
                _kind_of(skipped.name),
                skipped.seq,
                skipped.name,
                name,
                f"the journal's {_describe(skipped.name)} (#{skipped.seq}) is no longer asked for: the code goes "
                f"on with {_describe(name)} (#{self.journal[index].seq}) — removed or reordered",
            )
        )

    # --- the job-code API ------------------------------------------------------------------------------

    def step(self, name: str, fn: Callable[[], Any], *, cost: Any = None) -> Any:
        return decode(self._take(name).value)

    def check_budget(self) -> None:
        """Budgets were enforced when the job ran; a replay spends nothing."""

    def sleep(self, name: str, duration: timedelta | float) -> None:
        entry = self._take(f"{SLEEP}{name}")
        until = datetime.fromisoformat(decode(entry.value))
        if until > self.now and not self.job.terminal and self.cursor >= len(self.journal):
            raise _Stop(f"the job sleeps {name!r} until {until.isoformat()} (state {self.job.state})")

    def spawn(self, name: str, children: Sequence[ops.JobSpec]) -> tuple[int, ...]:
        entry = self._take(f"{SPAWN}{name}")
        ids = tuple(decode(entry.value))
        if len(ids) != len(children):
            raise _Diverged(
                Divergence(
                    "spawn",
                    entry.seq,
                    f"{len(ids)} children",
                    f"{len(children)} children",
                    f"spawn {name!r} asks for {len(children)} children; the journal spawned {len(ids)} ({list(ids)})",
                )
            )
        rows = {c.id: c for c in self.snap.children(self.job.id)}
        for i, (child_id, spec) in enumerate(zip(ids, children, strict=True)):
            row = rows.get(child_id)
            if row is None:
                self.report.notes.append(
                    f"spawn {name!r}: child {child_id} no longer exists (pruned?); "
                    "its queue, kind and input were not compared"
                )
                continue
            theirs = (row.queue, row.worker, row.input)
            ours = (spec.queue, spec.worker, spec.input)
            if theirs != ours:
                raise _Diverged(
                    Divergence(
                        "spawn",
                        entry.seq,
                        _short(theirs),
                        _short(ours),
                        f"spawn {name!r} child {i} differs: the journal spawned job {child_id} as "
                        f"(queue, kind, input) = {_short(theirs)}, the code asks for {_short(ours)}",
                    )
                )
        return ids

    def _await_missing(self, what: str, parked_here: bool) -> None:
        """The awaited thing is not there: a consistent stop, or a divergence."""
        job = self.job
        nxt = self.journal[self.cursor] if self.cursor < len(self.journal) else None
        if parked_here and nxt is None:
            raise _Stop(f"the job is parked {what} (state {job.state})")
        if nxt is not None:
            raise _Diverged(
                Divergence(
                    "await",
                    nxt.seq,
                    None,
                    what,
                    f"the code waits {what}, which never came, yet the journal goes on with "
                    f"{_describe(nxt.name)} (#{nxt.seq})",
                )
            )
        if job.state == "awaiting":
            raise _Diverged(
                Divergence(
                    "await",
                    None,
                    f"await {job.await_name!r} in {job.await_scope!r}",
                    what,
                    f"the job is parked on signal {job.await_name!r} in {job.await_scope!r}, but the code waits {what}",
                )
            )
        if job.terminal:
            raise _Diverged(
                Divergence(
                    "await",
                    None,
                    None,
                    what,
                    f"the job finished {job.state}, but the code waits {what}, which never came "
                    "(or was cleared or pruned since)",
                )
            )
        raise _Stop(f"the code would park {what} here; the job is {job.state}")

    def await_signal(self, name: str, *, scope: str | None = None, timeout: timedelta | float | None = None) -> Any:
        scope = scope or f"job:{self.id}"
        self.report.calls.append({"call": f"await signal {name!r} in {scope!r}", "seq": None})
        found = self.snap.signal(scope, name)
        if found is not None:
            return found.payload
        parked = self.job.state == "awaiting" and (self.job.await_scope, self.job.await_name) == (scope, name)
        if not parked and (self.job.await_scope, self.job.await_name) == (scope, name):
            raise SignalTimeout(f"no signal {name!r} in {scope!r} before the deadline")
        self._await_missing(f"for signal {name!r} in {scope!r}", parked)

    def await_children(self, *, timeout: timedelta | float | None = None) -> tuple[Job, ...]:
        self.report.calls.append({"call": "await children", "seq": None})
        children = self.snap.children(self.id)
        if all(c.state in TERMINAL for c in children):
            return tuple(children)
        parked = self.job.state == "awaiting" and self.job.await_name == "$children"
        self._await_missing("for its children", parked)
        raise AssertionError("unreachable")

    def emit(self, payload: Any) -> int:
        self.emitted.append(payload)
        return len(self.emitted)

    def steering(self) -> Any:
        found = self.snap.signal(f"job:{self.id}", "$steer")
        return found.payload if found else None


def load_registry(spec: str) -> Registry:
    """MODULE[:ATTR] exposing an impl.worker.Registry (default attribute: registry)."""
    module_name, _, attr = spec.partition(":")
    registry = getattr(import_app(module_name), attr or "registry", None)
    if not isinstance(registry, Registry):
        raise ReplayError(f"{spec} is not an impl.worker.Registry (MODULE[:ATTR], default attribute: registry)")
    return registry


def _execute(kind: Kind, ctx: ReplayContext) -> Any:
    if kind.chunk_size is not None:
        returned = kind.fn([ctx])
        value = returned.get(ctx.id) if isinstance(returned, dict) else next(iter(returned))
        if isinstance(value, BaseException):
            raise value
        return value
    return kind.fn(ctx, ctx.job.input)


def _replay(snap: _Snapshot, job: Job, registry: Registry, now: datetime, report: Replay) -> None:
    kind = registry.kinds.get(job.worker)
    if kind is None:
        raise ReplayError(f"the registry has no kind {job.worker!r} (job {job.id}); known: {sorted(registry.kinds)}")
    steps = snap.steps(job.id)
    ctx = ReplayContext(job, snap, steps, now, report)
    report.executed = True
    try:
        value = _execute(kind, ctx)
    except _Stop as stop:
        report.ended = stop.reason
        return
    except _Diverged as diverged:
        report.divergence = diverged.divergence
        report.ended = "diverged"
        return
    except Exception as exc:  # noqa: BLE001 - the job code raised: compare with the recorded outcome
        raised = type(exc).__name__
        last = (job.errors or [{}])[-1].get("error") if job.errors else None
        if job.state == "succeeded":
            report.divergence = Divergence(
                "outcome",
                None,
                "succeeded",
                f"raised {raised}",
                f"the code raises {raised}: {exc} — the recorded job succeeded",
            )
            report.ended = "diverged"
            return
        report.ended = f"the code raised {raised}: {exc}"
        if last != raised and not isinstance(exc, SignalTimeout):
            report.notes.append(f"the recorded last error is {last!r}, the replay raised {raised!r}")
        _check_rest(ctx, report)
        return
    report.ended = "the code returned"
    if not _check_rest(ctx, report):
        return
    if job.state == "succeeded":
        recorded = plain(decode(job.result))
        if plain(value) != recorded:
            report.divergence = Divergence(
                "result",
                None,
                _short(recorded),
                _short(plain(value)),
                f"the code returns {_short(plain(value))}, the job's recorded result is {_short(recorded)}",
            )
            report.ended = "diverged"
    elif job.terminal:
        report.notes.append(
            f"the code returns, but the job ended {job.state}; its last error: "
            f"{_short(job.errors[-1] if job.errors else None)}"
        )
    else:
        report.notes.append(f"the code returns; the job is still {job.state} (its recorded run has not finished)")


def _check_rest(ctx: ReplayContext, report: Replay) -> bool:
    """After the code finished: every journaled entry must have been asked for."""
    left = [s for i, s in enumerate(ctx.journal) if i not in ctx.consumed]
    if left:
        first = left[0]
        report.divergence = Divergence(
            _kind_of(first.name),
            first.seq,
            first.name,
            None,
            f"the journal's {_describe(first.name)} (#{first.seq}) is no longer asked for: the code finished "
            f"without it" + (f" (and {len(left) - 1} more journal entries)" if len(left) > 1 else ""),
        )
        report.ended = "diverged"
        return False
    return True


def dry_run(
    conninfo: str,
    job_id: int,
    registry: Registry | str | None = None,
    *,
    schema: str = "public",
    now: datetime | None = None,
) -> Replay:
    """Belay.Replay.dry_run: the job's history and, with a registry (or MODULE[:ATTR]), a side-effect-free
    re-execution of its code against its journal. `now` decides whether a journaled sleep is over
    (default: the system clock — this is an entry point)."""
    if isinstance(registry, str):
        registry = load_registry(registry)
    now = now or datetime.now(UTC)
    snap = _Snapshot(conninfo, schema)
    try:
        job = snap.job(job_id)
        if job is None:
            raise ReplayError(f"job {job_id} does not exist (it may have been pruned)")
        report = Replay(job_id, _history(snap, job))
        if registry is not None:
            _replay(snap, job, registry, now, report)
        else:
            report.notes.append("not re-executed: no app given (--app MODULE[:ATTR]); the history is all there is")
        return report
    finally:
        snap.close()


def dry_run_many(
    conninfo: str,
    registry: Registry | str,
    *,
    since: datetime | None = None,
    kinds: Sequence[str] | None = None,
    states: Sequence[str] = ("succeeded", "failed", "cancelled"),
    limit: int = 1000,
    schema: str = "public",
    now: datetime | None = None,
) -> list[Replay]:
    """Replay many jobs against (new) code: the jobs of `registry`'s kinds (or `kinds`) in `states`,
    inserted at or after `since`, newest first, at most `limit`."""
    if isinstance(registry, str):
        registry = load_registry(registry)
    kinds = list(kinds) if kinds is not None else sorted(registry.kinds)
    with psycopg.connect(conninfo, row_factory=dict_row) as conn:
        conn.read_only = True
        q = SchemaSQL(schema)
        ids: list[int] = []
        after = None
        while len(ids) < limit:
            rows = conn.execute(
                q.q("ops_jobs_page"),
                {
                    "after": after,
                    "states": list(states),
                    "queue": None,
                    "kind": None,
                    "workflow_id": None,
                    "parent_id": None,
                    "error": None,
                    "limit": 500,
                },
            ).fetchall()
            if not rows:
                break
            for r in rows:
                if r["worker"] in kinds and (since is None or r["inserted_at"] >= since):
                    ids.append(r["id"])
            after = rows[-1]["id"]
            if since is not None and rows[-1]["inserted_at"] < since:
                break
        conn.rollback()
    return [dry_run(conninfo, job_id, registry, schema=schema, now=now) for job_id in ids[:limit]]
