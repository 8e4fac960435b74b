"""The worker runtime on real PostgreSQL (spec/belay-operations.txt; wire contract §§6–9, §11).

Workers run in-process (`Worker`) or as `belay worker` subprocesses over tests/apps/runtime_app.py.
Job kinds record every execution in a side table (rt_exec) on autocommit connections of their own,
outside every Belay transaction, so the tests see what actually ran, crashes included. Tests wait on
conditions by polling the database with a deadline; a job that must hold still blocks on a gate row
(rt_gate) that the test opens. Every test gets a fresh database, and every process and Worker a test
starts is stopped by its fixtures, gates opened first so nothing outlives the test.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from impl.client import Client, result_value
from impl.provision import ClusterConfig, EmbeddedCluster
from impl.runtime import QueueConfig, Worker, WorkerConfig, default_logger, utc_now
from impl.runtime.faults import RetryPolicy
from impl.store import PgStore
from impl.store.migrate import migrate
from impl.testing import wait_for
from impl.worker import Registry
from model import ops
from model import worker_ops as w
from model.cron import CronDef
from model.envelope import decode
from model.ops import JobSpec, minute_slot
from model.queues import QueueOpts
from tests.apps import runtime_app as app

ROOT = Path(__file__).resolve().parents[1]
BELAY = Path(sys.executable).parent / "belay"
APP = "tests.apps.runtime_app"
Q = app.QUEUE


# --- waiting and reading ---------------------------------------------------------------------------


def scalar(pg: psycopg.Connection, query: str, *params: Any) -> Any:
    return pg.execute(query, params).fetchone()[0]


def job_row(pg: psycopg.Connection, job_id: int) -> dict:
    with pg.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM belay_jobs WHERE id = %s", (job_id,)).fetchone()


def state_of(pg: psycopg.Connection, job_id: int) -> str:
    return scalar(pg, "SELECT state FROM belay_jobs WHERE id = %s", job_id)


def executions(pg: psycopg.Connection, job_id: int, what: str | None = None) -> list[dict]:
    """What the job's code actually ran (rt_exec rows), in insertion order."""
    with pg.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM rt_exec WHERE job_id = %s AND (%s::text IS NULL OR what = %s) ORDER BY id",
            (job_id, what, what),
        ).fetchall()


def open_gate(pg: psycopg.Connection, name: str) -> None:
    pg.execute("INSERT INTO rt_gate (name) VALUES (%s) ON CONFLICT DO NOTHING", (name,))


