"""Ack conformance (contract §7, docs/decisions.md's outcome table): every outcome's column effects, the fence
(stale attempts and non-running rows change nothing), the await park rule in both orders, durable
sleep, and the after-terminal steps (workflow settlement, `$children` to the parent, unconditionally)."""

from __future__ import annotations

from datetime import timedelta

from model import ops
from model import worker_ops as w
from properties.conformance.core import case
from properties.conformance.support import (
    MIN,
    NODE,
    QUEUE,
    TTL,
    S,
    ack,
    check,
    claim,
    claim_job,
    enqueue,
    errors_of,
    expect,
    expect_unchanged,
    fields,
    insert,
    member,
    observe,
    park,
    read,
    signal,
    spawn,
    spec,
    start,
    succeed,
    value_of,
    wf_states,
    workflow,
)

CLEARED = dict(lease_until=None, leased_by=None)


# ---------------------------------------------------------------------------------------------
# outcomes


@case("§7", "succeed stores the enveloped result and finishes the job")
def _(store, now):
    job = start(store, now)
    value = {"total": 3, "items": ["a", "b"], "ok": True, "ratio": 0.5, "none": None}
    expect(ack(store, now + S, job, w.Succeed(value)), w.Acked(job.id, "succeeded"), "the ack result")
    after = read(store, job.id)
    expect(
        fields(after, "state", "finished_at", "attempt", "lease_until", "leased_by"),
        dict(state="succeeded", finished_at=now + S, attempt=1, **CLEARED),
        "the succeeded row",
    )
    expect(value_of(after.result), value, "result = envelope(value), decoded")


@case("§7", "an error with attempts left and a retry time readies the job then, with the error appended")
def _(store, now):
    job = start(store, now, max_attempts=3)
    outcome = w.Fail("timeout", detail="upstream slow", retry_at=now + MIN)
    expect(ack(store, now + S, job, outcome), w.Acked(job.id, "ready"), "the ack result")
    after = read(store, job.id)
    expect(
        fields(after, "state", "ready_at", "finished_at", "attempt", "max_attempts", "lease_until", "leased_by"),
        dict(state="ready", ready_at=now + MIN, finished_at=None, attempt=1, max_attempts=3, **CLEARED),
        "ready at the SDK-computed retry time",
    )
    expect(errors_of(after), [(1, now + S, "timeout", "upstream slow")], "errors: {attempt, at, error, detail}")
    expect(claim(store, now + MIN - S), (), "not claimable before retry_at")


@case("§7", "an error on the last attempt fails the job")
def _(store, now):
    job = start(store, now, max_attempts=2)
    ack(store, now + S, job, w.Fail("e1", retry_at=now + 2 * S))
    job = claim_job(store, now + 2 * S, job.id)
    expect(
        ack(store, now + 3 * S, job, w.Fail("e2", retry_at=now + MIN)),
        w.Acked(job.id, "failed"),
        "attempt 2 of 2 fails even with a retry time",
    )
    after = read(store, job.id)
    expect(
        fields(after, "state", "finished_at", "attempt", "lease_until", "leased_by"),
        dict(state="failed", finished_at=now + 3 * S, attempt=2, **CLEARED),
        "the failed row",
    )
    expect(errors_of(after), [(1, now + S, "e1", None), (2, now + 3 * S, "e2", None)], "both errors kept in order")


@case("§7", "an error without a retry time fails the job at once")
def _(store, now):
    job = start(store, now, max_attempts=20)
    expect(
        ack(store, now + S, job, w.Fail("budget_exceeded")),
        w.Acked(job.id, "failed"),
        "retry_at None (e.g. budget_exceeded) means no retry",
    )
    expect(
        fields(read(store, job.id), "state", "finished_at"), dict(state="failed", finished_at=now + S), "the failed row"
    )


@case("§7", "failure detail is truncated to 8 KiB of UTF-8 without splitting a character")
def _(store, now):
    job = start(store, now)
    ack(store, now + S, job, w.Fail("big", detail="€" * 4000))  # 12000 bytes of 3-byte characters
    ((_, _, _, detail),) = errors_of(read(store, job.id))
    expect((detail, len(detail.encode())), ("€" * 2730, 8190), "the stored detail (the one bound that truncates)")


