"""Workflows (§8.3), cancel and retry (§8.6), signals and the await park rule (§7, §8.1), children
notification (§8.4). States a worker would produce (a claim, a failed ack) are written with SQL here,
marked as such; the operation under test always runs through the store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from model import ops
from model import worker_ops as wops
from model.ops import Enqueue, EnqueueWorkflow, InvalidInput, JobSpec, WorkflowMember


def member(name, *deps, ignore=()):
    return WorkflowMember(name, JobSpec("q", f"w_{name}"), deps=deps, ignore=ignore)


def states(store, wf="wf"):
    return {j.wf_name: j.state for j in store.apply(ops.ReadWorkflow(wf))}


def simulate_claim(conn, job_id, now, node="n1"):
    """What a worker's claim (§6) writes; claims arrive with the worker issue."""
    conn.execute(
        "UPDATE belay_jobs SET state = 'running', attempt = attempt + 1, lease_until = %s, leased_by = %s, "
        "started_at = COALESCE(started_at, %s) WHERE id = %s",
        (now + timedelta(seconds=30), node, now, job_id),
    )


def simulate_failed(conn, job_id, now):
    """What a worker's final error ack (§7) writes to the row itself."""
    conn.execute(
        "UPDATE belay_jobs SET state = 'failed', finished_at = %s, lease_until = NULL, leased_by = NULL WHERE id = %s",
        (now, job_id),
    )


def test_dep_bearing_members_are_held_and_roots_ready(store, now):
    result = store.apply(EnqueueWorkflow(now, "wf", (member("a"), member("b", "a"), member("c", "a", "b"))))
    assert [n for n, _ in result.ids] == ["a", "b", "c"]
    assert states(store) == {"a": "ready", "b": "held", "c": "held"}
    job = store.apply(ops.ReadJob(dict(result.ids)["c"]))
    assert (job.workflow_id, job.wf_name, job.wf_deps, job.wf_ignore) == ("wf", "c", ("a", "b"), ())


def test_a_dependency_cycle_is_refused_and_nothing_is_inserted(store, conn, now):
    with pytest.raises(InvalidInput, match=r"dependency cycle: (a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c)"):
        store.apply(EnqueueWorkflow(now, "wf", (member("a", "c"), member("b", "a"), member("c", "b"))))
    assert conn.execute("SELECT count(*) FROM belay_jobs").fetchone()[0] == 0


def test_a_dep_on_a_missing_name_is_refused(store, conn, now):
    with pytest.raises(InvalidInput, match=r"member 'b' depends on \['nope'\]"):
        store.apply(EnqueueWorkflow(now, "wf", (member("a"), member("b", "a", "nope"))))
    assert conn.execute("SELECT count(*) FROM belay_jobs").fetchone()[0] == 0


def test_members_may_depend_on_members_stored_earlier_and_settle_at_insert(store, conn, now):
    first = store.apply(EnqueueWorkflow(now, "wf", (member("a"),)))
    simulate_failed(conn, dict(first.ids)["a"], now)
    second = store.apply(EnqueueWorkflow(now, "wf", (member("b", "a"), member("c", "a", ignore=("failed",)))))
    # Settlement ran at insert: b is doomed by the failed dep, c tolerates it and is released.
    assert states(store) == {"a": "failed", "b": "cancelled", "c": "ready"}
    assert second.doomed == (dict(second.ids)["b"],) and second.released == (dict(second.ids)["c"],)


def test_a_member_name_already_stored_is_refused(store, now):
    store.apply(EnqueueWorkflow(now, "wf", (member("a"),)))
    with pytest.raises(InvalidInput, match=r"already has members named \['a'\]"):
        store.apply(EnqueueWorkflow(now, "wf", (member("a"),)))


def test_bad_member_definitions_are_refused():
    with pytest.raises(InvalidInput, match="depends on itself"):
        member("a", "a")
    with pytest.raises(InvalidInput, match="ignore flags"):
        member("a", "b", ignore=("succeeded",))
    with pytest.raises(InvalidInput, match="cannot carry a unique key"):
        WorkflowMember("a", JobSpec("q", "w", unique_key="k"))
    with pytest.raises(InvalidInput, match="names a member twice"):
        EnqueueWorkflow(
            __import__("datetime").datetime.now(__import__("datetime").timezone.utc), "wf", (member("a"), member("a"))
        )


def test_cancelling_a_dep_dooms_its_dependents_transitively(store, now):
    result = store.apply(EnqueueWorkflow(now, "wf", (member("a"), member("b", "a"), member("c", "b"))))
    assert store.apply(ops.Cancel(now, dict(result.ids)["a"])) == ops.Cancelled(dict(result.ids)["a"])
    assert states(store) == {"a": "cancelled", "b": "cancelled", "c": "cancelled"}
    assert all(j.finished_at == now for j in store.apply(ops.ReadWorkflow("wf")))


