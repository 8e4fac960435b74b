"""The HTTP server's hot paths (impl/http/fastpath.py): completeRun requests coalesced into one
statement keep each run's own §7 fence and outcome; a batch the database refuses is retried per
request; the one-round-trip claim honours §6 queue options (paused, admission) like the full path.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from impl.http.fastpath import CompletionBatcher
from impl.store.pgrows import result_payload
from model.envelope import decode
from tests.http_support import claim_tasks, http_api, http_clock, job, make_tasks  # noqa: F401  (fixtures: api, clock)


def claim(api, limit: int, queue: str = "q", timeout: int = 30) -> list[str]:
    """The run ids of the claimed tasks."""
    return [t["run_id"] for t in claim_tasks(api, limit, queue, timeout)]


def batch_complete(api, db_url: str, runs: list[str], *, batch_sql=None, close_first: bool = False, **kw):
    """Complete `runs` (result = the run id) through a CompletionBatcher of our own, all requests
    queued before its first statement runs. Returns (outcome or exception per run, batcher)."""
    service = api.belay.service
    now = api.belay.clock()
    q = service.store.q

    async def go():
        pool = AsyncConnectionPool(db_url, min_size=1, max_size=4, open=False, kwargs={"autocommit": True})
        await pool.open()
        if close_first:
            await pool.close()
        try:
            batcher = CompletionBatcher(
                pool, batch_sql or q.q("http_complete_batch"), q.q("http_complete_solo"), max_in_flight=1, **kw
            )
            params = [service.completion_params(now, run, {"result": run}) for run in runs]
            outcomes = await asyncio.gather(*(batcher.complete(p) for p in params), return_exceptions=True)
            return outcomes, batcher
        finally:
            await pool.close()

    return asyncio.run(go())


def test_completions_that_arrive_together_commit_in_one_statement_each_with_its_result_and_notification(api, db_url):
    make_tasks(api, 6)
    runs = claim(api, 6)
    channel = api.belay.service._channel()
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        outcomes, batcher = batch_complete(api, db_url, runs)
        heard = {n.payload for n in listener.notifies(timeout=10, stop_after=6)}
    assert outcomes == [True] * 6
    assert batcher.batches == 1 and batcher.completed == 6
    for run in runs:
        row = job(db_url, run)
        assert (row["state"], decode(bytes(row["result"]))) == ("succeeded", run)
    assert heard == {result_payload(int(run.split("_")[1])) for run in runs}


def test_in_one_batch_a_stale_pending_or_repeated_run_completes_nothing_and_the_live_ones_complete(api, db_url, clock):
    live_task, other_task = make_tasks(api, 2, max_attempts=2)
    first = claim(api, 2, timeout=1)  # attempt 1 of both
    clock.advance(5)
    api.belay.sweep_once()  # both claims expired: both ready again
    second = claim(api, 2)  # attempt 2 of both
    (pending_task,) = make_tasks(api, 1)
    stale, live = (f"run_{live_task.removeprefix('task_')}_{n}" for n in (1, 2))
    repeated = f"run_{other_task.removeprefix('task_')}_2"
    pending = f"run_{pending_task.removeprefix('task_')}_1"
    assert {stale, *second} == {*first, *second} - {first[1]} and {live, repeated} == set(second)

    outcomes, batcher = batch_complete(api, db_url, [stale, live, repeated, repeated, pending])
    assert outcomes == [False, True, True, False, False]
    assert batcher.batches == 2  # a job's second request (stale or repeated) waits for the next batch
    assert decode(bytes(job(db_url, live)["result"])) == live  # the live run's write, not the stale one's
    assert job(db_url, pending)["state"] == "ready"

    before = job(db_url, live_task)
    r = api.post(f"/runs/{stale}/complete", json={"result": "late"})
    assert r.status_code == 409 and r.json()["code"] == "STALE_RUN", r.text
    assert job(db_url, live_task) == before


def test_a_batch_the_database_refuses_is_retried_one_request_at_a_time(api, db_url):
    make_tasks(api, 4)
    runs = claim(api, 4)
    refused = sql.SQL("SELECT (1 / 0)::bigint AS id WHERE %(ids)s::bigint[] IS NOT NULL")  # SQLSTATE 22012
    outcomes, batcher = batch_complete(api, db_url, runs, batch_sql=refused)
    assert outcomes == [True] * 4 and batcher.batches == 0
    assert all(job(db_url, run)["state"] == "succeeded" for run in runs)


def test_a_batch_whose_outcome_is_unknown_reports_the_failure_to_every_request(api, db_url):
    make_tasks(api, 3)
    runs = claim(api, 3)
    outcomes, _ = batch_complete(api, db_url, runs, close_first=True)
    assert all(isinstance(o, psycopg.OperationalError) for o in outcomes), outcomes
    assert all(job(db_url, run)["state"] == "running" for run in runs)


def test_concurrent_complete_requests_through_the_server_all_complete(api, db_url):
    make_tasks(api, 24)
    runs = claim(api, 24)
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda run: api.post(f"/runs/{run}/complete", json={"result": run}).status_code, runs))
    assert codes == [200] * 24
    assert all(job(db_url, run)["state"] == "succeeded" for run in runs)
    completions = api.belay.completions
    assert completions is not None and completions.completed == 24


def test_claims_honour_a_paused_queue_and_the_queues_admission_options(api, db_url):
    tasks = make_tasks(api, 3)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("""UPDATE belay_queues SET opts = opts || '{"paused": true}' WHERE name = 'q'""")
        assert claim(api, 5) == []
        assert [job(db_url, t)["state"] for t in tasks] == ["ready"] * 3
        c.execute("""UPDATE belay_queues SET opts = '{"global_limit": 1}' WHERE name = 'q'""")
        assert len(claim(api, 5)) == 1
        c.execute("""UPDATE belay_queues SET opts = '{"cleanup": {"task_ttl_seconds": 60}}' WHERE name = 'q'""")
        assert len(claim(api, 5)) == 2
    r = api.post("/queues/nope/tasks/claim", json={"limit": 1, "claim_timeout": 30})
    assert r.status_code == 404 and r.json()["code"] == "QUEUE_NOT_FOUND", r.text