def open_all_gates(url: str) -> None:
    """Release every execution blocked on a gate (teardown: nothing may outlive its test)."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=2) as c:
            c.execute("INSERT INTO rt_gate (name) VALUES ('*') ON CONFLICT DO NOTHING")
    except psycopg.Error:
        pass  # the database is gone already: so are the gates' readers


def ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


def error_names(job: Any) -> list[tuple[int, str]]:
    return [(e["attempt"], e["error"]) for e in job.errors]


# --- fixtures --------------------------------------------------------------------------------------


@pytest.fixture
def db(db_url: str) -> str:
    """The test's fresh migrated database, plus the app's side tables."""
    with psycopg.connect(db_url, autocommit=True) as c:
        app.install(c)
    return db_url


@pytest.fixture
def pg(db: str) -> psycopg.Connection:
    with psycopg.connect(db, autocommit=True) as c:
        yield c


@pytest.fixture
def client(db: str) -> Client:
    with Client(db) as c:
        yield c


FAST = {"busy_poll": 0.01, "poll_interval": 0.05, "sweep_interval": 0.1}


@pytest.fixture
def workers(db: str):
    """Start in-process Workers (fast polling by default); all are stopped at teardown."""
    started: list[tuple[str, Worker]] = []

    def start(
        url: str = db,
        registry: Registry = app.registry,
        *,
        limit: int = 4,
        clock: Callable[[], datetime] = utc_now,
        telemetry: tuple = (default_logger,),
        **config: Any,
    ) -> Worker:
        config = {**FAST, **config}
        config.setdefault("queues", (QueueConfig(Q, QueueOpts(limit_min=limit, limit_max=limit)),))
        worker = Worker(url, registry, WorkerConfig(**config), clock=clock, telemetry=telemetry)
        started.append((url, worker))
        return worker.start()

    yield start
    for url, worker in started:
        if not worker.stopped.is_set():
            open_all_gates(url)
            worker.stop(grace=10)


@dataclass
class WorkerProcess:
    node: str
    proc: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def spawn_worker(db: str, tmp_path: Path):
    """Start `belay worker` subprocesses over the test app; teardown kills any still running."""
    procs: list[WorkerProcess] = []

    def start(node: str, *, lease_ttl: float = 30, limit: int = 4, grace: float = 15) -> WorkerProcess:
        log = tmp_path / f"{node}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    str(BELAY),
                    "worker",
                    "--app",
                    APP,
                    "--queues",
                    Q,
                    "--database-url",
                    db,
                    "--node",
                    node,
                    "--lease-ttl",
                    str(lease_ttl),
                    "--limit",
                    str(limit),
                    "--shutdown-grace",
                    str(grace),
                ],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wp = WorkerProcess(node, proc, log)
        procs.append(wp)
        wait_for(lambda: proc.poll() is not None or "running queues" in wp.output(), 30, f"worker {node} to start")
        assert proc.poll() is None, f"worker {node} exited at start:\n{wp.output()}"
        return wp

    yield start
    open_all_gates(db)
    for wp in procs:
        if wp.proc.poll() is None:
            wp.proc.kill()
        wp.proc.wait(timeout=10)


# --- 1. exclusive execution ------------------------------------------------------------------------


def test_two_workers_never_run_the_same_attempt_at_once(db, pg, client, spawn_worker):
    spawn_worker("node-a", limit=6)
    spawn_worker("node-b", limit=6)
    ids = client.enqueue_many([JobSpec(Q, "interval", {"ms": 15}) for _ in range(150)]).ids

    wait_for(
        lambda: scalar(pg, "SELECT count(*) FROM belay_jobs WHERE state = 'succeeded'") == 150,
        40,
        "all 150 jobs to succeed",
    )

    runs: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    nodes = set()
    for job_id, attempt, node, started, ended in pg.execute(
        "SELECT job_id, attempt, node, started_ns, ended_ns FROM rt_exec WHERE what = 'body'"
    ):
        runs[(job_id, attempt)].append((started, ended))
        nodes.add(node)
    for key, intervals in runs.items():
        intervals.sort()
        overlapping = [(a, b) for a, b in itertools.pairwise(intervals) if b[0] < a[1]]
        assert not overlapping, f"job {key[0]} attempt {key[1]} ran concurrently: {overlapping}"
    assert sorted(runs) == [(i, 1) for i in sorted(ids)], "every job ran exactly one attempt"
    assert all(len(intervals) == 1 for intervals in runs.values()), "no attempt ran twice"
    rows = pg.execute("SELECT id, state, attempt, errors FROM belay_jobs ORDER BY id").fetchall()
    assert rows == [(i, "succeeded", 1, []) for i in sorted(ids)]
    assert nodes == {"node-a", "node-b"}, "both workers took part in the race"


# --- 2. the ack fence ------------------------------------------------------------------------------


def test_a_reclaim_of_many_expired_leases_is_a_fixed_number_of_statements(db, now):
    """One reclaim pass of 30 expired leases (20 with attempts left, 10 on their last) runs the same three
    statements as a pass of one: the two-hour soak's P17 (24 leases left expired 8 s while the only live
    node was under 66 ms of network latency: its per-row reclaim, one round trip per row, outlived the
    2.5 s call deadline on every try). Outcomes as the model's: retried ready at the backoff, failed at
    now, lease_expired appended with each row's attempt."""
    from properties.statements import recording

    with PgStore(db) as store:
        ids = store.apply(
            ops.Enqueue(now, tuple(JobSpec(Q, "interval", max_attempts=1 if i % 3 == 0 else 3) for i in range(30)))
        ).ids
        claimed = store.apply(w.Claim(now, Q, "ghost", 30, timedelta(seconds=1))).jobs
        assert len(claimed) == 30
        later = now + timedelta(seconds=5)
        with recording() as counts:
            out = store.apply(w.Reclaim(later, w.Backoff(base_s=7)))
        last = {ids[i] for i in range(30) if i % 3 == 0}
        assert out == w.Reclaimed(tuple(sorted(set(ids) - last)), tuple(sorted(last)))
        assert counts["expired_leases"] == 1 and counts["reclaim_many"] == 1, counts
        assert sum(counts.values()) <= 4, f"a statement per row: {dict(counts)}"
    from impl.store.snapshot import snapshot

    with psycopg.connect(db) as conn:
        jobs = snapshot(conn).jobs
        for job_id in ids:
            job = jobs[job_id]
            assert job.errors == [w.error_entry(1, later, "lease_expired", None)]
            assert (job.lease_until, job.leased_by) == (None, None)
            if job_id in last:
                assert (job.state, job.finished_at) == ("failed", later)
            else:
                assert (job.state, job.ready_at, job.finished_at) == ("ready", later + timedelta(seconds=7), None)