def test_a_dependent_ignoring_cancelled_is_released_by_a_cancel(store, now):
    result = store.apply(EnqueueWorkflow(now, "wf", (member("a"), member("b", "a", ignore=("cancelled",)))))
    store.apply(ops.Cancel(now, dict(result.ids)["a"]))
    assert states(store) == {"a": "cancelled", "b": "ready"}


def test_doomed_members_count_as_cancelled_for_their_dependents(store, now):
    result = store.apply(
        EnqueueWorkflow(now, "wf", (member("a"), member("b", "a"), member("c", "b", ignore=("cancelled",))))
    )
    store.apply(ops.Cancel(now, dict(result.ids)["a"]))
    assert states(store) == {"a": "cancelled", "b": "cancelled", "c": "ready"}


def test_retrying_a_dependent_of_a_still_failed_dep_re_dooms_it(store, conn, now):
    result = store.apply(EnqueueWorkflow(now, "wf", (member("a"), member("b", "a"))))
    ids = dict(result.ids)
    simulate_failed(conn, ids["a"], now)
    conn.execute("UPDATE belay_jobs SET state = 'cancelled', finished_at = %s WHERE id = %s", (now, ids["b"]))
    later = now + timedelta(minutes=5)
    # §8.6: re-held, then settled under the workflow lock — the failed dep dooms it again.
    assert store.apply(ops.Retry(later, ids["b"])) == ops.Retried(ids["b"], "cancelled")
    b = store.apply(ops.ReadJob(ids["b"]))
    assert b.state == "cancelled" and b.finished_at == later


def test_retrying_the_failed_dep_then_the_dependent_holds_it_until_the_dep_succeeds(store, conn, now):
    result = store.apply(EnqueueWorkflow(now, "wf", (member("a"), member("b", "a"))))
    ids = dict(result.ids)
    store.apply(ops.Cancel(now, ids["a"]))
    assert states(store) == {"a": "cancelled", "b": "cancelled"}
    assert store.apply(ops.Retry(now, ids["a"])) == ops.Retried(ids["a"], "ready")
    assert store.apply(ops.Retry(now, ids["b"])) == ops.Retried(ids["b"], "held")
    assert states(store) == {"a": "ready", "b": "held"}


def test_retry_clears_cancel_requested_raises_max_attempts_and_clears_lease(store, conn, now):
    job_id = store.apply(Enqueue(now, (JobSpec("q", "w", max_attempts=1),))).ids[0]
    simulate_claim(conn, job_id, now)
    assert store.apply(ops.Cancel(now, job_id)) == ops.CancelRequested(job_id)
    # The worker honours the request at a step boundary (simulated ack: cancelled, flag survives).
    conn.execute(
        "UPDATE belay_jobs SET state = 'cancelled', finished_at = %s, lease_until = NULL, "
        "leased_by = NULL WHERE id = %s",
        (now, job_id),
    )
    assert store.apply(ops.ReadJob(job_id)).cancel_requested is True
    later = now + timedelta(hours=1)
    assert store.apply(ops.Retry(later, job_id)) == ops.Retried(job_id, "ready")
    job = store.apply(ops.ReadJob(job_id))
    assert job.cancel_requested is False
    assert job.max_attempts == 2 and job.attempt == 1
    assert (job.ready_at, job.finished_at, job.lease_until, job.leased_by) == (later, None, None, None)


def test_retry_of_a_live_job_is_refused_as_a_value(store, now):
    job_id = store.apply(Enqueue(now, (JobSpec("q", "w"),))).ids[0]
    assert store.apply(ops.Retry(now, job_id)) == ops.NotRetryable(job_id, "ready")
    assert store.apply(ops.Retry(now, 999)) == ops.NotFound(999)


def test_retry_that_would_duplicate_a_live_unique_key_is_blocked(store, now):
    first = store.apply(Enqueue(now, (JobSpec("q", "w", unique_key="k"),))).ids[0]
    store.apply(ops.Cancel(now, first))
    second = store.apply(Enqueue(now, (JobSpec("q", "w", unique_key="k"),))).ids[0]
    assert store.apply(ops.Retry(now, first)) == ops.RetryBlocked(first, second)
    assert store.apply(ops.ReadJob(first)).state == "cancelled"


def test_cancel_running_sets_cancel_requested_and_terminal_is_not_cancellable(store, conn, now):
    job_id = store.apply(Enqueue(now, (JobSpec("q", "w"),))).ids[0]
    simulate_claim(conn, job_id, now)
    assert store.apply(ops.Cancel(now, job_id)) == ops.CancelRequested(job_id)
    job = store.apply(ops.ReadJob(job_id))
    assert job.state == "running" and job.cancel_requested is True
    other = store.apply(Enqueue(now, (JobSpec("q", "w"),))).ids[0]
    store.apply(ops.Cancel(now, other))
    assert store.apply(ops.Cancel(now, other)) == ops.NotCancellable(other, "cancelled")
    assert store.apply(ops.Cancel(now, 4242)) == ops.NotFound(4242)


