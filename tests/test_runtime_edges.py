"""Runtime edges the runtime suites did not pin down (found by planting mutants: the `runtime_*`
mutants of properties/mutants/hunts.py).

Each test names the contract text it holds the runtime to: docs/sdk-guide.md §7 (transient errors),
docs/connections.md (the default store-call deadline), spec/belay-operations.txt and the wire contract
§6 (a lost lease stops the execution at its next step boundary; acks fenced by attempt).
Store faults are real where that is cheap; retries run on an injected clock and sleep; the runtime's
pieces are driven directly (renew_once, execute_chunk) with no worker threads and no timing.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors

from impl.runtime import QueueConfig, Worker, WorkerConfig, utc_now
from impl.runtime.faults import RetryPolicy, is_transient, with_retries
from impl.store import PgStore
from impl.worker import JobContext, Registry
from model import ops
from model import worker_ops as w
from model.queues import QueueOpts
from model.rows import Job
from tests.jobrows import EMPTY
from tests.test_faults import FakeTime

Q = "edges"
NO_BACKOFF = w.Backoff(base_s=0, factor=1, max_s=0)


# --- sdk-guide §7: transient faults -------------------------------------------------------------------


def test_a_lock_timeout_is_transient_and_retried(db_url):
    """`55P03` lock_not_available is transient (sdk-guide §7): a store call that hit a role's lock_timeout
    behind a long lock is retried, not raised as the job's or the node's permanent error."""
    with psycopg.connect(db_url, autocommit=True) as holder, psycopg.connect(db_url, autocommit=True) as waiter:
        holder.execute("CREATE TABLE edge_lock (id int)")
        waiter.execute("SET lock_timeout = '20ms'")
        with holder.transaction():
            holder.execute("LOCK TABLE edge_lock IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(errors.LockNotAvailable) as info:
                waiter.execute("SELECT * FROM edge_lock")
        assert info.value.sqlstate == "55P03"
        assert is_transient(info.value), "lock_not_available (55P03) must be retried (sdk-guide §7)"
        t = FakeTime()
        faults = [info.value]

        def fn() -> str:
            if faults:
                raise faults.pop()
            return "ok"

        assert with_retries(fn, RetryPolicy(0.05, 0.4, 5.0), sleep=t.sleep, clock=t.clock) == "ok"
        assert t.sleeps == [0.05]


def test_a_client_side_error_without_a_sqlstate_is_not_transient(db_url):
    """Only driver-level socket errors are transient without a SQLSTATE (sdk-guide §7): a programming
    error the driver raises before sending anything (no SQLSTATE) is raised at once, never retried for
    max_elapsed — "a false positive turns a fatal error into an endless retry"."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        with pytest.raises(psycopg.ProgrammingError) as info:
            conn.execute("SELECT %s, %s", (1,))  # two placeholders, one parameter
    assert info.value.sqlstate is None
    assert not is_transient(info.value)
    interface = psycopg.InterfaceError("bad connection string option")
    assert not is_transient(interface)
    t = FakeTime()
    calls = []

    def fn() -> None:
        calls.append(1)
        raise info.value

    with pytest.raises(psycopg.ProgrammingError):
        with_retries(fn, RetryPolicy(0.05, 0.4, 5.0), sleep=t.sleep, clock=t.clock)
    assert (len(calls), t.sleeps) == (1, []), "a permanent fault is raised at once, without sleeping"


def test_the_retry_backoff_is_jittered_not_lockstep(monkeypatch):
    """Capped, *jittered* exponential backoff (sdk-guide §7, RetryPolicy: full jitter): nodes that lost the
    same database retry at spread-out times, not all at the same nominal delays."""
    random.seed(20240)
    policy = RetryPolicy(initial=0.05, maximum=0.4, max_elapsed=60.0)
    t = FakeTime()
    faults = [errors.AdminShutdown("restart")] * 12

    def fn() -> str:
        if faults:
            raise faults.pop()
        return "ok"

    assert with_retries(fn, policy, sleep=t.sleep, clock=t.clock) == "ok"
    nominal = [min(policy.initial * 2**i, policy.maximum) for i in range(len(t.sleeps))]
    assert all(0 <= s <= cap for s, cap in zip(t.sleeps, nominal, strict=True))
    jittered = [s for s, cap in zip(t.sleeps[1:], nominal[1:], strict=True) if s < cap]
    assert len(jittered) >= len(t.sleeps) - 2, f"the retries slept their nominal delays (no jitter): {t.sleeps}"


# --- docs/connections.md: the default store-call deadline ------------------------------------------------


