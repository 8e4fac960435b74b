"""The HTTP API (impl/http) against a running server on real PostgreSQL, one behaviour per test.

Each hole of the public implementation has a test here that would fail on it (see the names).
The clock is a FakeClock the test moves; the sweeper is driven with `api.belay.sweep_once()`.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from impl.client import Client
from impl.http.errors import iso
from impl.http.server import BindRefused, check_bind
from impl.http.tasks import ROW_MAX_ATTEMPTS
from impl.http.testing import serve_api
from impl.ops.cli import main
from tests.http_support import claim_tasks, http_api, http_clock, job  # noqa: F401  (fixtures: api, clock)


def make_queue(api, name: str = "q", **cleanup) -> None:
    body = {"name": name, **({"cleanup": cleanup} if cleanup else {})}
    assert api.post("/queues", json=body).status_code == 201


def make_task(api, queue: str = "q", **fields) -> dict:
    r = api.post(f"/queues/{queue}/tasks", json={"task_name": "work", **fields})
    assert r.status_code == 201, r.text
    return r.json()


def claim(api, queue: str = "q", limit: int = 1, timeout: int = 30) -> list[dict]:
    return claim_tasks(api, limit, queue, timeout)


def assert_error(r: httpx.Response, status: int, code: str | None = None) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "code"} and body["error"], body
    if code is not None:
        assert body["code"] == code, body


# --- queues ------------------------------------------------------------------------------------


def test_queue_is_a_belay_queues_row_and_a_duplicate_is_409(api, db_url):
    make_queue(api, "orders", task_ttl_seconds=60)
    assert_error(api.post("/queues", json={"name": "orders"}), 409, "QUEUE_EXISTS")
    listed = api.get("/queues").json()["queues"]
    assert listed == [
        {
            "name": "orders",
            "created_at": "2026-11-30T12:00:00Z",
            "cleanup": {"task_ttl_seconds": 60, "event_ttl_seconds": 259200},
        }
    ]
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT name FROM belay_queues").fetchall() == [("orders",)]


def test_delete_queue_with_a_pending_task_is_409_and_deletes_nothing(api, db_url):
    make_queue(api)
    task = make_task(api)
    assert_error(api.delete("/queues/q"), 409, "QUEUE_NOT_EMPTY")
    assert job(db_url, task["task_id"])["state"] == "ready"
    assert [q["name"] for q in api.get("/queues").json()["queues"]] == ["q"]


def test_delete_queue_with_a_claimed_task_is_409_and_deletes_nothing(api, db_url):
    make_queue(api)
    task = make_task(api)
    claim(api)
    assert_error(api.delete("/queues/q"), 409, "QUEUE_NOT_EMPTY")
    assert job(db_url, task["task_id"])["state"] == "running"


@pytest.mark.parametrize("how", ["schedule", "wait", "retry"])
def test_delete_queue_with_a_sleeping_task_is_409_and_deletes_nothing(api, clock, db_url, how):
    make_queue(api)
    task = make_task(api, max_attempts=2, retry_strategy={"kind": "fixed", "base_seconds": 60})
    run = claim(api)[0]
    if how == "schedule":
        api.post(f"/runs/{run['run_id']}/schedule", json={"run_at": iso(clock() + timedelta(seconds=60))})
    elif how == "wait":
        assert wait(api, run, "later").status_code == 202
    else:
        assert "next_run_id" in api.post(f"/runs/{run['run_id']}/fail", json={"error": "x"}).json()
    assert runs_of(api, task)[-1][2] == "sleeping"
    assert_error(api.delete("/queues/q"), 409, "QUEUE_NOT_EMPTY")
    assert job(db_url, task["task_id"]) is not None


def test_delete_queue_with_only_finished_tasks_deletes_them_as_the_served_document_says(api, db_url):
    make_queue(api)
    task = make_task(api)
    run = claim(api)[0]
    described = api.get("/openapi.json").json()["paths"]["/queues/{queue_name}"]["delete"]["description"]
    assert "deleted together with its finished tasks" in described
    assert api.post(f"/runs/{run['run_id']}/complete", json={}).status_code == 200
    assert api.delete("/queues/q").status_code == 204
    assert job(db_url, task["task_id"]) is None  # its finished tasks go with it
    assert_error(api.delete("/queues/q"), 404, "QUEUE_NOT_FOUND")
    assert_error(api.post("/queues/q/tasks", json={"task_name": "x"}), 404, "QUEUE_NOT_FOUND")


def test_queue_names_with_slashes_and_percents_round_trip(api):
    make_queue(api, "a/b%2Fc")
    assert api.get("/queues/a%2Fb%252Fc/stats").json()["queue_name"] == "a/b%2Fc"


def test_queue_stats_count_runs_and_report_the_oldest_pending_age(api, clock):
    make_queue(api)
    assert api.get("/queues/q/stats").json()["oldest_pending_run_age_seconds"] is None
    make_task(api)
    clock.advance(5)
    make_task(api)
    make_task(api)
    clock.advance(10)
    run = claim(api)[0]
    api.post(f"/runs/{run['run_id']}/complete", json={"result": 1})
    claim(api)
    stats = api.get("/queues/q/stats").json()
    assert stats == {
        "queue_name": "q",
        "pending_runs": 1,
        "claimed_runs": 1,
        "completed_runs": 1,
        "oldest_pending_run_age_seconds": 10.0,
    }
    assert_error(api.get("/queues/nope/stats"), 404)


# --- tasks, claims, fencing ----------------------------------------------------------------------


def test_task_is_a_job_with_kind_input_meta_and_max_attempts(api, db_url):
    make_queue(api)
    task = make_task(
        api,
        params={"n": 1},
        headers={"region": "eu"},
        max_attempts=3,
        retry_strategy={"kind": "fixed", "base_seconds": 5},
    )
    row = job(db_url, task["task_id"])
    assert (row["queue"], row["worker"], row["input"], row["meta"], row["max_attempts"]) == (
        "q",
        "work",
        {"n": 1},
        {"region": "eu"},
        ROW_MAX_ATTEMPTS,  # the task's budget (3) is its `$http:task` step's: no claim spends it (issue 53)
    )
    [claimed] = claim(api, timeout=45)
    assert claimed == {
        "run_id": task["run_id"],
        "task_id": task["task_id"],
        "attempt": 1,
        "task_name": "work",
        "params": {"n": 1},
        "headers": {"region": "eu"},
        "max_attempts": 3,
        "retry_strategy": {"kind": "fixed", "base_seconds": 5},
    }
    row = job(db_url, task["task_id"])
    assert row["state"] == "running" and row["lease_until"] == row["started_at"] + timedelta(seconds=45)


def test_stale_run_complete_is_409_and_the_task_is_unchanged(api, clock, db_url):
    make_queue(api)
    task = make_task(api, max_attempts=3)
    old = claim(api, timeout=10)[0]["run_id"]
    clock.advance(11)
    api.belay.sweep_once()  # the claim expired: reclaimed, claimable again at once
    new = claim(api)[0]["run_id"]
    assert new != old
    before = job(db_url, task["task_id"])
    for verb, body in (
        ("complete", {"result": "late"}),
        ("fail", {"error": "late"}),
        ("schedule", {"run_at": iso(clock())}),
    ):
        assert_error(api.post(f"/runs/{old}/{verb}", json=body), 409, "STALE_RUN")
    assert job(db_url, task["task_id"]) == before
    assert api.post(f"/runs/{new}/complete", json={"result": "ok"}).status_code == 200


def test_a_foreign_or_pending_run_cannot_complete_a_task(api, db_url):
    make_queue(api)
    a, b = make_task(api), make_task(api)
    run_a = claim(api)[0]["run_id"]
    assert_error(api.post(f"/runs/{b['run_id']}/complete", json={}), 409, "RUN_NOT_CLAIMED")
    assert_error(api.post(f"/runs/run_{b['task_id'][5:]}_7/complete", json={}), 404, "RUN_NOT_FOUND")
    assert job(db_url, b["task_id"])["state"] == "ready"
    assert api.post(f"/runs/{run_a}/complete", json={}).status_code == 200
    assert_error(api.post(f"/runs/{run_a}/complete", json={}), 409, "STALE_RUN")
    assert job(db_url, a["task_id"])["state"] == "succeeded"


def test_failing_a_run_twice_schedules_one_retry(api, db_url):
    make_queue(api)
    task = make_task(api, max_attempts=5)
    run = claim(api)[0]["run_id"]
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: api.post(f"/runs/{run}/fail", json={"error": "x"}).status_code, range(8)))
    assert sorted(codes) == [200] + [409] * 7
    row = job(db_url, task["task_id"])
    assert (row["state"], row["attempt"], len(row["errors"])) == ("ready", 1, 1)


def test_a_retried_tasks_next_run_id_and_next_attempt_at_match_the_strategy(api, clock):
    make_queue(api)
    make_task(
        api, max_attempts=5, retry_strategy={"kind": "exponential", "base_seconds": 2, "factor": 3, "max_seconds": 30}
    )
    expected = [2, 6, 18, 30]  # 2·3^(n−1), capped at max_seconds
    for n, delay in enumerate(expected, start=1):
        run = claim(api)[0]
        assert run["attempt"] == n
        r = api.post(f"/runs/{run['run_id']}/fail", json={"error": f"failure {n}"}).json()
        assert r == {
            "run_id": run["run_id"],
            "status": "failed",
            "attempt": n,
            "next_run_id": f"run_{run['task_id'][5:]}_{n + 1}",
            "next_attempt_at": iso(clock() + timedelta(seconds=delay)),
        }
        assert claim(api) == []  # not before next_attempt_at
        clock.advance(delay)
    last = claim(api)[0]
    r = api.post(f"/runs/{last['run_id']}/fail", json={"error": "final"}).json()
    assert r == {"run_id": last["run_id"], "status": "failed", "attempt": 5}  # attempts exhausted
    runs = api.get("/runs", params={"task_id": last["task_id"]}).json()["runs"]
    assert [(x["status"], x["error"]) for x in runs] == [("failed", f"failure {n}") for n in range(1, 5)] + [
        ("failed", "final")
    ]


def test_a_fixed_strategy_waits_base_seconds_every_time(api, clock):
    make_queue(api)
    make_task(api, max_attempts=3, retry_strategy={"kind": "fixed", "base_seconds": 7.5})
    for _ in range(2):
        run = claim(api)[0]
        r = api.post(f"/runs/{run['run_id']}/fail", json={"error": "x"}).json()
        assert r["next_attempt_at"] == iso(clock() + timedelta(seconds=7.5))
        clock.advance(7.5)


def test_schedule_snoozes_the_run_and_spends_no_attempt(api, clock, db_url):
    make_queue(api)
    task = make_task(api, max_attempts=1)
    run = claim(api)[0]["run_id"]
    at = clock() + timedelta(seconds=60)
    resumes_as = f"run_{task['task_id'][5:]}_2"
    assert api.post(f"/runs/{run}/schedule", json={"run_at": iso(at)}).json() == {
        "run_id": resumes_as,  # the run that resumes, under the id of its next claim
        "scheduled_at": iso(at),
    }
    assert runs_of(api, task) == [(resumes_as, 1, "sleeping")]  # one run, the scheduled one, no phantom
    assert claim(api) == []
    assert_error(api.post(f"/runs/{run}/complete", json={}), 409, "STALE_RUN")
    clock.advance(60)
    assert runs_of(api, task) == [(resumes_as, 1, "pending")]
    again = claim(api)[0]
    assert (again["run_id"], again["attempt"], again["max_attempts"]) == (resumes_as, 1, 1)
    assert runs_of(api, task) == [(resumes_as, 1, "claimed")]
    r = api.post(f"/runs/{again['run_id']}/fail", json={"error": "x"}).json()
    assert "next_run_id" not in r  # max_attempts 1: the schedule did not use it up, the failure did
    assert job(db_url, task["task_id"])["state"] == "failed"


def runs_of(api, task: dict) -> list[tuple[str, int, str]]:
    """(id, attempt, status) of every run of a task, as GET /runs lists them."""
    r = api.get("/runs", params={"task_id": task["task_id"]})
    assert r.status_code == 200, r.text
    return [(x["id"], x["attempt"], x["status"]) for x in r.json()["runs"]]


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_an_expired_claim_is_claimable_again_without_spending_an_attempt(api, clock, db_url, max_attempts):
    make_queue(api)
    task = make_task(api, max_attempts=max_attempts)
    n = task["task_id"][5:]
    first = claim(api, timeout=5)[0]
    clock.advance(4)
    assert api.belay.sweep_once().requeued == []  # not yet expired
    clock.advance(1)
    assert api.belay.sweep_once().requeued == [int(n)]
    assert runs_of(api, task) == [(f"run_{n}_2", 1, "pending")]  # the same run, back in the queue
    for lap in range(3):  # expiring again and again never spends the budget
        again = claim(api, timeout=5)[0]
        assert (again["run_id"], again["attempt"], again["max_attempts"]) == (f"run_{n}_{lap + 2}", 1, max_attempts)
        clock.advance(5)
        api.belay.sweep_once()
    again = claim(api, timeout=5)[0]
    stale = first["run_id"]  # the holder whose claim expired is refused everywhere, and changes nothing
    assert_error(api.post(f"/runs/{stale}/complete", json={"result": 1}), 409, "STALE_RUN")
    assert_error(api.post(f"/runs/{stale}/fail", json={"error": "late"}), 409, "STALE_RUN")
    assert_error(api.post(f"/runs/{stale}/schedule", json={"run_at": iso(clock())}), 409, "STALE_RUN")
    assert_error(
        api.put(f"/tasks/{task['task_id']}/checkpoints/s", json={"state": 1, "owner_run": stale}), 409, "STALE_RUN"
    )
    assert_error(wait(api, {**first, "run_id": stale}, "e"), 409, "STALE_RUN")
    assert api.get(f"/tasks/{task['task_id']}/checkpoints/s").status_code == 404
    row = job(db_url, task["task_id"])
    assert (row["state"], [e["error"] for e in row["errors"]]) == ("running", ["lease_expired"] * 4)  # §6 reclaim
    failed = api.post(f"/runs/{again['run_id']}/fail", json={"error": "boom"}).json()
    assert failed["attempt"] == 1
    assert ("next_run_id" in failed) == (max_attempts > 1), "the budget is the one the task was created with"
    assert runs_of(api, task)[0] == (again["run_id"], 1, "failed")


# --- timeouts --------------------------------------------------------------------------------------


# --- timeouts --------------------------------------------------------------------------------------


def test_start_timeout_cancels_an_unclaimed_task_with_a_recorded_reason(api, clock, db_url):
    make_queue(api)
    swept = make_task(api, start_timeout=30)
    at_claim = make_task(api, start_timeout=30)
    unlimited = make_task(api, start_timeout=0)
    clock.advance(30)
    report = api.belay.sweep_once()
    assert report.timed_out == [int(swept["task_id"][5:]), int(at_claim["task_id"][5:])]
    assert job(db_url, swept["task_id"])["state"] == "cancelled"
    runs = api.get("/runs", params={"task_id": swept["task_id"]}).json()["runs"]
    assert [(r["status"], r["error"]) for r in runs] == [("failed", "cancelled: start_timeout")]
    assert [t["task_id"] for t in claim(api, limit=5)] == [unlimited["task_id"]]


def test_start_timeout_is_enforced_at_claim_time_between_sweeps(api, clock, db_url):
    make_queue(api)
    late = make_task(api, start_timeout=10)
    fresh = make_task(api)
    clock.advance(10)
    assert [t["task_id"] for t in claim(api, limit=1)] == [fresh["task_id"]]
    assert job(db_url, late["task_id"])["state"] == "cancelled"


def test_execution_timeout_cancels_a_running_task_and_fences_its_run(api, clock, db_url):
    make_queue(api)
    task = make_task(api, execution_timeout=60, max_attempts=3)
    run = claim(api, timeout=600)[0]["run_id"]
    clock.advance(59)
    assert api.put(f"/tasks/{task['task_id']}/checkpoints/s", json={"state": 1, "owner_run": run}).status_code == 200
    clock.advance(1)
    assert_error(api.post(f"/runs/{run}/complete", json={}), 409, "EXECUTION_TIMEOUT")
    row = job(db_url, task["task_id"])
    assert row["state"] == "cancelled"
    runs = api.get("/runs", params={"task_id": task["task_id"]}).json()["runs"]
    assert runs[-1]["error"] == "cancelled: execution_timeout"


def test_execution_timeout_is_enforced_by_the_sweeper_across_retries(api, clock, db_url):
    make_queue(api)
    task = make_task(api, execution_timeout=100, max_attempts=10, retry_strategy={"kind": "fixed", "base_seconds": 60})
    run = claim(api)[0]["run_id"]
    api.post(f"/runs/{run}/fail", json={"error": "x"})
    clock.advance(100)
    assert api.belay.sweep_once().timed_out == [int(task["task_id"][5:])]
    assert job(db_url, task["task_id"])["state"] == "cancelled"


# --- checkpoints -----------------------------------------------------------------------------------


def step_names(db_url: str, task_id: str) -> list[str]:
    with psycopg.connect(db_url) as c:
        return [
            n for (n,) in c.execute("SELECT name FROM belay_steps WHERE job_id = %s ORDER BY seq", (int(task_id[5:]),))
        ]


def test_checkpoints_are_written_only_by_the_live_run_and_a_put_replaces_the_state(api, clock, db_url):
    make_queue(api)
    task, _other = make_task(api, max_attempts=3), make_task(api)
    tid = task["task_id"]
    run = claim(api, timeout=10)[0]["run_id"]
    other_run = claim(api)[0]["run_id"]
    put = lambda body, name="step1": api.put(f"/tasks/{tid}/checkpoints/{name}", json=body)  # noqa: E731
    assert_error(put({"state": 1, "owner_run": other_run}), 409, "NOT_OWNER")
    assert_error(put({"state": 1, "owner_run": "nonsense"}), 409, "NOT_OWNER")
    assert api.get(f"/tasks/{tid}/checkpoints/step1").status_code == 404
    r = put({"state": {"done": 5}, "owner_run": run, "extend_claim_by": 120})
    assert r.json() == {"task_id": tid, "step_name": "step1", "updated_at": iso(clock())}
    assert job(db_url, tid)["lease_until"] == clock() + timedelta(seconds=120)
    clock.advance(1)
    assert put({"state": {"done": 6}, "owner_run": run}).json()["updated_at"] == iso(clock())
    assert api.get(f"/tasks/{tid}/checkpoints/step1").json() == {
        "task_id": tid,
        "step_name": "step1",
        "state": {"done": 6},
        "updated_at": iso(clock()),
    }
    clock.advance(120)
    api.belay.sweep_once()
    new = claim(api)[0]["run_id"]
    assert_error(put({"state": {"done": 99}, "owner_run": run}), 409, "STALE_RUN")
    assert_error(put({"state": 2, "owner_run": run}, "step2"), 409, "STALE_RUN")
    assert api.get(f"/tasks/{tid}/checkpoints/step2").status_code == 404
    assert api.get(f"/tasks/{tid}/checkpoints/step1").json()["state"] == {"done": 6}, "the stale write changed nothing"
    assert put({"state": 2, "owner_run": new}, "step2").status_code == 200
    assert step_names(db_url, tid) == [
        "$http:task",
        "$checkpoint:step1#1",
        "$checkpoint:step1#2",
        "$checkpoint:step2#1",
    ]
    assert api.get(f"/tasks/{tid}/checkpoints/$http:task").status_code == 404  # reserved: not a checkpoint


def test_checkpoints_and_waits_are_per_task_when_tasks_share_step_names(api, clock, db_url):
    """Checkpoints are keyed by (task_id, step_name): two tasks of one queue using the same step names
    never see each other's state, version numbers or resolved waits."""
    make_queue(api)
    a, b = make_task(api), make_task(api)
    run_a, run_b = (t["run_id"] for t in claim(api, limit=2))
    put = lambda task, run, state, step="s": api.put(  # noqa: E731
        f"/tasks/{task['task_id']}/checkpoints/{step}", json={"state": state, "owner_run": run}
    )
    assert put(a, run_a, "a1").status_code == 200
    clock.advance(1)
    assert put(a, run_a, "a2").status_code == 200
    assert_error(api.get(f"/tasks/{b['task_id']}/checkpoints/s"), 404, "CHECKPOINT_NOT_FOUND")
    clock.advance(1)
    assert put(b, run_b, "b1").status_code == 200
    assert api.get(f"/tasks/{a['task_id']}/checkpoints/s").json()["state"] == "a2"
    assert api.get(f"/tasks/{b['task_id']}/checkpoints/s").json() == {
        "task_id": b["task_id"],
        "step_name": "s",
        "state": "b1",
        "updated_at": iso(clock()),
    }
    assert step_names(db_url, a["task_id"])[1:] == ["$checkpoint:s#1", "$checkpoint:s#2"]
    assert step_names(db_url, b["task_id"])[1:] == ["$checkpoint:s#1"]  # its own numbering
    # a wait resolves from the task's own checkpoint of its step, never another task's
    api.post("/events", json={"event_name": "shared", "payload": "p"})
    assert wait(api, {"run_id": run_a, "task_id": a["task_id"]}, "shared", step="w").json()["payload"] == "p"
    r = wait(api, {"run_id": run_b, "task_id": b["task_id"]}, "other", step="w")
    assert r.status_code == 202, r.text
    assert_error(api.get(f"/tasks/{b['task_id']}/checkpoints/w"), 404, "CHECKPOINT_NOT_FOUND")