def test_cancelling_a_child_signals_children_to_its_parent(store, conn, now):
    parent = store.apply(Enqueue(now, (JobSpec("q", "parent"),))).ids[0]
    simulate_claim(conn, parent, now)
    assert store.apply(wops.ParkAwait(now, parent, 1, f"job:{parent}", "$children")) == wops.Parked(parent, "awaiting")
    child = store.apply(Enqueue(now, (JobSpec("q", "child", parent_id=parent),))).ids[0]
    store.apply(ops.Cancel(now, child))
    signals = store.apply(ops.ReadSignals((f"job:{parent}",)))
    assert [(s.name, s.payload) for s in signals] == [("$children", {"children": [child]})]
    assert store.apply(ops.ReadJob(parent)).state == "ready"


def test_a_doomed_workflow_member_with_a_parent_signals_the_parent(store, now):
    parent = store.apply(Enqueue(now, (JobSpec("q", "parent"),))).ids[0]
    spec = JobSpec("q", "w")
    result = store.apply(EnqueueWorkflow(now, "wf", (WorkflowMember("a", spec), WorkflowMember("b", spec, ("a",)))))
    store.apply(ops.ReadJob(parent))
    # Link b to the parent the way a spawn would (parent_id is set at insert by spawns).
    with store.pool.connection() as c:
        c.execute("UPDATE belay_jobs SET parent_id = %s WHERE id = %s", (parent, dict(result.ids)["b"]))
    store.apply(ops.Cancel(now, dict(result.ids)["a"]))
    signals = store.apply(ops.ReadSignals((f"job:{parent}",)))
    assert [(s.name, s.payload) for s in signals] == [("$children", {"children": [dict(result.ids)["b"]]})]


# --- signals and the park rule -----------------------------------------------------------------------


def test_await_before_signal_parks_then_the_signal_wakes_the_job(store, conn, now):
    job_id = store.apply(Enqueue(now, (JobSpec("q", "w"),))).ids[0]
    simulate_claim(conn, job_id, now)
    deadline = now + timedelta(hours=1)
    assert store.apply(wops.ParkAwait(now, job_id, 1, "orders", "paid", deadline)) == wops.Parked(job_id, "awaiting")
    job = store.apply(ops.ReadJob(job_id))
    assert (job.state, job.await_scope, job.await_name, job.ready_at, job.lease_until) == (
        "awaiting",
        "orders",
        "paid",
        deadline,
        None,
    )
    later = now + timedelta(seconds=5)
    assert store.apply(ops.DeliverSignal(later, "orders", "paid", {"amount": 3})) == ops.Signalled((job_id,))
    job = store.apply(ops.ReadJob(job_id))
    assert (job.state, job.ready_at, job.await_scope, job.await_name) == ("ready", later, None, None)


def test_signal_before_await_parks_the_job_as_ready_at_once(store, conn, now):
    job_id = store.apply(Enqueue(now, (JobSpec("q", "w"),))).ids[0]
    assert store.apply(ops.DeliverSignal(now, "orders", "paid", {"amount": 3})) == ops.Signalled(())
    simulate_claim(conn, job_id, now)
    later = now + timedelta(seconds=1)
    assert store.apply(wops.ParkAwait(later, job_id, 1, "orders", "paid", now + timedelta(hours=1))) == wops.Parked(
        job_id, "ready"
    )
    job = store.apply(ops.ReadJob(job_id))
    assert (job.state, job.ready_at, job.await_scope, job.await_name) == ("ready", later, None, None)


def test_a_park_from_a_stale_attempt_changes_nothing(store, conn, now):
    job_id = store.apply(Enqueue(now, (JobSpec("q", "w"),))).ids[0]
    simulate_claim(conn, job_id, now)
    simulate_claim(conn, job_id, now)  # reclaimed and claimed again: attempt 2
    before = store.apply(ops.ReadJob(job_id))
    assert store.apply(wops.ParkAwait(now, job_id, 1, "s", "n")) == wops.Stale(job_id, 1)
    assert store.apply(ops.ReadJob(job_id)) == before


