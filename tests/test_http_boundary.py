"""The HTTP API and ordinary Belay jobs on one database (issue 53): whoever reclaims an expired lease.

The served OpenAPI promises that a run whose claim expired "is re-queued without spending an attempt".
Contract §6: "Any node reclaims expirees: select running AND lease_until <= $now FOR UPDATE SKIP LOCKED,
then per row apply outcome retry (attempt < max) or failed with error {"error":"lease_expired"}". A
`belay worker` on the same database (any SDK that follows the contract) reclaims HTTP tasks too, so the
promise must follow from the row itself: an HTTP task's row keeps `max_attempts` out of reach of its
claims (impl/http/tasks.py ROW_MAX_ATTEMPTS) and the server counts the task's budget from its failed runs.
The reverse: the HTTP server's sweep reclaims HTTP tasks only, never a job of another client.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from impl.http.testing import FakeClock, serve_api
from impl.store import PgStore
from model import ops
from model import worker_ops as w
from tests.http_support import job as job_row
from tests.test_http_api import claim, make_queue, make_task

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api(db_url: str, clock: FakeClock):
    with serve_api(db_url, clock=clock) as served:
        yield served


def worker_reclaim(db_url: str, now) -> w.Reclaimed:
    """A `belay worker`'s sweeper pass: the contract's §6 reclaim with the runtime's default backoff
    (impl/runtime/config.py WorkerConfig.reclaim_backoff), over every expired lease of the database."""
    with PgStore(db_url) as store:
        return store.apply(w.Reclaim(now, w.Backoff()))


def runs(api, task: dict) -> list[tuple[str, int, str]]:
    listed = api.get("/runs", params={"task_id": task["task_id"]}).json()["runs"]
    return [(r["id"], r["attempt"], r["status"]) for r in listed]


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_a_workers_reclaim_of_an_expired_http_claim_spends_no_attempt(api, clock, db_url, max_attempts):
    make_queue(api)
    task = make_task(api, max_attempts=max_attempts)
    n = int(task["task_id"][5:])
    for lap in range(4):  # expiring again and again, reclaimed by the worker's sweeper every time
        got = claim(api, timeout=5)
        assert [(t["run_id"], t["attempt"], t["max_attempts"]) for t in got] == [
            (f"run_{n}_{lap + 1}", 1, max_attempts)
        ], "an expired claim spent an attempt"
        clock.advance(5)
        done = worker_reclaim(db_url, clock())
        assert (done.retried, done.failed) == ((n,), ()), "the worker's reclaim failed an HTTP task"
        assert job_row(db_url, task["task_id"])["state"] == "ready"
        assert runs(api, task) == [(f"run_{n}_{lap + 2}", 1, "sleeping")]  # until the worker's backoff is due
        clock.advance(w.Backoff().max_s)
        assert runs(api, task) == [(f"run_{n}_{lap + 2}", 1, "pending")]
    last = claim(api, timeout=5)[0]
    failed = api.post(f"/runs/{last['run_id']}/fail", json={"error": "boom"}).json()
    assert failed["attempt"] == 1
    assert ("next_run_id" in failed) == (max_attempts > 1), "the budget is the one the task was created with"
    assert runs(api, task)[0] == (last["run_id"], 1, "failed")
    listed = api.get("/tasks", params={"queue_name": "q"}).json()["tasks"]
    assert [(t["attempt"], t["max_attempts"]) for t in listed] == [(1 if max_attempts == 1 else 2, max_attempts)]


def test_the_http_sweep_spends_the_same_as_a_workers_for_an_http_task(api, clock, db_url):
    """The HTTP server's own sweep applies the same §6 reclaim (restricted to HTTP tasks), claimable at
    once; a worker's pass over the same expiry finds nothing left (SKIP LOCKED, one winner)."""
    make_queue(api)
    task = make_task(api)
    n = int(task["task_id"][5:])
    claim(api, timeout=5)
    clock.advance(5)
    report = api.belay.sweep_once()
    assert report.requeued == [n] and report.failed == []
    assert worker_reclaim(db_url, clock()) == w.Reclaimed((), ())
    row = job_row(db_url, task["task_id"])
    assert (row["state"], [e["error"] for e in row["errors"]]) == ("ready", ["lease_expired"])
    assert runs(api, task) == [(f"run_{n}_2", 1, "pending")]


