"""Claim conformance (contract §6): claim order and the claimability predicate, admission
(global_limit, rate windows, partitions), lease renewal and reclaiming expired leases."""

from __future__ import annotations

from datetime import timedelta

from model import ops
from model import worker_ops as w
from properties.conformance.core import case
from properties.conformance.support import (
    MIN,
    NODE,
    OTHER_NODE,
    TTL,
    S,
    ack,
    check,
    claim,
    claim_job,
    claimed_ids,
    errors_of,
    expect,
    fields,
    insert,
    member,
    park,
    read,
    signal,
    spawn,
    spec,
    start,
    wf_states,
    workflow,
)


@case("§6", "claims follow priority, then ready_at, then id")
def _(store, now):
    late_low = insert(store, now, "a", priority=1, scheduled_at=now - 10 * S)
    mid = insert(store, now, "b", priority=0, scheduled_at=now - 5 * S)
    early1 = insert(store, now, "c", priority=0, scheduled_at=now - 10 * S)
    early2 = insert(store, now, "d", priority=0, scheduled_at=now - 10 * S)
    expect(
        claimed_ids(store, now, demand=3),
        [early1, early2, mid],
        "ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC, first `demand` rows",
    )
    expect(claimed_ids(store, now), [late_low], "the rest on the next claim")


@case("§6", "a claim leases the row to the node and keeps the first started_at")
def _(store, now):
    job_id = insert(store, now)
    (job,) = claim(store, now + S, demand=1, ttl=timedelta(seconds=45))
    expect(
        fields(job, "id", "state", "attempt", "lease_until", "leased_by", "started_at"),
        dict(
            id=job_id,
            state="running",
            attempt=1,
            lease_until=now + S + timedelta(seconds=45),
            leased_by=NODE,
            started_at=now + S,
        ),
        "the claimed row returned by the claim",
    )
    expect(read(store, job_id), job, "the row read back equals the claimed row")
    expect(
        ack(store, now + 2 * S, job, w.Fail("flaky", retry_at=now + 3 * S)),
        w.Acked(job_id, "ready"),
        "setup: a retryable error",
    )
    (again,) = claim(store, now + 3 * S, demand=1, node=OTHER_NODE)
    expect(
        fields(again, "attempt", "leased_by", "started_at"),
        dict(attempt=2, leased_by=OTHER_NODE, started_at=now + S),
        "started_at = COALESCE(started_at, now)",
    )


@case("§6", "a job whose ready_at is in the future is not claimable until due")
def _(store, now):
    job_id = insert(store, now, scheduled_at=now + MIN)
    expect(claim(store, now + MIN - S), (), "not due one second before ready_at")
    expect(claimed_ids(store, now + MIN), [job_id], "due exactly at ready_at (ready_at <= now)")


@case("§6", "claims take only from the named queue and at most `demand` rows")
def _(store, now):
    mine = [insert(store, now, queue="mine") for _ in range(3)]
    insert(store, now, queue="theirs")
    expect(claim(store, now, "mine", demand=0), (), "demand 0 claims nothing")
    expect(claimed_ids(store, now, "mine", demand=2), mine[:2], "demand caps the claim")
    expect(claimed_ids(store, now, "mine"), mine[2:], "the other queue's job is never taken")
    expect(claim(store, now, "empty"), (), "an empty queue claims nothing")


@case("§6", "an awaiting job is claimable only once its deadline is due")
def _(store, now):
    timed = park(store, now, start(store, now, queue="timed"), "s", "never", now + MIN)
    forever = park(store, now, start(store, now, queue="forever"), "s", "never")
    expect(claim(store, now + MIN - S, "timed"), (), "not claimable before its deadline")
    (resumed,) = claim(store, now + MIN, "timed")
    expect(
        fields(resumed, "id", "state", "attempt"),
        dict(id=timed.id, state="running", attempt=2),
        "resumed at the deadline so its own code observes the timeout",
    )
    expect(claim(store, now + timedelta(days=365), "forever"), (), "an awaiting job without a deadline never runs")
    expect(read(store, forever.id).state, "awaiting", "it stays parked")


@case("§6", "global_limit counts live leases only")
def _(store, now):
    opts = {"global_limit": 2}
    ids = [insert(store, now) for _ in range(5)]
    expect(claimed_ids(store, now, demand=5, opts=opts), ids[:2], "at most global_limit running")
    expect(
        claimed_ids(store, now + S, demand=5, opts=opts, node=OTHER_NODE),
        [],
        "another node sees the same two live leases",
    )
    done = read(store, ids[0])
    ack(store, now + 2 * S, done, w.Succeed())
    expect(claimed_ids(store, now + 2 * S, demand=5, opts=opts), [ids[2]], "a finished job frees its slot")
    # ids[1]'s lease (until now + 30s) has expired at now + 30s: it no longer counts, though still 'running'.
    expect(
        claimed_ids(store, now + TTL, demand=5, opts=opts),
        [ids[3]],
        "an expired lease (lease_until <= now) is not live",
    )


