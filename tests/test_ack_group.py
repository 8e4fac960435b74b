"""Group commit of single-job acks (impl.runtime.AckGroup, issue 33).

The unit tests drive AckGroup with fake commit functions and real threads; the integration tests run a
Worker on PostgreSQL and check the per-job guarantees the grouping must keep: each job acked with its own
value and time, each row fenced on its own attempt (a stale ack in a group changes nothing), and fewer
ack transactions than jobs under load."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from impl.client import Client, result_value
from impl.runtime import AckGroup, QueueConfig, Worker, WorkerConfig
from impl.worker import Registry
from model import worker_ops as w
from model.ops import JobSpec
from model.queues import QueueOpts

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _ack(job_id: int) -> w.Ack:
    return w.Ack(NOW + timedelta(milliseconds=job_id), job_id, 1, w.Succeed(job_id))


class FakeStore:
    """Commits take `delay` seconds; records each commit's ids."""

    def __init__(self, delay: float = 0.02, fail_many: bool = False) -> None:
        self.delay, self.fail_many = delay, fail_many
        self.commits: list[tuple[str, tuple[int, ...]]] = []
        self.lock = threading.Lock()

    def one(self, op: w.Ack) -> w.Acked:
        time.sleep(self.delay)
        with self.lock:
            self.commits.append(("one", (op.job_id,)))
        return w.Acked(op.job_id, "succeeded")

    def many(self, op: w.AckMany, tags: tuple = ()) -> w.AckedMany:
        time.sleep(self.delay)
        if self.fail_many:
            raise RuntimeError("permanent")
        with self.lock:
            self.commits.append(("many", tuple(a.job_id for a in op.acks)))
        return w.AckedMany(tuple(w.Acked(a.job_id, "succeeded") for a in op.acks))