def test_a_stale_ack_after_reclaim_changes_nothing(db, now):
    with PgStore(db) as store:
        job_id = store.apply(ops.Enqueue(now, (JobSpec(Q, "interval"),))).ids[0]
        [ghost] = store.apply(w.Claim(now, Q, "ghost", 1, timedelta(seconds=1))).jobs
        assert (ghost.id, ghost.attempt, ghost.leased_by) == (job_id, 1, "ghost")

        assert store.apply(w.Reclaim(now + timedelta(milliseconds=500))) == w.Reclaimed((), ()), (
            "a live lease is never reclaimed"
        )
        assert store.apply(w.Reclaim(now + timedelta(seconds=2))) == w.Reclaimed((job_id,), ())
        assert store.apply(
            w.Renew(now + timedelta(seconds=2), "ghost", (job_id,), now + timedelta(seconds=3))
        ).lost == (job_id,)
        later = now + timedelta(seconds=10)
        [live] = store.apply(w.Claim(later, Q, "live", 1, timedelta(seconds=30))).jobs
        assert (live.attempt, live.leased_by) == (2, "live")

        before = (store.apply(ops.ReadJob(job_id)), store.apply(ops.ReadSteps(job_id)))
        at = later + timedelta(seconds=1)
        for outcome in (
            w.Succeed("zombie"),
            w.Fail("Boom", "retry me", at),
            w.Fail("Boom", "final", None),
            w.CancelSelf(),
            w.Snooze(at + timedelta(hours=1)),
        ):
            assert store.apply(w.Ack(at, job_id, 1, outcome)) == w.Stale(job_id, 1), outcome
        assert store.apply(w.Sleep(at, job_id, 1, "nap", at + timedelta(hours=1))) == w.Stale(job_id, 1)
        assert store.apply(w.ParkAwait(at, job_id, 1, f"job:{job_id}", "go")) == w.Stale(job_id, 1)
        assert store.apply(w.AwaitChildren(at, job_id, 1)) == w.Stale(job_id, 1)
        assert (store.apply(ops.ReadJob(job_id)), store.apply(ops.ReadSteps(job_id))) == before

        assert store.apply(w.Ack(at, job_id, 2, w.Succeed("live"))) == w.Acked(job_id, "succeeded")
        final = store.apply(ops.ReadJob(job_id))
        assert decode(final.result) == "live"
        assert error_names(final) == [(1, "lease_expired")]


def test_a_runtime_ack_after_its_lease_was_reclaimed_is_discarded_with_a_stale_ack_warning(
    db, pg, client, workers, caplog
):
    caplog.set_level(logging.WARNING, logger="belay")
    events: list[tuple[str, dict]] = []
    # A lease far longer than the test: this worker never renews it, as if cut off from the database.
    worker = workers(lease_ttl=3600, telemetry=(default_logger, lambda e, m: events.append((e, m))))
    job_id = client.enqueue(Q, "gated", {"gate": "zombie"}).id
    wait_for(lambda: executions(pg, job_id, "body"), 10, "attempt 1 to start")

    lease_until = job_row(pg, job_id)["lease_until"]
    with PgStore(db) as store:  # another node's sweeper, once the lease has expired, and another claimer
        assert store.apply(w.Reclaim(lease_until)).retried == (job_id,)
        [other] = store.apply(w.Claim(lease_until + timedelta(seconds=5), Q, "other-node", 1, timedelta(hours=2))).jobs
    assert other.attempt == 2
    before = client.job(job_id)

    open_gate(pg, "zombie:1")  # the zombie attempt finishes and acks
    wait_for(lambda: any(e == "ack.stale" for e, _ in events), 10, "the ack.stale telemetry event")

    assert ("ack.stale", {"job_id": job_id, "attempt": 1}) in events
    assert [m["state"] for e, m in events if e == "job.stop" and m["job_id"] == job_id] == ["stale"]
    assert worker.stale_acks == 1
    assert client.job(job_id) == before, "the stale ack changed nothing"
    assert (before.state, before.attempt, before.leased_by) == ("running", 2, "other-node")
    assert f"belay stale ack job={job_id} attempt=1" in caplog.text


def test_a_zombie_attempt_ending_on_the_same_node_leaves_the_live_attempt_leased(db, pg, client, workers):
    ttl = 1.5
    workers(lease_ttl=ttl, node="same-node")  # renews every ttl/3
    job_id = client.enqueue(Q, "gated", {"gate": "z"}).id
    wait_for(lambda: executions(pg, job_id, "body"), 10, "attempt 1 to start")

    with PgStore(db) as store:  # a sweeper whose clock runs 2 s ahead (within the tolerated skew)
        assert store.apply(w.Reclaim(utc_now() + timedelta(seconds=2), w.Backoff(base_s=0))).retried == (job_id,)
    wait_for(lambda: len(executions(pg, job_id, "body")) == 2, 10, "the same node to claim attempt 2")
    assert [r["node"] for r in executions(pg, job_id, "body")] == ["same-node", "same-node"]

    open_gate(pg, "z:1")  # the zombie attempt 1 ends (its ack is stale); attempt 2 still runs
    wait_for(lambda: executions(pg, job_id, "body_end"), 10, "attempt 1 to end")
    released = utc_now()

    def settled() -> dict | None:
        row = job_row(pg, job_id)
        renewed_past_expiry = row["lease_until"] is not None and row["lease_until"] > released + timedelta(
            seconds=2 * ttl
        )
        return row if row["attempt"] != 2 or row["state"] != "running" or renewed_past_expiry else None

    row = wait_for(settled, 4 * ttl, "attempt 2's lease to be renewed past its first expiry (or lost)")
    assert (row["state"], row["attempt"], row["leased_by"]) == ("running", 2, "same-node")
    assert len(executions(pg, job_id, "body")) == 2, "no third execution while attempt 2 runs"