def test_checkpointed_steps_resume_from_the_last_checkpoint_after_a_crash(api, clock, db_url):
    """The API's flagship pattern, as its clients write it: save progress under one checkpoint name after
    each of three steps; the first run stops calling after the second (a crash); the claim times out;
    the next run reads the checkpoint, does only the third step and completes."""
    make_queue(api)
    tid = make_task(api, task_name="pipeline", params={"steps": 3}, max_attempts=3)["task_id"]
    done: list[tuple[int, str]] = []

    def run_steps(stop_after: int | None = None) -> str:
        (task,) = claim(api, timeout=30)
        assert task["task_id"] == tid
        r = api.get(f"/tasks/{tid}/checkpoints/progress")
        completed = r.json()["state"]["completed"] if r.status_code == 200 else 0
        for step in range(completed + 1, task["params"]["steps"] + 1):
            done.append((step, task["run_id"]))
            r = api.put(
                f"/tasks/{tid}/checkpoints/progress",
                json={"state": {"completed": step}, "owner_run": task["run_id"], "extend_claim_by": 30},
            )
            assert r.status_code == 200, r.text
            if step == stop_after:
                return task["run_id"]
        assert api.post(f"/runs/{task['run_id']}/complete", json={"result": {"steps": len(done)}}).status_code == 200
        return task["run_id"]

    first = run_steps(stop_after=2)
    assert claim(api) == [], "the crashed run still holds its claim"
    clock.advance(30)
    api.belay.sweep_once()
    second = run_steps()
    assert done == [(1, first), (2, first), (3, second)], "steps 1 and 2 ran once, the retry resumed at step 3"
    row = job(db_url, tid)
    assert (row["state"], row["attempt"]) == ("succeeded", 2)
    assert api.get(f"/tasks/{tid}/checkpoints/progress").json()["state"] == {"completed": 3}
    assert_error(
        api.put(f"/tasks/{tid}/checkpoints/progress", json={"state": {"completed": 0}, "owner_run": first}),
        409,
        "STALE_RUN",
    )
    assert api.get(f"/tasks/{tid}/checkpoints/progress").json()["state"] == {"completed": 3}