@case("§7", "a cooperative cancel makes the job cancelled and keeps cancel_requested")
def _(store, now):
    job = start(store, now)
    expect(store.apply(ops.Cancel(now + S, job.id)), ops.CancelRequested(job.id), "setup: the cancel request")
    expect(ack(store, now + 2 * S, job, w.CancelSelf()), w.Acked(job.id, "cancelled"), "the ack result")
    expect(
        fields(read(store, job.id), "state", "finished_at", "cancel_requested", "lease_until", "leased_by"),
        dict(state="cancelled", finished_at=now + 2 * S, cancel_requested=True, **CLEARED),
        "transitions never clear cancel_requested (it is moot once terminal)",
    )


@case("§7", "a retried attempt keeps a pending cancel request")
def _(store, now):
    job = start(store, now)
    store.apply(ops.Cancel(now + S, job.id))
    ack(store, now + 2 * S, job, w.Fail("flaky", retry_at=now + 3 * S))
    expect(
        fields(read(store, job.id), "state", "cancel_requested"),
        dict(state="ready", cancel_requested=True),
        "a pending cancel request survives a retry",
    )
    job = claim_job(store, now + 3 * S, job.id)
    expect(
        store.apply(w.Preflight(job.id)),
        w.BudgetOk(cancel_requested=True),
        "the next attempt sees the request at its first step boundary",
    )


@case("§7", "a snooze readies the job at until and spends no attempt")
def _(store, now):
    job = start(store, now, max_attempts=4)
    expect(ack(store, now + S, job, w.Snooze(now + MIN)), w.Acked(job.id, "ready"), "the ack result")
    expect(
        fields(
            read(store, job.id),
            "state",
            "ready_at",
            "attempt",
            "max_attempts",
            "errors",
            "finished_at",
            "lease_until",
            "leased_by",
        ),
        dict(state="ready", ready_at=now + MIN, attempt=1, max_attempts=5, errors=[], finished_at=None, **CLEARED),
        "max_attempts + 1 compensates the claim's attempt + 1",
    )


# ---------------------------------------------------------------------------------------------
# the park rule, both orders


@case("§7", "await parks the job on its scope and name until the deadline")
def _(store, now):
    job = start(store, now)
    result = store.apply(w.ParkAwait(now + S, job.id, job.attempt, "orders", "paid", now + MIN))
    expect(result, w.Parked(job.id, "awaiting"), "no signal yet: parked")
    expect(
        fields(read(store, job.id), "state", "await_scope", "await_name", "ready_at", "lease_until", "leased_by"),
        dict(state="awaiting", await_scope="orders", await_name="paid", ready_at=now + MIN, **CLEARED),
        "the awaiting row (ready_at is the deadline)",
    )


@case("§7", "await after the signal was delivered parks the job as ready at once")
def _(store, now):
    store.apply(ops.DeliverSignal(now, "orders", "paid", {"amount": 3}))
    job = start(store, now)
    result = store.apply(w.ParkAwait(now + S, job.id, job.attempt, "orders", "paid", now + MIN))
    expect(result, w.Parked(job.id, "ready"), "the signal row exists: park as ready instead")
    expect(
        fields(read(store, job.id), "state", "ready_at", "await_scope", "await_name", "lease_until", "leased_by"),
        dict(state="ready", ready_at=now + S, await_scope=None, await_name=None, **CLEARED),
        "the parked row",
    )
    check(signal(store, "orders", "paid") is not None, "the signal persists: parking does not consume it")
    expect([j.id for j in claim(store, now + S)], [job.id], "the job runs again at once and finds its signal")


@case("§7", "a signal delivered after the await wakes the job")
def _(store, now):
    job = park(store, now + S, start(store, now), "orders", "paid", now + MIN)
    expect(
        store.apply(ops.DeliverSignal(now + 2 * S, "orders", "paid", {"amount": 3})),
        ops.Signalled((job.id,)),
        "the delivery wakes the awaiter",
    )
    expect(
        fields(read(store, job.id), "state", "ready_at", "await_scope", "await_name"),
        dict(state="ready", ready_at=now + 2 * S, await_scope=None, await_name=None),
        "either order ends the same way: ready, await fields cleared",
    )