def test_the_http_sweep_never_touches_a_job_of_another_client(api, clock, db_url):
    """An ordinary job leased by a worker, expired: the HTTP sweep leaves it alone (its worker's own
    sweeper, or any other node following the contract, reclaims it: spending an attempt)."""
    now = clock()
    with PgStore(db_url) as store:
        store.apply(ops.Enqueue(now, (ops.JobSpec("jobs", "plain", input={"n": 1}, max_attempts=1),)))
        store.apply(ops.Enqueue(now, (ops.JobSpec("jobs", "plain", input={"n": 2}, max_attempts=2),)))
        leased = store.apply(w.Claim(now, "jobs", "worker-1", 2, timedelta(seconds=5))).jobs
    assert len(leased) == 2
    make_queue(api)
    make_task(api)
    claim(api, timeout=5)
    clock.advance(30)
    report = api.belay.sweep_once()
    ours = {j.id for j in leased}
    assert not ours & {*report.requeued, *report.failed, *report.timed_out, *report.pruned_tasks}
    with PgStore(db_url) as store:
        rows = {j.id: j for j in (store.apply(ops.ReadJob(i)) for i in ours)}
    assert {(r.state, r.attempt, tuple(r.errors or ())) for r in rows.values()} == {("running", 1, ())}
    done = worker_reclaim(db_url, clock())
    assert sorted([*done.retried, *done.failed]) == sorted(ours)
    with PgStore(db_url) as store:
        after = {
            j.input["n"]: (j.state, [e["error"] for e in j.errors]) for j in (store.apply(ops.ReadJob(i)) for i in ours)
        }
    assert after == {1: ("failed", ["lease_expired"]), 2: ("ready", ["lease_expired"])}


# --- the repro: a real `belay worker` beside the served API, both sweepers running ------------

N_TASKS = 200


def _claim_all(api, queue: str, n: int, timeout: int, deadline: float) -> list[dict]:
    got: list[dict] = []
    while len(got) < n and time.monotonic() < deadline:
        r = api.post(f"/queues/{queue}/tasks/claim", json={"limit": n - len(got), "claim_timeout": timeout})
        assert r.status_code == 200, r.text
        got += r.json()["tasks"]
        if len(got) < n:
            time.sleep(0.2)
    return got


