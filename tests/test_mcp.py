"""The MCP server (impl/ops/mcp_server.py) through the official `mcp` SDK's own client over stdio: the
tools are listed and called against real PostgreSQL; mutations are refused (a tool error, nothing
changed) unless the server runs with --allow-mutations or an --authorizer that allows the call.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import psycopg
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from impl.client import Client
from impl.store import PgStore
from impl.store.snapshot import snapshot
from model import worker_ops as w
from tests.apps import replay_app as app

ROOT = Path(__file__).resolve().parents[1]
OLD = datetime(2020, 1, 1, tzinfo=UTC)
READ_ONLY = {
    "stats",
    "list_jobs",
    "get_job",
    "steps",
    "events",
    "workflow",
    "replay_dry_run",
    "soak_verdict",
    "list_crons",
    "get_cron",
}
MUTATING = {"retry_job", "cancel_job", "signal", "steer", "queue_put", "queue_pause", "queue_resume"}


def session(url: str, *flags: str, calls) -> list:
    """Start `belay mcp` over stdio, run `calls(session)` (async), return what it returns."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "impl.ops.cli", "mcp", "--database-url", url, *flags],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            return await calls(s)

    return anyio.run(run)


def payload(result) -> dict:
    assert not result.isError, result.content
    return json.loads(result.content[0].text)


def error(result) -> str:
    assert result.isError, result.content
    return result.content[0].text


def failed_job(url: str) -> int:
    with Client(url, clock=lambda: OLD) as c, PgStore(url) as store:
        job_id = c.enqueue("m", "k", max_attempts=1).id
        store.apply(w.Claim(OLD, "m", "n1", 1, timedelta(minutes=5)))
        store.apply(w.Ack(OLD, job_id, 1, w.Fail("Boom", "boom", None)))
    return job_id


def test_a_server_without_flags_answers_read_only_tools_and_refuses_every_mutation(db_url, tmp_path):
    with Client(db_url, clock=lambda: OLD) as c, PgStore(db_url) as store:
        job_id = c.enqueue(app.QUEUE, "pipeline", {"n": 21}).id
        app.drain(store, app.registry, lambda: OLD)
    failed = failed_job(db_url)
    latest = tmp_path / "latest"
    latest.mkdir()
    (latest / "results.json").write_text(
        json.dumps(
            {
                "run_id": "r1",
                "verdict": "valid",
                "exit_code": 0,
                "invariants": {"I1": {"verdict": "valid", "checks": 3}},
            }
        )
    )
    with psycopg.connect(db_url, autocommit=True) as c:
        before = snapshot(c)

    async def calls(s):
        tools = await s.list_tools()
        reads = [
            await s.call_tool("stats", {}),
            await s.call_tool("list_jobs", {"state": ["succeeded"], "limit": 2}),
            await s.call_tool("get_job", {"job_id": job_id}),
            await s.call_tool("steps", {"job_id": job_id}),
            await s.call_tool("events", {"job_id": job_id}),
            await s.call_tool("replay_dry_run", {"job_id": job_id}),
            await s.call_tool("soak_verdict", {}),
            await s.call_tool("get_job", {"job_id": 999}),
            await s.call_tool("workflow", {"workflow_id": "nope"}),
        ]
        writes = [
            await s.call_tool("retry_job", {"job_id": failed}),
            await s.call_tool("cancel_job", {"job_id": failed}),
            await s.call_tool("signal", {"scope": "x", "name": "y", "payload": {"a": 1}}),
            await s.call_tool("steer", {"job_id": failed, "payload": 1}),
            await s.call_tool("queue_put", {"name": "m", "opts": {"limit": 2}}),
        ]
        return tools, reads, writes

    tools, reads, writes = session(db_url, "--reports", str(tmp_path), "--app", "tests.apps.replay_app", calls=calls)
    stats, jobs, job, steps, events, replay, verdict, unknown, no_wf = reads
    listed = {t.name: t for t in tools.tools}
    assert set(listed) == READ_ONLY | MUTATING
    assert all(listed[n].annotations.readOnlyHint for n in READ_ONLY)
    assert not any(listed[n].annotations.readOnlyHint for n in MUTATING)
    assert payload(stats) == {app.QUEUE: {"succeeded": 3}, "m": {"failed": 1}}
    page = payload(jobs)
    assert len(page["jobs"]) == 2 and page["next_after"] == page["jobs"][-1]["id"]
    journal = payload(job)
    assert journal["job"]["result"] == {"total": 42, "children": 2} and journal["cost"]["usd_micros"] == 250
    assert [s["name"] for s in payload(steps)["steps"]] == ["fetch", "$spawn:pages", "summarize"]
    assert payload(events)["events"][0]["payload"] == {"progress": 0.5}
    assert payload(replay)["clean"] is True
    assert payload(verdict)["verdict"] == "valid" and payload(verdict)["invariants"]["I1"]["checks"] == 3
    assert "job 999 does not exist" in error(unknown)
    assert "workflow 'nope' has no jobs" in error(no_wf)
    for result in writes:
        assert "mutations are disabled on this server" in error(result)
        assert "--allow-mutations or --authorizer" in error(result)
    with psycopg.connect(db_url, autocommit=True) as c:
        assert snapshot(c) == before, "a refused mutation (or a read) changed the database"