@case("§9", "a durable sleep journals $sleep:<name> and a re-run keeps the first wake time")
def _(store, now):
    job = start(store, now)
    expect(
        store.apply(w.Sleep(now + S, job.id, job.attempt, "nap", now + MIN)),
        w.Slept(job.id, now + MIN),
        "the first sleep",
    )
    expect(
        fields(read(store, job.id), "state", "ready_at", "lease_until", "leased_by"),
        dict(state="ready", ready_at=now + MIN, **CLEARED),
        "asleep: ready at until",
    )
    check(isinstance(store.apply(w.ReadStep(job.id, "$sleep:nap")), w.StepHit), "the $sleep:nap step is journaled")
    expect(claim(store, now + MIN - S), (), "not claimable while asleep")
    job = claim_job(store, now + MIN, job.id)
    expect(
        store.apply(w.Sleep(now + MIN, job.id, job.attempt, "nap", now + 10 * MIN)),
        w.Slept(job.id, now + MIN),
        "the re-run's sleep returns the journaled wake time",
    )
    expect(read(store, job.id).ready_at, now + MIN, "and readies the job at it (already due)")


# ---------------------------------------------------------------------------------------------
# the fence


@case("§7", "a stale ack after reclaim changes nothing")
def _(store, now):
    first = start(store, now)
    expect(store.apply(w.Reclaim(now + TTL)), w.Reclaimed((first.id,), ()), "setup: the lease expired")
    second = claim_job(store, now + TTL + timedelta(seconds=2), first.id)
    expect(second.attempt, 2, "setup: the job runs its second attempt")
    before = observe(store, [first.id])
    for outcome in (w.Succeed("late"), w.Fail("late"), w.CancelSelf(), w.Snooze(now + 10 * MIN)):
        expect(
            ack(store, now + TTL + 3 * S, first, outcome),
            w.Stale(first.id, 1),
            f"an ack of attempt 1 with {type(outcome).__name__} after attempt 2 started",
        )
    expect(
        store.apply(w.ParkAwait(now + TTL + 3 * S, first.id, 1, "s", "n")),
        w.Stale(first.id, 1),
        "a park of the reclaimed attempt",
    )
    expect(
        store.apply(w.Sleep(now + TTL + 3 * S, first.id, 1, "nap", now + 10 * MIN)),
        w.Stale(first.id, 1),
        "a sleep of the reclaimed attempt",
    )
    expect_unchanged(before, store, "a stale write never mutates the row (§11 invariant 2)")
    expect(
        ack(store, now + TTL + 4 * S, second, w.Succeed("fresh")),
        w.Acked(first.id, "succeeded"),
        "the live attempt still acks",
    )


@case("§7", "an ack for a job that is not running is stale and changes nothing")
def _(store, now):
    waiting = insert(store, now, queue="never-claimed")
    done = succeed(store, now + S, insert(store, now, queue="finished"), {"v": 1})
    parked = park(store, now, start(store, now, queue="parked"), "s", "n")
    before = observe(store, [waiting, done.id, parked.id])
    expect(store.apply(w.Ack(now + 2 * S, waiting, 1, w.Succeed())), w.Stale(waiting, 1), "a ready, never-claimed job")
    expect(store.apply(w.Ack(now + 2 * S, done.id, 1, w.Fail("x"))), w.Stale(done.id, 1), "a succeeded job")
    expect(store.apply(w.Ack(now + 2 * S, parked.id, 1, w.Succeed())), w.Stale(parked.id, 1), "an awaiting job")
    expect(
        store.apply(w.Ack(now + 2 * S, done.id + 1000, 1, w.Succeed())), w.Stale(done.id + 1000, 1), "an unknown job"
    )
    expect_unchanged(before, store, "stale acks change nothing")


# ---------------------------------------------------------------------------------------------
# after-terminal steps


@case("§7", "a successful ack releases a dependent once all its deps succeeded")
def _(store, now):
    ids = workflow(store, now, "wf", member("a", queue="qa"), member("b", queue="qb"), member("c", "a", "b"))
    succeed(store, now + S, ids["a"])
    expect(wf_states(store, "wf")["c"], "held", "one dep left")
    succeed(store, now + 2 * S, ids["b"])
    expect(wf_states(store, "wf")["c"], "ready", "released by the last dep's ack")