def test_a_plain_step_from_an_earlier_server_reads_as_the_checkpoints_first_version(api, db_url):
    make_queue(api)
    task = make_task(api)
    run = claim(api)[0]["run_id"]
    with psycopg.connect(db_url) as c:
        c.execute(
            "INSERT INTO belay_steps (job_id, seq, name, value, inserted_at) VALUES (%s, 9, 'old', %s, now())",
            (int(task["task_id"][5:]), b'{"v": 0}'),
        )
    assert api.get(f"/tasks/{task['task_id']}/checkpoints/old").json()["state"] == {"v": 0}
    api.put(f"/tasks/{task['task_id']}/checkpoints/old", json={"state": {"v": 1}, "owner_run": run})
    assert api.get(f"/tasks/{task['task_id']}/checkpoints/old").json()["state"] == {"v": 1}
    assert step_names(db_url, task["task_id"])[-1] == "$checkpoint:old#1"


# --- the listTasks extension ---------------------------------------------------------------------


def test_tasks_listing_filters_by_queue_and_status_and_pages_with_a_cursor(api, clock):
    make_queue(api)
    make_queue(api, "other")
    a, b, c = (make_task(api, params={"i": i}, headers={"h": "v"}) for i in range(3))
    elsewhere = make_task(api, "other")
    running = claim(api)[0]
    api.post(f"/runs/{running['run_id']}/schedule", json={"run_at": iso(clock() + timedelta(seconds=60))})
    done = claim(api)[0]
    api.post(f"/runs/{done['run_id']}/complete", json={})
    listing = api.get("/tasks", params={"queue_name": "q"}).json()
    assert api.get("/tasks", params={"queue": "q"}).json() == listing  # the earlier parameter name
    assert [(t["id"], t["status"], t["state"]) for t in listing["tasks"]] == [
        (a["task_id"], "pending", "sleeping"),
        (b["task_id"], "completed", "completed"),
        (c["task_id"], "pending", "pending"),
    ]
    first = listing["tasks"][0]
    assert {k: first[k] for k in ("queue_name", "task_name", "attempt", "max_attempts", "params", "headers")} == {
        "queue_name": "q",
        "task_name": "work",
        "attempt": 1,
        "max_attempts": 1,
        "params": {"i": 0},
        "headers": {"h": "v"},
    }, "max_attempts as created: the schedule spent none"
    assert set(first) >= {"id", "task_name", "status", "queue_name", "max_attempts", "created_at", "completed_at"}
    assert first["completed_at"] is None and listing["tasks"][1]["completed_at"] == iso(clock())
    named = make_task(api, task_name="other_kind")
    assert [t["id"] for t in api.get("/tasks", params={"task_name": "other_kind"}).json()["tasks"]] == [
        named["task_id"]
    ]
    assert api.get("/tasks", params={"queue_name": "other", "task_name": "other_kind"}).json() == {"tasks": []}
    assert [t["task_id"] for t in api.get("/tasks", params={"state": "pending"}).json()["tasks"]] == [
        c["task_id"],
        elsewhere["task_id"],
        named["task_id"],
    ]
    page = api.get("/tasks", params={"limit": 2}).json()
    assert [t["task_id"] for t in page["tasks"]] == [a["task_id"], b["task_id"]]
    rest = api.get("/tasks", params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert [t["task_id"] for t in rest["tasks"]] == [c["task_id"], elsewhere["task_id"]]
    last = api.get("/tasks", params={"limit": 2, "cursor": rest["next_cursor"]}).json()
    assert [t["task_id"] for t in last["tasks"]] == [named["task_id"]] and "next_cursor" not in last
    assert_error(api.get("/tasks", params={"queue_name": "nope"}), 404, "QUEUE_NOT_FOUND")
    assert_error(api.get("/tasks", params={"status": "claimed"}), 400, "VALIDATION_ERROR")
    r = api.get("/tasks", params={"limit": 0})
    assert_error(r, 400, "VALIDATION_ERROR")
    assert r.json()["error"] == "limit must be at least 1, got 0"
    assert_error(api.get("/tasks", params={"cursor": "zz"}), 400, "VALIDATION_ERROR")


CLIENT_TASK_STATUSES = {"pending", "completed", "failed", "canceled"}  # TaskStatus of both reference clients


def test_tasks_listing_speaks_the_reference_clients_task_status_and_state_is_the_finer_one(api, clock):
    make_queue(api)
    held, scheduled, waiting, finished = (make_task(api) for _ in range(4))
    claim(api)  # held
    run = claim(api)[0]
    api.post(f"/runs/{run['run_id']}/schedule", json={"run_at": iso(clock() + timedelta(seconds=60))})
    run = claim(api)[0]
    assert wait(api, run, "never").status_code == 202
    run = claim(api)[0]
    assert api.post(f"/runs/{run['run_id']}/complete", json={}).status_code == 200
    ready = make_task(api)
    listing = api.get("/tasks", params={"queue_name": "q"}).json()["tasks"]
    # the clients' TaskStatus is pending | completed | failed | canceled: pending until the task finishes
    assert {t["status"] for t in listing} <= CLIENT_TASK_STATUSES
    assert [(t["id"], t["status"], t["state"]) for t in listing] == [
        (held["task_id"], "pending", "running"),
        (scheduled["task_id"], "pending", "sleeping"),
        (waiting["task_id"], "pending", "sleeping"),
        (finished["task_id"], "completed", "completed"),
        (ready["task_id"], "pending", "pending"),
    ]
    unfinished = api.get("/tasks", params={"status": "pending"}).json()["tasks"]
    assert [t["id"] for t in unfinished] == [t["task_id"] for t in (held, scheduled, waiting, ready)]
    assert [t["id"] for t in api.get("/tasks", params={"state": "running"}).json()["tasks"]] == [held["task_id"]]
    assert [t["id"] for t in api.get("/tasks", params={"state": "sleeping"}).json()["tasks"]] == [
        scheduled["task_id"],
        waiting["task_id"],
    ]
    assert_error(api.get("/tasks", params={"status": "running"}), 400, "VALIDATION_ERROR")
    assert_error(api.get("/tasks", params={"state": "claimed"}), 400, "VALIDATION_ERROR")


# --- events and wait-for-event -------------------------------------------------------------------


def wait(api, run: dict, event: str, timeout: int = 60, step: str = "w") -> httpx.Response:
    return api.post(
        f"/runs/{run['run_id']}/wait-for-event",
        json={"event_name": event, "timeout_seconds": timeout, "task_id": run["task_id"], "step_name": step},
    )


def test_wait_for_an_existing_event_answers_200_with_its_payload(api):
    make_queue(api)
    make_task(api)
    assert api.post("/events", json={"event_name": "ready", "payload": {"v": 1}}).status_code == 201
    run = claim(api)[0]
    assert wait(api, run, "ready").json() == {"status": "resolved", "payload": {"v": 1}}
    assert api.get(f"/tasks/{run['task_id']}/checkpoints/w").json()["state"] == {"v": 1}


def test_wait_parks_the_run_with_its_deadline_and_emit_wakes_it(api, clock, db_url):
    make_queue(api)
    task = make_task(api, max_attempts=1)
    run = claim(api)[0]
    r = wait(api, run, "go", timeout=300)
    n = task["task_id"][5:]
    assert r.status_code == 202 and r.json()["status"] == "sleeping"
    assert r.json()["next_run_id"] == f"run_{n}_2"
    assert runs_of(api, task) == [(f"run_{n}_2", 1, "sleeping")]  # the run that waits, and no other
    row = job(db_url, task["task_id"])
    assert (row["state"], row["await_name"], row["ready_at"]) == ("awaiting", "go", clock() + timedelta(seconds=300))
    assert claim(api) == []
    assert_error(api.post(f"/runs/{run['run_id']}/complete", json={}), 409, "STALE_RUN")  # it sleeps
    api.post("/events", json={"event_name": "go", "payload": [1, 2]})
    assert runs_of(api, task) == [(f"run_{n}_2", 1, "pending")]  # woken in place
    resumed = claim(api)[0]
    assert (resumed["run_id"], resumed["attempt"], resumed["max_attempts"]) == (f"run_{n}_2", 1, 1)
    assert wait(api, resumed, "go").json() == {"status": "resolved", "payload": [1, 2]}
    assert api.post(f"/runs/{resumed['run_id']}/complete", json={}).status_code == 200
    assert runs_of(api, task) == [(f"run_{n}_2", 1, "completed")]
    assert api.get("/runs", params={"status": "sleeping"}).json() == {"runs": []}


def test_wait_resumed_after_the_deadline_without_the_event_answers_408(api, clock):
    make_queue(api)
    task = make_task(api, max_attempts=1)
    run = claim(api)[0]
    assert wait(api, run, "never", timeout=30).status_code == 202
    clock.advance(29)
    assert claim(api) == []
    [listed] = api.get("/runs", params={"task_id": task["task_id"]}).json()["runs"]
    assert listed["status"] == "sleeping" and "wait_timed_out" not in listed
    clock.advance(1)
    [listed] = api.get("/runs", params={"task_id": task["task_id"]}).json()["runs"]
    assert (listed["status"], listed["wait_timed_out"]) == ("pending", True)  # marked: woken by its deadline
    resumed = claim(api)[0]  # the deadline made it claimable again
    assert resumed["run_id"] == listed["id"]
    r = wait(api, resumed, "never", timeout=30)  # the first deadline holds, not a fresh 30 s
    assert r.status_code == 408 and r.json()["status"] == "timeout"
    assert api.post(f"/runs/{resumed['run_id']}/fail", json={"error": "no event"}).status_code == 200
    assert runs_of(api, task) == [(resumed["run_id"], 1, "failed")]


def test_concurrent_emit_and_wait_for_event_never_strand_a_run(api, db_url):
    """Each run waits for its own event while another thread emits it, released together: whichever
    wins the scope lock, the run either resolves at once or is parked and woken — never left asleep."""
    make_queue(api)
    n = 24
    for _ in range(n):
        make_task(api)
    runs = claim(api, limit=n)
    barrier = threading.Barrier(2 * n)

    def do_wait(run):
        with httpx.Client(base_url=api.client.base_url, timeout=30) as c:
            barrier.wait()
            return wait(c, run, f"e-{run['task_id']}").status_code

    def do_emit(run):
        with httpx.Client(base_url=api.client.base_url, timeout=30) as c:
            barrier.wait()
            return c.post("/events", json={"event_name": f"e-{run['task_id']}"}).status_code

    with ThreadPoolExecutor(2 * n) as pool:
        waits = [pool.submit(do_wait, r) for r in runs]
        emits = [pool.submit(do_emit, r) for r in runs]
        codes = [f.result() for f in waits]
        assert all(f.result() == 201 for f in emits)
    assert set(codes) <= {200, 202}
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM belay_jobs WHERE state = 'awaiting'").fetchone()[0] == 0
    assert len(claim(api, limit=n)) == codes.count(202)  # every parked run is claimable again


# --- runs listing --------------------------------------------------------------------------------


def test_runs_listing_defaults_to_50_and_pages_with_a_stable_cursor(api):
    make_queue(api)
    tasks = [make_task(api) for _ in range(60)]
    first = api.get("/runs").json()
    assert len(first["runs"]) == 50 and "next_cursor" in first
    make_task(api)  # a new task lands after the cursor: no skip, no repeat
    second = api.get("/runs", params={"cursor": first["next_cursor"]}).json()
    ids = [r["id"] for r in first["runs"] + second["runs"]]
    assert ids == [t["run_id"] for t in tasks] + [f"run_{len(tasks) + 1}_1"]
    assert "next_cursor" not in second
    assert all(r["status"] == "pending" for r in second["runs"])
    assert api.get("/runs", params={"limit": 5, "status": "claimed"}).json() == {"runs": []}
    assert_error(api.get("/runs", params={"cursor": "garbage"}), 400, "VALIDATION_ERROR")
    assert api.get("/runs", params={"task_id": "task_999999"}).json() == {"runs": []}


# --- workflow runs -------------------------------------------------------------------------------


def test_workflow_runs_group_tasks_and_report_status_consistently(api, db_url):
    make_queue(api)
    wf = api.post("/workflow-runs", json={"workflow_name": "pipe", "tags": {"env": "test"}}).json()
    assert wf["status"] == "pending"
    wid = wf["workflow_run_id"]
    a = make_task(api, workflow_run_id=wid)
    b = make_task(api, workflow_run_id=wid)
    assert a["workflow_run_id"] == wid and job(db_url, a["task_id"])["workflow_id"] == wid
    assert api.patch(f"/workflow-runs/{wid}", json={}).json()["status"] == "pending"
    run = claim(api)[0]
    assert api.patch(f"/workflow-runs/{wid}", json={"result": {"x": 1}}).json()["status"] == "running"
    assert_error(api.patch(f"/workflow-runs/{wid}", json={"status": "completed"}), 409, "TASKS_STILL_RUNNING")
    r = api.patch(f"/workflow-runs/{wid}", json={"status": "canceled"}).json()
    assert r["status"] == "canceled"
    assert job(db_url, a["task_id"])["state"] == job(db_url, b["task_id"])["state"] == "cancelled"
    assert_error(api.post(f"/runs/{run['run_id']}/complete", json={}), 409, "STALE_RUN")
    assert_error(api.patch(f"/workflow-runs/{wid}", json={"status": "running"}), 409, "WORKFLOW_RUN_FINISHED")
    assert_error(api.post("/queues/q/tasks", json={"task_name": "t", "workflow_run_id": wid}), 409)
    assert_error(api.post("/queues/q/tasks", json={"task_name": "t", "workflow_run_id": "wfr_x"}), 404)
    assert_error(api.patch("/workflow-runs/wfr_" + "0" * 32, json={}), 404)


# --- cleanup ---------------------------------------------------------------------------------------


def test_cleanup_removes_expired_tasks_and_events_and_nothing_else(api, clock, db_url):
    make_queue(api, "a", task_ttl_seconds=100, event_ttl_seconds=50)
    make_queue(api, "b", task_ttl_seconds=0, event_ttl_seconds=60)
    done_a = make_task(api, "a")
    failed_a = make_task(api, "a")
    live_a = make_task(api, "a")
    done_b = make_task(api, "b")
    for run in claim(api, "a", limit=2):
        verb = "complete" if run["task_id"] == done_a["task_id"] else "fail"
        api.put(f"/tasks/{run['task_id']}/checkpoints/s", json={"state": 1, "owner_run": run["run_id"]})
        api.post(f"/runs/{run['run_id']}/{verb}", json={"error": "x"} if verb == "fail" else {})
    api.post(f"/runs/{claim(api, 'b')[0]['run_id']}/complete", json={})
    wf = api.post("/workflow-runs", json={"workflow_name": "w"}).json()["workflow_run_id"]
    api.post("/events", json={"event_name": "old"})
    with Client(db_url, clock=clock) as sdk:
        foreign = sdk.enqueue("elsewhere", "kind").id  # a job no HTTP queue owns
        sdk.signal("user-scope", "sig", {"keep": True})
        sdk.cancel(foreign)
    clock.advance(50)
    api.post("/events", json={"event_name": "young"})
    clock.advance(20)  # now t0+70: "old" is past every queue's event TTL (max 60), "young" is not
    report = api.belay.sweep_once()
    assert report.pruned_events == 1 and report.pruned_tasks == []
    clock.advance(31)  # t0+101: a's finished tasks are past its task TTL
    report = api.belay.sweep_once()
    assert sorted(report.pruned_tasks) == sorted(int(t["task_id"][5:]) for t in (done_a, failed_a))
    for gone in (done_a, failed_a):
        assert job(db_url, gone["task_id"]) is None
    for kept in (live_a, done_b):
        assert job(db_url, kept["task_id"]) is not None
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM belay_jobs WHERE id = %s", (foreign,)).fetchone()[0] == 1
        assert (
            c.execute(
                "SELECT count(*) FROM belay_steps WHERE job_id = ANY(%s)",
                ([int(done_a["task_id"][5:]), int(failed_a["task_id"][5:])],),
            ).fetchone()[0]
            == 0
        )
        signals = sorted(c.execute("SELECT scope, name FROM belay_signals").fetchall())
    assert signals == [("http:events", "young"), ("http:workflow-runs", wf), ("user-scope", "sig")]


# --- input, errors, auth, the document -------------------------------------------------------------


def test_bad_input_is_400_with_the_error_schema_never_500(api):
    make_queue(api)
    cases = [
        ("post", "/queues", {"name": ""}),
        ("post", "/queues", {"name": 5}),
        ("post", "/queues", [1]),
        ("post", "/queues", {"name": "x", "cleanup": {"task_ttl_seconds": -1}}),
        ("post", "/queues/q/tasks", {"task_name": "t", "max_attempts": 0}),
        ("post", "/queues/q/tasks", {"task_name": "t", "headers": {"a": 1}}),
        ("post", "/queues/q/tasks", {"task_name": "t", "params": {"s": "nul\u0000"}}),
        ("post", "/queues/q/tasks", {"task_name": "t", "retry_strategy": {"kind": "linear", "base_seconds": 1}}),
        ("post", "/queues/q/tasks", {"task_name": "t", "workflow_run_id": None}),
        ("post", "/queues/q/tasks/claim", {"limit": 0, "claim_timeout": 5}),
        ("post", "/queues/q/tasks/claim", {"limit": 1, "claim_timeout": 5, "long_poll_seconds": 4}),
        ("post", "/runs/run_1_1/schedule", {"run_at": "tomorrow"}),
        ("post", "/runs/run_1_1/fail", {}),
        ("post", "/events", {"payload": 1}),
        ("patch", "/workflow-runs/wfr_x", {"status": "done"}),
    ]
    for method, url, body in cases:
        assert_error(api.request(method, url, json=body), 400, "VALIDATION_ERROR")
    assert_error(api.post("/queues", content=b"{not json"), 400)
    assert_error(api.get("/runs", params={"limit": "many"}), 400)


def test_unknown_ids_are_404_never_500(api):
    for method, url, body in [
        ("post", "/runs/run_999_1/complete", {}),
        ("post", "/runs/nonsense/fail", {"error": "x"}),
        ("post", "/runs/run_99999999999999999999_1/schedule", {"run_at": "2026-01-01T00:00:00Z"}),
        (
            "post",
            "/runs/run_5_1/wait-for-event",
            {"event_name": "e", "timeout_seconds": 1, "task_id": "task_5", "step_name": "s"},
        ),
        ("get", "/tasks/task_7/checkpoints/s", None),
        ("get", "/tasks/bogus/checkpoints/s", None),
        ("put", "/tasks/task_7/checkpoints/s", {"state": 1, "owner_run": "run_7_1"}),
        ("delete", "/queues/nope", None),
        ("get", "/queues/nope/stats", None),
        ("post", "/queues/nope/tasks/claim", {"limit": 1, "claim_timeout": 1}),
        ("patch", "/workflow-runs/wfr_0123456789abcdef0123456789abcdef", {}),
        ("get", "/no/such/route", None),
    ]:
        assert_error(api.request(method, url, json=body), 404)


def test_mutating_requests_need_the_bearer_token_when_one_is_configured(db_url):
    with serve_api(db_url, token="s3cret") as api:
        anonymous = httpx.Client(base_url=api.client.base_url)
        r = anonymous.post("/queues", json={"name": "q"})
        assert_error(r, 401, "UNAUTHORIZED")
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert_error(anonymous.post("/queues", json={"name": "q"}, headers={"Authorization": "Bearer nope"}), 401)
        assert anonymous.get("/queues").status_code == 200  # reads are open
        assert api.post("/queues", json={"name": "q"}).status_code == 201
        doc = httpx.get(f"{api.base}/openapi.json").json()
        assert doc["paths"]["/queues"]["post"]["security"] == [{"bearerAuth": []}]
        anonymous.close()


def test_without_a_token_the_server_binds_loopback_only():
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        check_bind(host, None)
    for host in ("0.0.0.0", "::", "192.0.2.1", "example.com"):
        with pytest.raises(BindRefused):
            check_bind(host, None)
        check_bind(host, "token")
    result = CliRunner().invoke(
        main, ["serve", "--database-url", "postgresql://unused", "--host", "0.0.0.0"], env={"BELAY_HTTP_TOKEN": ""}
    )
    assert result.exit_code != 0 and "loopback" in result.output


def test_long_poll_claim_is_woken_by_pg_notify_from_another_client(db_url):
    with serve_api(db_url, poll_interval=30) as api:  # the polling floor is out of reach: only a wake-up helps
        make_queue(api)
        started = time.monotonic()

        def enqueue_elsewhere() -> None:
            with Client(db_url) as sdk:
                sdk.enqueue("q", "work")

        timer = threading.Timer(0.3, enqueue_elsewhere)
        timer.start()
        r = api.post("/queues/q/tasks/claim", json={"limit": 1, "claim_timeout": 5, "long_poll_seconds": 10})
        timer.join()
        assert len(r.json()["tasks"]) == 1
        assert time.monotonic() - started < 5


def test_long_poll_returns_empty_when_nothing_arrives(db_url):
    with serve_api(db_url, max_long_poll=0.3) as api:
        make_queue(api)
        r = api.post("/queues/q/tasks/claim", json={"limit": 1, "claim_timeout": 5, "long_poll_seconds": 5})
        assert r.json() == {"tasks": []}