@pytest.mark.parametrize("ttl, expected", [(1.0, 2.0), (4.0, 2.0), (30.0, 7.5)])
def test_the_default_call_deadline_is_a_quarter_of_the_ttl_but_never_under_two_seconds(db_url, ttl, expected):
    """`WorkerConfig.call_timeout` defaults to max(lease_ttl / 4, 2 s) (docs/connections.md): a short ttl
    must not cut ordinary store calls (a claim, a renewal) after a quarter of a second."""
    worker = Worker(db_url, Registry(), WorkerConfig(queues=(), lease_ttl=ttl))
    try:
        assert worker.store.call_timeout == expected
    finally:
        worker.store.close()


# --- §6: a lost lease stops the execution, also after an await_children that did not park ------------


def _job(job_id: int, attempt: int = 1, worker: str = "k") -> Job:
    now = utc_now()
    return Job(
        id=job_id,
        queue=Q,
        worker=worker,
        input=None,
        meta=None,
        state="running",
        priority=0,
        attempt=attempt,
        max_attempts=5,
        ready_at=None,
        inserted_at=now,
        started_at=now,
        finished_at=None,
        **EMPTY,
    )


class ChildrenAllDone:
    """A job-side store whose children are all terminal: await_children returns without parking."""

    def apply(self, op: Any, conn: Any = None) -> Any:
        if isinstance(op, w.Preflight):
            return w.BudgetOk()
        if isinstance(op, w.AwaitChildren):
            return w.ChildrenDone(())
        raise AssertionError(f"unexpected {op!r}")


class LeaseGone:
    """The node's store: every renewal reports every lease lost (another node reclaimed them)."""

    def __init__(self) -> None:
        self.renewals: list[w.Renew] = []

    def apply(self, op: Any, conn: Any = None) -> Any:
        assert isinstance(op, w.Renew), op
        self.renewals.append(op)
        return w.Renewed((), op.job_ids)


def test_a_lease_lost_after_await_children_returned_without_parking_is_flagged_to_the_execution(db_url):
    """await_children whose children are all done returns and the attempt runs on under its lease: it
    gave nothing up, so a renewal that later finds that lease gone must flag the execution (wire contract
    §6: it stops at its next step boundary) — not take the loss for the attempt's own release."""
    worker = Worker(db_url, Registry(), WorkerConfig(queues=(QueueConfig(Q),), node="edge-node"))
    real = worker.store
    try:
        ctx = JobContext(_job(7), ChildrenAllDone(), utc_now)
        assert ctx.await_children() == ()
        worker.producers[Q].running[ctx.id] = ctx  # the execution runs on
        worker.store = fake = LeaseGone()
        assert worker.renew_once() == (7,), "the renewer did not report the lost lease of a running attempt"
        assert fake.renewals and fake.renewals[0].job_ids == (7,)
        assert ctx.lost.is_set(), "the execution was not told its lease is lost"
    finally:
        real.close()


# --- §6/§7: a chunk acks each job with its own attempt ---------------------------------------------------------


def test_a_chunk_of_jobs_on_different_attempts_acks_each_on_its_own_attempt(db_url):
    """A chunk gathers whatever the claim returned: a job on its second attempt (reclaimed after a crash)
    beside fresh ones. Each ack is fenced on its own job's attempt (§7), so every job of the chunk that
    succeeded ends succeeded — none is left running as a stale ack to be run again after its lease."""
    registry = Registry()

    @registry.kind("edge_chunk", queue=Q, chunk={"size": 10, "gather_ms": 10})
    def edge_chunk(contexts: list[JobContext]) -> dict:
        return {c.id: c.attempt for c in contexts}

    now = utc_now()
    with PgStore(db_url) as store:
        retried = store.apply(ops.Enqueue(now, (ops.JobSpec(Q, "edge_chunk"),))).ids[0]
        store.apply(w.Claim(now, Q, "crashed-node", 1, timedelta(seconds=1)))
        later = now + timedelta(seconds=5)
        assert store.apply(w.Reclaim(later, NO_BACKOFF)).retried == (retried,)
        fresh = store.apply(ops.Enqueue(later, tuple(ops.JobSpec(Q, "edge_chunk") for _ in range(2)))).ids
        claimed = store.apply(w.Claim(later, Q, "edge-node", 3, timedelta(minutes=5))).jobs
    assert {(j.id, j.attempt) for j in claimed} == {(retried, 2), *((i, 1) for i in fresh)}
    worker = Worker(
        db_url,
        registry,
        WorkerConfig(queues=(QueueConfig(Q, QueueOpts(limit_min=3, limit_max=3)),), node="edge-node"),
        clock=lambda: later + timedelta(seconds=1),
    )
    try:
        producer = worker.producers[Q]
        order = sorted(claimed, key=lambda j: -j.attempt)  # the retried job first in the chunk
        contexts = [JobContext(j, worker.store, worker.clock, call=worker.call) for j in order]
        with producer.lock:
            producer.running.update({c.id: c for c in contexts})
        worker.execute_chunk(producer, registry.kinds["edge_chunk"], contexts)
        assert worker.stale_acks == 0, "an ack of the chunk was fenced out (acked on another job's attempt)"
        with psycopg.connect(db_url, autocommit=True) as pg:
            rows = dict(
                pg.execute("SELECT id, state FROM belay_jobs WHERE id = ANY(%s)", ([j.id for j in claimed],)).fetchall()
            )
        assert rows == {j.id: "succeeded" for j in claimed}, rows
        assert not producer.running
    finally:
        _stop(worker)