@case("§7", "a failed ack dooms dependents, cascading, except those that tolerate the outcome")
def _(store, now):
    ids = workflow(
        store,
        now,
        "wf",
        member("a"),
        member("b", "a"),
        member("c", "b"),
        member("d", "b", ignore=("cancelled",)),
        member("e", "a", ignore=("failed",)),
        member("f", "a", ignore=("cancelled",)),
    )
    expect(
        ack(store, now + S, claim_job(store, now, ids["a"]), w.Fail("boom")),
        w.Acked(ids["a"], "failed"),
        "the failing ack",
    )
    expect(
        wf_states(store, "wf"),
        {"a": "failed", "b": "cancelled", "c": "cancelled", "d": "ready", "e": "ready", "f": "cancelled"},
        "doomed members count as cancelled for their own dependents (fixpoint)",
    )
    for name in ("b", "c", "f"):
        expect(read(store, ids[name]).finished_at, now + S, f"doomed {name} finishes at the ack's now")


@case("§7", "a cooperative cancel dooms dependents unless they tolerate cancellation")
def _(store, now):
    ids = workflow(store, now, "wf", member("a"), member("b", "a"), member("c", "a", ignore=("cancelled",)))
    ack(store, now + S, claim_job(store, now, ids["a"]), w.CancelSelf())
    expect(wf_states(store, "wf"), {"a": "cancelled", "b": "cancelled", "c": "ready"}, "settlement after cancel")


@case("§7", "every terminal child delivers $children to its parent, never gated on its siblings")
def _(store, now):
    parent = start(store, now, queue="parents")
    c1, c2, c3 = spawn(store, now, parent.id, "kids", *(spec(f"kid{i}", "kids") for i in range(3)))
    succeed(store, now + S, c1, "one")
    first = signal(store, f"job:{parent.id}", "$children")
    check(first is not None, "the first child's success signals the parent though two siblings still run")
    expect((first.payload, first.inserted_at), ({"children": [c1]}, now + S), "the first delivery")
    ack(store, now + 2 * S, claim_job(store, now + 2 * S, c2), w.Fail("boom"))
    expect(signal(store, f"job:{parent.id}", "$children").payload, {"children": [c2]}, "a failed child signals too")
    store.apply(ops.Cancel(now + 3 * S, c3))
    got = signal(store, f"job:{parent.id}", "$children")
    expect((got.payload, got.inserted_at), ({"children": [c3]}, now + 3 * S), "an operator cancel signals too")


@case("§7", "a snooze that would overflow max_attempts is refused loudly and changes nothing")
def _(store, now):
    job = start(store, now, max_attempts=2**31 - 1)
    before = observe(store, [job.id])
    try:
        result = ack(store, now + S, job, w.Snooze(now + MIN))
    except Exception:  # noqa: BLE001 -- any store's own error counts as "refused loudly"
        result = None
    check(result is None, f"max_attempts + 1 does not fit the integer column: the snooze must raise, got {result!r}")
    expect_unchanged(before, store, "the refused snooze changes nothing")


# ---------------------------------------------------------------------------------------------
# batched acks (chunk workers): the same fence per row, after-terminal steps once


@case("§7", "a batched ack fences each row on its own attempt")
def _(store, now):
    done, retried, snoozed, stale = (start(store, now, queue=f"q{i}") for i in range(4))
    expect(
        store.apply(w.Reclaim(now + TTL)),
        w.Reclaimed(tuple(sorted((done.id, retried.id, snoozed.id, stale.id))), ()),
        "setup: every lease expired",
    )
    done, retried, snoozed = (claim_job(store, now + TTL + 2 * S, j.id) for j in (done, retried, snoozed))
    before = observe(store, [stale.id])
    at = now + TTL + 3 * S
    result = store.apply(
        w.AckMany(
            at,
            (
                w.Ack(at, done.id, done.attempt, w.Succeed({"v": 1})),
                w.Ack(at, stale.id, 1, w.Succeed("late")),
                w.Ack(at, retried.id, retried.attempt, w.Fail("flaky", retry_at=at + MIN)),
                w.Ack(at, snoozed.id, snoozed.attempt, w.Snooze(at + MIN)),
            ),
        )
    )
    expect(
        result,
        w.AckedMany(
            (
                w.Acked(done.id, "succeeded"),
                w.Stale(stale.id, 1),
                w.Acked(retried.id, "ready"),
                w.Acked(snoozed.id, "ready"),
            )
        ),
        "one result per ack, in order",
    )
    expect_unchanged(before, store, "the stale row in a batch is not touched")
    expect(
        (value_of(read(store, done.id).result), read(store, done.id).finished_at), ({"v": 1}, at), "the succeeded row"
    )
    expect(errors_of(read(store, retried.id))[-1], (2, at, "flaky", None), "the retried row's error")
    expect(read(store, snoozed.id).max_attempts, 21, "the snooze spent no attempt")