def test_a_renewal_that_misses_a_lease_this_attempt_gave_up_itself_reports_no_lease_loss(db, pg, client, workers):
    """The renewer races the node's own acks and parks: a lease the attempt released itself (its ack or
    park call in flight or committed) is not a lost lease — no `lease lost` warning, no lease.lost
    event, no stop signal. A lease another node took is still reported."""
    events: list[tuple[str, dict]] = []
    # A long lease: the renew loop does not run on its own during the test; renew_once is called.
    worker = workers(lease_ttl=3600, telemetry=(lambda e, m: events.append((e, m)),))
    own = client.enqueue(Q, "gated", {"gate": "own"}).id
    taken = client.enqueue(Q, "gated", {"gate": "taken"}).id
    wait_for(lambda: executions(pg, own, "body") and executions(pg, taken, "body"), 10, "both attempts to start")
    running = worker.producers[Q].running
    own_ctx, taken_ctx = running[own], running[taken]

    own_ctx.releasing.set()  # as Worker.ack does before its call: the ack commits, the context is not yet done
    with PgStore(db) as store:
        assert store.apply(w.Ack(utc_now(), own, 1, w.Succeed(None))).state == "succeeded"
        lease_until = job_row(pg, taken)["lease_until"]
        assert store.apply(w.Reclaim(lease_until + timedelta(seconds=1))).retried == (taken,)

    assert worker.renew_once() == (taken,)
    assert not own_ctx.lost.is_set(), "its own ack is not a lost lease"
    assert taken_ctx.lost.is_set(), "a reclaimed lease is lost: the execution stops at its next boundary"
    assert [m["job_id"] for e, m in events if e == "lease.lost"] == [taken]
    open_gate(pg, "own:1")
    open_gate(pg, "taken:1")


# --- 3. kill -9 ------------------------------------------------------------------------------------


def test_a_worker_killed_with_kill_9_has_its_jobs_retried_by_another_after_the_lease(db, pg, client, spawn_worker):
    doomed = spawn_worker("doomed", lease_ttl=2)
    job_id = client.enqueue(Q, "block_first_attempt", {"gate": "never"}).id
    wait_for(lambda: executions(pg, job_id, "body"), 15, "attempt 1 to start")

    doomed.proc.send_signal(signal.SIGKILL)
    assert doomed.proc.wait(timeout=10) == -signal.SIGKILL
    orphan = job_row(pg, job_id)
    assert (orphan["state"], orphan["attempt"], orphan["leased_by"]) == ("running", 1, "doomed")

    spawn_worker("rescuer", lease_ttl=2)
    final = client.await_result(job_id, timeout=20)

    assert final.state == "succeeded" and result_value(final) == {"attempt": 2}
    assert error_names(final) == [(1, "lease_expired")]
    assert datetime.fromisoformat(final.errors[0]["at"]) >= orphan["lease_until"], (
        "reclaimed only once the dead worker's last lease had expired"
    )
    bodies = executions(pg, job_id, "body")
    assert [(r["attempt"], r["node"]) for r in bodies] == [(1, "doomed"), (2, "rescuer")]
    assert bodies[0]["pid"] == doomed.proc.pid != bodies[1]["pid"]


# --- 4. memoized steps across a crash -------------------------------------------------------------


def test_step_values_survive_the_crash_and_are_not_re_executed(db, pg, client, spawn_worker):
    crashy = spawn_worker("crashy", lease_ttl=2)
    job_id = client.enqueue(Q, "tokens", {"crash": True}).id
    assert crashy.proc.wait(timeout=20) == 137, "attempt 1 died right after journaling step 2"
    assert state_of(pg, job_id) == "running"

    spawn_worker("survivor", lease_ttl=2)
    final = client.await_result(job_id, timeout=20)
    assert final.state == "succeeded"

    ran = [(r["what"], r["attempt"], r["node"], r["value"]) for r in executions(pg, job_id)]
    assert [(what, attempt, node) for what, attempt, node, _ in ran] == [
        ("step:s1", 1, "crashy"),
        ("step:s2", 1, "crashy"),
        ("step:s3", 2, "survivor"),
    ], "steps 1 and 2 ran once, on attempt 1 only"
    tokens = [value for *_, value in ran]
    assert result_value(final) == tokens, "the re-run used the journaled tokens of steps 1 and 2"
    assert [(s.seq, s.name, decode(s.value)) for s in client.steps(job_id)] == [
        (1, "s1", tokens[0]),
        (2, "s2", tokens[1]),
        (3, "s3", tokens[2]),
    ]
    assert error_names(final) == [(1, "lease_expired")]


# --- 5. budgets -------------------------------------------------------------------------------------


def test_a_budget_crossing_fails_the_job_on_that_step_and_a_retry_runs_no_further_paid_step(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "paid", {"steps": 5, "cost": 4}, budget_usd_micros=10).id
    final = client.await_result(job_id, timeout=10)

    assert final.state == "failed"
    assert error_names(final) == [(1, "budget_exceeded")]
    assert final.spent_usd_micros == 12
    assert [(s.name, s.usd_micros) for s in client.steps(job_id)] == [("paid1", 4), ("paid2", 4), ("paid3", 4)]
    assert [r["what"] for r in executions(pg, job_id)] == ["step:paid1", "step:paid2", "step:paid3"]

    assert client.retry(job_id) == ops.Retried(job_id, "ready")
    wait_for(lambda: len(client.job(job_id).errors) == 2, 10, "the retried attempt to fail")
    again = client.job(job_id)
    assert again.state == "failed"
    assert error_names(again) == [(1, "budget_exceeded"), (2, "budget_exceeded")]
    assert [r["what"] for r in executions(pg, job_id)] == ["step:paid1", "step:paid2", "step:paid3"], (
        "the pre-flight check stopped the retry before a 4th paid step"
    )
    assert len(client.steps(job_id)) == 3 and again.spent_usd_micros == 12


