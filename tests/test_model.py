"""The executable specification (model/store.py) on its own: no database, a fixed `now`, every operation.

Sections follow the contract: §5 enqueue and uniqueness, §6 claims / admission / leases / reclaim,
§7 acks (one test per row of docs/decisions.md's outcome table, plus the fence), §4's legal writers (each
named, then a Hypothesis sweep that every state change any operation makes is one of them), §8.1
signals, §8.2 steps and budgets, events, §8.4 children, §8.5 cron, §8.6 cancel and retry, §8.7
retention, reads, and refused input. States a test needs that no operation produces directly (a
`paused` job, a `ready_at` of NULL) are built with `dataclasses.replace` on the model's own rows.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model import ops
from model import worker_ops as w
from model.envelope import decode, encode
from model.ops import (
    Cancel,
    Cancelled,
    CancelRequested,
    CheckCompat,
    Cleared,
    ClearSignal,
    Compatible,
    DeliverSignal,
    Duplicate,
    Enqueue,
    EnqueueWorkflow,
    IncompatibleSchema,
    Inserted,
    InvalidInput,
    JobSpec,
    NotCancellable,
    NotFound,
    NotRetryable,
    PutCron,
    PutQueue,
    ReadEvents,
    ReadJob,
    ReadSignals,
    ReadSteps,
    ReadWorkflow,
    Retried,
    Retry,
    RetryBlocked,
    Signalled,
    Steer,
    WorkflowMember,
)
from model.queues import QueueOpts
from model.rows import TERMINAL
from model.state import State, from_rows
from model.store import ModelStore, claim_order, transition
from model.worker_ops import (
    Ack,
    Acked,
    AwaitChildren,
    Backoff,
    BudgetOk,
    CancelSelf,
    ChildrenDone,
    Claim,
    CronDef,
    EmitEvent,
    Emitted,
    Fail,
    FireCrons,
    JobGone,
    OverBudget,
    ParkAwait,
    Parked,
    Preflight,
    Prune,
    ReadStep,
    Reclaim,
    Reconcile,
    Reconciled,
    RecordStep,
    Renew,
    Renewed,
    Sleep,
    Slept,
    Snooze,
    Spawn,
    Spawned,
    Stale,
    StepHit,
    StepMiss,
    Succeed,
)

AckMany = getattr(w, "AckMany", None)  # batched acks (chunk workers); newer than the rest of the vocabulary
needs_ack_many = pytest.mark.skipif(AckMany is None, reason="model.worker_ops has no AckMany")

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)  # a whole minute: rate windows start here
TTL = timedelta(seconds=30)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


# ---------------------------------------------------------------------------------------------------
# helpers: every state below is reached through operations, except where `patch` says otherwise


def spec(queue: str = "q", worker: str = "w", **kw) -> JobSpec:
    return JobSpec(queue, worker, **kw)


def enqueue(store: ModelStore, *specs: JobSpec, now: datetime = NOW) -> list[int | None]:
    """Enqueue a batch; the id of each inserted row (the holder's id for a duplicate)."""
    result = store.apply(Enqueue(now, specs or (spec(),)))
    return [o.id for o in result.outcomes]


def claim(
    store: ModelStore,
    demand: int = 1,
    *,
    queue: str = "q",
    now: datetime = NOW,
    node: str = "n1",
    ttl: timedelta = TTL,
    opts: QueueOpts = QueueOpts(),
) -> list[int]:
    return [j.id for j in store.apply(Claim(now, queue, node, demand, ttl, opts)).jobs]


def run(store: ModelStore, job_id: int, *, now: datetime = NOW, node: str = "n1", ttl: timedelta = TTL) -> int:
    """Claim exactly `job_id` (it must be first in its queue's claim order); its attempt number."""
    queue = store.state.jobs[job_id].queue
    assert claim(store, 1, queue=queue, now=now, node=node, ttl=ttl) == [job_id]
    return store.state.jobs[job_id].attempt


def started(store: ModelStore, *, now: datetime = NOW, **kw) -> int:
    """Enqueue one job into a queue of its own and claim it."""
    kw.setdefault("queue", f"solo{store.state.next_id}")
    [job_id] = enqueue(store, spec(**kw), now=now)
    run(store, job_id, now=now)
    return job_id


def job(store: ModelStore, job_id: int):
    return store.state.jobs[job_id]


def patch(store: ModelStore, job_id: int, **changes) -> None:
    """Rewrite one row directly: only for states no operation produces (paused, ready_at NULL)."""
    jobs = dict(store.state.jobs)
    jobs[job_id] = replace(jobs[job_id], **changes)
    store.state = replace(store.state, jobs=MappingProxyType(jobs))


def assert_refused(store: ModelStore, op, expected) -> None:
    """The result is the expected refusal value and the whole State is unchanged."""
    before = store.state
    assert store.apply(op) == expected
    assert store.state == before


def member(name: str, *deps: str, ignore: tuple[str, ...] = (), **kw) -> WorkflowMember:
    return WorkflowMember(name, spec(worker=f"w_{name}", **kw), deps=deps, ignore=ignore)


def workflow(store: ModelStore, wf: str, *members: WorkflowMember, now: datetime = NOW) -> dict[str, int]:
    return dict(store.apply(EnqueueWorkflow(now, wf, members)).ids)


def wf_states(store: ModelStore, wf: str) -> dict[str, str]:
    return {j.wf_name: j.state for j in store.apply(ReadWorkflow(wf))}


def fail_for_good(store: ModelStore, job_id: int, now: datetime = NOW) -> None:
    attempt = run(store, job_id, now=now)
    assert store.apply(Ack(now, job_id, attempt, Fail("boom"))) == Acked(job_id, "failed")


def succeed(store: ModelStore, job_id: int, now: datetime = NOW, value=None) -> None:
    attempt = run(store, job_id, now=now)
    assert store.apply(Ack(now, job_id, attempt, Succeed(value))) == Acked(job_id, "succeeded")


# ---------------------------------------------------------------------------------------------------
# §5.1 insert


def test_enqueue_inserts_a_ready_row_with_every_contract_default():
    store = ModelStore()
    [job_id] = enqueue(store, spec(input={"to": "a"}, meta={"m": 1}, priority=3, max_attempts=4), now=NOW)
    row = job(store, job_id)
    assert (row.state, row.attempt, row.errors, row.spent_usd_micros, row.spent_tokens) == ("ready", 0, [], 0, 0)
    assert (row.cancel_requested, row.ready_at, row.inserted_at) == (False, NOW, NOW)
    assert (row.started_at, row.finished_at, row.lease_until, row.leased_by, row.result) == (None,) * 5
    assert (row.input, row.meta, row.priority, row.max_attempts) == ({"to": "a"}, {"m": 1}, 3, 4)


def test_a_scheduled_job_is_ready_at_its_scheduled_time_and_claimed_only_then():
    store = ModelStore()
    [job_id] = enqueue(store, spec(scheduled_at=at(60)))
    assert (job(store, job_id).state, job(store, job_id).ready_at) == ("ready", at(60))
    assert claim(store, now=at(59)) == []
    assert claim(store, now=at(60)) == [job_id]


def test_a_batch_reports_one_outcome_per_spec_in_input_order():
    store = ModelStore()
    result = store.apply(Enqueue(NOW, (spec(worker="a"), spec(worker="b", unique_key="k"), spec(worker="c"))))
    assert result.outcomes == (Inserted(1), Inserted(2), Inserted(3))
    assert result.ids == (1, 2, 3)
    assert [job(store, i).worker for i in (1, 2, 3)] == ["a", "b", "c"]


def test_skipped_rows_consume_their_ids_so_the_next_insert_skips_them():
    store = ModelStore()
    enqueue(store, spec(unique_key="k"))  # id 1
    result = store.apply(Enqueue(NOW, (spec(unique_key="k"), spec(unique_key="k"), spec())))
    assert result.outcomes == (Duplicate(1, "unique"), Duplicate(1, "unique"), Inserted(4))
    assert store.state.next_id == 5
    assert enqueue(store) == [5]
    assert sorted(store.state.jobs) == [1, 4, 5]


# ---------------------------------------------------------------------------------------------------
# §5.2 uniqueness


def test_incomplete_mode_admits_one_live_holder_and_reports_it_as_the_duplicate():
    store = ModelStore()
    [first] = enqueue(store, spec(unique_key="k"))
    assert job(store, first).unique_mode == "incomplete"
    assert store.apply(Enqueue(NOW, (spec(unique_key="k"),))).outcomes == (Duplicate(first, "unique"),)


def test_incomplete_mode_admits_a_new_holder_once_the_old_one_is_terminal():
    store = ModelStore()
    [first] = enqueue(store, spec(unique_key="k"))
    succeed(store, first)
    [second] = enqueue(store, spec(unique_key="k"))
    assert second != first and job(store, second).state == "ready"


def test_a_duplicate_within_one_batch_is_skipped_against_the_earlier_row():
    store = ModelStore()
    result = store.apply(Enqueue(NOW, (spec(unique_key="k"), spec(unique_key="k"))))
    assert result.outcomes == (Inserted(1), Duplicate(1, "unique"))


def test_window_mode_embeds_the_bucket_in_the_key_and_dedupes_regardless_of_outcome():
    store = ModelStore()
    bucket = (NOW - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(seconds=3600)
    [first] = enqueue(store, spec(unique_key="daily", unique_mode="window", unique_window=3600))
    assert job(store, first).unique_key == f"daily@{bucket}"
    succeed(store, first)  # terminal: the window index still covers it
    assert enqueue(store, spec(unique_key="daily", unique_mode="window", unique_window=3600), now=at(3599)) == [first]
    [later] = enqueue(store, spec(unique_key="daily", unique_mode="window", unique_window=3600), now=at(3600))
    assert later != first and job(store, later).unique_key == f"daily@{bucket + 1}"


def test_always_mode_dedupes_forever():
    store = ModelStore()
    [first] = enqueue(store, spec(unique_key="once", unique_mode="always"))
    fail_for_good(store, first)
    outcome = store.apply(Enqueue(at(10**6), (spec(unique_key="once", unique_mode="always"),))).outcomes
    assert outcome == (Duplicate(first, "unique"),)


def test_incomplete_and_always_keys_live_in_different_indexes_and_do_not_collide():
    store = ModelStore()
    result = store.apply(Enqueue(NOW, (spec(unique_key="k"), spec(unique_key="k", unique_mode="always"))))
    assert result.outcomes == (Inserted(1), Inserted(2))


def test_a_cron_slot_dedupes_and_reports_the_slot_owner():
    store = ModelStore()
    [owner] = enqueue(store, spec(cron_name="tick", cron_slot=NOW))
    assert store.apply(Enqueue(NOW, (spec(cron_name="tick", cron_slot=NOW),))).outcomes == (Duplicate(owner, "cron"),)
    assert enqueue(store, spec(cron_name="tick", cron_slot=at(60))) == [owner + 2]


# ---------------------------------------------------------------------------------------------------
# §8.3 workflows at insert


def test_dep_bearing_members_are_held_and_roots_are_ready():
    store = ModelStore()
    ids = workflow(store, "wf", member("a"), member("b", "a"), member("c", "a", "b"))
    assert wf_states(store, "wf") == {"a": "ready", "b": "held", "c": "held"}
    row = job(store, ids["c"])
    assert (row.workflow_id, row.wf_name, row.wf_deps, row.wf_ignore) == ("wf", "c", ("a", "b"), ())


def test_members_depending_on_stored_terminal_members_settle_at_insert():
    store = ModelStore()
    ids = workflow(store, "wf", member("a"))
    fail_for_good(store, ids["a"])
    result = store.apply(EnqueueWorkflow(at(1), "wf", (member("b", "a"), member("c", "a", ignore=("failed",)))))
    new = dict(result.ids)
    assert wf_states(store, "wf") == {"a": "failed", "b": "cancelled", "c": "ready"}
    assert (result.doomed, result.released) == ((new["b"],), (new["c"],))
    assert job(store, new["b"]).finished_at == at(1)


# ---------------------------------------------------------------------------------------------------
# §6 claim


def test_claim_leases_the_job_and_counts_the_attempt():
    store = ModelStore()
    [job_id] = enqueue(store)
    [row] = store.apply(Claim(at(1), "q", "n1", 5, timedelta(seconds=45))).jobs
    assert row == job(store, job_id)
    assert (row.state, row.attempt, row.lease_until, row.leased_by, row.started_at) == (
        "running",
        1,
        at(46),
        "n1",
        at(1),
    )


def test_a_reclaim_keeps_the_first_started_at():
    store = ModelStore()
    [job_id] = enqueue(store)
    run(store, job_id, now=NOW)
    store.apply(Reclaim(at(31), Backoff(base_s=0)))
    run(store, job_id, now=at(40))
    assert (job(store, job_id).attempt, job(store, job_id).started_at) == (2, NOW)


def test_claim_orders_by_priority_then_ready_at_nulls_first_then_id():
    store = ModelStore()
    ids = enqueue(
        store,
        spec(priority=1),  # 1
        spec(priority=0, scheduled_at=at(-5)),  # 2
        spec(priority=0, scheduled_at=at(-10)),  # 3
        spec(priority=0, scheduled_at=at(-10)),  # 4: ties with 3, higher id
        spec(priority=0),  # 5: ready_at set to NULL below
        spec(priority=2, scheduled_at=at(-99)),
    )  # 6
    patch(store, ids[4], ready_at=None)
    expected = [5, 3, 4, 2, 1, 6]
    assert sorted(store.state.jobs.values(), key=claim_order)[0].id == 5
    assert claim(store, 10) == expected


def test_claim_takes_ready_due_and_awaiting_due_jobs_only():
    store = ModelStore()
    ids = dict(
        zip(
            [
                "ready",
                "ready_null",
                "future",
                "awaiting_due",
                "awaiting_later",
                "awaiting_forever",
                "held",
                "paused",
                "running",
                "succeeded",
                "failed",
                "cancelled",
            ],
            enqueue(store, *[spec() for _ in range(12)]),
            strict=True,
        )
    )
    patch(store, ids["ready_null"], ready_at=None)
    patch(store, ids["future"], ready_at=at(1))
    patch(store, ids["awaiting_due"], state="awaiting", await_scope="s", await_name="n", ready_at=NOW)
    patch(store, ids["awaiting_later"], state="awaiting", await_scope="s", await_name="n", ready_at=at(1))
    patch(store, ids["awaiting_forever"], state="awaiting", await_scope="s", await_name="n", ready_at=None)
    for name in ("held", "paused", "succeeded", "failed", "cancelled"):
        patch(store, ids[name], state=name)
    patch(store, ids["running"], state="running", attempt=1, lease_until=at(-1), leased_by="x")  # even expired
    taken = claim(store, 100)
    assert sorted(taken) == sorted([ids["ready"], ids["ready_null"], ids["awaiting_due"]])


def test_claim_takes_only_its_queue_and_at_most_the_demand():
    store = ModelStore()
    enqueue(store, spec(queue="other"), spec(), spec(), spec())
    assert claim(store, 2) == [2, 3]
    assert claim(store, 0) == []


def test_a_claimed_awaiting_job_that_timed_out_resumes_running():
    store = ModelStore()
    job_id = started(store, queue="q")
    store.apply(ParkAwait(NOW, job_id, 1, "orders", "paid", deadline=at(100)))
    assert claim(store, now=at(99)) == []
    assert claim(store, now=at(100)) == [job_id]
    assert (job(store, job_id).state, job(store, job_id).attempt) == ("running", 2)


# §6 admission: global_limit


def test_global_limit_counts_live_leases_only_so_an_expired_lease_frees_a_slot():
    store = ModelStore()
    enqueue(store, *[spec() for _ in range(8)], spec(queue="other"))
    limited = QueueOpts.parse({"global_limit": 3})
    assert claim(store, 2, ttl=timedelta(seconds=10), opts=limited) == [1, 2]  # leases end at(10)
    assert claim(store, 1, ttl=timedelta(seconds=60), opts=limited) == [3]  # lease ends at(60)
    claim(store, 1, queue="other", ttl=timedelta(seconds=60))  # another queue's lease never counts
    assert claim(store, 5, now=at(5), opts=limited) == []
    assert claim(store, 5, now=at(10), opts=limited) == [4, 5]  # lease_until <= now is not live


# §6 admission: rate


def rate_opts(allowed: int, estimate: int = 1, period: int = 60, **extra) -> QueueOpts:
    return QueueOpts.parse({"rate": {"allowed": allowed, "period": period, "estimate": estimate, **extra}})


def test_rate_admits_floor_of_the_headroom_over_the_estimate_and_debits_n_times_estimate():
    store = ModelStore()
    enqueue(store, *[spec() for _ in range(10)])
    opts = rate_opts(allowed=10, estimate=3)
    assert claim(store, 5, now=at(1), opts=opts) == [1, 2, 3]  # floor(10 / 3)
    assert store.state.rate[("queue:q", NOW)].count == 9
    assert claim(store, 5, now=at(2), opts=opts) == []  # floor((10 - 9) / 3) = 0: used up


def test_rate_weighs_the_previous_window_by_the_part_of_it_still_inside_the_period():
    store = ModelStore()
    enqueue(store, *[spec() for _ in range(20)], now=at(-60))
    opts = rate_opts(allowed=10)
    assert len(claim(store, 4, now=at(-30), opts=opts)) == 4  # window 11:59
    assert store.state.rate[("queue:q", at(-60))].count == 4
    # at 12:00:15 the previous window weighs 3/4: used = 0 + round(4 * 0.75) = 3
    assert len(claim(store, 10, now=at(15), opts=opts)) == 7
    assert store.state.rate[("queue:q", NOW)].count == 7
    assert claim(store, 10, now=at(16), opts=opts) == []  # used = 7 + 3 = allowed
    # at 12:00:45 the weight is 1/4: used = 7 + round(4 * 0.25) = 8
    assert len(claim(store, 10, now=at(45), opts=opts)) == 2


def test_a_rate_resource_bucket_is_shared_across_queues():
    store = ModelStore()
    enqueue(store, *[spec(queue="q1") for _ in range(5)], *[spec(queue="q2") for _ in range(5)])
    opts = rate_opts(allowed=3, resource="gpu")
    assert len(claim(store, 2, queue="q1", opts=opts)) == 2
    assert len(claim(store, 5, queue="q2", opts=opts)) == 1
    assert store.state.rate[("resource:gpu", NOW)].count == 3


def test_a_claim_that_admits_nothing_debits_nothing():
    store = ModelStore()
    assert claim(store, 5, opts=rate_opts(allowed=3)) == []
    assert store.state.rate == {}


# §6 admission: partitions


def test_partitioned_claims_cannot_be_starved_by_a_heavy_key():
    store = ModelStore()
    enqueue(
        store,
        *[spec(input={"tenant": "big"}) for _ in range(10)],
        spec(input={"tenant": "b"}),
        spec(input={"tenant": "b"}),
        spec(input={"tenant": "b"}),
        spec(input={"tenant": "c"}),
        spec(input={}),
    )
    opts = QueueOpts.parse({"limit": 2, "partition": {"field": "input", "key": "tenant"}})  # per key: local 2
    assert claim(store, 10, opts=opts) == [1, 2, 11, 12, 14, 15]  # the missing key partitions as ''


def test_per_key_limit_is_the_global_limit_when_there_is_one():
    store = ModelStore()
    enqueue(store, *[spec(meta={"t": "a"}) for _ in range(5)], spec(meta={"t": "b"}))
    opts = QueueOpts.parse({"limit": 1, "global_limit": 3, "partition": {"field": "meta", "key": "t"}})
    assert claim(store, 10, opts=opts) == [1, 2, 3]


def test_a_keys_live_running_jobs_reduce_its_allowance_and_expired_ones_do_not():
    store = ModelStore()
    enqueue(store, *[spec(input={"t": "a"}) for _ in range(6)], spec(input={"t": "b"}))
    opts = QueueOpts.parse({"limit": 2, "partition": {"field": "input", "key": "t"}})
    assert claim(store, 1, ttl=timedelta(seconds=10), opts=opts) == [1]  # a: 1 live until at(10)
    assert claim(store, 10, now=at(5), ttl=timedelta(seconds=10), opts=opts) == [2, 7]
    # at(20) both a-leases are expired (never reclaimed): a's allowance is back to 2
    assert claim(store, 10, now=at(20), opts=opts) == [3, 4]


# §6 renew


def test_renew_extends_this_nodes_running_leases_and_reports_the_rest_lost():
    store = ModelStore()
    mine = started(store)
    theirs = started(store)
    patch(store, theirs, leased_by="n2")
    [idle] = enqueue(store)
    result = store.apply(Renew(at(10), "n1", (mine, theirs, idle, 999), at(40)))
    assert result == Renewed((mine,), (theirs, idle, 999))
    assert job(store, mine).lease_until == at(40)
    assert job(store, theirs).lease_until == NOW + TTL


def test_renew_after_a_reclaim_loses_the_job():
    store = ModelStore()
    job_id = started(store)
    store.apply(Reclaim(at(31)))
    assert store.apply(Renew(at(31), "n1", (job_id,), at(61))) == Renewed((), (job_id,))


# §6 reclaim


def test_reclaim_retries_an_expired_lease_with_backoff_and_a_lease_expired_error():
    store = ModelStore()
    job_id = started(store, max_attempts=3)
    backoff = Backoff(base_s=5, factor=2, max_s=100)
    assert store.apply(Reclaim(at(29), backoff)) == w.Reclaimed((), ())  # still live
    assert store.apply(Reclaim(at(30), backoff)) == w.Reclaimed((job_id,), ())  # lease_until <= now
    row = job(store, job_id)
    assert (row.state, row.ready_at, row.lease_until, row.leased_by) == ("ready", at(35), None, None)
    assert row.errors == [{"attempt": 1, "at": at(30).isoformat(), "error": "lease_expired", "detail": None}]
    run(store, job_id, now=at(35))
    run_again = store.apply(Reclaim(at(100), backoff))
    assert run_again.retried == (job_id,) and job(store, job_id).ready_at == at(110)  # 5 * 2^(2-1)


def test_reclaim_fails_the_job_at_max_attempts_and_settles_its_workflow():
    store = ModelStore()
    ids = workflow(store, "wf", member("a", max_attempts=1), member("b", "a"), member("c", "a", ignore=("failed",)))
    run(store, ids["a"])
    assert store.apply(Reclaim(at(31))) == w.Reclaimed((), (ids["a"],))
    row = job(store, ids["a"])
    assert (row.state, row.finished_at, row.lease_until, row.leased_by) == ("failed", at(31), None, None)
    assert row.errors[-1]["error"] == "lease_expired"
    assert wf_states(store, "wf") == {"a": "failed", "b": "cancelled", "c": "ready"}


def test_reclaim_failing_a_child_notifies_its_parent():
    store = ModelStore()
    parent = started(store)
    [child] = store.apply(Spawn(NOW, parent, "kids", (spec(queue="kids", max_attempts=1),))).child_ids
    run(store, child)
    store.apply(Reclaim(at(31)))
    assert store.state.signals[(f"job:{parent}", "$children")].payload == {"children": [child]}


def test_reclaim_takes_at_most_its_limit_lowest_ids_first():
    store = ModelStore()
    enqueue(store, *[spec() for _ in range(3)])
    claim(store, 3)
    assert store.apply(Reclaim(at(31), limit=2)).retried == (1, 2)
    assert job(store, 3).state == "running"


# ---------------------------------------------------------------------------------------------------
# §7 acks: one test per row of the outcome table


def test_ack_succeed_makes_the_job_succeeded_with_its_result_envelope():
    store = ModelStore()
    job_id = started(store)
    assert store.apply(Ack(at(5), job_id, 1, Succeed({"ok": [1, 2]}))) == Acked(job_id, "succeeded")
    row = job(store, job_id)
    assert (row.state, decode(row.result), row.result, row.finished_at) == (
        "succeeded",
        {"ok": [1, 2]},
        encode({"ok": [1, 2]}),
        at(5),
    )


def test_ack_error_below_max_attempts_is_ready_at_the_sdks_retry_time_with_the_error_appended():
    store = ModelStore()
    job_id = started(store, max_attempts=3)
    assert store.apply(Ack(at(5), job_id, 1, Fail("boom", "trace", retry_at=at(65)))) == Acked(job_id, "ready")
    row = job(store, job_id)
    assert (row.state, row.ready_at, row.attempt, row.finished_at) == ("ready", at(65), 1, None)
    assert row.errors == [{"attempt": 1, "at": at(5).isoformat(), "error": "boom", "detail": "trace"}]
    run(store, job_id, now=at(65))
    store.apply(Ack(at(66), job_id, 2, Fail("again", retry_at=at(70))))
    assert [e["attempt"] for e in job(store, job_id).errors] == [1, 2]


def test_ack_error_at_max_attempts_fails_the_job_with_the_error_appended():
    store = ModelStore()
    job_id = started(store, max_attempts=1)
    assert store.apply(Ack(at(5), job_id, 1, Fail("boom", retry_at=at(65)))) == Acked(job_id, "failed")
    row = job(store, job_id)
    assert (row.state, row.finished_at) == ("failed", at(5))
    assert row.errors == [{"attempt": 1, "at": at(5).isoformat(), "error": "boom", "detail": None}]


def test_ack_error_without_a_retry_time_fails_at_once_even_with_attempts_left():
    store = ModelStore()
    job_id = started(store, max_attempts=5)
    assert store.apply(Ack(at(5), job_id, 1, Fail("budget_exceeded"))) == Acked(job_id, "failed")


def test_ack_error_detail_is_truncated_utf8_safely_never_refused():
    store = ModelStore()
    job_id = started(store, max_attempts=1)
    store.apply(Ack(at(5), job_id, 1, Fail("boom", "é" * 10_000)))
    detail = job(store, job_id).errors[0]["detail"]
    assert len(detail.encode()) <= w.MAX_DETAIL_BYTES and set(detail) == {"é"}


def test_ack_cancel_at_a_step_boundary_makes_the_job_cancelled():
    store = ModelStore()
    job_id = started(store)
    assert store.apply(Ack(at(5), job_id, 1, CancelSelf())) == Acked(job_id, "cancelled")
    assert (job(store, job_id).state, job(store, job_id).finished_at) == ("cancelled", at(5))


def test_ack_snooze_is_ready_at_until_and_spends_no_attempt():
    store = ModelStore()
    job_id = started(store, max_attempts=2)
    assert store.apply(Ack(at(5), job_id, 1, Snooze(at(300)))) == Acked(job_id, "ready")
    row = job(store, job_id)
    assert (row.state, row.ready_at, row.attempt, row.max_attempts, row.errors) == ("ready", at(300), 1, 3, [])


def test_ack_await_parks_the_job_awaiting_with_its_deadline():
    store = ModelStore()
    job_id = started(store)
    assert store.apply(ParkAwait(at(5), job_id, 1, "orders", "paid", at(100))) == Parked(job_id, "awaiting")
    row = job(store, job_id)
    assert (row.state, row.await_scope, row.await_name, row.ready_at) == ("awaiting", "orders", "paid", at(100))


def test_ack_await_with_the_signal_already_delivered_parks_ready_at_once():
    store = ModelStore()
    job_id = started(store)
    store.apply(DeliverSignal(at(1), "orders", "paid", {"amount": 3}))
    assert store.apply(ParkAwait(at(5), job_id, 1, "orders", "paid", at(100))) == Parked(job_id, "ready")
    row = job(store, job_id)
    assert (row.state, row.ready_at, row.await_scope, row.await_name) == ("ready", at(5), None, None)
    assert ("orders", "paid") in store.state.signals  # persistent: not consumed by the park


def test_sleep_journals_its_wake_time_and_is_ready_at_it():
    store = ModelStore()
    job_id = started(store)
    assert store.apply(Sleep(at(5), job_id, 1, "nap", at(100))) == Slept(job_id, at(100))
    row = job(store, job_id)
    assert (row.state, row.ready_at, row.lease_until, row.leased_by) == ("ready", at(100), None, None)
    assert store.apply(ReadStep(job_id, "$sleep:nap")) == StepHit(encode(at(100).isoformat()))


def test_sleep_on_a_rerun_keeps_the_first_journaled_wake_time():
    store = ModelStore()
    job_id = started(store)
    store.apply(Sleep(at(5), job_id, 1, "nap", at(100)))
    run(store, job_id, now=at(100))
    assert store.apply(Sleep(at(101), job_id, 2, "nap", at(201))) == Slept(job_id, at(100))
    assert job(store, job_id).ready_at == at(100)
    assert claim(store, queue=job(store, job_id).queue, now=at(101)) == [job_id]


FENCED_OUTCOMES = {
    "succeed": lambda j, a: Ack(at(5), j, a, Succeed(1)),
    "retry": lambda j, a: Ack(at(5), j, a, Fail("e", retry_at=at(50))),
    "fail": lambda j, a: Ack(at(5), j, a, Fail("e")),
    "cancel": lambda j, a: Ack(at(5), j, a, CancelSelf()),
    "snooze": lambda j, a: Ack(at(5), j, a, Snooze(at(50))),
    "await": lambda j, a: ParkAwait(at(5), j, a, "s", "n", at(50)),
    "await_signalled": lambda j, a: ParkAwait(at(5), j, a, "s", "present", at(50)),
    "sleep": lambda j, a: Sleep(at(5), j, a, "nap", at(50)),
    "await_children": lambda j, a: AwaitChildren(at(5), j, a, at(50)),
}


def _running_with_a_live_child(store: ModelStore) -> int:
    store.apply(DeliverSignal(NOW, "s", "present"))
    job_id = started(store, max_attempts=2)
    store.apply(Spawn(NOW, job_id, "kids", (spec(queue="kids"),)))
    return job_id


@pytest.mark.parametrize("outcome", sorted(FENCED_OUTCOMES))
def test_every_ack_outcome_clears_the_lease(outcome):
    store = ModelStore()
    job_id = _running_with_a_live_child(store)
    store.apply(FENCED_OUTCOMES[outcome](job_id, 1))
    row = job(store, job_id)
    assert row.state != "running"
    assert (row.lease_until, row.leased_by) == (None, None)


@pytest.mark.parametrize("outcome", sorted(FENCED_OUTCOMES))
def test_a_pending_cancel_request_survives_every_ack_outcome(outcome):
    store = ModelStore()
    job_id = _running_with_a_live_child(store)
    assert store.apply(Cancel(at(1), job_id)) == CancelRequested(job_id)
    store.apply(FENCED_OUTCOMES[outcome](job_id, 1))
    assert job(store, job_id).cancel_requested is True


def test_a_pending_cancel_request_survives_reclaim_and_the_next_claim():
    store = ModelStore()
    job_id = started(store, max_attempts=3)
    store.apply(Cancel(at(1), job_id))
    store.apply(Reclaim(at(31), Backoff(base_s=0)))
    assert job(store, job_id).cancel_requested is True
    run(store, job_id, now=at(31))
    assert job(store, job_id).cancel_requested is True


def test_a_terminal_ack_settles_the_workflow():
    store = ModelStore()
    ids = workflow(store, "wf", member("a"), member("b", "a"), member("c", "b"))
    succeed(store, ids["a"])
    assert wf_states(store, "wf") == {"a": "succeeded", "b": "ready", "c": "held"}
    assert job(store, ids["b"]).ready_at == NOW  # a release keeps the member's ready_at
    fail_for_good(store, ids["b"], now=at(7))
    assert wf_states(store, "wf") == {"a": "succeeded", "b": "failed", "c": "cancelled"}
    assert job(store, ids["c"]).finished_at == at(7)


def test_a_terminal_ack_of_a_child_signals_its_parent_unconditionally():
    store = ModelStore()
    parent = started(store)
    first, _second = store.apply(Spawn(NOW, parent, "kids", (spec(queue="kids"), spec(queue="kids")))).child_ids
    succeed(store, first, now=at(3))
    signal = store.state.signals[(f"job:{parent}", "$children")]
    assert (signal.payload, signal.inserted_at) == ({"children": [first]}, at(3))  # a sibling is still live


# §7 the fence


def test_an_ack_of_a_job_that_is_not_running_is_stale_and_changes_nothing():
    store = ModelStore()
    [job_id] = enqueue(store)
    assert_refused(store, Ack(at(5), job_id, 1, Succeed(1)), Stale(job_id, 1))


def test_an_ack_of_a_missing_job_is_stale():
    assert_refused(ModelStore(), Ack(at(5), 42, 1, Succeed(1)), Stale(42, 1))


def test_a_second_ack_of_the_same_attempt_is_stale_and_changes_nothing():
    store = ModelStore()
    job_id = started(store)
    store.apply(Ack(at(5), job_id, 1, Succeed(1)))
    assert_refused(store, Ack(at(6), job_id, 1, Fail("late")), Stale(job_id, 1))


def test_a_stale_ack_after_reclaim_and_reclaim_changes_nothing():
    store = ModelStore()
    job_id = started(store, max_attempts=5)
    store.apply(Reclaim(at(31), Backoff(base_s=0)))
    run(store, job_id, now=at(31))  # attempt 2 is running now
    for op in (
        Ack(at(40), job_id, 1, Succeed("old")),
        ParkAwait(at(40), job_id, 1, "s", "n"),
        Sleep(at(40), job_id, 1, "nap", at(90)),
        AwaitChildren(at(40), job_id, 1),
        Ack(at(40), job_id, 3, Succeed("future")),
    ):
        assert_refused(store, op, Stale(job_id, op.attempt))
    assert store.apply(Ack(at(41), job_id, 2, Succeed("ok"))) == Acked(job_id, "succeeded")


# §7 batched acks: each row fenced on its own attempt, after-terminal steps once for all


@needs_ack_many
def test_ack_many_fences_each_row_on_its_own_attempt():
    store = ModelStore()
    good, stale = started(store), started(store)
    before_stale = job(store, stale)
    result = store.apply(AckMany(at(5), (Ack(at(5), good, 1, Succeed(1)), Ack(at(5), stale, 2, Succeed(2)))))
    assert result == w.AckedMany((Acked(good, "succeeded"), Stale(stale, 2)))
    assert job(store, good).state == "succeeded" and job(store, stale) == before_stale


@needs_ack_many
def test_ack_many_of_only_stale_acks_changes_nothing():
    store = ModelStore()
    job_id = started(store)
    assert_refused(store, AckMany(at(5), (Ack(at(5), job_id, 7, CancelSelf()),)), w.AckedMany((Stale(job_id, 7),)))


@needs_ack_many
def test_ack_many_settles_and_notifies_once_for_all_its_terminal_rows():
    store = ModelStore()
    parent = started(store)
    first, second = store.apply(Spawn(NOW, parent, "kids", (spec(queue="kids"), spec(queue="kids")))).child_ids
    claim(store, 2, queue="kids")
    store.apply(AwaitChildren(NOW, parent, 1))
    ids = workflow(store, "wf", member("a", queue="wfq"), member("b", queue="wfq"), member("c", "a", "b"))
    claim(store, 2, queue="wfq")
    store.apply(AckMany(at(5), tuple(Ack(at(5), j, 1, Succeed(j)) for j in (first, second, ids["a"], ids["b"]))))
    assert store.state.signals[(f"job:{parent}", "$children")].payload == {"children": [first, second]}
    assert job(store, parent).state == "ready"
    assert wf_states(store, "wf") == {"a": "succeeded", "b": "succeeded", "c": "ready"}


# ---------------------------------------------------------------------------------------------------
# §4 legal writers, each named


def test_legal_writer_claim_moves_ready_or_awaiting_due_to_running():
    store = ModelStore()
    parked = started(store, queue="q")
    store.apply(ParkAwait(NOW, parked, 1, "s", "n", at(10)))
    [ready] = enqueue(store)
    assert claim(store, 5, now=at(10)) == [ready, parked]  # claim order: ready_at NOW before the deadline


def test_legal_writer_wake_moves_awaiting_to_ready():
    store = ModelStore()
    a, b, other = started(store), started(store), started(store)
    store.apply(ParkAwait(NOW, a, 1, "orders", "paid"))
    store.apply(ParkAwait(NOW, b, 1, "orders", "paid"))
    store.apply(ParkAwait(NOW, other, 1, "orders", "shipped"))
    assert store.apply(DeliverSignal(at(3), "orders", "paid", 1)) == Signalled((a, b))
    for job_id in (a, b):
        row = job(store, job_id)
        assert (row.state, row.ready_at, row.await_scope, row.await_name) == ("ready", at(3), None, None)
    assert job(store, other).state == "awaiting"


def test_legal_writer_settle_moves_held_to_ready_or_cancelled():
    store = ModelStore()
    ids = workflow(store, "wf", member("a"), member("b"), member("x", "a"), member("y", "b"))
    succeed(store, ids["a"])
    fail_for_good(store, ids["b"])
    assert wf_states(store, "wf") == {"a": "succeeded", "b": "failed", "x": "ready", "y": "cancelled"}


def test_legal_writer_cancel_moves_non_terminal_non_running_jobs_to_cancelled():
    store = ModelStore()
    ready, held, paused = enqueue(store, spec(), spec(), spec())
    patch(store, held, state="held")
    patch(store, paused, state="paused")
    parked = started(store)
    store.apply(ParkAwait(NOW, parked, 1, "s", "n", at(100)))
    for job_id in (ready, held, paused, parked):
        assert store.apply(Cancel(at(5), job_id)) == Cancelled(job_id)
        row = job(store, job_id)
        assert (row.state, row.finished_at, row.await_scope, row.await_name) == ("cancelled", at(5), None, None)


def test_legal_writer_cancel_only_flags_a_running_job():
    store = ModelStore()
    job_id = started(store)
    before = job(store, job_id)
    assert store.apply(Cancel(at(5), job_id)) == CancelRequested(job_id)
    assert job(store, job_id) == replace(before, cancel_requested=True)


def test_cancel_of_a_terminal_job_is_not_cancellable_and_changes_nothing():
    store = ModelStore()
    done = started(store)
    store.apply(Ack(NOW, done, 1, Succeed(1)))
    assert_refused(store, Cancel(at(5), done), NotCancellable(done, "succeeded"))
    failed = started(store, max_attempts=1)
    store.apply(Ack(NOW, failed, 1, Fail("x")))
    assert_refused(store, Cancel(at(5), failed), NotCancellable(failed, "failed"))
    assert_refused(store, Cancel(at(6), done + 100), NotFound(done + 100))


def test_cancelling_a_held_member_settles_its_workflow():
    store = ModelStore()
    ids = workflow(
        store, "wf", member("a"), member("b", "a"), member("c", "b"), member("d", "b", ignore=("cancelled",))
    )
    assert store.apply(Cancel(at(5), ids["b"])) == Cancelled(ids["b"])
    assert wf_states(store, "wf") == {"a": "ready", "b": "cancelled", "c": "cancelled", "d": "ready"}
    assert job(store, ids["c"]).finished_at == at(5)


def test_cancelling_a_child_notifies_and_wakes_its_awaiting_parent():
    store = ModelStore()
    parent = started(store)
    [child] = store.apply(Spawn(NOW, parent, "kids", (spec(queue="kids"),))).child_ids
    assert store.apply(AwaitChildren(at(1), parent, 1, at(100))) == Parked(parent, "awaiting")
    assert store.apply(Cancel(at(5), child)) == Cancelled(child)
    assert store.state.signals[(f"job:{parent}", "$children")].payload == {"children": [child]}
    assert (job(store, parent).state, job(store, parent).ready_at) == ("ready", at(5))


def test_a_settlement_doomed_child_also_notifies_its_parent():
    store = ModelStore()
    ids = workflow(store, "wf", member("a"), member("b", "a"))
    patch(store, ids["b"], parent_id=99)  # no operation makes a workflow member a child: built directly
    store.apply(Cancel(at(5), ids["a"]))
    assert store.state.signals[("job:99", "$children")].payload == {"children": [ids["b"]]}


# §8.6 retry


def test_retry_makes_a_failed_job_ready_now_with_room_for_one_more_attempt():
    store = ModelStore()
    job_id = started(store, max_attempts=1)
    store.apply(Ack(at(1), job_id, 1, Fail("boom")))
    assert store.apply(Retry(at(9), job_id)) == Retried(job_id, "ready")
    row = job(store, job_id)
    assert (row.state, row.ready_at, row.finished_at, row.attempt, row.max_attempts) == ("ready", at(9), None, 1, 2)
    assert (row.lease_until, row.leased_by, len(row.errors)) == (None, None, 1)
    assert run(store, job_id, now=at(9)) == 2


def test_retry_keeps_a_larger_max_attempts():
    store = ModelStore()
    [job_id] = enqueue(store, spec(max_attempts=5))
    store.apply(Cancel(at(1), job_id))
    assert store.apply(Retry(at(2), job_id)) == Retried(job_id, "ready")
    assert job(store, job_id).max_attempts == 5


def test_retry_clears_the_cancel_request_of_a_cooperatively_cancelled_job():
    store = ModelStore()
    job_id = started(store)
    store.apply(Cancel(at(1), job_id))
    store.apply(Ack(at(2), job_id, 1, CancelSelf()))
    assert job(store, job_id).cancel_requested is True  # survives the terminal transition
    assert store.apply(Retry(at(3), job_id)) == Retried(job_id, "ready")
    assert job(store, job_id).cancel_requested is False


def test_retry_of_a_live_or_succeeded_job_is_not_retryable_and_changes_nothing():
    store = ModelStore()
    ids = workflow(store, "wf", member("a"), member("b", "a"))
    assert_refused(store, Retry(at(1), ids["a"]), NotRetryable(ids["a"], "ready"))
    assert_refused(store, Retry(at(1), ids["b"]), NotRetryable(ids["b"], "held"))
    running = started(store)
    assert_refused(store, Retry(at(1), running), NotRetryable(running, "running"))
    store.apply(ParkAwait(NOW, running, 1, "s", "n"))
    assert_refused(store, Retry(at(1), running), NotRetryable(running, "awaiting"))
    done = started(store)
    store.apply(Ack(NOW, done, 1, Succeed(None)))
    assert_refused(store, Retry(at(1), done), NotRetryable(done, "succeeded"))
    assert_refused(store, Retry(at(1), 999), NotFound(999))


def test_retry_of_a_member_whose_dep_is_still_failed_re_dooms_it():
    store = ModelStore()
    ids = workflow(store, "wf", member("a", max_attempts=1), member("b", "a"))
    fail_for_good(store, ids["a"])
    assert job(store, ids["b"]).state == "cancelled"
    assert store.apply(Retry(at(5), ids["b"])) == Retried(ids["b"], "cancelled")
    assert (job(store, ids["b"]).finished_at, job(store, ids["b"]).state) == (at(5), "cancelled")


def test_retry_of_a_member_whose_dep_is_live_re_holds_it_until_settlement_releases_it():
    store = ModelStore()
    ids = workflow(store, "wf", member("a", max_attempts=1), member("b", "a"))
    fail_for_good(store, ids["a"])
    assert store.apply(Retry(at(5), ids["a"])) == Retried(ids["a"], "ready")
    assert store.apply(Retry(at(6), ids["b"])) == Retried(ids["b"], "held")  # never ready beside a live dep
    succeed(store, ids["a"], now=at(7))
    assert wf_states(store, "wf") == {"a": "succeeded", "b": "ready"}


def test_retry_of_a_member_whose_deps_are_satisfied_releases_it_at_once():
    store = ModelStore()
    ids = workflow(store, "wf", member("a"), member("b", "a"))
    store.apply(Cancel(at(1), ids["b"]))
    succeed(store, ids["a"], now=at(2))
    assert store.apply(Retry(at(3), ids["b"])) == Retried(ids["b"], "ready")
    assert job(store, ids["b"]).ready_at == at(3)


def test_retry_that_would_make_a_second_live_holder_of_a_unique_key_is_blocked():
    store = ModelStore()
    [first] = enqueue(store, spec(unique_key="k"))
    store.apply(Cancel(at(1), first))
    [second] = enqueue(store, spec(unique_key="k"), now=at(2))
    assert_refused(store, Retry(at(3), first), RetryBlocked(first, second))


# ---------------------------------------------------------------------------------------------------
# §4 every state change is made by a legal writer (a Hypothesis sweep over random operation sequences)

SETTLE = {("held", "ready"), ("held", "cancelled")}
WAKE = {("awaiting", "ready")}
AFTER_TERMINAL = SETTLE | WAKE
ACK_TARGET = {("running", s) for s in ("ready", "succeeded", "failed", "cancelled")}
# Transitions of the job an operation names, then of every other job.
TARGETED = {
    Ack: (ACK_TARGET, AFTER_TERMINAL),
    ParkAwait: ({("running", "awaiting"), ("running", "ready")}, set()),
    Sleep: ({("running", "ready")}, set()),
    AwaitChildren: ({("running", "awaiting"), ("running", "ready")}, set()),
    Cancel: ({(s, "cancelled") for s in ("ready", "awaiting", "held", "paused")}, AFTER_TERMINAL),
    Retry: (
        {
            ("failed", "ready"),
            ("cancelled", "ready"),
            ("failed", "held"),
            ("cancelled", "held"),
            ("failed", "cancelled"),
        },
        AFTER_TERMINAL,
    ),
    Steer: (WAKE, WAKE),
    Spawn: (set(), set()),
}
if AckMany is not None:
    TARGETED[AckMany] = (ACK_TARGET | AFTER_TERMINAL, AFTER_TERMINAL)  # a row may be settled by a sibling
UNTARGETED = {
    Claim: {("ready", "running"), ("awaiting", "running")},
    Reclaim: {("running", "ready"), ("running", "failed")} | AFTER_TERMINAL,
    DeliverSignal: WAKE,
    Reconcile: WAKE,
    ClearSignal: set(),
    Enqueue: set(),
    EnqueueWorkflow: SETTLE,
    FireCrons: set(),
}
FENCED = (Ack, ParkAwait, Sleep, AwaitChildren)


def _draw_op(data, store: ModelStore, clock: datetime, serial: int):
    jobs = store.state.jobs
    kinds = ["enqueue", "workflow", "claim", "reclaim", "signal", "reconcile", "clear", "cron"]
    if jobs:
        kinds += ["ack", "ack", "park", "sleep", "spawn", "await_children", "cancel", "retry", "steer"]
        kinds += ["ack_many"] if AckMany is not None else []
    kind = data.draw(st.sampled_from(kinds))
    pick = (lambda: data.draw(st.sampled_from(sorted(jobs)))) if jobs else None
    later = lambda: clock + timedelta(seconds=data.draw(st.integers(0, 60)))  # noqa: E731
    scope_of = lambda j: data.draw(st.sampled_from(["s1", f"job:{j}"]))  # noqa: E731
    if kind == "enqueue":
        sched = data.draw(st.none() | st.just(later()))
        return Enqueue(clock, (spec(max_attempts=data.draw(st.integers(1, 3)), scheduled_at=sched),))
    if kind == "workflow":
        ignore = tuple(data.draw(st.sets(st.sampled_from(["failed", "cancelled"]))))
        return EnqueueWorkflow(
            clock,
            f"wf{serial}",
            (member("a", max_attempts=1), member("b", "a", max_attempts=2), member("c", "a", "b", ignore=ignore)),
        )
    if kind == "claim":
        return Claim(clock, "q", data.draw(st.sampled_from(["n1", "n2"])), data.draw(st.integers(1, 3)), TTL)
    if kind == "reclaim":
        return Reclaim(clock, Backoff(base_s=data.draw(st.integers(0, 20))))
    if kind == "signal":
        scope = data.draw(st.sampled_from(["s1"] + [f"job:{j}" for j in sorted(jobs)[:5]]))
        return DeliverSignal(clock, scope, data.draw(st.sampled_from(["go", "$children"])), serial)
    if kind == "reconcile":
        return Reconcile(clock)
    if kind == "clear":
        return ClearSignal(data.draw(st.sampled_from(["s1"] + [f"job:{j}" for j in sorted(jobs)[:5]])), "go")
    if kind == "cron":
        return FireCrons(clock, clock - timedelta(minutes=2), (CronDef("tick", "* * * * *", "w_tick", queue="q"),))

    def ack(job_id: int) -> Ack:
        attempt = max(1, jobs[job_id].attempt + data.draw(st.sampled_from([0, 0, 0, -1, 1])))
        outcome = data.draw(
            st.sampled_from(
                [
                    Succeed(serial),
                    Fail("e", retry_at=later()),
                    Fail("e"),
                    CancelSelf(),
                    Snooze(later()),
                ]
            )
        )
        return Ack(clock, job_id, attempt, outcome)

    if kind == "ack_many":
        targets = data.draw(st.lists(st.sampled_from(sorted(jobs)), min_size=1, max_size=3, unique=True))
        return AckMany(clock, tuple(ack(j) for j in targets))
    job_id = pick()
    attempt = max(1, jobs[job_id].attempt + data.draw(st.sampled_from([0, 0, 0, -1, 1])))
    if kind == "ack":
        return ack(job_id)
    if kind == "park":
        deadline = data.draw(st.none() | st.just(later()))
        return ParkAwait(clock, job_id, attempt, scope_of(job_id), "go", deadline)
    if kind == "sleep":
        return Sleep(clock, job_id, attempt, data.draw(st.sampled_from(["x", "y"])), later())
    if kind == "spawn":
        n = data.draw(st.integers(0, 2))
        return Spawn(clock, job_id, data.draw(st.sampled_from(["k1", "k2"])), tuple(spec() for _ in range(n)))
    if kind == "await_children":
        return AwaitChildren(clock, job_id, attempt, data.draw(st.none() | st.just(later())))
    if kind == "cancel":
        return Cancel(clock, job_id)
    if kind == "retry":
        return Retry(clock, job_id)
    return Steer(clock, job_id, serial)


def _targets(op) -> set[int]:
    if AckMany is not None and isinstance(op, AckMany):
        return {a.job_id for a in op.acks}
    return {op.job_id}


def _check_step(op, result, before: State, after: State) -> None:
    if isinstance(op, FENCED) and isinstance(result, Stale):
        assert after == before, "a stale fenced write changed the state"
    if AckMany is not None and isinstance(op, AckMany):
        assert len(result.results) == len(op.acks)
        if all(isinstance(r, Stale) for r in result.results):
            assert after == before, "an all-stale AckMany changed the state"
        for ack, outcome in zip(op.acks, result.results, strict=True):
            if isinstance(outcome, Stale) and ack.job_id in before.jobs:
                change = (before.jobs[ack.job_id].state, after.jobs[ack.job_id].state)
                # only a sibling row's after-terminal steps (settlement, $children wake) may move it
                assert change[0] == change[1] or change in AFTER_TERMINAL, f"a stale row in AckMany moved {change}"
    assert set(before.jobs) <= set(after.jobs), "only Prune deletes jobs"
    for job_id, old in before.jobs.items():
        new = after.jobs[job_id]
        change = (old.state, new.state)
        if old.state != new.state:
            if type(op) in TARGETED:
                target, others = TARGETED[type(op)]
                allowed = target if job_id in _targets(op) else others
            else:
                allowed = UNTARGETED[type(op)]
            assert change in allowed, f"{type(op).__name__} moved job {job_id} {change[0]} -> {change[1]}"
            if old.state == "running":
                assert (new.lease_until, new.leased_by) == (None, None), f"{change} kept a lease"
            if change == ("failed", "cancelled"):
                assert new.wf_deps, "only a dep-bearing member is re-doomed by retry"
        if old.cancel_requested and not new.cancel_requested:
            assert isinstance(op, Retry) and op.job_id == job_id, "only retry clears cancel_requested"
        if new.state in TERMINAL and old.state in TERMINAL:
            assert new.finished_at == old.finished_at or isinstance(op, Retry)
    for job_id in set(after.jobs) - set(before.jobs):
        new = after.jobs[job_id]
        assert new.state in ("ready", "held"), f"{type(op).__name__} inserted a {new.state} row"
    for row in after.jobs.values():
        if row.state == "running":
            assert row.attempt >= 1 and row.lease_until is not None and row.leased_by is not None
        else:
            assert (row.lease_until, row.leased_by) == (None, None)
        if row.state == "held":
            assert row.wf_deps or (row.id in before.jobs and before.jobs[row.id].state == "held")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_state_change_any_operation_makes_is_one_of_section_4s_legal_writers(data):
    store = ModelStore()
    [frozen] = enqueue(store)
    patch(store, frozen, state="paused")  # the operator freeze no operation produces
    clock = NOW
    for serial in range(data.draw(st.integers(1, 30))):
        clock += timedelta(seconds=data.draw(st.integers(0, 40)))
        op = _draw_op(data, store, clock, serial)
        before = store.state
        result = store.apply(op)
        _check_step(op, result, before, store.state)


# ---------------------------------------------------------------------------------------------------
# §8.1 signals


def test_a_signal_is_upserted_latest_and_persists_until_cleared():
    store = ModelStore()
    store.apply(DeliverSignal(NOW, "orders", "paid", {"n": 1}))
    store.apply(DeliverSignal(at(5), "orders", "paid", {"n": 2}))
    signal = store.state.signals[("orders", "paid")]
    assert (signal.payload, signal.inserted_at) == ({"n": 2}, at(5))
    assert len(store.state.signals) == 1
    assert store.apply(ClearSignal("orders", "paid")) == Cleared(True)
    assert store.apply(ClearSignal("orders", "paid")) == Cleared(False)
    assert store.state.signals == {}


def test_a_signal_delivered_before_the_park_is_found_by_it_and_survives_the_wake():
    store = ModelStore()
    job_id = started(store)
    store.apply(DeliverSignal(NOW, f"job:{job_id}", "go", "early"))
    assert store.apply(ParkAwait(at(1), job_id, 1, f"job:{job_id}", "go")) == Parked(job_id, "ready")
    assert store.state.signals[(f"job:{job_id}", "go")].payload == "early"


def test_reading_signals_by_a_jobs_default_scopes_returns_job_and_workflow_signals_only():
    store = ModelStore()
    ids = workflow(store, "wf", member("a"))
    a = ids["a"]
    for scope, name in ((f"job:{a}", "x"), ("wf:wf", "y"), ("wf:other", "z"), (f"job:{a + 1}", "x"), ("user", "u")):
        store.apply(DeliverSignal(NOW, scope, name, name))
    got = store.apply(ReadSignals((f"job:{a}", "wf:wf")))
    assert [(s.scope, s.name) for s in got] == [(f"job:{a}", "x"), ("wf:wf", "y")]


def test_a_delivery_with_no_awaiter_wakes_nothing():
    assert ModelStore().apply(DeliverSignal(NOW, "s", "n")) == Signalled(())


def test_steer_delivers_dollar_steer_to_the_jobs_scope_and_wakes_a_job_awaiting_it():
    store = ModelStore()
    job_id = started(store)
    store.apply(ParkAwait(NOW, job_id, 1, f"job:{job_id}", "$steer"))
    assert store.apply(Steer(at(2), job_id, {"hint": "shorter"})) == Signalled((job_id,))
    assert store.state.signals[(f"job:{job_id}", "$steer")].payload == {"hint": "shorter"}
    assert job(store, job_id).state == "ready"


def test_steering_a_missing_job_is_not_found_and_changes_nothing():
    assert_refused(ModelStore(), Steer(NOW, 7, {}), NotFound(7))


# ---------------------------------------------------------------------------------------------------
# §8.2 steps and budgets


def test_a_read_step_misses_until_recorded_then_hits_with_the_envelope():
    store = ModelStore()
    job_id = started(store)
    assert store.apply(ReadStep(job_id, "fetch")) == StepMiss()
    store.apply(RecordStep(NOW, job_id, "fetch", {"rows": 3}))
    assert store.apply(ReadStep(job_id, "fetch")) == StepHit(encode({"rows": 3}))


def test_recording_steps_numbers_them_and_adds_their_spend():
    store = ModelStore()
    job_id = started(store)
    first = store.apply(RecordStep(NOW, job_id, "a", 1, usd_micros=10, tokens=100))
    second = store.apply(RecordStep(at(1), job_id, "b", None, usd_micros=5, tokens=7))
    assert first == w.Recorded(True, encode(1), 10, 100, False)
    assert second == w.Recorded(True, encode(None), 15, 107, False)
    assert [(s.seq, s.name, s.usd_micros, s.tokens, s.inserted_at) for s in store.apply(ReadSteps(job_id))] == [
        (1, "a", 10, 100, NOW),
        (2, "b", 5, 7, at(1)),
    ]
    assert (job(store, job_id).spent_usd_micros, job(store, job_id).spent_tokens) == (15, 107)


def test_a_duplicate_record_returns_the_first_value_and_adds_no_spend():
    store = ModelStore()
    job_id = started(store)
    store.apply(RecordStep(NOW, job_id, "a", "first", usd_micros=10))
    again = store.apply(RecordStep(at(1), job_id, "a", "second", usd_micros=99, tokens=5))
    assert again == w.Recorded(False, encode("first"), 10, 0, False)
    assert job(store, job_id).spent_usd_micros == 10
    assert len(store.apply(ReadSteps(job_id))) == 1


def test_error_shaped_step_values_are_memoized_like_any_other():
    store = ModelStore()
    job_id = started(store)
    store.apply(RecordStep(NOW, job_id, "call", {"error": "timeout"}))
    assert store.apply(ReadStep(job_id, "call")) == StepHit(encode({"error": "timeout"}))


def test_the_step_whose_spend_crosses_a_budget_reports_over_budget():
    store = ModelStore()
    job_id = started(store, budget_usd_micros=100, budget_tokens=1000)
    assert store.apply(RecordStep(NOW, job_id, "a", 1, usd_micros=100)).over_budget is False  # equal: not over
    assert store.apply(Preflight(job_id)) == BudgetOk()
    crossing = store.apply(RecordStep(NOW, job_id, "b", 2, usd_micros=1))
    assert (crossing.inserted, crossing.over_budget, crossing.spent_usd_micros) == (True, True, 101)
    tokens = started(store, budget_tokens=10)
    assert store.apply(RecordStep(NOW, tokens, "a", 1, tokens=11)).over_budget is True


def test_preflight_refuses_another_paid_step_once_durable_spend_exceeds_a_budget():
    store = ModelStore()
    job_id = started(store, budget_tokens=10)
    store.apply(RecordStep(NOW, job_id, "a", 1, tokens=11))
    store.apply(Reclaim(at(31), Backoff(base_s=0)))  # the crash between journal and failure ack
    run(store, job_id, now=at(31))
    assert store.apply(ReadStep(job_id, "a")) == StepHit(encode(1))  # replayed from the journal
    assert store.apply(Preflight(job_id)) == OverBudget(0, 11)


def test_step_and_event_writes_to_a_missing_job_report_it_gone():
    store = ModelStore()
    assert store.apply(Preflight(5)) == JobGone(5)
    assert_refused(store, RecordStep(NOW, 5, "a", 1), JobGone(5))
    assert_refused(store, EmitEvent(NOW, 5, {}), JobGone(5))
    assert_refused(store, Spawn(NOW, 5, "kids", (spec(),)), JobGone(5))


def test_events_are_numbered_per_job_in_emission_order():
    store = ModelStore()
    a, b = started(store), started(store)
    assert [store.apply(EmitEvent(at(i), a, {"i": i})) for i in range(3)] == [Emitted(1), Emitted(2), Emitted(3)]
    assert store.apply(EmitEvent(at(9), b, "x")) == Emitted(1)
    assert [(e.seq, e.payload, e.inserted_at) for e in store.apply(ReadEvents(a))] == [
        (1, {"i": 0}, at(0)),
        (2, {"i": 1}, at(1)),
        (3, {"i": 2}, at(2)),
    ]
    # a retried emit (once): its earlier try's event (same now and payload) answers it; any other appends
    assert store.apply(EmitEvent(at(1), a, {"i": 1}, once=True)) == Emitted(2)
    assert store.apply(EmitEvent(at(1), a, {"i": 9}, once=True)) == Emitted(4)
    assert store.apply(EmitEvent(at(7), a, {"i": 1}, once=True)) == Emitted(5)


# ---------------------------------------------------------------------------------------------------
# §8.4 children


def test_spawn_inserts_keyed_children_and_journals_their_ids():
    store = ModelStore()
    parent = started(store)
    result = store.apply(Spawn(at(1), parent, "kids", (spec(queue="kids", input=1), spec(queue="kids", input=2))))
    assert result == Spawned((parent + 1, parent + 2), False)
    for index, child in enumerate(result.child_ids):
        row = job(store, child)
        assert (row.parent_id, row.unique_key, row.unique_mode, row.state, row.input) == (
            parent,
            f"$spawn:{parent}:kids:{index}",
            "always",
            "ready",
            index + 1,
        )
    assert decode(store.apply(ReadStep(parent, "$spawn:kids")).value) == list(result.child_ids)


def test_a_repeated_spawn_is_memoized_and_inserts_nothing():
    store = ModelStore()
    parent = started(store)
    first = store.apply(Spawn(at(1), parent, "kids", (spec(queue="kids"),)))
    before = store.state
    again = store.apply(Spawn(at(2), parent, "kids", (spec(queue="kids"), spec(queue="kids"))))
    assert again == Spawned(first.child_ids, True)
    assert store.state == before


def test_spawn_after_a_crash_that_inserted_the_children_but_never_journaled_returns_the_existing_ids():
    store = ModelStore()
    parent = started(store)
    crashed = enqueue(
        store,
        *[
            spec(queue="kids", unique_key=f"$spawn:{parent}:kids:{i}", unique_mode="always", parent_id=parent)
            for i in range(2)
        ],
    )
    result = store.apply(Spawn(at(1), parent, "kids", (spec(queue="kids"), spec(queue="kids"))))
    assert result == Spawned(tuple(crashed), False)
    assert len(store.state.children_of(parent)) == 2
    assert decode(store.apply(ReadStep(parent, "$spawn:kids")).value) == crashed


def test_spawn_after_a_partial_insert_keeps_the_existing_child_and_adds_the_missing_one():
    store = ModelStore()
    parent = started(store)
    [old] = enqueue(
        store, spec(queue="kids", unique_key=f"$spawn:{parent}:kids:0", unique_mode="always", parent_id=parent)
    )
    next_id = store.state.next_id
    result = store.apply(Spawn(at(1), parent, "kids", (spec(queue="kids"), spec(queue="kids"))))
    assert result == Spawned((old, next_id + 1), False)  # the skipped row consumed next_id
    assert [c.id for c in store.state.children_of(parent)] == [old, next_id + 1]


def test_await_children_with_every_child_terminal_is_done_and_the_parent_keeps_running():
    store = ModelStore()
    parent = started(store)
    assert store.apply(AwaitChildren(NOW, parent, 1)) == ChildrenDone(())
    kids = store.apply(Spawn(NOW, parent, "kids", (spec(queue="kids"), spec(queue="kids")))).child_ids
    succeed(store, kids[0])
    fail_for_good(store, kids[1])
    before = store.state
    assert store.apply(AwaitChildren(at(1), parent, 1)) == ChildrenDone(kids)
    assert store.state == before and job(store, parent).state == "running"


def test_await_children_with_a_live_child_clears_the_stale_signal_and_parks():
    store = ModelStore()
    parent = started(store)
    first, second = store.apply(Spawn(NOW, parent, "kids", (spec(queue="kids"), spec(queue="kids")))).child_ids
    succeed(store, first, now=at(1))  # delivers $children while the parent is still running
    assert (f"job:{parent}", "$children") in store.state.signals
    assert store.apply(AwaitChildren(at(2), parent, 1, at(500))) == Parked(parent, "awaiting")
    assert (f"job:{parent}", "$children") not in store.state.signals
    row = job(store, parent)
    assert (row.state, row.await_scope, row.await_name, row.ready_at) == (
        "awaiting",
        f"job:{parent}",
        "$children",
        at(500),
    )
    succeed(store, second, now=at(3))
    assert (job(store, parent).state, job(store, parent).ready_at) == ("ready", at(3))
    attempt = run(store, parent, now=at(3))
    assert store.apply(AwaitChildren(at(4), parent, attempt)) == ChildrenDone((first, second))


def test_reconcile_wakes_an_awaiting_parent_whose_children_are_all_terminal():
    store = ModelStore()
    parent = started(store)
    [child] = store.apply(Spawn(NOW, parent, "kids", (spec(queue="kids"),))).child_ids
    store.apply(AwaitChildren(NOW, parent, 1))
    succeed(store, child)
    # the wake-up is lost (R2): rebuild the parked parent directly, signal gone
    patch(store, parent, state="awaiting", await_scope=f"job:{parent}", await_name="$children", ready_at=None)
    store.apply(ClearSignal(f"job:{parent}", "$children"))
    assert store.apply(Reconcile(at(9))) == Reconciled((parent,))
    row = job(store, parent)
    assert (row.state, row.ready_at, row.await_scope, row.await_name) == ("ready", at(9), None, None)
    assert store.apply(Reconcile(at(10))) == Reconciled(())


def test_reconcile_leaves_parents_with_a_live_child_or_no_children_and_other_awaiters_alone():
    store = ModelStore()
    busy = started(store)
    store.apply(Spawn(NOW, busy, "kids", (spec(queue="kids"),)))
    store.apply(AwaitChildren(NOW, busy, 1))
    childless = started(store)
    store.apply(ParkAwait(NOW, childless, 1, f"job:{childless}", "$children"))
    other = started(store)
    store.apply(ParkAwait(NOW, other, 1, "s", "n"))
    assert_refused(store, Reconcile(at(9)), Reconciled(()))


# ---------------------------------------------------------------------------------------------------
# §8.5 cron


TICK = CronDef("tick", "* * * * *", "w_tick", queue="cron")


def test_fire_crons_inserts_one_job_per_due_utc_minute_slot():
    store = ModelStore()
    result = store.apply(FireCrons(at(10), at(-150), (TICK,)))
    slots = [at(-120), at(-60), NOW]
    assert [(f.cron_name, f.slot, f.inserted) for f in result.fired] == [("tick", s, True) for s in slots]
    rows = [job(store, f.job_id) for f in result.fired]
    assert [(r.cron_name, r.cron_slot, r.queue, r.worker, r.input, r.state) for r in rows] == [
        ("tick", s, "cron", "w_tick", {}, "ready") for s in slots
    ]


def test_a_cron_slot_fires_exactly_once():
    store = ModelStore()
    first = store.apply(FireCrons(at(10), at(-150), (TICK,)))
    again = store.apply(FireCrons(at(20), at(-150), (TICK,)))
    assert [(f.job_id, f.inserted) for f in again.fired] == [(f.job_id, False) for f in first.fired]
    assert len(store.state.jobs) == 3


def test_cron_slots_are_utc_minutes_whatever_the_callers_timezone():
    store = ModelStore()
    plus2 = timezone(timedelta(hours=2))
    result = store.apply(FireCrons(at(10).astimezone(plus2), at(-30).astimezone(plus2), (TICK,)))
    assert [f.slot for f in result.fired] == [NOW] and result.fired[0].slot.utcoffset() == timedelta(0)


def test_a_dynamic_cron_row_overrides_the_static_definition_by_name():
    store = ModelStore()
    store.apply(PutCron(NOW, "tick", "*/2 * * * *", "w_dyn", {"x": 1}, {"queue": "dyn", "priority": 4}))
    fired = store.apply(FireCrons(at(10), at(-150), (TICK,))).fired
    assert [f.slot for f in fired] == [at(-120), NOW]
    row = job(store, fired[0].job_id)
    assert (row.worker, row.input, row.queue, row.priority) == ("w_dyn", {"x": 1}, "dyn", 4)


def test_a_paused_cron_row_is_skipped_even_over_a_static_definition():
    store = ModelStore()
    store.apply(PutCron(NOW, "tick", "* * * * *", "w_tick", paused=True))
    other = CronDef("other", "* * * * *", "w_other")
    fired = store.apply(FireCrons(at(10), at(-30), (TICK, other))).fired
    assert [f.cron_name for f in fired] == ["other"]


# ---------------------------------------------------------------------------------------------------
# §8.7 retention


def _terminal_jobs(store: ModelStore) -> tuple[int, int, int]:
    done = started(store)
    store.apply(RecordStep(NOW, done, "s", 1))
    store.apply(EmitEvent(NOW, done, "e"))
    store.apply(Ack(NOW, done, 1, Succeed(1)))
    failed = started(store, max_attempts=1)
    store.apply(RecordStep(NOW, failed, "s", 1))
    store.apply(Ack(NOW, failed, 1, Fail("x")))
    [cancelled] = enqueue(store)
    store.apply(Cancel(NOW, cancelled))
    return done, failed, cancelled


def test_prune_deletes_terminal_jobs_past_their_states_retention_with_their_steps_and_events():
    store = ModelStore()
    done, failed, cancelled = _terminal_jobs(store)
    result = store.apply(Prune(at(3601), {"succeeded": 3600, "failed": None}, signal_ttl=None))
    assert result == w.Pruned((done,), 0, 0)
    assert sorted(store.state.jobs) == [failed, cancelled]
    assert all(j != done for j, _ in store.state.steps) and all(j != done for j, _ in store.state.events)
    assert (failed, "s") in store.state.steps


def test_prune_keeps_a_job_finished_exactly_at_the_retention_boundary():
    store = ModelStore()
    _terminal_jobs(store)
    assert store.apply(Prune(at(3600), {"succeeded": 3600}, signal_ttl=None)).jobs == ()


def test_prune_never_deletes_non_terminal_jobs():
    store = ModelStore()
    ready = enqueue(store)[0]
    running = started(store)
    held = workflow(store, "wf", member("a"), member("b", "a"))["b"]
    parked = started(store)
    store.apply(ParkAwait(NOW, parked, 1, "s", "n"))
    everything = {"succeeded": 0, "failed": 0, "cancelled": 0}
    store.apply(Prune(at(10**8), everything))
    assert {ready, running, held, parked} <= set(store.state.jobs)


def test_prune_deletes_at_most_its_batch_limit_lowest_ids_first():
    store = ModelStore()
    ids = enqueue(store, spec(), spec(), spec())
    for job_id in ids:
        store.apply(Cancel(NOW, job_id))
    assert store.apply(Prune(at(10), {"cancelled": 0}, limit=2)).jobs == tuple(ids[:2])
    assert store.apply(Prune(at(10), {"cancelled": 0}, limit=2)).jobs == (ids[2],)


def test_prune_deletes_signals_past_their_ttl_and_rate_windows_older_than_a_day():
    store = ModelStore()
    store.apply(DeliverSignal(NOW, "s", "old"))
    store.apply(DeliverSignal(at(50), "s", "new"))
    enqueue(store, spec(), spec())
    claim(store, 1, opts=rate_opts(10))
    claim(store, 1, now=at(86400 + 30), opts=rate_opts(10))
    result = store.apply(Prune(at(86400 + 120), {}, signal_ttl=86400 + 100))
    assert (result.signals, result.rate_windows) == (1, 1)
    assert list(store.state.signals) == [("s", "new")]
    assert list(store.state.rate) == [("queue:q", at(86400))]


# ---------------------------------------------------------------------------------------------------
# runtime rows, reads, compatibility


def test_put_queue_and_put_cron_store_their_rows():
    store = ModelStore()
    assert store.apply(PutQueue(NOW, "q", {"global_limit": 2})) == ops.QueuePut("q")
    assert store.apply(PutCron(NOW, "c", "* * * * *", "w", paused=True)) == ops.CronPut("c")
    assert (store.state.queues["q"].opts, store.state.queues["q"].updated_at) == ({"global_limit": 2}, NOW)
    assert (store.state.crons["c"].paused, store.state.crons["c"].worker) == (True, "w")


def test_reads_return_rows_and_not_found_without_changing_anything():
    store = ModelStore()
    [job_id] = enqueue(store)
    assert_refused(store, ReadJob(job_id), job(store, job_id))
    assert_refused(store, ReadJob(99), NotFound(99))
    assert_refused(store, ReadSteps(job_id), ())
    assert_refused(store, ReadEvents(job_id), ())
    assert_refused(store, ReadWorkflow("none"), ())
    assert_refused(store, ReadSignals(("s",)), ())


def test_check_compat_accepts_newer_migrations_and_refuses_a_newer_major_or_an_older_migration():
    assert ModelStore().apply(CheckCompat()) == Compatible(3, 1)
    assert ModelStore(from_rows(version=7)).apply(CheckCompat()) == Compatible(7, 1)
    with pytest.raises(IncompatibleSchema, match="major 2"):
        ModelStore(from_rows(contract_major=2)).apply(CheckCompat())
    with pytest.raises(IncompatibleSchema, match="belay migrate"):
        ModelStore(from_rows(version=2)).apply(CheckCompat())


# ---------------------------------------------------------------------------------------------------
# purity of transition, refused input


def test_transition_is_a_pure_function_of_state_and_operation():
    store = ModelStore()
    job_id = started(store, max_attempts=3)
    state = store.state
    snapshot = repr(state)
    op = Ack(at(5), job_id, 1, Fail("boom", "d", retry_at=at(9)))
    first = transition(state, op)
    second = transition(state, op)
    assert first == second
    assert repr(state) == snapshot  # the input state (errors lists included) is untouched


def test_the_model_refuses_transactional_enqueue_loudly_and_changes_nothing():
    store = ModelStore()
    enqueue(store)
    before, history = store.state, list(store.history)
    assert ModelStore.supports_transactional_enqueue is False
    with pytest.raises(InvalidInput, match="transaction"):
        store.apply(Enqueue(NOW, (spec(),)), conn=object())
    assert store.state == before and store.history == history


@pytest.mark.parametrize(
    "members, message",
    [
        ((member("a", "c"), member("b", "a"), member("c", "b")), "dependency cycle"),
        ((member("a"), member("b", "a", "nope")), r"depends on \['nope'\]"),
        ((member("x"),), "already has members named"),
    ],
)
def test_an_invalid_workflow_raises_and_leaves_the_whole_state_unchanged(members, message):
    store = ModelStore()
    workflow(store, "wf", member("x"))
    before, history = store.state, list(store.history)
    with pytest.raises(InvalidInput, match=message):
        store.apply(EnqueueWorkflow(NOW, "wf", members))
    assert store.state == before and store.history == history


@pytest.mark.parametrize(
    "build",
    [
        lambda: JobSpec("q", "w", priority=-1),
        lambda: JobSpec("q", "w", priority=40000),
        lambda: JobSpec("q", "w", max_attempts=0),
        lambda: JobSpec("q", "w", unique_key="k", unique_mode="sometimes"),
        lambda: JobSpec("q", "w", unique_key="k", unique_mode="window"),
        lambda: JobSpec("q", "w", scheduled_at=datetime(2026, 1, 1)),
        lambda: JobSpec("q", "w", cron_name="c", cron_slot=at(1)),
        lambda: JobSpec("", "w"),
        lambda: JobSpec("q", "w", input={"x": float("nan")}),
        lambda: Enqueue(NOW, ()),
        lambda: Enqueue(datetime(2026, 1, 1), (spec(),)),
        lambda: Claim(NOW, "q", "n1", -1),
        lambda: Claim(NOW, "q", "n1", 1, timedelta(0)),
        lambda: Ack(NOW, 1, 0, Succeed(1)),
        lambda: Ack(NOW, 1, 1, "done"),
        lambda: RecordStep(NOW, 1, "$sleep:x", 1),
        lambda: RecordStep(NOW, 1, "a", 1, usd_micros=-1),
        lambda: Spawn(NOW, 1, "kids", (spec(unique_key="mine"),)),
        lambda: Prune(NOW, {"ready": 10}),
        lambda: PutQueue(NOW, "q", {"global_limt": 3}),
        lambda: PutCron(NOW, "c", "not a cron", "w"),
        lambda: DeliverSignal(NOW, "", "n"),
        lambda: WorkflowMember("a", spec(unique_key="k")),
    ],
)
def test_invalid_input_is_refused_with_invalid_input_before_any_store_sees_it(build):
    with pytest.raises(InvalidInput):
        build()


def test_an_unknown_operation_is_a_type_error_and_changes_nothing():
    store = ModelStore()
    before = store.state
    with pytest.raises(TypeError, match="does not implement"):
        store.apply(object())
    assert store.state == before


def test_an_id_supply_gives_an_insert_the_ids_a_real_sequence_handed_out():
    """The trace validation's Tables.id_supply (soak/judges/refine/): a concurrent insert can take ids
    between one statement's rows — the spawn's children get the supplied ids, journaled as such, and
    next_id moves past the highest."""
    from model import store as model_store
    from model.state import Tables

    store = ModelStore()
    parent = started(store)
    t = Tables.of(store.state)
    t.id_supply = iter([parent + 1, parent + 5])
    result = model_store.HANDLERS[Spawn](t, Spawn(at(1), parent, "kids", (spec(queue="kids"), spec(queue="kids"))))
    assert result == Spawned((parent + 1, parent + 5), False)
    assert {parent + 1, parent + 5} <= set(t.jobs) and parent + 2 not in t.jobs and t.next_id == parent + 6
    assert decode(t.steps[(parent, "$spawn:kids")].value) == [parent + 1, parent + 5]


def test_tables_update_gives_what_dataclasses_replace_gives():
    # model/state.py's Tables.update builds the new row without dataclasses.replace (the trace validation's
    # hottest path): the same value, the old row untouched, an unknown column still refused
    import dataclasses

    from model.state import Tables

    store = ModelStore()
    job = started(store)
    t = Tables.of(store.state)
    old = t.jobs[job]
    changes = {"state": "running", "attempt": 1, "leased_by": "n1", "errors": [{"x": 1}]}
    before = dataclasses.replace(old)
    new = t.update(job, **changes)
    assert new == dataclasses.replace(old, **changes) and type(new) is type(old)
    assert t.jobs[job] is new and old == before and new != old
    with pytest.raises(TypeError):
        t.update(job, no_such_column=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.state = "ready"  # type: ignore[misc]