@case("§7", "a batched ack settles workflows and signals each parent once with all its finished children")
def _(store, now):
    ids = workflow(store, now, "wf", member("a", queue="qa"), member("b", "a"), member("c", "a", ignore=("failed",)))
    parent = start(store, now, queue="parents")
    c1, c2, c3 = spawn(store, now, parent.id, "kids", *(spec("k", "kids") for _ in range(3)))
    a = claim_job(store, now, ids["a"])
    k1, k2, _k3 = claim(store, now, "kids")
    at = now + S
    result = store.apply(
        w.AckMany(
            at,
            (
                w.Ack(at, k2.id, k2.attempt, w.Fail("boom")),
                w.Ack(at, a.id, a.attempt, w.Succeed()),
                w.Ack(at, k1.id, k1.attempt, w.Succeed()),
            ),
        )
    )
    expect(
        result, w.AckedMany((w.Acked(c2, "failed"), w.Acked(a.id, "succeeded"), w.Acked(c1, "succeeded"))), "the batch"
    )
    expect(wf_states(store, "wf"), {"a": "succeeded", "b": "ready", "c": "ready"}, "settlement after the batch")
    got = signal(store, f"job:{parent.id}", "$children")
    check(got is not None, "the finished children signal their parent")
    expect(
        (got.payload, got.inserted_at),
        ({"children": [c1, c2]}, at),
        "one $children delivery per parent per transaction, naming every child it finished",
    )
    expect(read(store, c3).state, "running", "the third child still runs")


# ---------------------------------------------------------------------------------------------
# a wait spends no attempt (model.store.max_attempts_after_park): every park outcome — await a
# signal (awaiting, or ready at once when the signal is already there), durable sleep, await
# children — raises max_attempts by one, so the resume's claim leaves the retry budget as it was.

PARKS = 50


def _park_and_resume(store, at, job, i: int):
    """Park the running `job` with one of the four wait outcomes (by i), resume it, claim it again:
    (the running row, the time after). Each outcome's own result is checked on the way."""
    kind = i % 4
    if kind == 0:  # await a signal that arrives later
        park(store, at, job, f"job:{job.id}", f"go{i}", at + MIN)
        expect(
            store.apply(ops.DeliverSignal(at + S, f"job:{job.id}", f"go{i}", i)),
            ops.Signalled((job.id,)),
            f"park {i}: the signal wakes the awaiter",
        )
    elif kind == 1:  # await a signal already delivered: §7 parks it as ready at once
        store.apply(ops.DeliverSignal(at, f"job:{job.id}", f"go{i}", i))
        park(store, at, job, f"job:{job.id}", f"go{i}", at + MIN, expected="ready")
    elif kind == 2:  # durable sleep
        expect(
            store.apply(w.Sleep(at, job.id, job.attempt, f"nap{i}", at + S)),
            w.Slept(job.id, at + S),
            f"park {i}: the sleep",
        )
    else:  # await children: park until the only child finishes
        (child,) = spawn(store, at, job.id, f"kids{i}", spec("kid", "kids"))
        result = store.apply(w.AwaitChildren(at, job.id, job.attempt))
        expect(result, w.Parked(job.id, "awaiting"), f"park {i}: await-children parks while the child runs")
        succeed(store, at + S, child)
    at += 2 * S
    return claim_job(store, at, job.id), at


def _parked_many_times(store, now, max_attempts: int = 3):
    job = start(store, now, max_attempts=max_attempts)
    at = now + S
    for i in range(PARKS):
        job, at = _park_and_resume(store, at, job, i)
    after = read(store, job.id)
    expect(
        (after.attempt, after.max_attempts - after.attempt),
        (PARKS + 1, max_attempts - 1),
        f"after {PARKS} waits and resumes the retry budget (max_attempts − attempt) is what the first claim "
        "left: no wait spent an attempt",
    )
    return job, at