def test_a_database_fault_during_a_step_is_retried_not_the_jobs_error(db, client, workers, monkeypatch):
    """A crash-restart while a step journals (or a boundary reads) is the database's weather, not the job's
    error: the call retries like the runtime's own. In the two-hour soak (seed 2028) a `slow` job on its
    last attempt ended failed with AdminShutdown raised by a step call (P9)."""
    registry = Registry()

    @registry.kind("twostep", queue=Q)
    def twostep(ctx: Any, input: dict) -> dict:
        return {"a": ctx.step("a", lambda: 1), "b": ctx.step("b", lambda: 2)}

    worker = workers(registry=registry)
    real = worker.store.apply
    faults = {"RecordStep": 1, "ReadStep": 1, "Preflight": 1}

    def flaky(op: Any, *args: Any, **kwargs: Any) -> Any:
        name = type(op).__name__
        if faults.get(name):
            faults[name] -= 1
            raise psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
        return real(op, *args, **kwargs)

    monkeypatch.setattr(worker.store, "apply", flaky)
    job_id = client.enqueue(Q, "twostep", {}, max_attempts=1).id
    final = client.await_result(job_id, timeout=20)
    assert (final.state, final.attempt, final.errors) == ("succeeded", 1, []), final.errors
    assert result_value(final) == {"a": 1, "b": 2}
    assert not any(faults.values()), f"every planted fault was met: {faults}"


def test_an_emit_cut_after_its_commit_is_retried_and_appends_its_event_once(db, pg, client, workers, monkeypatch):
    """An emit whose connection is cut — before it reached the server, or after its commit with the answer
    lost — is retried, not the job's error, and the job's stream holds the event once. A soak with
    partitions (seed 69) failed a `slow` job of the reference worker on the OperationalError of its start
    event (P9). The retry finds the event its committed try appended (same `now` and payload: sdk-guide §7)."""
    registry = Registry()

    @registry.kind("emitter", queue=Q)
    def emitter(ctx: Any, input: dict) -> str:
        ctx.emit({"phase": "start", "attempt": ctx.attempt})
        ctx.emit({"phase": "end"})
        return "done"

    worker = workers(registry=registry)
    real = worker.store.apply
    cuts = ["before", "after"]  # the first emit's first try is lost before the server, the second's after it

    def flaky(op: Any, *args: Any, **kwargs: Any) -> Any:
        if type(op).__name__ == "EmitEvent" and cuts:
            when = cuts.pop(0)
            if when == "after":
                real(op, *args, **kwargs)  # committed; the answer never arrives
            raise psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
        return real(op, *args, **kwargs)

    monkeypatch.setattr(worker.store, "apply", flaky)
    job_id = client.enqueue(Q, "emitter", {}, max_attempts=1).id
    final = client.await_result(job_id, timeout=20)
    assert (final.state, final.errors) == ("succeeded", []), final.errors
    events = pg.execute("SELECT seq, payload FROM belay_events WHERE job_id = %s ORDER BY seq", (job_id,)).fetchall()
    assert events == [(1, {"phase": "start", "attempt": 1}), (2, {"phase": "end"})], events
    assert cuts == []


# --- 6. cron ------------------------------------------------------------------------------------------

CRON = CronDef("every-minute", "* * * * *", "tick", {"from": "static"}, queue="cron")


def cron_slots(pg: psycopg.Connection) -> list[tuple[datetime, int]]:
    return pg.execute(
        "SELECT cron_slot, count(*) FROM belay_jobs WHERE cron_name = %s GROUP BY 1 ORDER BY 1", (CRON.name,)
    ).fetchall()


def test_cron_slots_fire_exactly_once_with_three_workers_racing(db, pg, workers, caplog):
    caplog.set_level(logging.ERROR, logger="belay")
    start = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
    origin: list[float] = []  # empty: the clock stands still until all three nodes run

    def clock() -> datetime:  # then two minutes of cron time per real second, shared by all three nodes
        return start + timedelta(seconds=(time.monotonic() - origin[0]) * 120 if origin else 0)

    nodes = [
        workers(registry=Registry(), queues=(), node=f"cron-{i}", clock=clock, crons=(CRON,), sweep_interval=0.01)
        for i in range(3)
    ]
    origin.append(time.monotonic())
    wait_for(lambda: len(cron_slots(pg)) >= 6, 20, "six minute slots to fire")
    for node in nodes:
        node.stop()
    end = clock()

    slots = cron_slots(pg)
    assert all(n == 1 for _, n in slots), f"a slot fired more than once: {slots}"
    fired = [s for s, _ in slots]
    first = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert fired == [first + timedelta(minutes=i) for i in range(len(fired))], "no slot was skipped"
    assert fired[-1] <= minute_slot(end)
    jobs = pg.execute("SELECT DISTINCT queue, worker, input, state FROM belay_jobs").fetchall()
    assert jobs == [("cron", "tick", {"from": "static"}, "ready")]
    assert "sweeper pass failed" not in caplog.text


