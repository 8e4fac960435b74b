"""Cron and retention conformance: firing per due UTC minute slot exactly once, paused rows skipped,
dynamic rows over static config (§8.5); pruning terminal jobs per state with their steps and events,
in batches, signals past TTL and rate windows older than a day, never a live job, never a member of a
workflow that is still settling (§8.7)."""

from __future__ import annotations

from datetime import timedelta

from model import ops
from model import worker_ops as w
from model.cron import CronDef
from properties.conformance.core import case
from properties.conformance.support import (
    MIN,
    S,
    cancel,
    check,
    claim,
    expect,
    fail,
    fields,
    gone,
    insert,
    member,
    park,
    read,
    signals,
    start,
    succeed,
    wf_states,
    workflow,
)

TICK = CronDef("tick", "* * * * *", "tick_worker", {"n": 1}, "cron", priority=2, max_attempts=3)
DAY = timedelta(days=1)


def fire(store, now, since, *static):
    result = store.apply(w.FireCrons(now, since, tuple(static)))
    check(isinstance(result, w.CronsFired), f"FireCrons returned {result!r}, not CronsFired")
    return result.fired


# ---------------------------------------------------------------------------------------------
# §8.5 cron


@case("§8.5", "firing inserts one job per due minute slot since the last firing")
def _(store, now):
    expect(fire(store, now + 30 * S, now, TICK), (), "no minute boundary in (12:00:00, 12:00:30]")
    fired = fire(store, now + 3 * MIN + 10 * S, now, TICK)
    expect(
        [(f.cron_name, f.slot, f.inserted) for f in fired],
        [("tick", now + i * MIN, True) for i in (1, 2, 3)],
        "slots 12:01, 12:02, 12:03",
    )
    for f in fired:
        expect(
            fields(
                read(store, f.job_id),
                "cron_name",
                "cron_slot",
                "queue",
                "worker",
                "input",
                "priority",
                "max_attempts",
                "state",
                "ready_at",
                "inserted_at",
            ),
            dict(
                cron_name="tick",
                cron_slot=f.slot,
                queue="cron",
                worker="tick_worker",
                input={"n": 1},
                priority=2,
                max_attempts=3,
                state="ready",
                ready_at=now + 3 * MIN + 10 * S,
                inserted_at=now + 3 * MIN + 10 * S,
            ),
            f"the job of slot {f.slot.isoformat()}",
        )


@case("§8.5", "each slot fires exactly once across overlapping firings")
def _(store, now):
    first = {f.slot: f.job_id for f in fire(store, now + 3 * MIN, now, TICK)}
    again = fire(store, now + 4 * MIN, now + MIN, TICK)
    expect(
        [(f.slot, f.inserted) for f in again],
        [(now + 2 * MIN, False), (now + 3 * MIN, False), (now + 4 * MIN, True)],
        "slots already taken are skipped; the new one is inserted",
    )
    expect(
        [f.job_id for f in again[:2]],
        [first[now + 2 * MIN], first[now + 3 * MIN]],
        "a skipped slot reports the job that owns it",
    )
    expect(fire(store, now + 4 * MIN, now, TICK)[-1].job_id, again[-1].job_id, "and again from another node")


@case("§8.5", "a paused dynamic cron is skipped, also over a static one of the same name")
def _(store, now):
    store.apply(ops.PutCron(now, "tick", "* * * * *", "tick_worker", paused=True))
    store.apply(ops.PutCron(now, "solo", "* * * * *", "solo_worker", paused=True))
    expect(fire(store, now + 3 * MIN, now, TICK), (), "paused rows fire nothing")
    store.apply(ops.PutCron(now + 3 * MIN, "solo", "* * * * *", "solo_worker", paused=False))
    expect(
        [f.cron_name for f in fire(store, now + 4 * MIN, now + 3 * MIN, TICK)],
        ["solo"],
        "unpausing the dynamic row resumes it; tick stays paused",
    )


@case("§8.5", "a dynamic cron row overrides the static definition of the same name")
def _(store, now):
    other = CronDef("zzz", "*/4 * * * *", "z_worker", queue="cron")
    store.apply(ops.PutCron(now, "tick", "*/2 * * * *", "dyn_worker", {"d": 1}, {"queue": "dynq", "priority": 3}))
    fired = fire(store, now + 4 * MIN, now, TICK, other)
    expect(
        [(f.cron_name, f.slot) for f in fired],
        [("tick", now + 2 * MIN), ("tick", now + 4 * MIN), ("zzz", now + 4 * MIN)],
        "tick fires on its dynamic expression; the untouched static cron fires as configured",
    )
    expect(
        fields(read(store, fired[0].job_id), "worker", "queue", "priority", "input"),
        dict(worker="dyn_worker", queue="dynq", priority=3, input={"d": 1}),
        "the dynamic row's job",
    )


# ---------------------------------------------------------------------------------------------
# §8.7 retention


@case("§8.7", "prune deletes terminal jobs past retention together with their steps and events")
def _(store, now):
    job = start(store, now, queue="qa")
    store.apply(w.RecordStep(now, job.id, "s", 1))
    store.apply(w.EmitEvent(now, job.id, {"e": 1}))
    store.apply(w.Ack(now + S, job.id, job.attempt, w.Succeed()))
    live = start(store, now, queue="qb")
    store.apply(w.RecordStep(now, live.id, "s", 2))
    expect(store.apply(w.Prune(now + S + 100 * S, {"succeeded": 50})), w.Pruned((job.id,), 0, 0), "the prune")
    check(gone(store, job.id), "the pruned job is gone")
    expect(
        (tuple(store.apply(ops.ReadSteps(job.id))), tuple(store.apply(ops.ReadEvents(job.id)))),
        ((), ()),
        "its steps and events went with it",
    )
    expect(len(store.apply(ops.ReadSteps(live.id))), 1, "another job's journal is untouched")