@case("§7", "each park outcome raises max_attempts by one, as a snooze does")
def _(store, now):
    for i, label in enumerate(("await (awaiting)", "await (signal present: ready at once)", "sleep", "await children")):
        job = start(store, now + i * MIN, queue=f"w{i}", max_attempts=3)
        if i == 0:
            park(store, now + i * MIN + S, job, "s", "n", now + 10 * MIN)
        elif i == 1:
            store.apply(ops.DeliverSignal(now + i * MIN, "s", "present", 1))
            park(store, now + i * MIN + S, job, "s", "present", expected="ready")
        elif i == 2:
            store.apply(w.Sleep(now + i * MIN + S, job.id, job.attempt, "nap", now + 10 * MIN))
        else:
            spawn(store, now + i * MIN, job.id, "kids", spec("kid", "kids"))
            expect(
                store.apply(w.AwaitChildren(now + i * MIN + S, job.id, job.attempt)),
                w.Parked(job.id, "awaiting"),
                "setup: await-children parks",
            )
        expect(
            fields(read(store, job.id), "attempt", "max_attempts"),
            dict(attempt=1, max_attempts=4),
            f"{label}: the park leaves max_attempts − attempt at 3 for the claim that resumes it",
        )


@case("§7", "a job that parked 50 times with max_attempts 3 still retries after a crash")
def _(store, now):
    job, at = _parked_many_times(store, now)
    at_once = w.Backoff(base_s=0, factor=1, max_s=0)
    expect(
        store.apply(w.Reclaim(at + TTL, at_once)),
        w.Reclaimed((job.id,), ()),
        "the crashed attempt's lease expires: retried, not failed",
    )
    job = claim_job(store, at + TTL + S, job.id)
    expect(
        store.apply(w.Reclaim(at + 2 * TTL + S, at_once)), w.Reclaimed((job.id,), ()), "a second crash: retried again"
    )
    job = claim_job(store, at + 2 * TTL + 2 * S, job.id)
    expect(
        store.apply(w.Reclaim(at + 3 * TTL + 2 * S, at_once)),
        w.Reclaimed((), (job.id,)),
        "the third crash spends the last of the three attempts: failed",
    )


@case("§7", "a job that parked 50 times with max_attempts 3 still retries after a raised error")
def _(store, now):
    job, at = _parked_many_times(store, now)
    expect(
        ack(store, at, job, w.Fail("boom", retry_at=at + S)),
        w.Acked(job.id, "ready"),
        "the first real error is retried",
    )
    job = claim_job(store, at + S, job.id)
    expect(
        ack(store, at + S, job, w.Fail("boom", retry_at=at + 2 * S)),
        w.Acked(job.id, "ready"),
        "the second real error is retried",
    )
    job = claim_job(store, at + 2 * S, job.id)
    expect(
        ack(store, at + 2 * S, job, w.Fail("boom", retry_at=at + 3 * S)),
        w.Acked(job.id, "failed"),
        "the third real error spends the last of the three attempts: failed",
    )


@case("§7", "a park at the integer ceiling of max_attempts is not refused and keeps the ceiling")
def _(store, now):
    job = start(store, now, max_attempts=2**31 - 1)
    park(store, now + S, job, "s", "n", now + MIN)
    expect(read(store, job.id).max_attempts, 2**31 - 1, "max_attempts saturates at 2^31−1")


@case("§7", "a group of acks and the claim of the slots they free commit together (AckClaim)")
def _(store, now):
    done = start(store, now)
    waiting = enqueue(store, now, ops.JobSpec(QUEUE, "w")).outcomes[0].id
    at = now + S
    result = store.apply(
        w.AckClaim(
            w.AckMany(at, (w.Ack(at, done.id, done.attempt, w.Succeed({"v": 1})),)),
            w.Claim(at, QUEUE, NODE, 1, TTL),
        )
    )
    check(isinstance(result, w.AckedClaimed), f"an AckedClaimed, got {result!r}")
    expect(result.acked, w.AckedMany((w.Acked(done.id, "succeeded"),)), "the ack")
    expect([j.id for j in result.claimed.jobs], [waiting], "the freed slot is claimed in the same transaction")
    expect(read(store, done.id).state, "succeeded", "the acked row")
    claimed = read(store, waiting)
    expect((claimed.state, claimed.attempt, claimed.leased_by), ("running", 1, NODE), "the claimed row")