def test_an_authorizer_decides_each_mutation_and_its_refusal_is_a_clear_tool_error(db_url):
    job_id = failed_job(db_url)

    async def calls(s):
        return [
            await s.call_tool("cancel_job", {"job_id": job_id}),
            await s.call_tool("steer", {"job_id": job_id, "payload": 1}),
            await s.call_tool("retry_job", {"job_id": job_id}),
            await s.call_tool("retry_job", {"job_id": job_id}),
        ]

    cancel, steer, retry, again = session(db_url, "--authorizer", "tests.apps.mcp_guard:only_retry", calls=calls)
    assert "refused by the authorizer: cancel_job" in error(cancel) and "needs a human" in error(cancel)
    assert "refused by the authorizer: steer" in error(steer)
    assert payload(retry) == {"job_id": job_id, "retried": True, "state": "ready"}
    assert "only failed or cancelled jobs can be retried" in error(again)
    with Client(db_url) as c:
        assert c.job(job_id).state == "ready" and c.signals(f"job:{job_id}") == ()


def test_allow_mutations_enables_every_mutating_tool(db_url):
    job_id = failed_job(db_url)

    async def calls(s):
        return [
            await s.call_tool("retry_job", {"job_id": job_id}),
            await s.call_tool("steer", {"job_id": job_id, "payload": {"hint": "h"}}),
            await s.call_tool("signal", {"scope": "orders", "name": "paid", "payload": 3}),
            await s.call_tool("queue_put", {"name": "m", "opts": {"limit": 2}}),
            await s.call_tool("queue_put", {"name": "m", "opts": {"limt": 2}}),
            await s.call_tool("cancel_job", {"job_id": job_id}),
        ]

    retry, steer, signal, put, bad_put, cancel = session(db_url, "--allow-mutations", calls=calls)
    assert payload(retry)["state"] == "ready" and payload(steer)["steered"] is True
    assert payload(signal)["woken"] == [] and payload(put)["opts"] == {"limit": 2}
    assert "unknown queue options" in error(bad_put)
    assert payload(cancel)["state"] == "cancelled"


# --- issue 29: pause/resume tools, queue_put merges, validated arguments, the server's own version ----


