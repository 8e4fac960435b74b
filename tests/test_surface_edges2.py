"""Edges of the HTTP API and the operator's surface that no other test pinned down, second round (hunt M:
bugs planted in impl/http, impl/ops and impl/telemetry that the existing tests let pass). Each test is one
documented behaviour — of the served API, the day-2 commands, the MCP server, the dashboard or the
telemetry — with the sentence it enforces quoted in its docstring; most are pure or use a throwaway
database through the existing fixtures.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from impl import telemetry
from impl.client import Client
from impl.ops.dashboard.views import _doomed, queue_listing, step_rows
from impl.ops.operator import Operator
from model.ops import JobSpec
from model.rows import Job, Step
from tests.http_support import claim_tasks, http_api, http_clock, job, make_tasks  # noqa: F401  (fixtures: api, clock)

OLD = datetime(2020, 1, 1, tzinfo=UTC)  # long past every retention, whatever today is


def _job(**fields) -> Job:
    """A belay_jobs row as the dashboard reads it, with defaults for what a test leaves out."""
    base = dict(
        id=1, queue="q", worker="work", input=None, meta=None, state="ready", priority=0, attempt=0,
        max_attempts=3, ready_at=None, inserted_at=OLD, started_at=None, finished_at=None, lease_until=None,
        leased_by=None, errors=[], result=None, cancel_requested=False, unique_key=None, unique_mode=None,
        cron_name=None, cron_slot=None, workflow_id=None, wf_name=None, wf_deps=None, wf_ignore=None,
        parent_id=None, await_scope=None, await_name=None, budget_usd_micros=None, budget_tokens=None,
        spent_usd_micros=0, spent_tokens=0,
    )  # fmt: skip
    return Job(**{**base, **fields})


# --- the dashboard (pure: its views over hand-built rows) ---------------------------------------------


@dataclass
class _Tile:
    queue: str
    counts: dict[str, int]


def test_the_queue_filter_matches_names_case_insensitively():
    """The dashboard's queue list (impl/ops/dashboard/views.py queue_listing): "The tiles the filter keeps
    (case-insensitive substring of the name)" — typing `mail` finds the queue `Mailers`, and `MAIL` finds
    `mailers`."""
    tiles = [_Tile("Mailers", {}), _Tile("mailers", {}), _Tile("billing", {})]
    assert [t.queue for t in queue_listing(tiles, "name", "mail")] == ["Mailers", "mailers"]
    assert [t.queue for t in queue_listing(tiles, "name", "MAIL")] == ["Mailers", "mailers"]


def test_sorting_queues_by_failures_puts_the_most_failed_first():
    """The dashboard's queue list (impl/ops/dashboard/views.py queue_listing), in the order chosen:
    "failures (most failed jobs first, then name)"."""
    tiles = [_Tile("a", {"failed": 1}), _Tile("b", {"failed": 9}), _Tile("c", {}), _Tile("d", {"failed": 9})]
    assert [t.queue for t in queue_listing(tiles, "failures", "")] == ["b", "d", "a", "c"]


def test_a_step_whose_running_total_only_reaches_the_budget_is_not_over_it():
    """§8.2 (and the dashboard's StepRow.over_budget): a budget is crossed when the spend is *strictly
    greater* than it — a journal that spends exactly the budget is within it; one micro-dollar or token
    more is over."""
    job = _job(state="succeeded", budget_usd_micros=100, budget_tokens=10)
    steps = (
        Step(1, 1, "a", b"", 60, 4, OLD),
        Step(1, 2, "b", b"", 40, 6, OLD),  # exactly the budget, both columns
        Step(1, 3, "c", b"", 1, 0, OLD),  # one micro-dollar past it
    )
    assert [r.over_budget for r in step_rows(job, steps)] == [False, False, True]
    tokens = (Step(1, 1, "a", b"", 0, 10, OLD), Step(1, 2, "b", b"", 0, 1, OLD))
    assert [r.over_budget for r in step_rows(job, tokens)] == [False, True]


def test_a_cancelled_member_whose_failed_dep_it_ignores_is_not_drawn_as_doomed():
    """§8.3: a member whose dep ended with an outcome it ignores (`wf_ignore`) is not doomed by it — the
    dashboard's DAG marks doomed only the members settlement cancelled because of a dep; one cancelled
    for another reason while ignoring its failed dep is not."""
    members = [
        _job(id=1, workflow_id="w", wf_name="a", state="failed", attempt=1),
        _job(id=2, workflow_id="w", wf_name="b", state="cancelled", wf_deps=("a",), wf_ignore=("failed",)),
        _job(id=3, workflow_id="w", wf_name="c", state="cancelled", wf_deps=("a",)),
    ]
    assert _doomed(members) == {"c"}


def test_a_cancelled_member_that_ran_was_not_doomed_by_its_dep():
    """§8.3 "doomed": settlement cancels a held member before it ever runs; a member cancelled after it
    had run (attempt > 0: an operator's cancel) was not doomed by its failed dep."""
    members = [
        _job(id=1, workflow_id="w", wf_name="a", state="failed", attempt=1),
        _job(id=2, workflow_id="w", wf_name="b", state="cancelled", attempt=1, wf_deps=("a",)),
    ]
    assert _doomed(members) == set()


# --- telemetry (pure) ----------------------------------------------------------------------------------


@pytest.fixture
def away_from_utc():
    """The process's local time zone set five and a half hours east of UTC for the test."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "IST-5:30"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_a_json_log_lines_time_is_utc_whatever_the_local_zone(away_from_utc):
    """`belay worker --log-format json` (docs/operations.md): each line's `time` is an RFC 3339 instant with
    a `Z` suffix — so it must be the UTC time of the record, not the host's local wall clock."""
    at = datetime(2026, 3, 1, 12, 0, 5, 250000, tzinfo=UTC)
    record = logging.LogRecord("belay", logging.INFO, __file__, 1, "belay worker n1 running", None, None)
    record.created, record.msecs = at.timestamp(), 250.0
    line = json.loads(telemetry.JsonLinesFormatter().format(record))
    assert line["time"] == "2026-03-01T12:00:05.250Z"


# --- the HTTP API ------------------------------------------------------------------------------------


def test_a_listing_limit_above_1000_returns_1000(api, db_url):
    """docs/http-api.md "Limits": "listing limit | at least 1; values above 1,000 return 1,000" — for the
    runs listing and the tasks listing alike, with a next_cursor since more follow."""
    with Client(db_url) as client:
        client.enqueue_many([JobSpec("q", "work") for _ in range(1001)])
    runs = api.get("/runs", params={"limit": 5000})
    assert runs.status_code == 200, runs.text
    assert len(runs.json()["runs"]) == 1000 and "next_cursor" in runs.json()
    tasks = api.get("/tasks", params={"limit": 5000})
    assert tasks.status_code == 200, tasks.text
    assert len(tasks.json()["tasks"]) == 1000 and "next_cursor" in tasks.json()


def test_a_page_that_holds_the_last_run_has_no_next_cursor(api):
    """The OpenAPI's next_cursor: "Pass as `cursor` to fetch the next page. Absent when there are no more
    results." — a page that ends exactly at the last run (or task) carries none."""
    make_tasks(api, 3)
    first = api.get("/runs", params={"limit": 3}).json()
    assert len(first["runs"]) == 3 and "next_cursor" not in first
    page = api.get("/runs", params={"limit": 2}).json()
    assert len(page["runs"]) == 2 and "next_cursor" in page
    rest = api.get("/runs", params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert len(rest["runs"]) == 1 and "next_cursor" not in rest
    tasks = api.get("/tasks", params={"limit": 3}).json()
    assert len(tasks["tasks"]) == 3 and "next_cursor" not in tasks


# --- the operator's surface --------------------------------------------------------------------------


def test_prune_deletes_in_batches_until_nothing_is_left(db_url):
    """Operator.prune / `belay prune` (§8.7 retention now): "otherwise prune in batches until done" — with a
    batch smaller than what is due, every due job is still deleted, whether the last batch is full or not."""
    for due in (4, 5):  # a multiple of the batch, and not
        with Client(db_url, clock=lambda: OLD) as c:
            ids = [c.enqueue("p", "k").id for _ in range(due)]
            for job_id in ids:
                c.cancel(job_id)  # cancelled in 2020: long past a day's retention
        with Operator(db_url) as op:
            done = op.prune({"cancelled": 86400}, dry_run=False, batch=2)
            assert done["pruned_jobs"] == due
            assert op.stats().get("p", {}) == {}


def test_an_mcp_authorizer_that_returns_nothing_refuses_the_mutation(db_url):
    """impl/ops/mcp_server.py (docs/operations.md, MCP): an authorizer "is called as authorizer(tool_name,
    arguments) before each mutation ... and a falsy return or an exception refuses it" — an authorizer
    that forgets to return (None) allows nothing, and nothing is changed."""
    import anyio
    from mcp.server.fastmcp.exceptions import ToolError

    from impl.ops.mcp_server import build_server

    with Client(db_url, clock=lambda: OLD) as c:
        job_id = c.enqueue("m", "k").id
    for falsy in (None, 0, ""):
        calls: list[str] = []
        with Operator(db_url) as op:
            server = build_server(
                db_url, operator=op, authorizer=lambda tool, arguments, r=falsy, seen=calls: seen.append(tool) or r
            )
            with pytest.raises(ToolError, match="refused by the authorizer"):
                anyio.run(server.call_tool, "cancel_job", {"job_id": job_id})
        assert calls == ["cancel_job"]
    with Client(db_url) as c:
        assert c.job(job_id).state == "ready"


def _events(db_url: str) -> int:
    with psycopg.connect(db_url) as c:
        return c.execute("SELECT count(*) FROM belay_signals WHERE scope = 'http:events'").fetchone()[0]


def test_events_are_kept_while_any_queues_cleanup_policy_still_wants_them(api, clock, db_url):
    """The OpenAPI's CleanupPolicy: event_ttl_seconds — "Delete events older than this many seconds. 0
    disables event cleanup."; events are API-wide, so (impl/http/service.py sweep_once) they are "kept while
    any queue's policy still wants them": pruned after the longest event_ttl_seconds of all queues, and
    never while a queue says 0."""
    api.post("/queues", json={"name": "short", "cleanup": {"event_ttl_seconds": 10}})
    api.post("/queues", json={"name": "long", "cleanup": {"event_ttl_seconds": 1000}})
    assert api.post("/events", json={"event_name": "e1", "payload": 1}).status_code in (200, 201)
    clock.advance(100)
    api.belay.sweep_once()
    assert _events(db_url) == 1, "the longer policy still wants the event"
    api.post("/queues", json={"name": "never", "cleanup": {"event_ttl_seconds": 0}})
    clock.advance(10_000)
    api.belay.sweep_once()
    assert _events(db_url) == 1, "a queue whose event_ttl_seconds is 0 keeps events"
    assert api.delete("/queues/never").status_code == 204
    api.belay.sweep_once()
    assert _events(db_url) == 0


def test_a_cleanup_policy_of_zero_never_prunes_finished_tasks(api, clock, db_url):
    """docs/http-api.md "Queues": finished tasks are pruned by the cleanup policy "(3 days by default, never
    with `task_ttl_seconds: 0`)" (the OpenAPI's CleanupPolicy: "0 disables task cleanup")."""
    assert api.post("/queues", json={"name": "q", "cleanup": {"task_ttl_seconds": 0}}).status_code == 201
    [task] = make_tasks(api, 1)
    [claimed] = claim_tasks(api, 1)
    assert api.post(f"/runs/{claimed['run_id']}/complete", json={"result": 1}).status_code == 200
    clock.advance(30 * 86400)
    api.belay.sweep_once()
    assert job(db_url, task) is not None
    assert api.get("/queues").json()["queues"][0]["cleanup"]["task_ttl_seconds"] == 0


def test_one_sweep_reclaims_every_expired_claim_and_prunes_every_expired_task_batch_by_batch(api, clock, db_url):
    """impl/http/service.py sweep_once: "Reclaim expired claims (claimable again at once ...) ... and apply
    every queue's cleanup policy" — all of them in one sweep, however many batches that takes."""
    assert api.post("/queues", json={"name": "q", "cleanup": {"task_ttl_seconds": 60}}).status_code == 201
    make_tasks(api, 5)
    assert len(claim_tasks(api, 5, timeout=10)) == 5
    clock.advance(11)
    report = api.belay.service.sweep_once(clock(), batch=2)
    assert len(report.requeued) == 5
    claimed = claim_tasks(api, 10)
    assert len(claimed) == 5
    for run in claimed:
        assert api.post(f"/runs/{run['run_id']}/complete", json={}).status_code == 200
    clock.advance(61)
    assert len(api.belay.service.sweep_once(clock(), batch=2).pruned_tasks) == 5


def test_a_failed_tasks_attempt_is_its_last_runs(api):
    """docs/http-api.md "Counting": "`attempt` (ClaimedTask, RunSummary, failRun, TaskSummary) is 1 plus the
    runs of the task that failed before this one ... So `attempt == max_attempts` means 'this is the last
    run'" — a task whose every run failed lists the attempt of its last run, never one past its budget."""
    [task] = make_tasks(api, 1, max_attempts=2)
    for attempt in (1, 2):
        [run] = claim_tasks(api, 1)
        assert run["attempt"] == attempt
        assert api.post(f"/runs/{run['run_id']}/fail", json={"error": "boom"}).json()["attempt"] == attempt
        [listed] = api.get("/tasks").json()["tasks"]
        assert (listed["attempt"], listed["status"]) == ((2, "pending") if attempt == 1 else (2, "failed"))
    runs = api.get("/runs", params={"task_id": task}).json()["runs"]
    assert [r["attempt"] for r in runs] == [1, 2]


def test_a_run_at_with_a_utc_offset_names_the_same_instant(api, clock):
    """OpenAPI `format: date-time` (RFC 3339): `2026-11-30T14:00:10+02:00` is 12:00:10 UTC — the offset is
    taken off the local time (east of Greenwich: earlier in UTC), and a run scheduled so is claimable
    exactly then."""
    make_tasks(api, 2)
    start = clock()  # 2026-11-30T12:00:00Z
    east, west = claim_tasks(api, 2)
    r = api.post(f"/runs/{east['run_id']}/schedule", json={"run_at": "2026-11-30T14:00:10+02:00"})
    assert r.status_code == 200 and r.json()["scheduled_at"] == "2026-11-30T12:00:10Z", r.text
    r = api.post(f"/runs/{west['run_id']}/schedule", json={"run_at": "2026-11-30T07:00:20-05:00"})
    assert r.status_code == 200 and r.json()["scheduled_at"] == "2026-11-30T12:00:20Z", r.text
    clock.set(start + timedelta(seconds=10))
    assert [t["task_id"] for t in claim_tasks(api, 2)] == [east["task_id"]]
    clock.set(start + timedelta(seconds=20))
    assert [t["task_id"] for t in claim_tasks(api, 2)] == [west["task_id"]]


def test_a_task_whose_wait_deadline_is_now_is_listed_pending(api, clock):
    """docs/http-api.md "GET /tasks": `state` is "`pending` (claimable now, or held), ... `sleeping`
    (scheduled, backing off before a retry, waiting for an event)" — a wait whose deadline is exactly now
    is claimable now (§6: due when ready_at <= now), so the task is pending, not sleeping."""
    [task] = make_tasks(api, 1)
    [run] = claim_tasks(api, 1)
    body = {"event_name": "never", "timeout_seconds": 10, "task_id": task, "step_name": "s"}
    assert api.post(f"/runs/{run['run_id']}/wait-for-event", json=body).status_code == 202
    clock.advance(5)
    assert api.get("/tasks").json()["tasks"][0]["state"] == "sleeping"
    clock.advance(5)
    assert api.get("/tasks").json()["tasks"][0]["state"] == "pending"
    assert [t["task_id"] for t in api.get("/tasks", params={"state": "pending"}).json()["tasks"]] == [task]
    assert len(claim_tasks(api, 1)) == 1  # and it is indeed claimable now


def test_a_held_job_is_listed_as_a_pending_task(api, db_url):
    """docs/http-api.md "GET /tasks": `state` is "`pending` (claimable now, or held)" — a workflow member
    another client enqueued, held until its dependency finishes, is pending, never sleeping."""
    from model.ops import WorkflowMember

    with Client(db_url, clock=lambda: OLD) as c:
        c.enqueue_workflow(
            "wf", [WorkflowMember("a", JobSpec("w", "k")), WorkflowMember("b", JobSpec("w", "k"), deps=("a",))]
        )
        held = next(j.id for j in c.workflow("wf") if j.state == "held")
    tasks = {t["task_id"]: t for t in api.get("/tasks").json()["tasks"]}
    assert (tasks[f"task_{held}"]["state"], tasks[f"task_{held}"]["status"]) == ("pending", "pending")
    assert f"task_{held}" in {t["task_id"] for t in api.get("/tasks", params={"state": "pending"}).json()["tasks"]}


def test_the_sweep_reclaims_a_job_of_another_client_that_this_server_handed_out(api, clock, db_url):
    """docs/http-api.md "Runs": "this server's sweep reclaims HTTP tasks only — jobs with a `$http:task`
    step, or leased by the server's node" — a job another client enqueued and this server handed out as a
    run is re-queued by the sweep when its claim expires (it keeps its own column budget)."""
    assert api.post("/queues", json={"name": "q"}).status_code == 201
    with Client(db_url, clock=clock) as c:
        job_id = c.enqueue("q", "work", max_attempts=3).id
    [run] = claim_tasks(api, 1, timeout=10)
    assert run["task_id"] == f"task_{job_id}"
    clock.advance(11)
    assert api.belay.sweep_once().requeued == [job_id]
    row = job(db_url, run["task_id"])
    assert (row["state"], row["attempt"]) == ("ready", 1)


def test_a_prune_dry_run_counts_the_rate_windows_the_prune_then_deletes(db_url):
    """Operator.prune: "Dry-run: what a prune at `now` would delete (... rate windows)" — §8.7 prunes rate
    windows older than a day, so a two-hour-old window is neither counted nor deleted, a two-day-old one
    both."""
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    with psycopg.connect(db_url, autocommit=True) as c:
        for age in (timedelta(hours=2), timedelta(days=2)):
            c.execute("INSERT INTO belay_rate (bucket, window_start, count) VALUES ('queue:r', %s, 1)", (now - age,))
    with Operator(db_url, clock=lambda: now) as op:
        assert op.prune(dry_run=True)["rate_windows"] == 1
        assert op.prune(dry_run=False)["rate_windows"] == 1


# --- binding: loopback only without a token ------------------------------------------------------------


def test_a_dashboard_with_an_authorizer_may_bind_beyond_loopback():
    """docs/operations.md (dashboard) "Who may act": "Without a token or an authorizer it is read-only ...
    and binds loopback only" — an authorizer (or a token) lets it listen elsewhere; neither does not."""
    from impl.ops.dashboard.auth import BindRefused, check_bind

    with pytest.raises(BindRefused):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", None, lambda tool, arguments: True)
    check_bind("0.0.0.0", "secret")
    check_bind("127.0.0.1", None)


def test_the_bearer_scheme_is_matched_case_insensitively():
    """`belay serve --token`: mutating requests need `Authorization: Bearer <token>` (docs/operations.md);
    the scheme is the HTTP authentication scheme of RFC 6750, whose name is case-insensitive (RFC 9110
    §11.1) — `bearer` and `BEARER` carry the token too, and a wrong token or no scheme is still 401."""
    from impl.http.errors import ApiError
    from impl.http.hot import check_token

    for given in ("Bearer s3cret", "bearer s3cret", "BEARER s3cret"):
        check_token("s3cret", "POST", given)
    for given in ("Bearer wrong", "s3cret", "Basic s3cret", ""):
        with pytest.raises(ApiError) as refused:
            check_token("s3cret", "DELETE", given)
        assert refused.value.status == 401


def test_a_database_outage_answers_503_with_a_retry_after():
    """impl/http/hot.py error_response: a request the database could not serve answers 503
    DATABASE_UNAVAILABLE ("the database is unavailable; retry") in the Error schema — with `Retry-After`
    (RFC 9110 §10.2.3) so a client knows when to retry — not a 500."""
    from impl.http.hot import error_response

    answer = error_response(psycopg.OperationalError("connection refused"), "POST", "/api/v1/queues/q/tasks/claim")
    assert answer.status_code == 503
    assert json.loads(answer.body)["code"] == "DATABASE_UNAVAILABLE"
    assert int(answer.headers["retry-after"]) >= 1


# --- replay dry-run --------------------------------------------------------------------------------------


def _raising(*, steps: tuple[str, ...]):
    """A registry whose kind `flaky` journals `steps` in order, then raises."""
    from impl.worker import Registry

    reg = Registry()

    @reg.kind("flaky", queue="replay")
    def flaky(ctx, input):
        for name in steps:
            ctx.step(name, lambda value=name: value)
        raise RuntimeError("boom")

    return reg


def test_code_that_now_raises_before_journaled_steps_it_never_asks_for_is_a_divergence(db_url):
    """`belay replay ID --app` (impl/ops/replay.py): "After the code finished: every journaled entry must
    have been asked for" — also when the code raised: a failed job that journaled `a` then `b` before it
    raised, replayed by code that raises right after `a`, diverges at `b` (exit 3), it is not clean."""
    from impl.ops.replay import dry_run
    from impl.store import PgStore
    from tests.apps import replay_app

    with PgStore(db_url) as store, Client(db_url, clock=lambda: OLD) as client:
        job_id = client.enqueue("replay", "flaky", {}, max_attempts=1).id
        assert replay_app.run_one(store, _raising(steps=("a", "b")), OLD, "replay") == job_id
        assert client.job(job_id).state == "failed"
    assert dry_run(db_url, job_id, _raising(steps=("a", "b"))).divergence is None
    report = dry_run(db_url, job_id, _raising(steps=("a",)))
    assert report.divergence is not None and report.divergence.expected == "b", report.describe()
    assert not report.clean


def test_a_fixed_retry_strategy_is_capped_at_max_seconds_too(api, clock):
    """docs/http-api.md "Timeouts and retries": "`fixed` waits `base_seconds` before every retry;
    `exponential` waits ... both are capped at `max_seconds` when given"."""
    make_tasks(api, 1, max_attempts=2, retry_strategy={"kind": "fixed", "base_seconds": 60, "max_seconds": 5})
    [run] = claim_tasks(api, 1)
    failed = api.post(f"/runs/{run['run_id']}/fail", json={"error": "boom"}).json()
    assert datetime.fromisoformat(failed["next_attempt_at"]) == clock() + timedelta(seconds=5)
    clock.advance(5)
    assert len(claim_tasks(api, 1)) == 1


def test_a_jobs_journal_lists_the_signals_of_the_scope_it_awaits(db_url):
    """`belay jobs show` (Operator.journal): "the job with its journal — ... and the signals in its own scope
    (job:<id>) and the scope it awaits" — a job parked on `orders`/`paid` shows the `orders` signals there
    are (here `shipped`), beside its own scope's."""
    from model import worker_ops as w

    with Client(db_url, clock=lambda: OLD) as c:
        job_id = c.enqueue("j", "k").id
        c.signal("orders", "shipped", {"n": 1})
        c.steer(job_id, "hello")  # a signal in the job's own scope
        c.store.apply(w.Claim(OLD, "j", "n1", 1, timedelta(seconds=60)))
        c.store.apply(w.ParkAwait(OLD, job_id, 1, "orders", "paid"))
        assert c.job(job_id).state == "awaiting"
    with Operator(db_url) as op:
        shown = {(s["scope"], s["name"]) for s in op.journal(job_id)["signals"]}
    assert ("orders", "shipped") in shown
    assert any(scope == f"job:{job_id}" for scope, _ in shown)


def test_belay_worker_waits_for_a_database_not_migrated_yet(blank_db_url, capsys):
    """docs/python.md: "`belay worker` is a daemon: when the database is unreachable at start (or not
    migrated yet) it waits with backoff ... `--exit-on-unreachable SECONDS` makes it give up (exit 1) after
    that long" — a database with no Belay schema yet is waited for (one line), not a failure at once."""
    from types import SimpleNamespace

    from impl.ops.failures import wait_for_database

    started = time.monotonic()
    assert wait_for_database(blank_db_url, "public", SimpleNamespace(received=False), 0.6) is False
    assert time.monotonic() - started >= 0.6
    err = capsys.readouterr().err
    assert "waiting for the database" in err and "gave up after" in err
