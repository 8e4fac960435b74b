"""A model of durable execution: what a job program does under a fault schedule (wire contract §§6–9).

The store model (`model.store`) says what each operation does to the tables. This module says what a
*job author* sees when a program runs on a conforming runtime: the Worker SDK's step memoization
(§8.2: a journaled step never runs again — whatever its value, `0`, `""`, `[]`, `False` and `None`
included), step boundaries (§6: a lost lease stops the execution there; §8.6: a cancel request is
honoured there; §8.2: durable spend over budget fails the job there), parks (durable sleep, awaits of
signals, awaits of children — the park is the ack and the job re-runs from the top when it resumes),
snoozes, raises, events, spawns, and the faults a fleet survives: a crash after a step or in the middle
of one (the node dies; the lease expires; another node reclaims), a node frozen past its lease and
resumed (its zombie execution goes on until its next step boundary; its ack is stale), a database
restart while the job is parked, a cancel request at a step boundary, a signal sent before or after the
job parks.

`predict(program)` runs the program against `model.store.ModelStore` with a logical clock and returns a
`Prediction`: the final row (state, attempt, max_attempts, result, errors), the journal (names, values,
costs, in order), how many times each step function ran, which side effects the author saw twice, the
events, which acks were stale. Every attempt / max_attempts effect (claims, snoozes, parks, reclaims,
retries) comes from ONE place, the store model's transitions: when a rule there changes (for example
"a wait spends no attempt"), this prediction follows it without an edit here.

A program is plain JSON (it is the job's input on a real runtime, see properties/durable_app.py):

    {"uid": str, "max_attempts": int, "budget_usd": int | null,
     "ops": [op, ...], "faults": [fault, ...]}

ops:    {"op": "step", "name": str, "value": JSON, "cost": [usd_micros, tokens], "slow_ms": int}
        {"op": "raise", "on": [attempt, ...]}          RuntimeError on those attempts (retried at once)
        {"op": "snooze", "on": [attempt, ...], "ms": int}
        {"op": "sleep", "name": str, "ms": int}         durable sleep ($sleep:<name>)
        {"op": "await", "name": str, "payload": JSON, "when": "before" | "after", "db_restart": bool}
        {"op": "spawn", "name": str, "values": [JSON, ...]}   children returning those values
        {"op": "await_children"}
        {"op": "emit", "payload": JSON}
faults: {"f": "crash_after" | "crash_mid" | "freeze" | "cancel", "at": op index (a step), "attempt": int}

Pure: no I/O, no clock, no randomness; time is a parameter (`start`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from model import ops
from model import worker_ops as w
from model.envelope import STEP_VALUE_CAP, StepValueTooLarge, decode, encode
from model.store import ModelStore

QUEUE = "dx"  # the programs' queue
CHILD_QUEUE = "dxc"  # their children's queue (claims of the parent never see a child)
PROGRAM_KIND = "dx_program"
CHILD_KIND = "dx_child"
NO_BACKOFF = w.Backoff(base_s=0, factor=1, max_s=0)  # retries and reclaims: ready again at once
FAULTS = ("crash_after", "crash_mid", "freeze", "cancel")
OPS = ("step", "raise", "snooze", "sleep", "await", "spawn", "await_children", "emit")
TICK = timedelta(milliseconds=1)


def signal_scope(uid: str) -> str:
    return f"dx:{uid}"


def check_program(program: dict[str, Any]) -> None:
    """Clear errors for malformed programs (the runtime and the model read the same JSON)."""
    if not isinstance(program.get("uid"), str) or not program["uid"]:
        raise ValueError("a program needs a non-empty string uid")
    if not isinstance(program.get("max_attempts"), int) or program["max_attempts"] < 1:
        raise ValueError("max_attempts must be an int >= 1")
    names = set()
    for i, op in enumerate(program["ops"]):
        if op.get("op") not in OPS:
            raise ValueError(f"op {i}: unknown op {op.get('op')!r}; known: {', '.join(OPS)}")
        if op["op"] in ("step", "sleep", "await", "spawn"):
            key = (op["op"], op["name"])
            if key in names:
                raise ValueError(f"op {i}: {op['op']} name {op['name']!r} is used twice")
            names.add(key)
    for fault in program.get("faults", ()):
        if fault.get("f") not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        at = fault["at"]
        if not (0 <= at < len(program["ops"])) or program["ops"][at]["op"] != "step":
            raise ValueError(f"fault {fault!r} must name the index of a step op")


@dataclass
class Prediction:
    """What the author observes once the job is terminal."""

    state: str
    attempt: int
    max_attempts: int
    result: Any  # decoded; None unless succeeded
    errors: list[tuple[int, str]]  # (attempt, error name), in order
    journal: list[tuple[str, Any, int, int]]  # (name, normalized value, usd_micros, tokens) by seq
    runs: dict[str, int]  # step name → times its function ran
    events: list[Any]  # payloads, in order
    stale_acks: int
    crashes: int = 0
    freezes: int = 0
    cancels: int = 0
    db_restarts: int = 0
    signals_after_park: list[str] = field(default_factory=list)

    @property
    def duplicates(self) -> dict[str, int]:
        """Steps whose side effect the author saw more than once (and how often)."""
        return {name: n for name, n in self.runs.items() if n > 1}

    @property
    def faults(self) -> int:
        return self.crashes + self.freezes + self.cancels + self.db_restarts


def normalize_journal_value(name: str, value: Any) -> Any:
    """Journal values that differ between runs by construction: a sleep's deadline (a time), a
    spawn's child ids (sequence numbers) — compared by shape only."""
    if name.startswith("$sleep:"):
        return "<until>"
    if name.startswith("$spawn:"):
        return len(value)
    return value