def test_pause_and_resume_tools_keep_a_queues_limits_and_queue_put_merges(db_url):
    opts = {"limit": 2, "global_limit": 5, "partition": {"field": "input", "key": "tenant"}}

    async def calls(s):
        return [
            await s.call_tool("queue_put", {"name": "m", "opts": opts}),
            await s.call_tool("queue_pause", {"name": "m"}),
            await s.call_tool("queue_put", {"name": "m", "opts": {"limit": 3}}),
            await s.call_tool("queue_put", {"name": "m", "opts": {"global_limit": None}}),
            await s.call_tool("queue_resume", {"name": "m"}),
            await s.call_tool("queue_put", {"name": "m", "opts": {"limit": 4}, "replace": True}),
            await s.call_tool("queue_pause", {"name": "nosuchqueue"}),
        ]

    put, paused, merged, dropped, resumed, replaced, ghost = session(db_url, "--allow-mutations", calls=calls)
    assert payload(put)["opts"] == opts
    assert payload(paused)["opts"] == {**opts, "paused": True}
    assert payload(merged)["opts"] == {**opts, "limit": 3, "paused": True}
    assert payload(dropped)["opts"] == {"limit": 3, "partition": opts["partition"], "paused": True}
    assert payload(resumed)["opts"] == {"limit": 3, "partition": opts["partition"]}
    assert payload(replaced)["opts"] == {"limit": 4}
    assert "queue 'nosuchqueue' has no belay_queues row and no jobs" in error(ghost)
    with psycopg.connect(db_url, autocommit=True) as c:
        assert c.execute("SELECT name FROM belay_queues").fetchall() == [("m",)]


def test_arguments_are_validated_with_messages_a_model_can_act_on_and_unknown_ones_refused(db_url):
    failed = failed_job(db_url)
    with Client(db_url, clock=lambda: OLD) as c:
        c.enqueue("m", "k")

    async def calls(s):
        return [
            await s.call_tool("list_jobs", {"state": "failed"}),
            await s.call_tool("list_jobs", {"state": ["failed", "ready"]}),
            await s.call_tool("list_jobs", {"state": "faild"}),
            await s.call_tool("list_jobs", {"stat": "failed"}),
            await s.call_tool("list_jobs", {"limit": 0}),
            await s.call_tool("get_job", {"job_id": "twelve"}),
            await s.call_tool("get_job", {}),
        ]

    one, many, typo, unknown, limit, not_int, missing = session(db_url, calls=calls)
    assert [j["id"] for j in payload(one)["jobs"]] == [failed]
    assert len(payload(many)["jobs"]) == 2
    assert "unknown state faild" in error(typo) and "failed" in error(typo)
    for message in (error(unknown), error(limit), error(not_int), error(missing)):
        assert "pydantic" not in message and "validation error" not in message.lower(), message
    assert "list_jobs: unknown argument 'stat' (did you mean 'state'?)" in error(unknown), error(unknown)
    assert "takes: state, queue, kind" in error(unknown)
    assert "list_jobs: argument 'limit'" in error(limit) and "1" in error(limit), error(limit)
    assert "get_job: argument 'job_id'" in error(not_int) and '"twelve"' in error(not_int), error(not_int)
    assert "get_job: argument 'job_id' is required" in error(missing), error(missing)


def test_the_server_reports_belays_version_not_the_mcp_sdks(db_url):
    from importlib.metadata import version

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "impl.ops.cli", "mcp", "--database-url", db_url],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            return await s.initialize()

    info = anyio.run(run).serverInfo
    assert (info.name, info.version) == ("belay", version("belay-toolkit")), info
    assert info.version != version("mcp")


def test_cron_read_tools_list_rows_and_the_apps_static_crons_with_next_slots(db_url):
    with Client(db_url) as c:
        c.put_cron("hourly", "0 * * * *", "report", {"x": 1}, opts={"queue": "reports"})

    async def calls(s):
        return [
            await s.call_tool("list_crons", {}),
            await s.call_tool("get_cron", {"name": "hourly", "slots": 2}),
            await s.call_tool("get_cron", {"name": "nope"}),
        ]

    listed, hourly, nope = session(db_url, "--app", "tests.apps.cron_app", calls=calls)
    crons = {c["name"]: c for c in payload(listed)["crons"]}
    assert set(crons) == {"hourly", "nightly", "every-minute"}
    assert (crons["nightly"]["source"], crons["hourly"]["source"]) == ("static", "row")
    assert len(crons["nightly"]["next_slots"]) == 3
    one = payload(hourly)
    assert one["queue"] == "reports" and [datetime.fromisoformat(t).minute for t in one["next_slots"]] == [0, 0]
    assert "cron 'nope' has no belay_crons row" in error(nope)
