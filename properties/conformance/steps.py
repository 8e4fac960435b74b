"""Step conformance (contract §8.2): read hit/miss, the pre-flight budget check, journaling with spend,
over_budget on the crossing step, duplicate records keep the first value and spend, per-job seq;
and the job's append-only event stream."""

from __future__ import annotations

from model import ops
from model import worker_ops as w
from model.rows import Event
from properties.conformance.core import case
from properties.conformance.support import S, check, expect, fields, insert, read, start, value_of


def record(store, now, job_id, name, value, usd=0, tokens=0):
    result = store.apply(w.RecordStep(now, job_id, name, value, usd, tokens))
    check(isinstance(result, w.Recorded), f"RecordStep({job_id}, {name!r}) returned {result!r}, not Recorded")
    return result


def recorded(result: w.Recorded) -> tuple:
    """A Recorded as (inserted, decoded value, spent usd, spent tokens, over_budget)."""
    return (result.inserted, value_of(result.value), result.spent_usd_micros, result.spent_tokens, result.over_budget)


def _steps(store, job_id):
    return tuple(store.apply(ops.ReadSteps(job_id)))


@case("§8.2", "reading a step misses until it is journaled, then hits with its value")
def _(store, now):
    job = start(store, now)
    expect(store.apply(w.ReadStep(job.id, "fetch")), w.StepMiss(), "an unjournaled step misses")
    record(store, now + S, job.id, "fetch", {"rows": [1, 2]})
    hit = store.apply(w.ReadStep(job.id, "fetch"))
    check(isinstance(hit, w.StepHit), f"a journaled step hits; got {hit!r}")
    expect(value_of(hit.value), {"rows": [1, 2]}, "the hit's value decodes to what was recorded")
    expect(store.apply(w.ReadStep(job.id, "other")), w.StepMiss(), "another name still misses")


@case("§8.2", "recording a step journals it and adds its costs to the job's spend")
def _(store, now):
    job = start(store, now)
    result = record(store, now + S, job.id, "llm", "answer", usd=1500, tokens=42)
    expect(recorded(result), (True, "answer", 1500, 42, False), "the first record")
    (step,) = _steps(store, job.id)
    expect(
        fields(step, "job_id", "seq", "name", "usd_micros", "tokens", "inserted_at"),
        dict(job_id=job.id, seq=1, name="llm", usd_micros=1500, tokens=42, inserted_at=now + S),
        "the step row",
    )
    expect(value_of(step.value), "answer", "the step value")
    expect(
        fields(read(store, job.id), "spent_usd_micros", "spent_tokens"),
        dict(spent_usd_micros=1500, spent_tokens=42),
        "durable spend on the job row",
    )


@case("§8.2", "a duplicate record keeps the first value and spends nothing more")
def _(store, now):
    job = start(store, now)
    record(store, now + S, job.id, "charge", "first", usd=3, tokens=4)
    again = record(store, now + 2 * S, job.id, "charge", "second", usd=100, tokens=100)
    expect(recorded(again), (False, "first", 3, 4, False), "the second writer gets the journaled value")
    steps = _steps(store, job.id)
    expect(
        [(s.name, s.seq, value_of(s.value), s.usd_micros, s.tokens, s.inserted_at) for s in steps],
        [("charge", 1, "first", 3, 4, now + S)],
        "exactly one immutable row per (job, name)",
    )
    expect(
        fields(read(store, job.id), "spent_usd_micros", "spent_tokens"),
        dict(spent_usd_micros=3, spent_tokens=4),
        "a duplicate execution's costs are not added",
    )


@case("§8.2", "step seq is per-job insertion order")
def _(store, now):
    a = start(store, now, queue="qa")
    b = start(store, now, queue="qb")
    for i, name in enumerate(["one", "two", "three"]):
        record(store, now + i * S, a.id, name, i)
    record(store, now, b.id, "solo", None)
    record(store, now + 5 * S, a.id, "two", "dup")
    expect([(s.seq, s.name) for s in _steps(store, a.id)], [(1, "one"), (2, "two"), (3, "three")], "job a's journal")
    expect([(s.seq, s.name) for s in _steps(store, b.id)], [(1, "solo")], "job b's journal starts at 1")