# --- adaptive concurrency: a busy queue is not an idle one ----------------------------------------------------


def test_a_saturated_queue_keeps_its_limit_on_rounds_that_find_no_free_slot(db_url):
    """The operations guide: "Saturated claim rounds double the limit toward max; an idle queue decays back to min"
    (spec/belay-operations.txt). A round with every slot taken claims nothing because it asks for nothing:
    that queue is busy, not idle, and its limit must hold — only a round that claimed nothing with no job
    running decays it."""
    worker = Worker(db_url, Registry(), WorkerConfig(queues=(QueueConfig(Q, QueueOpts(limit_min=1, limit_max=4)),)))
    try:
        producer = worker.producers[Q]
        producer.limit = 4
        for i in range(4):
            producer.running[100 + i] = JobContext(_job(100 + i), None, utc_now)
        assert producer.free() == 0
        producer.adapt(0, 0)  # the producer's round: no free slot, so no demand and nothing claimed
        assert producer.limit == 4, f"a saturated queue's limit decayed to {producer.limit}"
        producer.running.clear()
        producer.adapt(0, 4)  # idle: it asked for work, found none, runs nothing
        assert producer.limit == 2
    finally:
        worker.store.close()


# --- Shutdown: SIGTERM, SIGINT and SIGHUP all drain ---------------------------------------------------------


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_termination_turns_each_shutdown_signal_into_a_drain(name):
    """impl/runtime/termination.py: SIGTERM, SIGINT and SIGHUP are recorded for the main thread, which then
    stops the node with its grace (operations guide, Shutdown) — none keeps its default action, which for
    SIGHUP (a closed terminal, a supervisor's reload) kills the process with its jobs mid-run."""
    import os
    import signal

    from impl.runtime.termination import Termination

    signum = getattr(signal, name)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        signal.signal(signum, lambda *_: pytest.fail(f"{name} reached a handler Termination should have replaced"))
        term = Termination()
        os.kill(os.getpid(), signum)  # delivered to the main thread before os.kill returns to Python code
        assert term.wait(poll=0.01) == signum
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


# --- §8.2: a re-run that only replays the journal does not succeed past a budget crossing ---------------------


def test_a_rerun_that_only_replays_its_journal_fails_budget_exceeded_instead_of_succeeding(db_url):
    """Attempt 1 journaled a paid step that crossed the job's budget, and its node died before acking.
    Attempt 2 replays that step from the journal (no step boundary runs: nothing is executed) and returns:
    the runtime must check durable spend before acking success (§8.2) — the job fails budget_exceeded."""
    registry = Registry()

    @registry.kind("edge_paid", queue=Q)
    def edge_paid(ctx: JobContext, input: Any) -> str:
        return ctx.step("call-model", lambda: "answer", cost=(20, 0))

    now = utc_now()
    with PgStore(db_url) as store:
        job_id = store.apply(ops.Enqueue(now, (ops.JobSpec(Q, "edge_paid", budget_usd_micros=10),))).ids[0]
        store.apply(w.Claim(now, Q, "dead-node", 1, timedelta(seconds=1)))
        assert store.apply(w.RecordStep(now, job_id, "call-model", "answer", 20, 0)).over_budget  # then it died
        later = now + timedelta(seconds=5)
        assert store.apply(w.Reclaim(later, NO_BACKOFF)).retried == (job_id,)
        [job] = store.apply(w.Claim(later, Q, "edge-node", 1, timedelta(minutes=5))).jobs
    assert job.attempt == 2
    worker = Worker(db_url, registry, WorkerConfig(queues=(QueueConfig(Q),), node="edge-node"), clock=lambda: later)
    try:
        producer = worker.producers[Q]
        ctx = JobContext(job, worker.store, worker.clock, call=worker.call)
        producer.running[ctx.id] = ctx
        worker.execute(producer, ctx)  # a lone ack commits on this thread
        assert not producer.running
        with psycopg.connect(db_url, autocommit=True) as pg:
            state, errs = pg.execute("SELECT state, errors FROM belay_jobs WHERE id = %s", (job_id,)).fetchone()
        assert state == "failed", f"the replayed job ended {state} past its budget (spent 20 of 10 µ$)"
        assert errs[-1]["error"] == "budget_exceeded", errs
    finally:
        _stop(worker)


def _stop(worker: Worker) -> None:
    """End a worker the tests drove by hand: its producers' pools and its store."""
    worker.stopping.set()
    worker.stopped.set()
    for p in worker.producers.values():
        p.pool.shutdown(wait=True)
    worker.store.close()