def _run_concurrently(group: AckGroup, ids: list[int]) -> dict[int, object]:
    results: dict[int, object] = {}
    barrier = threading.Barrier(len(ids))

    def one(i: int) -> None:
        barrier.wait()
        results[i] = group.ack(_ack(i))

    threads = [threading.Thread(target=one, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "an ack never returned"
    return results


def test_a_deferred_ack_waits_for_a_leader_and_lead_stale_leads_it_once_it_has_waited_long_enough() -> None:
    """`ack_then(defer=True)`: the caller runs more of the group's jobs before a commit is worth it, so its ack
    is queued with no leader; the next ack without `defer` leads it, and a deferred ack that has waited
    `older_than` is led by whoever calls `lead_stale` (the runtime's watchdog)."""
    store = FakeStore(delay=0.0)
    group = AckGroup(store.one, store.many)
    done: list[int] = []

    def then(waiter) -> None:
        done.append(waiter.op.job_id)

    group.ack_then(_ack(1), None, then, defer=True)
    group.ack_then(_ack(2), None, then, defer=True)
    assert store.commits == [] and done == [], "a deferred ack was committed with no leader"
    assert group.lead_stale(60) is True, "not yet stale: left waiting, and the watchdog must look again"
    assert store.commits == []
    group.ack_then(_ack(3), None, then)  # not deferred: it leads, the deferred ones with it
    assert store.commits == [("many", (1, 2, 3))] and done == [1, 2, 3]
    assert group.deferred_since is None and group.lead_stale(0) is False

    group.ack_then(_ack(4), None, then, defer=True)
    assert group.lead_stale(0) is False, "a stale deferred ack is led by the caller"
    assert store.commits[-1] == ("one", (4,)) and done == [1, 2, 3, 4]


def test_a_lone_ack_commits_at_once_on_the_single_path() -> None:
    store = FakeStore(delay=0)
    group = AckGroup(store.one, store.many)
    assert group.ack(_ack(1)) == w.Acked(1, "succeeded")
    assert store.commits == [("one", (1,))]


def test_acks_arriving_during_a_commit_share_the_next_one_and_each_gets_its_own_result() -> None:
    store = FakeStore(delay=0.05)
    group = AckGroup(store.one, store.many, max_batch=64)
    results = _run_concurrently(group, list(range(1, 21)))
    assert results == {i: w.Acked(i, "succeeded") for i in range(1, 21)}
    committed = sorted(i for _, ids in store.commits for i in ids)
    assert committed == list(range(1, 21)), "every ack committed exactly once"
    assert len(store.commits) < 20 and any(kind == "many" for kind, _ in store.commits)


def test_a_lingering_leader_commits_at_once_when_it_is_the_only_execution() -> None:
    store = FakeStore(delay=0)
    group = AckGroup(store.one, store.many, pending=lambda: 1, linger=5.0)
    t0 = time.monotonic()
    assert group.ack(_ack(1)) == w.Acked(1, "succeeded")
    assert time.monotonic() - t0 < 1.0, "an idle ack waits for nobody"
    assert store.commits == [("one", (1,))]


def test_a_lingering_leader_waits_for_the_other_executions_and_they_commit_together() -> None:
    # three executions finish a little apart: without the linger the first commits alone
    store = FakeStore(delay=0)
    group = AckGroup(store.one, store.many, pending=lambda: 3, linger=2.0)
    results: dict[int, object] = {}

    def late(i: int, after: float) -> None:
        time.sleep(after)
        results[i] = group.ack(_ack(i))

    threads = [threading.Thread(target=late, args=(i, 0.05 * i)) for i in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert results == {i: w.Acked(i, "succeeded") for i in (1, 2, 3)}
    assert store.commits == [("many", (1, 2, 3))]


def test_a_lingering_leader_waits_no_longer_than_the_linger() -> None:
    store = FakeStore(delay=0)
    group = AckGroup(store.one, store.many, pending=lambda: 5, linger=0.2)  # the other four never ack
    t0 = time.monotonic()
    assert group.ack(_ack(1)) == w.Acked(1, "succeeded")
    assert 0.15 < time.monotonic() - t0 < 2.0
    assert store.commits == [("one", (1,))]


def test_ack_then_returns_at_once_and_its_epilogue_runs_after_the_commit_on_the_leaders_thread() -> None:
    """The runtime's executions (`ack_then`): a caller that does not lead returns before its ack commits
    (its pool thread is free, no thread is woken for it); its `then` runs once its ack is durable, on the
    thread that led that commit, with its own outcome — each ack committed exactly once."""
    store = FakeStore(delay=0.1)
    group = AckGroup(store.one, store.many)
    done: dict[int, tuple[object, str, int]] = {}
    committed_before: dict[int, bool] = {}

    def then(waiter) -> None:
        i = waiter.op.job_id
        committed_before[i] = any(i in ids for _, ids in store.commits)
        done[i] = (waiter.outcome(), threading.current_thread().name, len(store.commits))

    leader = threading.Thread(target=group.ack_then, args=(_ack(1), None, then), name="leader")
    leader.start()
    time.sleep(0.03)  # the first commit is in flight
    t0 = time.monotonic()
    for i in (2, 3, 4):
        group.ack_then(_ack(i), None, then)  # queued behind it: returns without waiting
    assert time.monotonic() - t0 < 0.05, "a follower waited for a commit"
    assert 2 not in done
    leader.join(timeout=10)
    assert not leader.is_alive()
    assert {i: r for i, (r, _, _) in done.items()} == {i: w.Acked(i, "succeeded") for i in (1, 2, 3, 4)}
    assert all(committed_before.values()), "an epilogue ran before its ack committed"
    assert {name for _, name, _ in done.values()} == {"leader"}  # the leader went on to commit 2-4
    assert store.commits == [("one", (1,)), ("many", (2, 3, 4))]


def test_ack_then_hands_a_failed_commit_to_each_epilogue() -> None:
    def boom(op):
        raise RuntimeError("database gone")

    group = AckGroup(boom, lambda op, tags: (_ for _ in ()).throw(RuntimeError("x")))
    seen: list[str] = []

    def then(waiter) -> None:
        try:
            waiter.outcome()
        except RuntimeError as exc:
            seen.append(str(exc))

    group.ack_then(_ack(1), None, then)
    assert seen == ["database gone"]


def test_a_batch_never_exceeds_max_batch() -> None:
    store = FakeStore(delay=0.05)
    group = AckGroup(store.one, store.many, max_batch=3)
    _run_concurrently(group, list(range(1, 13)))
    assert max(len(ids) for _, ids in store.commits) <= 3
    assert sorted(i for _, ids in store.commits for i in ids) == list(range(1, 13))


def test_a_failed_batch_is_retried_ack_by_ack() -> None:
    store = FakeStore(delay=0.03, fail_many=True)
    group = AckGroup(store.one, store.many)
    results = _run_concurrently(group, list(range(1, 9)))
    assert results == {i: w.Acked(i, "succeeded") for i in range(1, 9)}
    assert all(kind == "one" for kind, _ in store.commits)


def test_an_error_reaches_only_its_own_caller() -> None:
    def one(op: w.Ack) -> w.Acked:
        if op.job_id == 2:
            raise ValueError("no")
        return w.Acked(op.job_id, "succeeded")

    group = AckGroup(one, lambda op, tags: (_ for _ in ()).throw(RuntimeError("x")))
    assert group.ack(_ack(1)) == w.Acked(1, "succeeded")
    with pytest.raises(ValueError):
        group.ack(_ack(2))
    assert group.ack(_ack(3)) == w.Acked(3, "succeeded")  # the group is not wedged by an error


# --- on PostgreSQL ----------------------------------------------------------------------------------

registry = Registry()
GATE = threading.Event()


@registry.kind("ag_echo", queue="ag")
def ag_echo(ctx, input):
    return {"n": input["n"], "attempt": ctx.attempt}


@registry.kind("ag_nap", queue="ag")
def ag_nap(ctx, input):
    time.sleep(0.003)
    return input["n"]


@registry.kind("ag_gated", queue="ag")
def ag_gated(ctx, input):
    GATE.wait(10)
    return {"n": input["n"]}


SLOW_STARTED = threading.Event()


@registry.kind("ag_slow", queue="ag")
def ag_slow(ctx, input):
    SLOW_STARTED.set()
    time.sleep(input["s"])
    return input["n"]


def _worker(url: str, limit: int, **kw) -> Worker:
    cfg = WorkerConfig(
        queues=(QueueConfig("ag", QueueOpts(limit_min=limit, limit_max=limit)),),
        busy_poll=0.005,
        poll_interval=0.05,
        sweep_interval=0.2,
        **kw,
    )
    return Worker(url, registry, cfg)


def test_a_drain_groups_acks_and_every_job_keeps_its_own_result(db_url: str) -> None:
    n = 300
    with Client(db_url) as client:
        ids = [client.enqueue("ag", "ag_echo", {"n": i}).id for i in range(n)]
        worker = _worker(db_url, 10).start()
        try:
            deadline = time.monotonic() + 60
            with psycopg.connect(db_url, autocommit=True) as pg:
                while time.monotonic() < deadline:
                    done = pg.execute("SELECT count(*) FROM belay_jobs WHERE state = 'succeeded'").fetchone()[0]
                    if done == n:
                        break
                    time.sleep(0.05)
                assert done == n
                rows = pg.execute("SELECT id, lease_until, leased_by FROM belay_jobs ORDER BY id").fetchall()
            assert all(r[1] is None and r[2] is None for r in rows), "a grouped ack left a lease behind"
            for i, job_id in enumerate(ids):
                job = client.job(job_id)
                assert result_value(job) == {"n": i, "attempt": 1}
            acks = sum(p.acks.acks for p in worker.producers.values())
            commits = sum(p.acks.commits for p in worker.producers.values())
        finally:
            worker.stop(grace=5)
    assert acks == n
    assert commits < n, f"{commits} ack commits for {n} jobs: nothing was grouped"
    print(f"{n} jobs acked in {commits} commits ({commits / n:.2f} per job)")


@pytest.mark.parametrize("order", ["fast_then_slow", "slow_then_fast"])
def test_a_long_job_claimed_by_a_group_holds_up_neither_the_next_job_nor_an_ack(db_url: str, order: str) -> None:
    """Issue 33: the jobs an ack group claims run on its leader's thread one after another (no thread woken
    per job); one of them may be long. Two fast jobs fill the queue's two slots; their grouped ack claims
    a fast and a slow job (priorities set the order), deferred on the leader's thread. Whichever runs first,
    the fast job must succeed while the slow one still runs: run on another thread (the watchdog hands it
    off) when it waits behind the slow one, or its ack committed (the watchdog leads it) when it ran first
    and its thread went on to the slow one."""
    SLOW_STARTED.clear()
    slow_priority, fast_priority = (2, 1) if order == "fast_then_slow" else (1, 2)
    with Client(db_url) as client:
        for i in range(2):
            client.enqueue("ag", "ag_echo", {"n": i})
        fast = client.enqueue("ag", "ag_echo", {"n": 9}, priority=fast_priority).id
        client.enqueue("ag", "ag_slow", {"n": 8, "s": 2.0}, priority=slow_priority)
        worker = _worker(db_url, 2).start()
        try:
            assert SLOW_STARTED.wait(20)
            started = time.monotonic()
            with psycopg.connect(db_url, autocommit=True) as pg:
                while time.monotonic() - started < 1.5:
                    row = pg.execute("SELECT state FROM belay_jobs WHERE id = %s", (fast,)).fetchone()
                    if row[0] == "succeeded":
                        break
                    time.sleep(0.01)
            waited = time.monotonic() - started
            assert row[0] == "succeeded", f"the fast job was {row[0]} 1.5 s into the slow one (order {order})"
            print(f"{order}: the fast job succeeded {waited * 1000:.0f} ms into the slow one")
        finally:
            worker.stop(grace=5)


def test_a_stale_ack_in_a_group_changes_nothing(db_url: str) -> None:
    """Three jobs run gated; one is reclaimed under the execution (its attempt moves on) before the gate
    opens, so its ack arrives in a group with the others' and must be fenced on its own attempt."""
    GATE.clear()
    with Client(db_url) as client:
        ids = [client.enqueue("ag", "ag_gated", {"n": i}).id for i in range(3)]
        worker = _worker(db_url, 3).start()
        try:
            with psycopg.connect(db_url, autocommit=True) as pg:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    running = pg.execute("SELECT count(*) FROM belay_jobs WHERE state = 'running'").fetchone()[0]
                    if running == 3:
                        break
                    time.sleep(0.02)
                assert running == 3
                # another node took job 0 over: attempt 2, its own lease
                pg.execute("UPDATE belay_jobs SET attempt = attempt + 1, leased_by = 'other' WHERE id = %s", (ids[0],))
                GATE.set()
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    done = pg.execute(
                        "SELECT count(*) FROM belay_jobs WHERE state = 'succeeded' AND id = ANY(%s)", (ids[1:],)
                    ).fetchone()[0]
                    if done == 2:
                        break
                    time.sleep(0.02)
                row = pg.execute("SELECT state, attempt, leased_by FROM belay_jobs WHERE id = %s", (ids[0],)).fetchone()
            assert done == 2
            assert row == ("running", 2, "other"), f"the stale ack of attempt 1 wrote the row: {row}"
            assert worker.stale_acks == 1
        finally:
            GATE.set()
            worker.stop(grace=5)


def test_grouped_acks_claim_the_slots_they_free_and_never_past_the_limit(db_url: str) -> None:
    """AckClaim refills a group's slots in the ack's transaction: the database, sampled through the drain,
    never shows the node holding more leases than its limit, and every job runs."""
    n, limit = 400, 8
    with Client(db_url) as client:
        client.enqueue_many([JobSpec("ag", "ag_nap", {"n": i}) for i in range(n)])
        worker = _worker(db_url, limit, node="ag-node").start()
        peak, samples = 0, 0
        try:
            with psycopg.connect(db_url, autocommit=True) as pg:
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline:
                    held, done = pg.execute(
                        "SELECT count(*) FILTER (WHERE state = 'running' AND leased_by = 'ag-node'), "
                        "count(*) FILTER (WHERE state = 'succeeded') FROM belay_jobs"
                    ).fetchone()
                    peak, samples = max(peak, held), samples + 1
                    if done == n:
                        break
                    time.sleep(0.002)
            assert done == n
        finally:
            worker.stop(grace=5)
    assert samples > 20
    assert peak <= limit, f"the node held {peak} leases at limit {limit}"