@case("§8.7", "prune applies retention per terminal state and keeps states without one")
def _(store, now):
    done = succeed(store, now, insert(store, now, queue="qs")).id
    failed = fail(store, now, insert(store, now, queue="qf")).id
    cancelled = cancel(store, now, insert(store, now, queue="qc")).id
    expect(
        store.apply(w.Prune(now + 100 * S, {"succeeded": 100, "failed": 99, "cancelled": None})),
        w.Pruned((failed,), 0, 0),
        "finished_at < now - retention: failed is 1 s past, succeeded exactly at it",
    )
    expect(
        store.apply(w.Prune(now + 101 * S, {"succeeded": 100})),
        w.Pruned((done,), 0, 0),
        "succeeded is past its retention a second later",
    )
    check(not gone(store, cancelled), "a state without retention is kept forever")


@case("§8.7", "prune never deletes a non-terminal job")
def _(store, now):
    ready = insert(store, now, queue="qr")
    running = start(store, now, queue="qn")
    parked = park(store, now, start(store, now, queue="qp"), "s", "n")
    ids = workflow(store, now, "wf", member("root", queue="qw"), member("held", "root", queue="qw"))
    everything = {"succeeded": 0, "failed": 0, "cancelled": 0}
    expect(store.apply(w.Prune(now + 365 * DAY, everything)).jobs, (), "nothing terminal to prune")
    expect(
        [read(store, i).state for i in (ready, running.id, parked.id, ids["held"])],
        ["ready", "running", "awaiting", "held"],
        "every live job is still there",
    )
    expect(wf_states(store, "wf"), {"root": "ready", "held": "held"}, "workflow untouched")


@case("§8.7", "prune deletes at most `limit` jobs per batch, lowest ids first")
def _(store, now):
    ids = [succeed(store, now, insert(store, now)).id for _ in range(3)]
    expect(store.apply(w.Prune(now + DAY, {"succeeded": 0}, limit=2)).jobs, tuple(ids[:2]), "the first batch")
    expect(store.apply(w.Prune(now + DAY, {"succeeded": 0}, limit=2)).jobs, (ids[2],), "the next batch")
    expect(store.apply(w.Prune(now + DAY, {"succeeded": 0}, limit=2)).jobs, (), "then nothing")


@case("§8.7", "prune removes signals past their TTL and keeps newer ones")
def _(store, now):
    store.apply(ops.DeliverSignal(now, "s", "old", 1))
    store.apply(ops.DeliverSignal(now + 50 * S, "s", "new", 2))
    expect(store.apply(w.Prune(now + 100 * S, {}, signal_ttl=None)), w.Pruned((), 0, 0), "no TTL keeps every signal")
    expect(
        store.apply(w.Prune(now + 100 * S, {}, signal_ttl=60)),
        w.Pruned((), 1, 0),
        "inserted_at < now - ttl: the old one goes",
    )
    expect([s.name for s in signals(store, "s")], ["new"], "the newer signal stays")


@case("§8.7", "prune removes rate windows older than a day")
def _(store, now):
    opts = {"rate": {"allowed": 2, "period": 60}}
    for _ in range(4):
        insert(store, now)
    expect(len(claim(store, now, opts=opts)), 2, "setup: the claim debits window 12:00")
    expect(store.apply(w.Prune(now + DAY, {})).rate_windows, 0, "a window exactly a day old stays")
    expect(store.apply(w.Prune(now + DAY + S, {})).rate_windows, 1, "older than a day: pruned")


@case("§8.7", "prune keeps the terminal members of a workflow that still has live members")
def _(store, now):
    ids = workflow(
        store, now, "wf", member("a", queue="qa"), member("x", queue="qx"), member("b", "a", "x", queue="qb")
    )
    succeed(store, now, ids["a"])
    expect(wf_states(store, "wf"), {"a": "succeeded", "x": "ready", "b": "held"}, "setup: b waits on x")
    expect(
        store.apply(w.Prune(now + DAY, {"succeeded": 0})).jobs,
        (),
        "a is past retention, but held b must still find its dep a (a missing dep could never settle)",
    )
    succeed(store, now + DAY, ids["x"])
    succeed(store, now + DAY, ids["b"])
    expect(
        store.apply(w.Prune(now + 2 * DAY, {"succeeded": 0})).jobs,
        tuple(sorted(ids.values())),
        "once every member is terminal the workflow is pruned whole",
    )


@case("§8.7", "retrying a member whose deps were pruned reports DepsGone and changes nothing")
def _(store, now):
    ids = workflow(store, now, "wf", member("a"), member("b", "a"))
    fail(store, now, ids["a"])
    expect(wf_states(store, "wf"), {"a": "failed", "b": "cancelled"}, "setup: b doomed")
    expect(store.apply(w.Prune(now + DAY, {"failed": 0})).jobs, (ids["a"],), "setup: a pruned, b kept")
    before = read(store, ids["b"])
    expect(
        store.apply(ops.Retry(now + DAY, ids["b"])),
        ops.DepsGone(ids["b"], ("a",)),
        "re-holding b could never settle: its dep is gone",
    )
    expect(read(store, ids["b"]), before, "the refused retry changes nothing")