def test_concurrent_sweeps_over_the_same_window_insert_each_cron_slot_once(db, pg):
    since = datetime(2026, 11, 30, 11, 59, 30, tzinfo=UTC)
    stores = [PgStore(db) for _ in range(3)]
    try:
        for rounds in range(4):  # windows that overlap (each starts before the last one ended)
            now = since + timedelta(minutes=3 + rounds)
            barrier = threading.Barrier(3)
            results: list[w.CronsFired] = []

            def race(store: PgStore, barrier: threading.Barrier, results: list[w.CronsFired], op: w.FireCrons) -> None:
                barrier.wait()
                results.append(store.apply(op))

            op = w.FireCrons(now, since + timedelta(minutes=rounds), (CRON,))
            threads = [threading.Thread(target=race, args=(s, barrier, results, op)) for s in stores]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            assert len(results) == 3
            inserted = defaultdict(int)
            for result in results:
                for fired in result.fired:
                    inserted[fired.slot] += fired.inserted
            assert all(n <= 1 for n in inserted.values()), inserted
    finally:
        for s in stores:
            s.close()
    slots = cron_slots(pg)
    first = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert slots == [(first + timedelta(minutes=i), 1) for i in range(6)]


# --- 7. SIGTERM -----------------------------------------------------------------------------------


def test_sigterm_drains_running_jobs_within_the_grace_and_claims_nothing_new(db, pg, client, spawn_worker):
    grace, margin = 5.0, 4.0
    worker = spawn_worker("drainer", limit=3, grace=grace)
    ids = client.enqueue_many([JobSpec(Q, "timed", {"s": 1.0}) for _ in range(6)]).ids

    def three_running() -> list[int] | None:
        found = [i for (i,) in pg.execute("SELECT id FROM belay_jobs WHERE state = 'running' ORDER BY id")]
        return found if len(found) == 3 else None

    running = wait_for(three_running, 10, "three jobs to run")

    signalled = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    code = worker.proc.wait(timeout=grace + margin)
    took = time.monotonic() - signalled

    assert code == 0, worker.output()
    assert took < grace + margin
    assert "stopped (drained)" in worker.output()
    states = dict(pg.execute("SELECT id, state FROM belay_jobs").fetchall())
    assert {i: states[i] for i in running} == {i: "succeeded" for i in running}, "running jobs completed"
    rest = sorted(set(ids) - set(running))
    assert pg.execute(
        "SELECT id, state, attempt FROM belay_jobs WHERE id = ANY(%s) ORDER BY id", (rest,)
    ).fetchall() == [(i, "ready", 0) for i in rest], "nothing claimed after SIGTERM"
    assert sorted(scalar(pg, "SELECT array_agg(job_id) FROM rt_exec WHERE what = 'body'")) == running


def test_sigterm_with_a_job_outliving_the_grace_exits_after_the_grace(db, pg, client, spawn_worker):
    grace, margin = 1.0, 4.0
    worker = spawn_worker("stubborn", grace=grace)
    job_id = client.enqueue(Q, "gated", {"gate": "never"}).id
    wait_for(lambda: executions(pg, job_id, "body"), 10, "the job to start")

    signalled = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: worker.proc.poll() is not None, grace + margin, "the worker to exit after the grace")
    assert time.monotonic() - signalled < grace + margin
    assert "stopped (grace expired)" in worker.output()
    assert state_of(pg, job_id) == "running", "left for its lease to expire and another node to reclaim"


# --- 8. a database restart ------------------------------------------------------------------------------