@case("§6", "a rate window admits floor((allowed - used) / estimate) and debits N × estimate")
def _(store, now):
    opts = {"rate": {"allowed": 5, "period": 60, "estimate": 2}}
    for _ in range(10):
        insert(store, now)
    # now is a whole minute, so it starts window w0. used(w0) = 0 → floor(5/2) = 2 jobs, debit 4.
    expect(len(claim(store, now, opts=opts)), 2, "first claim in an empty window")
    expect(len(claim(store, now + 30 * S, opts=opts)), 0, "used 4 → floor(1/2) = 0")
    # w1 at +60 s: used = 0 + round(4 × 1) = 4 → 0.
    expect(len(claim(store, now + 60 * S, opts=opts)), 0, "the previous window weighs fully at its end")
    # at +90 s: used = 0 + round(4 × 0.5) = 2 → floor(3/2) = 1, debit 2 into w1.
    expect(len(claim(store, now + 90 * S, opts=opts)), 1, "half-way through w1 the previous window weighs half")
    expect(len(claim(store, now + 90 * S, opts=opts)), 0, "used = 2 + 2 = 4 → 0")
    # w2 at +120 s: used = 0 + round(2 × 1) = 2 → 1.
    expect(len(claim(store, now + 120 * S, opts=opts)), 1, "w1's debit of 2 carries into w2")


@case("§6", "a resource rate bucket is shared by every queue that names it")
def _(store, now):
    opts = {"rate": {"allowed": 3, "period": 60, "resource": "api"}}
    for queue in ("qa", "qa", "qb", "qb"):
        insert(store, now, queue=queue)
    expect(len(claim(store, now, "qa", opts=opts)), 2, "qa takes 2 of the api's 3")
    expect(len(claim(store, now, "qb", opts=opts)), 1, "qb gets the one left in resource:api")
    expect(
        len(claim(store, now, "qb", opts={"rate": {"allowed": 3, "period": 60}})),
        1,
        "a queue bucket (queue:qb) is separate from resource:api",
    )


@case("§6", "partitioned claims allow per_key_limit per key, less that key's live running jobs")
def _(store, now):
    opts = {"limit": 1, "partition": {"field": "input", "key": "tenant"}}
    a1, a2, b1, none, a3 = (
        insert(store, now, input=i) for i in ({"tenant": "a"}, {"tenant": "a"}, {"tenant": "b"}, {}, {"tenant": "a"})
    )
    expect(
        claimed_ids(store, now, opts=opts),
        [a1, b1, none],
        "one per key (a missing key is the '' partition), in global claim order",
    )
    expect(claimed_ids(store, now, opts=opts), [], "every key is at its limit while its job runs")
    ack(store, now + S, read(store, a1), w.Succeed())
    expect(claimed_ids(store, now + S, opts=opts), [a2], "a's slot is free again")
    expect(
        claimed_ids(store, now + S + TTL, opts=opts),
        [a3],
        "once a2's lease has expired it no longer counts against key a",
    )


@case("§6", "partitioned claims use global_limit as the per-key limit and can key on meta")
def _(store, now):
    opts = {"limit": 1, "global_limit": 3, "partition": {"field": "meta", "key": "tenant"}}
    a1, a2, a3, b1 = (insert(store, now, meta={"tenant": t}) for t in "aaab")
    expect(
        claimed_ids(store, now, opts=opts),
        [a1, a2, a3],
        "per_key_limit is global_limit (3), not limit (1): key a takes three rows (limit 1 would give [a1, b1])",
    )
    expect(claimed_ids(store, now, opts=opts), [], "global_limit reached")
    check(read(store, b1).state == "ready", "b1 waits for a free global slot")


@case("§6", "renew extends only this node's running leases and reports the rest lost")
def _(store, now):
    a1 = start(store, now, queue="qa")
    a2 = start(store, now, queue="qa")
    b_id = insert(store, now, queue="qb")
    (b1,) = claim(store, now, "qb", node=OTHER_NODE)
    ack(store, now + S, a2, w.Succeed())
    missing = b_id + 1000
    result = store.apply(w.Renew(now + 10 * S, NODE, (a1.id, a2.id, b1.id, missing), now + 40 * S))
    expect(
        result,
        w.Renewed((a1.id,), tuple(sorted((a2.id, b1.id, missing)))),
        "kept: running and leased by this node; lost: finished, another node's, unknown",
    )
    expect(read(store, a1.id).lease_until, now + 40 * S, "the kept lease is extended")
    expect(read(store, b1.id).lease_until, b1.lease_until, "another node's lease is untouched")
    expect(store.apply(w.Renew(now, NODE, (), now + 40 * S)), w.Renewed((), ()), "renewing nothing")


