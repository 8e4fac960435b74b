"""Every documented runtime duty observed (spec/belay-operations.txt; wire contract §6, §8.4, §8.6).

Each test fails when its duty is skipped, bounded wrongly, or done only under some other condition:
lease renewal every ttl/3 (a job longer than the ttl beside a node whose clock runs ahead finishes on
attempt 1), a lost lease stopping the local execution at its next step boundary (whoever claimed the job
since, this node included), the sweeper's duties — reclaim, the `$children` reconciler, crons, prune —
on every pass, the chunk gather window and its clamp to half the lease ttl, adaptive limits doubling
between min and max and decaying back, the busy and idle poll intervals, and the shutdown grace.

Workers run in-process with real threads against a fresh database per test; what job code runs is
recorded in `duty_exec` on autocommit connections of its own (never inside a Belay transaction).
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from impl.client import Client
from impl.runtime import QueueConfig, Worker, WorkerConfig, utc_now
from impl.store import PgStore
from impl.testing import wait_for as _wait_for
from impl.worker import JobContext, Registry
from model import ops
from model import worker_ops as w
from model.cron import CronDef
from model.queues import QueueOpts

Q = "duty"
NO_BACKOFF = w.Backoff(base_s=0, factor=1, max_s=0)
FAST = {"busy_poll": 0.01, "poll_interval": 0.05, "sweep_interval": 0.05}

registry = Registry()
_URL: dict[str, str] = {}


def record(job_id: int, attempt: int, what: str) -> None:
    with psycopg.connect(_URL["url"], autocommit=True) as c:
        c.execute(
            "INSERT INTO duty_exec (job_id, attempt, what, at) VALUES (%s, %s, %s, clock_timestamp())",
            (job_id, attempt, what),
        )


def gate_open(name: str) -> bool:
    with psycopg.connect(_URL["url"], autocommit=True) as c:
        return c.execute("SELECT 1 FROM duty_gate WHERE name IN (%s, '*')", (name,)).fetchone() is not None


def wait_gate(ctx: JobContext, name: str) -> None:
    seen = False
    deadline = time.monotonic() + 30
    while not gate_open(name):
        if ctx.lost.is_set() and not seen:
            seen = True
            record(ctx.id, ctx.attempt, "lost_seen")
        if time.monotonic() > deadline:
            raise TimeoutError(name)
        time.sleep(0.01)


@registry.kind("slow", queue=Q)
def slow(ctx: JobContext, input: dict) -> str:
    record(ctx.id, ctx.attempt, "body")
    time.sleep(input["s"])
    return "done"


@registry.kind("two_steps", queue=Q)
def two_steps(ctx: JobContext, input: dict) -> str:
    """Step a blocks at gate a:<attempt>; step b follows — the boundary a lost lease must stop at."""
    try:

        def a() -> str:
            record(ctx.id, ctx.attempt, "step:a")
            wait_gate(ctx, f"a:{ctx.attempt}")
            return "A"

        ctx.step("a", a)
        ctx.step("b", lambda: record(ctx.id, ctx.attempt, "step:b") or "B")
        return "both"
    finally:
        record(ctx.id, ctx.attempt, "end")


@registry.kind("batch", queue=Q, chunk={"size": 10, "gather_ms": 60_000})
def batch(contexts: list[JobContext]) -> dict:
    return {c.id: len(contexts) for c in contexts}


@registry.kind("short_batch", queue=Q, chunk={"size": 10, "gather_ms": 400})
def short_batch(contexts: list[JobContext]) -> dict:
    return {c.id: len(contexts) for c in contexts}


@registry.kind("nap", queue=Q)
def nap(ctx: JobContext, input: dict) -> int:
    time.sleep(input["s"])
    return 1


# --- fixtures -------------------------------------------------------------------------------------------


@pytest.fixture
def db(db_url: str) -> str:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(
            "CREATE TABLE duty_exec (id bigserial PRIMARY KEY, job_id bigint, attempt int, what text, at timestamptz)"
        )
        c.execute("CREATE TABLE duty_gate (name text PRIMARY KEY)")
    _URL["url"] = db_url
    yield db_url
    try:
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("INSERT INTO duty_gate VALUES ('*') ON CONFLICT DO NOTHING")
    except psycopg.Error:
        pass


@pytest.fixture
def pg(db: str):
    with psycopg.connect(db, autocommit=True) as c:
        yield c


@pytest.fixture
def workers(db: str):
    started: list[Worker] = []

    def start(
        *,
        limit: tuple[int, int] = (4, 4),
        reg: Registry = registry,
        queues: tuple | None = None,
        clock: Callable[[], datetime] = utc_now,
        telemetry: tuple = (),
        go: bool = True,
        **config: Any,
    ) -> Worker:
        config = {**FAST, **config}
        if queues is None:
            queues = (QueueConfig(Q, QueueOpts(limit_min=limit[0], limit_max=limit[1])),)
        worker = Worker(db, reg, WorkerConfig(queues=queues, **config), clock=clock, telemetry=telemetry)
        started.append(worker)
        return worker.start() if go else worker

    yield start
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("INSERT INTO duty_gate VALUES ('*') ON CONFLICT DO NOTHING")
    for worker in started:
        if not worker.stopped.is_set():
            worker.stop(grace=5)


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.01) -> Any:
    return _wait_for(condition, timeout, what, interval=interval)


def row(pg: psycopg.Connection, job_id: int) -> tuple:
    return pg.execute("SELECT state, attempt, errors, lease_until FROM belay_jobs WHERE id = %s", (job_id,)).fetchone()


def execs(pg: psycopg.Connection, job_id: int, what: str, attempt: int | None = None) -> int:
    return pg.execute(
        "SELECT count(*) FROM duty_exec WHERE job_id = %s AND what = %s AND (%s::int IS NULL OR attempt = %s)",
        (job_id, what, attempt, attempt),
    ).fetchone()[0]


def open_gate(pg: psycopg.Connection, name: str) -> None:
    pg.execute("INSERT INTO duty_gate VALUES (%s) ON CONFLICT DO NOTHING", (name,))


class Recording:
    """A store wrapper that records (monotonic time, operation) for every op a component applies."""

    def __init__(self, store: PgStore) -> None:
        self.inner = store
        self.calls: list[tuple[float, Any]] = []
        self.pool = store.pool
        self.schema = store.schema

    def apply(self, op: Any, conn: Any = None) -> Any:
        self.calls.append((time.monotonic(), op))
        return self.inner.apply(op, conn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# --- renewal cadence (§6: every ttl/3) ------------------------------------------------------------------


def test_a_job_longer_than_the_lease_ttl_beside_a_node_whose_clock_runs_0_4_s_ahead_finishes_on_attempt_1(
    db, pg, workers
):
    ttl, skew = 1.2, 0.4
    workers(
        reg=Registry(),
        queues=(),
        lease_ttl=ttl,
        reclaim_backoff=NO_BACKOFF,
        clock=lambda: utc_now() + timedelta(seconds=skew),
    )  # a sweeper ahead, within the tolerance
    workers(lease_ttl=ttl, node="runner")
    with Client(db) as client:
        job_id = client.enqueue(Q, "slow", {"s": 2.2 * ttl}).id
    leases = set()

    def finished() -> bool:
        state, _, _, lease_until = row(pg, job_id)
        if lease_until is not None:
            leases.add(lease_until)
        return (state != "running" and state != "ready") or execs(pg, job_id, "body") > 1

    wait_for(finished, 20, "the slow job to end", interval=0.02)
    state, attempt, errors, _ = row(pg, job_id)
    assert (state, attempt, errors) == ("succeeded", 1, []), (
        f"the lease was lost while the job ran (renewal too slow for a {skew}s skew): {state} {attempt} {errors}"
    )
    assert execs(pg, job_id, "body") == 1
    # 2.2 ttl of running at one renewal per ttl/3: at least 5 renewals seen (6 expected), each a new lease.
    assert len(leases) >= 5, f"only {len(leases)} distinct leases over 2.2 ttl: renewal is not every ttl/3"


# --- a lost lease stops the local execution (§6) --------------------------------------------------------


@pytest.mark.parametrize("claimer", ["another node", "the same node"])
def test_a_lost_lease_stops_the_local_execution_at_its_next_step_boundary(db, pg, workers, claimer):
    if claimer == "another node":
        # One slot (held by the zombie): only the other node can claim attempt 2; renewals every 0.5 s
        # tell this node its lease is gone.
        worker = workers(lease_ttl=1.5, limit=(1, 1), node="here")
        ahead = timedelta(seconds=2)
    else:
        # Renewals every 10 s: this node claims attempt 2 long before its renewer could notice anything.
        worker = workers(lease_ttl=30, node="here")
        ahead = timedelta(seconds=31)
    with Client(db) as client:
        job_id = client.enqueue(Q, "two_steps", {}).id
    wait_for(lambda: execs(pg, job_id, "step:a", 1), 10, "attempt 1 to run step a")
    with PgStore(db) as store:  # a sweeper whose clock runs ahead reclaims the lease
        assert store.apply(w.Reclaim(utc_now() + ahead, NO_BACKOFF)).retried == (job_id,)
        if claimer == "another node":
            [other] = store.apply(w.Claim(utc_now() + ahead, Q, "elsewhere", 1, timedelta(hours=1))).jobs
            assert other.attempt == 2
    if claimer == "the same node":
        pg.execute("UPDATE belay_jobs SET ready_at = now() WHERE id = %s", (job_id,))  # ready by our clock
        wait_for(lambda: execs(pg, job_id, "step:a", 2), 10, "this node to claim attempt 2")
    wait_for(
        lambda: execs(pg, job_id, "lost_seen", 1),
        5,
        f"the execution of attempt 1 to be told its lease is lost ({claimer} claimed attempt 2)",
    )
    open_gate(pg, "a:1")
    wait_for(lambda: execs(pg, job_id, "end", 1), 10, "the zombie attempt 1 to end")
    assert execs(pg, job_id, "step:b", 1) == 0, "the zombie ran a step after its lease was lost"
    if claimer == "the same node":
        open_gate(pg, "a:2")
        wait_for(lambda: row(pg, job_id)[0] == "succeeded", 10, "attempt 2 to succeed")
        assert (execs(pg, job_id, "step:b"), row(pg, job_id)[1]) == (1, 2)
    assert worker.stale_acks == 0, "the zombie stopped at the boundary: it never acked"


# --- the sweeper: every duty on every pass ----------------------------------------------------------------


CRON = CronDef("every-minute", "* * * * *", "nap", {"s": 0}, queue="nowhere")


def test_every_sweeper_pass_reclaims_reconciles_fires_crons_and_prunes_whether_or_not_it_reclaimed(db, pg):
    worker = Worker(db, Registry(), WorkerConfig(queues=(), crons=(CRON,), lease_ttl=1))
    try:
        worker.store = recording = Recording(worker.store)
        now = utc_now()
        since = worker.sweep_once(now - timedelta(minutes=1))  # an empty database: nothing to reclaim
        with PgStore(db) as store:
            job_id = store.apply(ops.Enqueue(now, (ops.JobSpec(Q, "nap", {"s": 0}),))).ids[0]
            store.apply(w.Claim(now, Q, "dead-node", 1, timedelta(seconds=1)))
        worker.clock = lambda: utc_now() + timedelta(seconds=5)
        worker.sweep_once(since)  # this pass reclaims the dead node's job
        passes = [type(op).__name__ for _, op in recording.calls]
        assert passes == ["Reclaim", "Reconcile", "FireCrons", "Prune"] * 2, passes
        assert row(pg, job_id)[0] == "ready"
    finally:
        worker.stop(grace=0)


def test_the_children_reconciler_wakes_a_parent_whose_wake_up_was_lost_in_a_healthy_fleet(db, pg, workers):
    now = utc_now()
    with PgStore(db) as store:  # a parent parked on $children, its child done, the $children signal lost
        parent = store.apply(ops.Enqueue(now, (ops.JobSpec("parents", "p"),))).ids[0]
        store.apply(w.Claim(now, "parents", "n", 1, timedelta(minutes=5)))
        [kid] = store.apply(w.Spawn(now, parent, "kids", (ops.JobSpec("kids", "c"),))).child_ids
        assert isinstance(store.apply(w.AwaitChildren(now, parent, 1)), w.Parked)
        store.apply(w.Claim(now, "kids", "n", 1, timedelta(minutes=5)))
        store.apply(w.Ack(now, kid, 1, w.Succeed(1)))
    pg.execute(
        "UPDATE belay_jobs SET state = 'awaiting', await_scope = %s, await_name = '$children', "
        "ready_at = NULL WHERE id = %s",
        (f"job:{parent}", parent),
    )
    pg.execute("DELETE FROM belay_signals")
    assert pg.execute("SELECT count(*) FROM belay_jobs WHERE state = 'running'").fetchone()[0] == 0
    workers(reg=Registry(), queues=(), sweep_interval=0.05)  # nothing for this fleet ever to reclaim
    wait_for(lambda: row(pg, parent)[0] == "ready", 5, "the reconciler to wake the parent (R2, §8.4)")


# --- chunks: the gather window and its clamp ----------------------------------------------------------------


def test_a_partial_chunk_waits_its_gather_window_but_never_longer_than_half_the_lease_ttl(db, pg, workers):
    ttl = 1.0
    workers(lease_ttl=ttl)
    with Client(db) as client:
        clamped = client.enqueue(Q, "batch", {}).id  # gather_ms 60 s, clamped to ttl/2 = 0.5 s
        windowed = client.enqueue(Q, "short_batch", {}).id  # gather_ms 0.4 s < ttl/2: honoured
    wait_for(
        lambda: {row(pg, clamped)[0], row(pg, windowed)[0]} == {"succeeded"},
        5,
        "both partial chunks to be dispatched (the 60 s window clamped to half the 1 s ttl)",
    )
    for job_id, low, high in ((clamped, ttl / 2, ttl / 2 + 0.4), (windowed, 0.4, 0.4 + 0.4)):
        started, finished, attempt = pg.execute(
            "SELECT started_at, finished_at, attempt FROM belay_jobs WHERE id = %s", (job_id,)
        ).fetchone()
        held = (finished - started).total_seconds()
        assert low - 0.05 <= held <= high, f"job {job_id} gathered {held:.3f}s (expected {low}..{high})"
        assert attempt == 1


def test_a_partial_chunk_waiting_its_gather_window_at_shutdown_runs_within_the_grace(db, pg, workers):
    """SIGTERM drains what the node holds: jobs it claimed and is gathering into a chunk are leased to it,
    so stop() dispatches them at once instead of leaving them to expire."""
    worker = workers(lease_ttl=30)  # `batch` gathers 60 s, clamped to 15 s
    with Client(db) as client:
        ids = client.enqueue_many([ops.JobSpec(Q, "batch") for _ in range(3)]).ids
    wait_for(
        lambda: pg.execute("SELECT count(*) FROM belay_jobs WHERE state = 'running'").fetchone()[0] == 3,
        5,
        "the three jobs to be claimed into a partial chunk",
    )
    started = time.monotonic()
    assert worker.stop(grace=5), "the node did not drain: its gathered jobs never ran"
    assert time.monotonic() - started < 5
    states = {r[0] for r in pg.execute("SELECT state FROM belay_jobs WHERE id = ANY(%s)", (list(ids),))}
    assert states == {"succeeded"}


def test_a_full_chunk_dispatches_at_once(db, pg, workers):
    workers(lease_ttl=30, limit=(10, 10))
    with Client(db) as client:
        ids = client.enqueue_many([ops.JobSpec(Q, "batch") for _ in range(10)]).ids
    wait_for(
        lambda: pg.execute("SELECT count(*) FROM belay_jobs WHERE state = 'succeeded'").fetchone()[0] == 10,
        5,
        "a full chunk of 10 to run without waiting for its 60 s (clamped 15 s) window",
    )
    results = {
        r[0] for r in pg.execute("SELECT convert_from(result, 'UTF8') FROM belay_jobs WHERE id = ANY(%s)", (list(ids),))
    }
    assert results == {"10"}, "one invocation for the whole chunk"


class Timeline:
    """A store wrapper recording (start, end, thread name, op, result) of every call."""

    def __init__(self, store: PgStore) -> None:
        self.inner = store
        self.calls: list[tuple[float, float, str, Any, Any]] = []

    def apply(self, op: Any, conn: Any = None) -> Any:
        started = time.monotonic()
        result = self.inner.apply(op, conn)
        self.calls.append((started, time.monotonic(), threading.current_thread().name, op, result))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_chunk_that_acked_claims_the_next_jobs_for_its_own_slots_and_never_past_the_limit(db, pg, workers):
    limit = 20
    worker = workers(limit=(limit, limit), go=False)
    worker.store = timeline = Timeline(worker.store)
    worker.start()
    with Client(db) as client:
        client.enqueue_many([ops.JobSpec(Q, "batch") for _ in range(400)])
    held, done = [], 0
    deadline = time.monotonic() + 30
    while done < 400 and time.monotonic() < deadline:  # the leases the database shows, sampled throughout
        n, done = pg.execute(
            "SELECT count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = 'succeeded') "
            "FROM belay_jobs"
        ).fetchone()
        held.append(n)
    assert done == 400, f"{done} of 400 chunked jobs succeeded"
    assert max(held) <= limit, f"the node held {max(held)} leases at once (limit {limit}): {held}"
    calls = sorted(timeline.calls)
    claims = [(a, b, th, len(r.jobs)) for a, b, th, op, r in calls if isinstance(op, w.Claim)]
    # a chunk whose every job succeeded claims with its acks, in one commit (AckClaim, issue 33)
    claims += [(a, b, th, len(r.claimed.jobs)) for a, b, th, op, r in calls if isinstance(op, w.AckClaim)]
    refills = [c for c in claims if not c[2].startswith("belay-producer") and c[3]]
    assert refills, f"no claim came from a chunk execution: {[(th, n) for _, _, th, n in claims]}"


# --- adaptive concurrency ---------------------------------------------------------------------------------------


def test_the_adaptive_limit_doubles_toward_max_on_saturated_rounds_and_decays_to_min_when_idle(db, pg, workers):
    events: list[int] = []
    workers(limit=(1, 3), telemetry=(lambda e, m: events.append(m["limit"]) if e == "queue.scale" else None,))
    with Client(db) as client:
        client.enqueue_many([ops.JobSpec(Q, "nap", {"s": 0.2}) for _ in range(12)])
    wait_for(
        lambda: pg.execute("SELECT count(*) FROM belay_jobs WHERE state = 'succeeded'").fetchone()[0] == 12,
        20,
        "the 12 jobs to succeed",
    )
    wait_for(lambda: events and events[-1] == 1, 5, "the limit to decay back to its min when idle")
    assert all(1 <= limit <= 3 for limit in events), f"the limit left [min, max] = [1, 3]: {events}"
    rises = [b for a, b in zip([1, *events], events, strict=False) if b > a]
    assert rises[:2] == [2, 3], f"saturated rounds double the limit toward max, clamped: {events}"
    falls = [(a, b) for a, b in zip([1, *events], events, strict=False) if b < a]
    assert falls and all(b == max(a // 2, 1) for a, b in falls), f"idle rounds halve the limit toward min: {events}"


# --- poll intervals ---------------------------------------------------------------------------------------------


def test_an_idle_producer_backs_off_to_the_poll_interval_and_finds_new_work_within_it(db, pg, workers):
    worker = workers(busy_poll=0.01, poll_interval=0.2, go=False)
    worker.store = recording = Recording(worker.store)
    worker.start()
    time.sleep(2.5)  # idle: claims back off 0.01 → 0.02 → ... → capped at 0.2 s
    claims = [t for t, op in recording.calls if isinstance(op, w.Claim)]
    gaps = [b - a for a, b in itertools.pairwise(claims)]
    settled = gaps[-6:]
    assert 0.15 <= statistics.median(settled) <= 0.3, f"an idle producer polls every poll_interval: {gaps}"
    # Uncapped doubling would make about 9 claims in 2.5 s; capped at 0.2 s, about 15.
    assert len(claims) >= 12, f"only {len(claims)} idle claims in 2.5 s: the idle interval is not capped: {gaps}"
    # Enqueued by another process (no local poke, no pg_notify): found within one idle poll interval.
    with Client(db) as client:
        enqueued = time.monotonic()
        job_id = client.enqueue(Q, "nap", {"s": 0}).id
    wait_for(lambda: row(pg, job_id)[0] == "succeeded", 2, "the job to be found by the idle poll")
    found = next(t for t, op in recording.calls if isinstance(op, w.Claim) and t > enqueued)
    assert found - enqueued <= 0.2 + 0.25, "an enqueue is found within one idle poll interval"


def test_a_producer_that_just_claimed_work_polls_at_the_busy_cadence(db, pg, workers):
    workers(busy_poll=0.01, poll_interval=1.0, limit=(8, 8))
    ids = []
    with Client(db) as client:  # no local poke, no pg_notify listener: only polling finds these
        for _ in range(15):
            ids.append(client.enqueue(Q, "nap", {"s": 0}).id)
            time.sleep(0.03)
    wait_for(
        lambda: (
            pg.execute("SELECT count(*) FROM belay_jobs WHERE id = ANY(%s) AND state = 'succeeded'", (ids,)).fetchone()[
                0
            ]
            == 15
        ),
        20,
        "the 15 jobs to succeed",
    )
    waits = [
        r[0]
        for r in pg.execute(
            "SELECT extract(epoch FROM started_at - inserted_at) FROM belay_jobs WHERE id = ANY(%s) ORDER BY id", (ids,)
        )
    ]
    # The first job may wait up to the idle poll interval (1 s); the rest arrive while the producer is
    # busy, every 30 ms, and are found within a few busy polls (0.01 s doubling), never a full idle interval.
    assert statistics.median(waits[1:]) < 0.25, f"claim latencies while busy: {waits}"


# --- the shutdown grace ----------------------------------------------------------------------------------------


def test_stop_waits_for_running_jobs_up_to_the_grace_and_no_longer(db, pg, workers):
    worker = workers(shutdown_grace=0.6)
    with Client(db) as client:
        quick = client.enqueue(Q, "nap", {"s": 0.2}).id
        wait_for(lambda: row(pg, quick)[0] == "running", 5, "the quick job to start")
        started = time.monotonic()
        assert worker.stop() is True, "a job shorter than the grace drains"
        assert time.monotonic() - started < 0.6
        assert row(pg, quick)[0] == "succeeded"

    worker = workers(shutdown_grace=0.6)
    with Client(db) as client:
        long = client.enqueue(Q, "nap", {"s": 1.5}).id
        wait_for(lambda: row(pg, long)[0] == "running", 5, "the long job to start")
        started = time.monotonic()
        assert worker.stop() is False, "a job outliving the grace is abandoned"
        elapsed = time.monotonic() - started
    assert 0.6 <= elapsed < 0.6 + 0.8, f"stop() returned after {elapsed:.2f}s with a 0.6 s grace"
    assert row(pg, long)[0] == "running", "abandoned, not acked: its lease will expire"