# --- how an execution ends ------------------------------------------------------------------------


@dataclass
class _Crash:
    pass


@dataclass
class _Frozen:
    index: int  # the step whose function was running
    values: list[Any]


@dataclass
class _Ended:
    """The execution ended and acked (or parked, or stopped): nothing more for this execution."""


class _Model:
    def __init__(self, program: dict[str, Any], start: datetime, ttl: timedelta) -> None:
        check_program(program)
        self.p = program
        self.ops = program["ops"]
        self.faults = {(f["f"], f["at"], f["attempt"]) for f in program.get("faults", ())}
        self.store = ModelStore()
        self.now = start
        self.ttl = ttl
        self.runs: Counter[str] = Counter()
        self.stale_acks = 0
        self.counts: Counter[str] = Counter()
        self.after_signals: list[str] = []
        self.job_id = 0

    def tick(self) -> datetime:
        self.now += TICK
        return self.now

    def apply(self, op: Any) -> Any:
        return self.store.apply(op)

    def job(self) -> Any:
        return self.apply(ops.ReadJob(self.job_id))

    # --- the SDK's semantics, one execution -----------------------------------------------------------

    def boundary(self, lost: bool) -> str | None:
        """None when the step may run; otherwise how the execution ends there."""
        if lost:
            return "lost"
        verdict = self.apply(w.Preflight(self.job_id))
        if isinstance(verdict, w.JobGone):
            return "lost"
        if verdict.cancel_requested:
            return "cancel"
        if isinstance(verdict, w.OverBudget):
            return "budget"
        return None

    def ack(self, attempt: int, outcome: w.Outcome) -> None:
        result = self.apply(w.Ack(self.tick(), self.job_id, attempt, outcome))
        if isinstance(result, w.Stale):
            self.stale_acks += 1

    def end(self, attempt: int, how: str, detail: Any = None) -> _Ended:
        """Map how the job code ended to its ack (outcome_for, §7)."""
        if how in ("lost", "parked"):
            return _Ended()
        if how == "cancel":
            self.ack(attempt, w.CancelSelf())
        elif how == "budget":
            self.ack(attempt, w.Fail("budget_exceeded", "", None))
        elif how == "raise":
            self.ack(attempt, w.Fail(detail, "", NO_BACKOFF.retry_at(self.now, attempt)))
        elif how == "snooze":
            self.ack(attempt, w.Snooze(self.now + timedelta(milliseconds=detail)))
        elif how == "succeed":
            self.ack(attempt, w.Succeed(detail))
        else:  # pragma: no cover - the interpreter only produces the endings above
            raise AssertionError(how)
        return _Ended()

    def execute(
        self, attempt: int, start: int = 0, values: list[Any] | None = None, lost: bool = False, resume_step: Any = None
    ) -> _Crash | _Frozen | _Ended:
        values = [] if values is None else values
        for i in range(start, len(self.ops)):
            op = self.ops[i]
            kind = op["op"]
            if kind == "step":
                if resume_step is not None and i == start:
                    value, resume_step = resume_step, None  # the frozen function returns now
                    ended = self.record(attempt, op, value, values, lost)
                    if ended is not None:
                        return ended
                    continue
                if ("cancel", i, attempt) in self.faults and not lost:
                    self.counts["cancels"] += 1
                    self.apply(ops.Cancel(self.tick(), self.job_id))
                hit = self.apply(w.ReadStep(self.job_id, op["name"]))
                if isinstance(hit, w.StepHit):
                    values.append(decode(hit.value))
                else:
                    stop = self.boundary(lost)
                    if stop is not None:
                        return self.end(attempt, stop)
                    self.runs[op["name"]] += 1
                    if ("crash_mid", i, attempt) in self.faults and not lost:
                        self.counts["crashes"] += 1
                        return _Crash()
                    if ("freeze", i, attempt) in self.faults and not lost:
                        self.counts["freezes"] += 1
                        return _Frozen(i, values)
                    ended = self.record(attempt, op, op["value"], values, lost)
                    if ended is not None:
                        return ended
                if ("crash_after", i, attempt) in self.faults and not lost:
                    self.counts["crashes"] += 1
                    return _Crash()
            elif kind == "raise":
                if attempt in op["on"]:
                    return self.end(attempt, "raise", "RuntimeError")
            elif kind == "snooze":
                if attempt in op["on"]:
                    return self.end(attempt, "snooze", op["ms"])
            elif kind == "emit":
                self.apply(w.EmitEvent(self.tick(), self.job_id, op["payload"]))
            elif kind == "sleep":
                name = op["name"]
                hit = self.apply(w.ReadStep(self.job_id, f"$sleep:{name}"))
                now = self.tick()
                if isinstance(hit, w.StepHit) and datetime.fromisoformat(decode(hit.value)) <= now:
                    continue
                parked = self.apply(w.Sleep(now, self.job_id, attempt, name, now + timedelta(milliseconds=op["ms"])))
                return self.end(attempt, "lost" if isinstance(parked, w.Stale) else "parked")
            elif kind == "await":
                scope = signal_scope(self.p["uid"])
                found = [s for s in self.apply(ops.ReadSignals((scope,))) if s.name == op["name"]]
                if found:
                    values.append(found[0].payload)
                    continue
                parked = self.apply(w.ParkAwait(self.tick(), self.job_id, attempt, scope, op["name"], None))
                return self.end(attempt, "lost" if isinstance(parked, w.Stale) else "parked")
            elif kind == "spawn":
                specs = tuple(
                    ops.JobSpec(CHILD_QUEUE, CHILD_KIND, {"v": v, "uid": self.p["uid"]}) for v in op["values"]
                )
                spawned = self.apply(w.Spawn(self.tick(), self.job_id, op["name"], specs))
                if isinstance(spawned, w.JobGone):
                    return self.end(attempt, "lost")
            elif kind == "await_children":
                result = self.apply(w.AwaitChildren(self.tick(), self.job_id, attempt, None))
                if isinstance(result, w.ChildrenDone):
                    values.append([decode(self.apply(ops.ReadJob(c)).result) for c in result.child_ids])
                    continue
                return self.end(attempt, "lost" if isinstance(result, w.Stale) else "parked")
        if self.p.get("budget_usd") is not None:
            if isinstance(self.apply(w.Preflight(self.job_id)), w.OverBudget):
                return self.end(attempt, "budget")
        return self.end(attempt, "succeed", values)

    def record(self, attempt: int, op: dict[str, Any], value: Any, values: list[Any], lost: bool) -> _Ended | None:
        usd, tokens = op.get("cost", (0, 0))
        try:  # over the §2 cap, the SDK's RecordStep refuses the value: the job code raises, and retries
            recorded = self.apply(w.RecordStep(self.tick(), self.job_id, op["name"], value, usd, tokens))
        except (StepValueTooLarge, ops.InvalidInput) as exc:
            return self.end(attempt, "raise", type(exc).__name__)
        if isinstance(recorded, w.JobGone):
            return self.end(attempt, "lost")
        if recorded.over_budget:
            return self.end(attempt, "budget")
        values.append(decode(recorded.value))
        return None

    # --- the fleet around the job -------------------------------------------------------------------

    def reclaim(self) -> None:
        """The dead (or frozen) node's lease runs out; a sweeper reclaims it (at once ready again)."""
        job = self.job()
        self.now = max(self.now, job.lease_until) + TICK
        self.apply(w.Reclaim(self.now, NO_BACKOFF))

    def run_children(self) -> None:
        while True:
            claimed = self.apply(w.Claim(self.tick(), CHILD_QUEUE, "model", 100, self.ttl)).jobs
            if not claimed:
                return
            for child in claimed:
                self.apply(w.Ack(self.tick(), child.id, child.attempt, w.Succeed(child.input["v"])))

    def run(self, max_rounds: int = 500) -> Prediction:
        spec = ops.JobSpec(
            QUEUE, PROGRAM_KIND, self.p, max_attempts=self.p["max_attempts"], budget_usd_micros=self.p.get("budget_usd")
        )
        self.job_id = self.apply(ops.Enqueue(self.tick(), (spec,))).ids[0]
        scope = signal_scope(self.p["uid"])
        for op in self.ops:
            if op["op"] == "await" and op["when"] == "before":
                self.apply(ops.DeliverSignal(self.tick(), scope, op["name"], op["payload"]))
        for _ in range(max_rounds):
            job = self.job()
            if job.terminal:
                return self.prediction(job)
            if job.state == "awaiting":
                if job.await_name == "$children":
                    self.run_children()
                else:
                    op = next(o for o in self.ops if o["op"] == "await" and o["name"] == job.await_name)
                    if op.get("db_restart") and "db" not in self.after_signals:
                        self.counts["db_restarts"] += 1  # the rows are durable: nothing changes
                        self.after_signals.append("db")
                    self.after_signals.append(op["name"])
                    self.apply(ops.DeliverSignal(self.tick(), scope, op["name"], op["payload"]))
                continue
            if job.state == "ready" and job.ready_at is not None and job.ready_at > self.now:
                self.now = job.ready_at
            claimed = self.apply(w.Claim(self.tick(), QUEUE, "model", 1, self.ttl)).jobs
            if not claimed:
                raise AssertionError(f"the model could not claim job {self.job_id} in state {job.state}")
            attempt = claimed[0].attempt
            ended = self.execute(attempt)
            if isinstance(ended, _Crash):
                self.reclaim()
            elif isinstance(ended, _Frozen):
                self.reclaim()
                op = self.ops[ended.index]
                # The node resumes: the frozen step function returns, its zombie goes on with the lost
                # flag set (the renewal was refused) until its next step boundary or fenced write.
                self.execute(attempt, ended.index, ended.values, lost=True, resume_step=op["value"])
        raise AssertionError(f"the model did not reach a terminal state in {max_rounds} rounds")

    def prediction(self, job: Any) -> Prediction:
        steps = self.apply(ops.ReadSteps(self.job_id))
        journal = [
            (s.name, normalize_journal_value(s.name, decode(s.value)), s.usd_micros, s.tokens)
            for s in sorted(steps, key=lambda s: s.seq)
        ]
        events = [e.payload for e in self.apply(ops.ReadEvents(self.job_id))]
        return Prediction(
            state=job.state,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            result=decode(job.result) if job.result is not None else None,
            errors=[(e["attempt"], e["error"]) for e in job.errors],
            journal=journal,
            runs=dict(self.runs),
            events=events,
            stale_acks=self.stale_acks,
            crashes=self.counts["crashes"],
            freezes=self.counts["freezes"],
            cancels=self.counts["cancels"],
            db_restarts=self.counts["db_restarts"],
            signals_after_park=[s for s in self.after_signals if s != "db"],
        )


def predict(
    program: dict[str, Any],
    *,
    ttl: timedelta = timedelta(seconds=30),
    start: datetime = datetime(2030, 1, 1, tzinfo=UTC),
) -> Prediction:
    """The observable outcome of `program` (with its fault schedule) on a conforming runtime."""
    return _Model(program, start, ttl).run()


def fits_step_cap(value: Any) -> bool:
    """Whether a step value is journaled (§2: at most STEP_VALUE_CAP bytes once encoded)."""
    return len(encode(value)) <= STEP_VALUE_CAP