def test_signals_upsert_latest_and_persist_until_cleared(store, now):
    store.apply(ops.DeliverSignal(now, "s", "n", {"v": 1}))
    store.apply(ops.DeliverSignal(now + timedelta(seconds=1), "s", "n", {"v": 2}))
    rows = store.apply(ops.ReadSignals(("s", "other")))
    assert [(r.payload, r.inserted_at) for r in rows] == [({"v": 2}, now + timedelta(seconds=1))]
    assert store.apply(ops.ClearSignal("s", "n")) == ops.Cleared(True)
    assert store.apply(ops.ClearSignal("s", "n")) == ops.Cleared(False)
    assert store.apply(ops.ReadSignals(("s",))) == ()


def test_a_signal_wakes_every_awaiter_of_its_scope_and_name_only(store, conn, now):
    ids = store.apply(Enqueue(now, tuple(JobSpec("q", "w") for _ in range(3)))).ids
    for job_id, name in zip(ids, ["go", "go", "stop"], strict=True):
        simulate_claim(conn, job_id, now)
        store.apply(wops.ParkAwait(now, job_id, 1, "s", name))
    assert store.apply(ops.DeliverSignal(now, "s", "go")) == ops.Signalled(tuple(ids[:2]))
    assert store.apply(ops.ReadJob(ids[2])).state == "awaiting"


def test_steer_delivers_dollar_steer_to_the_jobs_own_scope(store, now):
    job_id = store.apply(Enqueue(now, (JobSpec("q", "w"),))).ids[0]
    assert store.apply(ops.Steer(now, job_id, {"hint": "shorter"})) == ops.Signalled(())
    rows = store.apply(ops.ReadSignals((f"job:{job_id}",)))
    assert [(r.name, r.payload) for r in rows] == [("$steer", {"hint": "shorter"})]
    assert store.apply(ops.Steer(now, 999, {})) == ops.NotFound(999)


def test_park_racing_delivery_never_loses_the_wake_up(db_url, store, conn, now):
    """§7 park-and-wake: with the scope lock and the persistent row, every interleaving ends ready."""
    import threading

    from impl.store import PgStore

    ids = store.apply(Enqueue(now, tuple(JobSpec("q", "w") for _ in range(30)))).ids
    for job_id in ids:
        simulate_claim(conn, job_id, now)
    parker, deliverer = PgStore(db_url, pool_size=1), PgStore(db_url, pool_size=1)
    try:
        for job_id in ids:
            barrier = threading.Barrier(2)

            def park(job_id=job_id, barrier=barrier):
                barrier.wait()
                parker.apply(wops.ParkAwait(now, job_id, 1, f"race:{job_id}", "go", now + timedelta(days=1)))

            def deliver(job_id=job_id, barrier=barrier):
                barrier.wait()
                deliverer.apply(ops.DeliverSignal(now, f"race:{job_id}", "go"))

            threads = [threading.Thread(target=park), threading.Thread(target=deliver)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        parker.close()
        deliverer.close()
    assert conn.execute("SELECT DISTINCT state FROM belay_jobs").fetchall() == [("ready",)]


def test_steps_and_events_read_back_in_order_with_their_envelopes(store, conn, now):
    from model.envelope import decode, encode

    job_id = store.apply(Enqueue(now, (JobSpec("q", "w"),))).ids[0]
    etf = bytes([131, 116, 0, 0, 0, 1, 100, 0, 1, 97, 97, 1])  # term_to_binary(#{a => 1}) from an Elixir SDK
    # A worker journals these (§8.2, §9 events); worker-level writes arrive with the worker issue.
    conn.execute(
        "INSERT INTO belay_steps (job_id, seq, name, value, usd_micros, tokens, inserted_at) VALUES "
        "(%s, 1, 'fetch', %s, 5, 7, %s), (%s, 2, 'elixir', %s, 0, 0, %s)",
        (job_id, encode({"rows": [1, 2]}), now, job_id, etf, now),
    )
    conn.execute(
        "INSERT INTO belay_events (job_id, seq, payload, inserted_at) VALUES (%s, 1, '{\"p\": 1}', %s), "
        "(%s, 2, '\"two\"', %s)",
        (job_id, now, job_id, now),
    )
    steps = store.apply(ops.ReadSteps(job_id))
    assert [(s.seq, s.name, decode(s.value), s.usd_micros, s.tokens) for s in steps] == [
        (1, "fetch", {"rows": [1, 2]}, 5, 7),
        (2, "elixir", {"a": 1}, 0, 0),
    ]
    assert [e.payload for e in store.apply(ops.ReadEvents(job_id))] == [{"p": 1}, "two"]


def test_the_database_refuses_a_step_value_over_1_mib_from_any_sdk(store, conn, now):
    import psycopg

    job_id = store.apply(Enqueue(now, (JobSpec("q", "w"),))).ids[0]
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "INSERT INTO belay_steps (job_id, seq, name, value, inserted_at) VALUES (%s, 1, 'big', %s, %s)",
            (job_id, b"x" * (1024 * 1024 + 1), now),
        )