@case("§6", "a renewal never moves a lease backwards (a late renewal lands on a longer lease)")
def _(store, now):
    job = start(store, now)
    expect(
        store.apply(w.Renew(now + S, NODE, (job.id,), now + 60 * S)),
        w.Renewed((job.id,), ()),
        "renewed to now + 60 s",
    )
    late = store.apply(w.Renew(now + 2 * S, NODE, (job.id,), now + 20 * S))
    expect(late, w.Renewed((job.id,), ()), "still this node's running job: kept, not lost")
    expect(read(store, job.id).lease_until, now + 60 * S, "a renewal computed earlier does not shorten the lease")


@case("§6", "reclaim retries an expired lease with lease_expired when attempts remain")
def _(store, now):
    job = start(store, now)
    expect(store.apply(w.Reclaim(now + TTL - S)), w.Reclaimed((), ()), "a live lease is never reclaimed")
    backoff = w.Backoff(base_s=5, factor=3, max_s=100)
    expect(
        store.apply(w.Reclaim(now + TTL, backoff)),
        w.Reclaimed((job.id,), ()),
        "expired at lease_until <= now; attempt 1 < 20 retries",
    )
    expect(
        fields(read(store, job.id), "state", "ready_at", "attempt", "lease_until", "leased_by", "finished_at"),
        dict(state="ready", ready_at=now + TTL + 5 * S, attempt=1, lease_until=None, leased_by=None, finished_at=None),
        "ready at the backoff the sweeper computed (5 s for attempt 1)",
    )
    expect(errors_of(read(store, job.id)), [(1, now + TTL, "lease_expired", None)], "the error appended")


@case("§6", "reclaim fails an expired lease on its last attempt and settles the workflow")
def _(store, now):
    ids = workflow(store, now, "wf", ops.WorkflowMember("a", spec("wa", max_attempts=1)), member("b", "a"))
    claim_job(store, now, ids["a"])
    expect(store.apply(w.Reclaim(now + TTL)), w.Reclaimed((), (ids["a"],)), "attempt 1 of 1 fails")
    expect(
        fields(read(store, ids["a"]), "state", "finished_at", "lease_until", "leased_by"),
        dict(state="failed", finished_at=now + TTL, lease_until=None, leased_by=None),
        "the failed row",
    )
    expect(errors_of(read(store, ids["a"])), [(1, now + TTL, "lease_expired", None)], "the error appended")
    expect(wf_states(store, "wf"), {"a": "failed", "b": "cancelled"}, "full §7 settlement after reclaim-fail")


@case("§6", "reclaim-fail delivers $children to the parent")
def _(store, now):
    parent = start(store, now, queue="parents")
    (child,) = spawn(store, now, parent.id, "kids", spec("kid", "kids", max_attempts=1))
    claim_job(store, now + S, child)
    expect(
        store.apply(w.Reclaim(now + S + TTL)),
        w.Reclaimed((parent.id,), (child,)),
        "the parent's lease also expired and retries; the child on its last attempt fails",
    )
    got = signal(store, f"job:{parent.id}", "$children")
    check(got is not None, "the failed child must signal $children to job:<parent>")
    expect((got.payload, got.inserted_at), ({"children": [child]}, now + S + TTL), "the $children signal")


@case("§6", "reclaim takes at most `limit` expired leases, lowest ids first")
def _(store, now):
    ids = [insert(store, now) for _ in range(3)]
    claim(store, now)
    expect(store.apply(w.Reclaim(now + TTL, limit=2)), w.Reclaimed(tuple(ids[:2]), ()), "the first batch")
    expect(read(store, ids[2]).state, "running", "the rest waits for the next sweep")
    expect(store.apply(w.Reclaim(now + TTL, limit=2)), w.Reclaimed((ids[2],), ()), "the next batch")


@case("§6", "partition keys are read from the stored JSON, so equal jsonb values share a partition")
def _(store, now):
    opts = {"limit": 1, "partition": {"field": "input", "key": "t"}}
    first = insert(store, now, input={"t": 1e20})
    insert(store, now, input={"t": 10**20})  # jsonb numeric: the same number, the same ->> text
    obj = insert(store, now, input={"t": {"b": 1, "a": 2}})
    insert(store, now, input={"t": {"a": 2, "b": 1}})  # jsonb objects have no key order
    null = insert(store, now, input={"t": None})
    insert(store, now, input={})  # JSON null and a missing key are both the '' partition
    digit = insert(store, now, input={1: "x"})  # stored as {"1": "x"}: no "t" key, so also ''
    expect(
        claimed_ids(store, now, opts=opts),
        [first, obj, null],
        "COALESCE(input->>'t', '') over the jsonb as stored: one job per distinct key",
    )
    check(read(store, digit).state == "ready", "the int-keyed job waits in the '' partition")
    keyed = {"limit": 1, "partition": {"field": "input", "key": "1"}}
    a = insert(store, now, queue="k", input={1: "a"})
    insert(store, now, queue="k", input={"1": "a"})
    expect(
        claimed_ids(store, now, "k", opts=keyed),
        [a],
        "input {1: 'a'} is stored as {'1': 'a'}: both jobs are partition 'a'",
    )
