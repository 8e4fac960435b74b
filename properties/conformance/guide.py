"""Cases that pin the points docs/sdk-guide.md settles and no other area pinned yet: the shape of an
error entry and when one is appended, what claiming a due awaiting job keeps, which scope a park
listens on, settlement's edge cases (held members without deps, a released member's ready_at),
cron expression syntax and options, and queue rows (§3, §6, §7, §8.1, §8.3, §8.5).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from model import ops
from model import worker_ops as w
from model.cron import CronDef
from properties.conformance.core import case
from properties.conformance.support import (
    MIN,
    QUEUE,
    S,
    ack,
    cancel,
    check,
    claim,
    claim_job,
    errors_of,
    expect,
    expect_raises,
    fields,
    insert,
    member,
    park,
    read,
    start,
    wf_states,
    workflow,
)


@case("§7", "an error entry is {attempt, at, error, detail} with at an ISO-8601 UTC instant")
def _(store, now):
    job = start(store, now, max_attempts=3)
    expect(
        ack(store, now + S, job, w.Fail("boom", "it broke", now + MIN)),
        w.Acked(job.id, "ready"),
        "attempt 1 of 3 retries",
    )
    (entry,) = read(store, job.id).errors
    expect(sorted(entry), ["at", "attempt", "detail", "error"], "exactly these four keys")
    expect((entry["attempt"], entry["error"], entry["detail"]), (1, "boom", "it broke"), "the values")
    at = datetime.fromisoformat(entry["at"])
    expect((at, at.utcoffset()), (now + S, timedelta(0)), "`at` is the ack's now, with a UTC offset")


@case("§7", "cancel appends no error entry, cooperative or operator; a non-retryable fail appends one")
def _(store, now):
    coop = start(store, now)
    expect(ack(store, now + S, coop, w.CancelSelf()), w.Acked(coop.id, "cancelled"), "cooperative cancel")
    expect(read(store, coop.id).errors, [], "no error entry for a cooperative cancel")
    parked = park(store, now, start(store, now, queue="other"), "s", "n")
    cancel(store, now + S, parked.id)
    expect(read(store, parked.id).errors, [], "no error entry for an operator cancel")
    hard = start(store, now, queue="hard", max_attempts=5)
    expect(
        ack(store, now + S, hard, w.Fail("fatal", None, None)),
        w.Acked(hard.id, "failed"),
        "Fail without retry_at fails at once although attempts remain",
    )
    expect(errors_of(read(store, hard.id)), [(1, now + S, "fatal", None)], "and appends its entry")


@case("§6", "claiming a due awaiting job keeps its await fields, so its code can tell the timeout")
def _(store, now):
    job = park(store, now, start(store, now), "job:x", "go", now + MIN)
    (resumed,) = claim(store, now + MIN)
    expect(
        fields(resumed, "state", "await_scope", "await_name", "ready_at"),
        dict(state="running", await_scope="job:x", await_name="go", ready_at=now + MIN),
        "running again with (await_scope, await_name) still set",
    )
    expect(ack(store, now + MIN + S, resumed, w.Succeed()), w.Acked(job.id, "succeeded"), "then acked")


@case("§8.1", "a park listens on its one scope: a signal of the same name in wf:<id> does not wake job:<id>")
def _(store, now):
    ids = workflow(store, now, "wf", member("a"))
    running = claim_job(store, now, ids["a"])
    store.apply(ops.DeliverSignal(now, "wf:wf", "go", {"from": "wf"}))
    parked = park(store, now + S, running, f"job:{ids['a']}", "go")
    expect(parked.state, "awaiting", "the wf: signal does not satisfy a park on job:")
    store.apply(ops.DeliverSignal(now + 2 * S, f"job:{ids['a']}", "go", {"from": "job"}))
    expect(read(store, ids["a"]).state, "ready", "the job: signal wakes it")
    got = {(s.scope, s.name): s.payload for s in store.apply(ops.ReadSignals((f"job:{ids['a']}", "wf:wf")))}
    expect(
        got,
        {(f"job:{ids['a']}", "go"): {"from": "job"}, ("wf:wf", "go"): {"from": "wf"}},
        "both rows persist; a reader asking both scopes sees both and chooses",
    )


@case("§8.3", "a released member keeps the ready_at of its insert, so it sorts by its original time")
def _(store, now):
    ids = workflow(store, now, "wf", member("a"), member("b", "a"))
    later = insert(store, now + 5 * S)
    expect(read(store, ids["b"]).ready_at, now, "held with ready_at = the insert's now")
    running = claim_job(store, now + 10 * S, ids["a"])
    ack(store, now + 20 * S, running, w.Succeed())
    expect(
        fields(read(store, ids["b"]), "state", "ready_at"),
        dict(state="ready", ready_at=now),
        "released at now + 20 s, ready_at still the insert's now",
    )
    expect([j.id for j in claim(store, now + 21 * S)], [ids["b"], later], "so it claims before a later insert")


@case("§8.3", "a member without deps is never held by settlement, and a retried member without deps is ready")
def _(store, now):
    ids = workflow(store, now, "wf", member("root"), member("leaf", "root"))
    expect(wf_states(store, "wf"), {"root": "ready", "leaf": "held"}, "only dep-bearing members are held")
    running = claim_job(store, now, ids["root"])
    ack(store, now + S, running, w.Fail("boom", None, None))
    expect(wf_states(store, "wf"), {"root": "failed", "leaf": "cancelled"}, "the leaf is doomed")
    expect(
        store.apply(ops.Retry(now + 2 * S, ids["root"])),
        ops.Retried(ids["root"], "ready"),
        "a member without deps is retried straight to ready",
    )
    expect(
        wf_states(store, "wf"),
        {"root": "ready", "leaf": "cancelled"},
        "a doomed dependent stays cancelled until it is retried itself",
    )


@case("§8.5", "a cron expression has exactly five fields; a seconds field or a nickname is refused")
def _(store, now):
    for bad in ("*/20 * * * * *", "@hourly", "* * * *", ""):
        expect_raises(
            ops.InvalidInput, lambda bad=bad: ops.PutCron(now, "c", bad, "w"), f"expression {bad!r} is refused"
        )
    expect_raises(
        ops.InvalidInput,
        lambda: CronDef("c", "*/20 * * * * *", "w"),
        "a static definition with a seconds field is refused too",
    )
    for good in ("*/5 * * * *", "0 9 * * MON-FRI", "0 0 L * *", "0 0 * * 1#2"):
        expect(store.apply(ops.PutCron(now, "c", good, "w")), ops.CronPut("c"), f"{good!r} is accepted")


@case("§8.5", "cron opts take queue, priority and max_attempts; a cron job defaults to queue default")
def _(store, now):
    expect_raises(
        ops.InvalidInput,
        lambda: ops.PutCron(now, "c", "* * * * *", "w", {}, {"queues": "x"}),
        "an unknown option is refused",
    )
    store.apply(ops.PutCron(now, "a", "* * * * *", "w", {"n": 1}, {"queue": QUEUE, "priority": 3, "max_attempts": 2}))
    store.apply(ops.PutCron(now, "b", "* * * * *", "w"))
    fired = store.apply(w.FireCrons(now + MIN, now))
    by_name = {f.cron_name: read(store, f.job_id) for f in fired.fired}
    expect(
        fields(by_name["a"], "queue", "priority", "max_attempts", "input", "cron_slot"),
        dict(
            queue=QUEUE,
            priority=3,
            max_attempts=2,
            input={"n": 1},
            cron_slot=(now + MIN).replace(second=0, microsecond=0),
        ),
        "the options are applied",
    )
    expect(
        fields(by_name["b"], "queue", "priority", "max_attempts", "input"),
        dict(queue="default", priority=0, max_attempts=20, input={}),
        "the defaults",
    )


@case("§6", "a queue row stores validated options and a later put replaces them")
def _(store, now):
    expect_raises(
        ops.InvalidInput,
        lambda: ops.PutQueue(now, "q", {"global_limt": 2}),
        "a misspelt option is refused before any store sees it",
    )
    expect(store.apply(ops.PutQueue(now, "q", {"global_limit": 2})), ops.QueuePut("q"), "stored")
    expect(store.apply(ops.PutQueue(now + S, "q", {"paused": True})), ops.QueuePut("q"), "replaced")
    check(True, "the row's content is compared model-vs-PostgreSQL by the stateful test (put_queue rule)")


@case("§8.6", "a parked job with a pending cancel request is cancelled at once by another cancel")
def _(store, now):
    running = start(store, now)
    expect(store.apply(ops.Cancel(now + S, running.id)), ops.CancelRequested(running.id), "running: a request")
    parked = park(store, now + 2 * S, running, f"job:{running.id}", "go")
    expect(store.apply(ops.Cancel(now + 3 * S, parked.id)), ops.Cancelled(parked.id), "parked: cancelled at once")
    expect(
        fields(read(store, parked.id), "state", "finished_at", "await_scope", "await_name"),
        dict(state="cancelled", finished_at=now + 3 * S, await_scope=None, await_name=None),
        "terminal",
    )