def _wait(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


WORKERS = {
    "belay-worker": (
        [sys.executable, "-m", "impl.ops.cli", "worker", "--app", "tests.apps.runtime_app", "--database-url", "{url}"],
        {},
    ),
    "soak-reference-worker": (  # soak/PROTOCOL.md §1: the certifier's worker, its own queue (no HTTP queue)
        ["sh", "soak/reference-worker"],
        {"BELAY_NODE": "ref-1", "BELAY_QUEUES": "soak", "BELAY_LEASE_TTL": "10", "BELAY_SOAK_PYTHON": sys.executable},
    ),
}


@pytest.mark.parametrize("which", sorted(WORKERS))
def test_no_expired_http_claim_is_lost_beside_a_belay_worker_nor_during_its_shutdown(db_url, monkeypatch, which):
    """200 HTTP tasks (max_attempts 1) claimed with a 1 s claim_timeout and let expire while a `belay
    worker` runs on the same database (it serves none of the HTTP queues, but its sweeper reclaims every
    expired lease), then again while that worker shuts down; ordinary jobs' leases expire beside them.
    Every task is claimable again at attempt 1 and completes: 0 of 200 lost. The HTTP server's sweep
    never reports an ordinary job; the worker's reclaim of those spends an attempt, as §6 says."""
    from impl.http.service import HttpService

    reports: list = []
    original = HttpService.sweep_once

    def recording(self, now, **kw):
        report = original(self, now, **kw)
        reports.append(report)
        return report

    monkeypatch.setattr(HttpService, "sweep_once", recording)
    now = datetime.now(UTC)
    with PgStore(db_url) as store:
        specs = tuple(ops.JobSpec("plain-jobs", "plain", input={"n": i}, max_attempts=1 + i % 2) for i in range(20))
        ordinary = [o.id for o in store.apply(ops.Enqueue(now, specs)).outcomes]
        store.apply(w.Claim(now, "plain-jobs", "vanished-node", 20, timedelta(seconds=1)))
    argv, env = WORKERS[which]
    worker = subprocess.Popen(
        [a.format(url=db_url) for a in argv],
        cwd=ROOT,
        env={**os.environ, "BELAY_DATABASE_URL": db_url, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with serve_api(db_url, sweep_interval=0.5) as api:
            make_queue(api, "http-q")
            tasks = [make_task(api, "http-q", max_attempts=1)["task_id"] for _ in range(N_TASKS)]
            lost_rounds = []
            for round_ in ("beside", "shutdown"):
                held = _claim_all(api, "http-q", N_TASKS, 1, time.monotonic() + 60)
                assert len(held) == N_TASKS and {t["attempt"] for t in held} == {1}
                if round_ == "shutdown":
                    worker.send_signal(signal.SIGTERM)  # its leases expire while it stops
                time.sleep(3)  # both sweepers pass over every expired claim
                failed = _count(db_url, "failed", tasks)
                lost_rounds.append(failed)
            assert worker.wait(timeout=60) == 0
            again = _claim_all(api, "http-q", N_TASKS, 60, time.monotonic() + 60)
            assert len(again) == N_TASKS, "an expired claim was lost"
            assert {(t["attempt"], t["max_attempts"]) for t in again} == {(1, 1)}
            for t in again:
                assert api.post(f"/runs/{t['run_id']}/complete", json={"result": 1}).status_code == 200
            assert lost_rounds == [0, 0], lost_rounds
            assert _count(db_url, "succeeded", tasks) == N_TASKS
        swept = {i for r in reports for i in (*r.requeued, *r.failed)}
        assert swept and not swept & set(ordinary), "the HTTP sweep touched an ordinary job"
        with PgStore(db_url) as store:
            rows = [store.apply(ops.ReadJob(i)) for i in ordinary]
        assert all(r.errors and r.errors[-1]["error"] == "lease_expired" for r in rows)
        assert {(r.max_attempts, r.state) for r in rows} == {(1, "failed"), (2, "ready")}
    finally:
        if worker.poll() is None:
            worker.kill()
        out = worker.communicate(timeout=30)[0]
        assert "Traceback" not in out, out[-3000:]


def _count(db_url: str, state: str, tasks: list[str]) -> int:
    with psycopg.connect(db_url) as c:
        return c.execute(
            "SELECT count(*) FROM belay_jobs WHERE state = %s AND id = ANY(%s)",
            (state, [int(t.removeprefix("task_")) for t in tasks]),
        ).fetchone()[0]


def test_a_queue_path_with_a_nul_is_not_found_not_a_500(api):
    """Found by tests/test_fuzz_surfaces.py: DELETE /queues/%00 answered 500 (PostgreSQL text holds no NUL)."""
    make_queue(api)
    for method, path, body in (
        ("DELETE", "/queues/%00", None),
        ("GET", "/queues/a%00b/stats", None),
        ("POST", "/queues/%00/tasks/claim", {"limit": 1, "claim_timeout": 5}),
    ):
        r = api.request(method, path, json=body)
        assert (r.status_code, r.json()["code"]) == (404, "QUEUE_NOT_FOUND"), (method, path, r.text)
