"""Edges of the HTTP API and the operator's surface that no other test pinned down (found by planting
mutants in impl/http and impl/ops): each test is one behaviour of the served API, the `belay` day-2
commands, the MCP server or the dashboard, against real PostgreSQL.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import httpx
import pytest
from click.testing import CliRunner

from impl.client import Client
from impl.http.server import running
from impl.http.testing import serve_api
from impl.ops.cli import main
from impl.ops.dashboard import create_app as create_dashboard
from impl.ops.operator import Operator
from impl.ops.shapes import Refused
from model.ops import JobSpec, WorkflowMember
from tests.http_support import claim_tasks, http_api, http_clock, job  # noqa: F401  (fixtures: api, clock)
from tests.test_http_api import assert_error

OLD = datetime(2020, 1, 1, tzinfo=UTC)  # long past every retention, whatever today is


def make_queue(api, name: str = "q") -> None:
    assert api.post("/queues", json={"name": name}).status_code == 201


def make_task(api, queue: str = "q", **fields) -> dict:
    r = api.post(f"/queues/{queue}/tasks", json={"task_name": "work", **fields})
    assert r.status_code == 201, r.text
    return r.json()


def belay(url: str, *args: str):
    return CliRunner().invoke(main, list(args), env={"BELAY_DATABASE_URL": url}, catch_exceptions=False)


def out(result) -> object:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- the HTTP API --------------------------------------------------------------------------------


def test_a_run_id_two_claims_ahead_of_a_never_claimed_task_is_404_not_409(api, db_url):
    """Only the live run and the pending next one exist: run_<n>_2 of a task never claimed names no run."""
    make_queue(api)
    task = make_task(api)
    n = task["task_id"][5:]
    assert_error(api.post(f"/runs/run_{n}_2/complete", json={}), 404, "RUN_NOT_FOUND")
    assert_error(api.post(f"/runs/run_{n}_2/fail", json={"error": "x"}), 404, "RUN_NOT_FOUND")
    assert_error(api.post(f"/runs/run_{n}_1/complete", json={}), 409, "RUN_NOT_CLAIMED")
    assert job(db_url, task["task_id"])["state"] == "ready"


def test_deleting_a_queue_needs_the_bearer_token_when_one_is_configured(db_url):
    with serve_api(db_url, token="s3cret") as api:
        assert api.post("/queues", json={"name": "q"}).status_code == 201
        with httpx.Client(base_url=api.client.base_url) as anonymous:
            assert_error(anonymous.delete("/queues/q"), 401, "UNAUTHORIZED")
            assert_error(anonymous.delete("/queues/q", headers={"Authorization": "Bearer nope"}), 401)
        assert [q["name"] for q in api.get("/queues").json()["queues"]] == ["q"]
        assert api.delete("/queues/q").status_code == 204


def test_a_task_cancelled_with_its_workflow_run_is_listed_as_canceled_not_failed(api):
    make_queue(api)
    wfr = api.post("/workflow-runs", json={"workflow_name": "nightly"}).json()["workflow_run_id"]
    task = make_task(api, workflow_run_id=wfr)
    assert api.patch(f"/workflow-runs/{wfr}", json={"status": "canceled"}).json()["status"] == "canceled"
    [listed] = api.get("/tasks").json()["tasks"]
    assert (listed["task_id"], listed["status"], listed["state"]) == (task["task_id"], "canceled", "canceled")
    assert [t["task_id"] for t in api.get("/tasks", params={"status": "canceled"}).json()["tasks"]] == [task["task_id"]]
    assert api.get("/tasks", params={"status": "failed"}).json()["tasks"] == []


def test_a_workflow_run_with_an_unfinished_task_cannot_be_marked_failed(api, db_url):
    """completed and failed need every task of the workflow run finished (409); nothing changes."""
    make_queue(api)
    wfr = api.post("/workflow-runs", json={"workflow_name": "nightly"}).json()["workflow_run_id"]
    task = make_task(api, workflow_run_id=wfr)
    for status in ("failed", "completed"):
        assert_error(api.patch(f"/workflow-runs/{wfr}", json={"status": status}), 409, "TASKS_STILL_RUNNING")
    assert job(db_url, task["task_id"])["state"] == "ready"
    assert api.post("/queues/q/tasks", json={"task_name": "more", "workflow_run_id": wfr}).status_code == 201


# --- the operator's surface ----------------------------------------------------------------------


def test_prune_keeps_cancelled_jobs_on_their_own_retention_not_the_failed_one(db_url):
    with Client(db_url, clock=lambda: OLD) as c:
        c.cancel(c.enqueue("p", "k").id)
    dry = out(belay(db_url, "prune", "--dry-run", "--failed", "infinity", "--json"))
    assert dry["jobs"] == {"cancelled": 1}
    assert out(belay(db_url, "prune", "--dry-run", "--cancelled", "infinity", "--json"))["jobs"] == {}


def test_the_operators_list_jobs_refuses_a_limit_below_1(db_url):
    with Client(db_url, clock=lambda: OLD) as c:
        c.enqueue("p", "k")
    with Operator(db_url) as op:
        for limit in (0, -1):
            with pytest.raises(Refused, match="limit must be between 1 and 1000"):
                op.list_jobs(limit=limit)
        assert len(op.list_jobs(limit=1).jobs) == 1


def test_the_mcp_list_jobs_tool_filters_by_queue(db_url):
    from tests.test_mcp import payload, session

    with Client(db_url, clock=lambda: OLD) as c:
        a = c.enqueue("a", "k").id
        c.enqueue("b", "k")

    async def calls(s):
        return [await s.call_tool("list_jobs", {"queue": "a"})]

    [listed] = session(db_url, calls=calls)
    assert [j["id"] for j in payload(listed)["jobs"]] == [a]


def dashboard(db_url):
    now = datetime.now(UTC)
    return running(create_dashboard(db_url, token=None, clock=lambda: now), token=None)


def test_a_queue_name_holding_markup_is_escaped_on_the_tiles(db_url):
    name = '"><b id="pwned">x</b>'
    with Client(db_url, clock=lambda: OLD) as c:
        c.enqueue(name, "k")
    with dashboard(db_url) as base, httpx.Client(base_url=base) as http:
        tiles = http.get("/fragments/tiles", params={"view": "tiles"}).text
    assert 'id="pwned"' not in tiles and "<b " not in tiles
    assert 'data-queue="&#34;&gt;&lt;b id=&#34;pwned&#34;&gt;x&lt;/b&gt;"' in tiles


def test_the_backlog_counts_held_jobs(db_url):
    with Client(db_url, clock=lambda: OLD) as c:
        c.enqueue_workflow(
            "wf", [WorkflowMember("a", JobSpec("w", "k")), WorkflowMember("b", JobSpec("w", "k"), deps=("a",))]
        )
        assert sorted(j.state for j in c.workflow("wf")) == ["held", "ready"]
    with dashboard(db_url) as base, httpx.Client(base_url=base) as http:
        table = http.get("/fragments/tiles", params={"view": "table"}).text
    row = table.split('data-queue="w"', 1)[1].split("</tr>", 1)[0]
    assert re.search(r'<td class="backlog">2</td>', row), row