@case("§8.2", "an error-shaped step value is memoized like any other")
def _(store, now):
    job = start(store, now)
    record(store, now, job.id, "call", {"error": "rate_limited", "retry": False})
    hit = store.apply(w.ReadStep(job.id, "call"))
    check(isinstance(hit, w.StepHit), f"a returned error value is journaled; got {hit!r}")
    expect(value_of(hit.value), {"error": "rate_limited", "retry": False}, "the memoized value")


@case("§8.2", "over_budget is reported on the step whose recorded spend crosses the cap")
def _(store, now):
    job = start(store, now, budget_usd_micros=10)
    expect(
        recorded(record(store, now, job.id, "s1", 1, usd=10)),
        (True, 1, 10, 0, False),
        "spend equal to the budget is not over it",
    )
    expect(store.apply(w.Preflight(job.id)), w.BudgetOk(), "pre-flight at the cap")
    expect(
        recorded(record(store, now + S, job.id, "s2", 2, usd=1)),
        (True, 2, 11, 0, True),
        "the crossing step reports over_budget",
    )
    expect(
        recorded(record(store, now + 2 * S, job.id, "s1", 9, usd=50)),
        (False, 1, 11, 0, True),
        "a replay of an earlier step reports the current (over-budget) spend",
    )


@case("§8.2", "pre-flight reports OverBudget once durable spend exceeds a budget")
def _(store, now):
    job = start(store, now, budget_tokens=100)
    record(store, now, job.id, "big", "x", usd=5, tokens=101)
    expect(
        store.apply(w.Preflight(job.id)),
        w.OverBudget(5, 101, False),
        "the next attempt must fail with budget_exceeded before executing another paid step",
    )
    uncapped = start(store, now, queue="uncapped")
    record(store, now, uncapped.id, "huge", "y", usd=10**12, tokens=10**12)
    expect(store.apply(w.Preflight(uncapped.id)), w.BudgetOk(), "a job without budget columns is never over")


@case("§8.2", "steps, pre-flight and events on an unknown job report JobGone")
def _(store, now):
    missing = insert(store, now) + 1000
    expect(store.apply(w.Preflight(missing)), w.JobGone(missing), "Preflight")
    expect(store.apply(w.RecordStep(now, missing, "s", 1)), w.JobGone(missing), "RecordStep")
    expect(store.apply(w.EmitEvent(now, missing, {})), w.JobGone(missing), "EmitEvent")
    expect(store.apply(w.ReadStep(missing, "s")), w.StepMiss(), "ReadStep")
    expect(_steps(store, missing), (), "nothing was journaled for it")


@case("§8.2", "events append to the job's stream with seq from 1")
def _(store, now):
    a = start(store, now, queue="qa")
    b = start(store, now, queue="qb")
    expect(store.apply(w.EmitEvent(now, a.id, {"progress": 0.5})), w.Emitted(1), "the first event")
    expect(store.apply(w.EmitEvent(now + S, a.id, ["done"])), w.Emitted(2), "the second event")
    expect(store.apply(w.EmitEvent(now, b.id, None)), w.Emitted(1), "another job's stream starts at 1")
    expect(
        tuple(store.apply(ops.ReadEvents(a.id))),
        (Event(a.id, 1, {"progress": 0.5}, now), Event(a.id, 2, ["done"], now + S)),
        "ReadEvents in seq order",
    )


@case("§8.2", "a step whose cost would overflow the bigint spend is refused loudly and journals nothing")
def _(store, now):
    job = start(store, now)
    record(store, now, job.id, "a", 1, usd=2**62)
    try:
        result = store.apply(w.RecordStep(now + S, job.id, "b", 2, 2**62, 0))
    except Exception:  # noqa: BLE001 -- any store's own error counts as "refused loudly"
        result = None
    check(
        result is None, f"spent_usd_micros is a bigint: 2^62 + 2^62 does not fit, the record must raise; got {result!r}"
    )
    expect([s.name for s in _steps(store, job.id)], ["a"], "the overflowing step is not journaled")
    expect(read(store, job.id).spent_usd_micros, 2**62, "the spend is unchanged")
