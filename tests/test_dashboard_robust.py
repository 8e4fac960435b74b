"""The dashboard under bad input and unexpected errors (issue 53): no bare 500 with a traceback, every
refusal one clear line, every attempt one audit line; and its retry shares the Client SDK's refusal of a
doomed workflow member (impl/ops/operator.py decides it, for the CLI, the MCP server and the dashboard)."""

from __future__ import annotations

import logging
import re

import httpx
import psycopg
import pytest

from impl.ops.dashboard import audit
from impl.ops.dashboard.queries import DashboardQueries
from impl.store import PgStore
from tests import dashboard_world
from tests.test_dashboard import SEEDED, TOKEN, Captured, served

JS = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}


@pytest.fixture
def world(db_url):
    with PgStore(db_url) as store:
        yield dashboard_world.build(store, SEEDED)


@pytest.fixture
def audit_lines():
    log = logging.getLogger(audit.LOGGER)
    handler = Captured()
    log.addHandler(handler)
    yield handler.lines
    log.removeHandler(handler)


def member(db_url: str, name: str) -> int:
    with psycopg.connect(db_url) as c:
        return c.execute("SELECT id FROM belay_jobs WHERE wf_name = %s", (name,)).fetchone()[0]


def test_a_retry_of_a_doomed_workflow_member_is_refused_naming_the_dependency(db_url, world, audit_lines):
    notify, fetch = member(db_url, "notify"), member(db_url, "fetch")
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http:
        r = http.post(f"/jobs/{notify}/retry", headers=JS)
        assert r.status_code == 409, r.text
        body = r.json()
        assert (body["ok"], body["outcome"]) == (False, "doomed")
        assert (
            f"job {fetch}" in body["message"] and "'fetch'" in body["message"] and "retried: now" not in body["message"]
        )
        form = http.post(f"/jobs/{notify}/retry", headers={"Authorization": f"Bearer {TOKEN}"})
        assert form.status_code == 409 and "retry that dependency first" in form.text
    outcomes = [audit.parse(x)["outcome"] for x in audit_lines if "retry_job" in x]
    assert outcomes == ["doomed", "doomed"]


@pytest.mark.parametrize(
    "form",
    [{"scope": "", "name": "paid"}, {"scope": "orders", "name": ""}, {"name": "paid"}, {"scope": "o"}],
    ids=["empty-scope", "empty-name", "no-scope", "no-name"],
)
def test_a_signal_form_without_a_scope_or_a_name_is_a_400_with_one_line(db_url, world, audit_lines, form):
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http:
        r = http.post("/signals", headers=JS, data={**form, "payload": ""})
        assert r.status_code == 400, r.text
        assert r.json()["outcome"] == "bad_input" and "\n" not in r.json()["message"]
        page = http.post("/signals", headers={"Authorization": f"Bearer {TOKEN}"}, data={**form, "payload": ""})
        assert page.status_code == 400 and "Traceback" not in page.text
    assert [audit.parse(x)["status"] for x in audit_lines] == ["400", "400"]


def test_a_job_id_beyond_bigint_and_a_nul_in_a_path_are_not_found(db_url, world, audit_lines):
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http:
        for verb in ("cancel", "retry", "steer"):
            r = http.post(f"/jobs/99999999999999999999/{verb}", headers=JS)
            assert (r.status_code, r.json()["outcome"]) == (404, "not_found"), r.text
        r = http.post("/jobs/0/cancel", headers=JS)  # found by tests/test_fuzz_surfaces.py: was a 500
        assert (r.status_code, r.json()["outcome"]) == (404, "not_found"), r.text
        for path in ("/jobs/99999999999999999999", "/jobs/0", "/fragments/jobs/99999999999999999999", "/workflows/%00"):
            r = http.get(path)
            assert r.status_code == 404 and "Traceback" not in r.text, (path, r.text)
    assert [audit.parse(x)["outcome"] for x in audit_lines] == ["not_found"] * 4


def test_chart_minutes_that_are_not_a_number_are_a_400_in_words(db_url):
    with served(db_url) as base, httpx.Client(base_url=base) as http:
        for bad in ("abc", "", "1e3", "-5", "99999999999999999999"):
            r = http.get("/api/charts", params={"minutes": bad})
            assert r.status_code == 400, (bad, r.text)
            assert "int()" not in r.json()["error"] and "minutes" in r.json()["error"], r.text


def test_an_unexpected_error_is_a_logged_500_with_a_request_id_and_an_audit_line(
    db_url, world, audit_lines, monkeypatch, caplog
):
    def broken(*args, **kw):
        raise RuntimeError("planted: the tiles query broke")

    monkeypatch.setattr(DashboardQueries, "tiles", broken)
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http, caplog.at_level(logging.ERROR):
        for headers in ({}, {"Accept": "application/json"}):
            r = http.get("/", headers=headers)
            assert r.status_code == 500
            assert "Traceback" not in r.text and "planted" not in r.text
            rid = re.search(r"request id ([0-9a-f]{12})", r.text)
            assert rid, r.text
            assert any(rid.group(1) in rec.getMessage() and rec.exc_info for rec in caplog.records)
    lines = [audit.parse(x) for x in audit_lines]
    assert [(f["action"], f["status"], f["outcome"]) for f in lines] == [("page", "500", "error")] * 2
    assert all(re.fullmatch(r"[0-9a-f]{12}", f["request"]) for f in lines)