def succeeded_count(url: str, ids: list[int]) -> int | None:
    """Succeeded jobs among ids, or None while the database cannot be reached."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=2) as c:
            return c.execute(
                "SELECT count(*) FROM belay_jobs WHERE id = ANY(%s) AND state = 'succeeded'", (ids,)
            ).fetchone()[0]
    except psycopg.OperationalError:
        return None


def test_a_postgres_restart_under_a_running_worker_loses_nothing_and_the_worker_resumes(workers, caplog):
    caplog.set_level(logging.WARNING, logger="belay")
    cluster = EmbeddedCluster(ClusterConfig())
    worker = None
    try:
        cluster.start()
        url = cluster.url
        with psycopg.connect(url, autocommit=True) as c:
            migrate(c)
            app.install(c)
        worker = workers(url, retry=RetryPolicy(initial=0.05, maximum=0.5, max_elapsed=60))
        with Client(url) as client:
            ids = list(client.enqueue_many([JobSpec(Q, "work", {"n": n, "s": 0.02}) for n in range(200)]).ids)
        assert len(ids) == 200

        done_before = wait_for(
            lambda: (n := succeeded_count(url, ids)) is not None and n >= 30 and n, 30, "30 jobs to succeed"
        )
        cluster.crash()
        cluster.restart()
        assert done_before < 200, "the crash hit the middle of the batch"
        # a lost database is logged once per outage ("database unreachable"); other faults per retry
        wait_for(
            lambda: "database unreachable" in caplog.text or "transient fault" in caplog.text,
            10,
            "the worker to notice the crash",
        )

        wait_for(
            lambda: succeeded_count(url, ids) == 200, 60, "all 200 jobs to succeed after the restart", interval=0.1
        )
        with psycopg.connect(url, autocommit=True) as c:
            rows = c.execute(
                "SELECT id, state, result FROM belay_jobs WHERE id = ANY(%s) ORDER BY id", (ids,)
            ).fetchall()
        assert [(i, state, decode(result)) for i, state, result in rows] == [
            (i, "succeeded", 2 * n) for n, i in enumerate(ids)
        ], "none lost, each with its own result"

        assert not worker.stopping.is_set()
        assert all(p.thread.is_alive() for p in worker.producers.values()), "the producers survived"
        with Client(url) as client:
            more = list(client.enqueue_many([JobSpec(Q, "work", {"n": n}) for n in range(10)]).ids)
        wait_for(lambda: succeeded_count(url, more) == 10, 20, "jobs enqueued after the restart to succeed")
    finally:
        if worker is not None:
            worker.stop(grace=5)
        cluster.destroy()


# --- 10. the job-code API ------------------------------------------------------------------------------


def test_await_signal_returns_the_payload_of_a_signal_sent_after_the_job_parked(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "await_signal").id
    wait_for(lambda: state_of(pg, job_id) == "awaiting", 10, "the job to park")
    parked = client.job(job_id)
    assert (parked.await_scope, parked.await_name, parked.ready_at) == (f"job:{job_id}", "go", None)

    assert client.signal(f"job:{job_id}", "go", {"x": 1}) == ops.Signalled((job_id,))
    final = client.await_result(job_id, timeout=10)
    assert (final.state, result_value(final)) == ("succeeded", {"payload": {"x": 1}})


def test_await_signal_returns_the_payload_of_a_signal_sent_before_the_job_ran(db, pg, client, workers):
    job_id = client.enqueue(Q, "await_signal").id
    assert client.signal(f"job:{job_id}", "go", {"early": True}) == ops.Signalled(())
    workers()
    final = client.await_result(job_id, timeout=10)
    assert (final.state, result_value(final)) == ("succeeded", {"payload": {"early": True}})
    assert len(executions(pg, job_id, "body")) == 1, "it found the signal without parking"


def test_await_signal_raises_signal_timeout_after_the_deadline(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "await_signal", {"timeout": 0.3}).id
    final = client.await_result(job_id, timeout=10)
    assert final.state == "succeeded"
    assert result_value(final) == {"timeout": f"no signal 'go' in 'job:{job_id}' before the deadline"}
    bodies = executions(pg, job_id, "body")
    assert len(bodies) == 2 and bodies[1]["started_ns"] - bodies[0]["started_ns"] >= 0.3e9


def test_sleep_parks_the_job_and_resumes_it_after_the_time(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "napper", {"s": 0.4}).id
    final = client.await_result(job_id, timeout=10)
    assert final.state == "succeeded"

    ran = executions(pg, job_id)
    assert [r["what"] for r in ran] == ["body", "step:before", "body", "after_sleep"], (
        "the body re-ran from the top after the sleep; the step before it did not"
    )
    assert ran[3]["started_ns"] - ran[0]["started_ns"] >= 0.4e9
    assert result_value(final) == ran[1]["value"]
    until = decode(next(s.value for s in client.steps(job_id) if s.name == "$sleep:nap"))
    assert ran[3]["started_ns"] >= ns(datetime.fromisoformat(until))


def test_spawned_children_run_and_await_children_returns_them_all_terminal(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "parent", {"ns": [1, 2, 3]}).id
    final = client.await_result(job_id, timeout=15)
    assert final.state == "succeeded"

    children = [i for (i,) in pg.execute("SELECT id FROM belay_jobs WHERE parent_id = %s ORDER BY id", (job_id,))]
    assert result_value(final) == {"ids": children, "results": [10, 20, 30], "states": ["succeeded"] * 3}
    assert decode(next(s.value for s in client.steps(job_id) if s.name == "$spawn:kids")) == children
    keys = [k for (k,) in pg.execute("SELECT unique_key FROM belay_jobs WHERE parent_id = %s ORDER BY id", (job_id,))]
    assert keys == [f"$spawn:{job_id}:kids:{i}" for i in range(3)]


def test_steering_delivers_the_latest_message_to_the_running_job(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "steerable").id
    wait_for(lambda: executions(pg, job_id, "body"), 10, "the job to run")
    assert client.steer(job_id, {"direction": "left"}) == ops.Signalled(())
    final = client.await_result(job_id, timeout=10)
    assert (final.state, result_value(final)) == ("succeeded", {"direction": "left"})


def test_emitted_events_are_appended_to_the_job_stream_in_order(db, client, workers):
    workers()
    job_id = client.enqueue(Q, "emitter", {"progress": [0.25, 0.5, 1.0]}).id
    final = client.await_result(job_id, timeout=10)
    assert result_value(final) == [1, 2, 3]
    assert [(e.seq, e.payload) for e in client.events(job_id)] == [
        (1, {"progress": 0.25}),
        (2, {"progress": 0.5}),
        (3, {"progress": 1.0}),
    ]


def test_a_cancel_request_is_honoured_at_the_next_step_boundary(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "cancellable", {"gate": "c"}).id
    wait_for(lambda: executions(pg, job_id, "step:a"), 10, "step a to run")
    assert client.cancel(job_id) == ops.CancelRequested(job_id)
    assert state_of(pg, job_id) == "running", "a running job is only asked to cancel"

    open_gate(pg, "c")
    final = client.await_result(job_id, timeout=10)
    assert (final.state, final.cancel_requested, final.errors) == ("cancelled", True, [])
    assert [s.name for s in client.steps(job_id)] == ["a"]
    assert [r["what"] for r in executions(pg, job_id)] == ["step:a"], "step b never ran"


def test_an_exception_is_retried_per_the_backoff_then_fails_at_max_attempts(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "always_fails", max_attempts=3).id
    final = client.await_result(job_id, timeout=15)

    assert final.state == "failed"
    assert [(e["attempt"], e["error"], e["detail"]) for e in final.errors] == [
        (k, "RuntimeError", f"RuntimeError: boom on attempt {k}") for k in (1, 2, 3)
    ]
    bodies = executions(pg, job_id, "body")
    assert [r["attempt"] for r in bodies] == [1, 2, 3]
    for error, retry in zip(
        final.errors, bodies[1:], strict=False
    ):  # the last error has no retry. Backoff(base_s=1, factor=1): 1 s between attempts
        # retry_at is computed a moment before the ack stamps `at`: allow that moment, not the second
        assert retry["started_ns"] >= ns(datetime.fromisoformat(error["at"]) + timedelta(seconds=0.95))


def test_snooze_makes_the_job_ready_later_without_spending_an_attempt(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "snoozer", {"s": 0.3}, max_attempts=2).id
    final = client.await_result(job_id, timeout=10)

    assert (final.state, result_value(final), final.errors) == ("succeeded", "woke", [])
    assert (final.attempt, final.max_attempts) == (2, 3), "the snooze gave its attempt back"
    bodies = executions(pg, job_id, "body")
    assert bodies[1]["started_ns"] - bodies[0]["started_ns"] >= 0.3e9


def test_waits_spend_no_attempt_so_a_job_that_waited_more_than_max_attempts_still_retries(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "many_waits", {"waits": 6}, max_attempts=2).id
    final = client.await_result(job_id, timeout=20)
    assert (final.state, result_value(final)) == ("succeeded", 8), final.errors
    assert [e["attempt"] for e in final.errors] == [7], "the one raise came after six waits and was retried"
    assert (final.attempt, final.max_attempts) == (8, 8), "each of the six waits gave its attempt back"


def test_an_unknown_kind_fails_with_an_error_naming_the_kind(db, client, workers):
    workers()
    job_id = client.enqueue(Q, "no_such_kind", max_attempts=1).id
    final = client.await_result(job_id, timeout=10)
    assert final.state == "failed"
    assert "no worker is registered under kind 'no_such_kind'" in final.errors[0]["detail"]


def test_an_unknown_kind_fails_the_job_at_once_with_error_unknown_kind(db, pg, client, workers):
    workers()
    job_id = client.enqueue(Q, "no_such_kind").id
    wait_for(lambda: client.job(job_id).errors, 10, "the first attempt to end")
    job = client.job(job_id)
    assert (job.state, error_names(job)) == ("failed", [(1, "unknown_kind")])


def test_a_node_applies_the_queue_row_options_from_its_first_claim(db, pg, client, workers):
    """§6 admission: a belay_queues row's global_limit is in force before the node's first claim. A node
    that claimed with its static options until its first refresh (queue_refresh later) over-admitted:
    the soak's trace validation found such claims from freshly started nodes (issue 30)."""
    with PgStore(db) as store:
        store.apply(ops.PutQueue(utc_now(), Q, {"global_limit": 1}))
    ids = [client.enqueue(Q, "gated", {"gate": f"adm{i}"}).id for i in range(4)]
    workers(limit=4, queue_refresh=3600.0)  # no periodic refresh within the test: only the one at start
    deadline = time.monotonic() + 10
    running = 0
    while time.monotonic() < deadline and running == 0:
        running = pg.execute("SELECT count(*) FROM belay_jobs WHERE state = 'running'").fetchone()[0]
        time.sleep(0.05)
    time.sleep(0.5)  # every producer round has had its chance to claim more
    running = pg.execute("SELECT count(*) FROM belay_jobs WHERE state = 'running'").fetchone()[0]
    assert running == 1, f"{running} of {len(ids)} jobs running under global_limit 1"
