"""The dashboard without a browser: keyset paging, bounded tile counts and their index variants, the
action endpoints (bearer token, sessions, CSRF, Origin), the bind rule, and input validation.

Served by uvicorn on a fresh database per test and read with httpx; the browser-level behaviour is
in test_dashboard_browser.py.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from impl.cli import main
from impl.dashboard import audit, create_app
from impl.dashboard.audit import LOGGER
from impl.dashboard.auth import Auth, BindRefused, Sessions, check_bind
from impl.dashboard.queries import (
    FILTERS,
    INDEXES,
    DashboardQueries,
    JobFilter,
    dashboard_blocks,
    index_blocks,
    like_pattern,
)
from impl.http.server import free_port, running
from impl.store import PgStore
from model import ops
from model import worker_ops as w
from soak.proxy import Proxy
from tests import dashboard_world

SEEDED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NOW = SEEDED + timedelta(seconds=60)
TOKEN = "t0ken"


@pytest.fixture
def world(db_url):
    with PgStore(db_url) as store:
        yield dashboard_world.build(store, SEEDED)


def served(db_url, token=None, **kw):
    return running(create_app(db_url, token=token, clock=lambda: NOW, **kw), token=token)


def ids_on(html: str) -> list[int]:
    return [int(x) for x in re.findall(r'<tr class="job-row" data-id="(\d+)"', html)]


def test_the_job_list_pages_by_keyset_and_shows_every_job_exactly_once(db_url, world):
    with PgStore(db_url) as store:
        store.apply(ops.Enqueue(SEEDED, tuple(ops.JobSpec("bulk", "noop", {"i": i}) for i in range(120))))
    with psycopg.connect(db_url) as c:
        expected = [r[0] for r in c.execute("SELECT id FROM belay_jobs ORDER BY id DESC")]
    seen, url, pages = [], "/jobs", 0
    with served(db_url) as base, httpx.Client(base_url=base) as http:
        while url:
            html = http.get(url).text
            seen += ids_on(html)
            pages += 1
            nxt = re.search(r'<a href="([^"]+)" id="next-page">', html)
            url = nxt.group(1).replace("&amp;", "&") if nxt else None
    assert seen == expected
    assert pages == -(-len(expected) // 50)


def test_no_dashboard_query_uses_offset():
    assert not [name for name, body in dashboard_blocks().items() if re.search(r"\bOFFSET\b", body, re.I)]


def test_no_job_list_query_under_any_filters_uses_offset():
    """Every composed page query (each combination of filters, first and later pages, with and without
    error text) and every index block: the keyset is the only way the job list moves."""
    q = DashboardQueries()
    values = {"queue": "q", "state": "ready", "kind": "k", "workflow": "wf", "parent": 1, "error": "x"}
    texts = [body for body in index_blocks().values()]
    for n in range(len(FILTERS) + 1):
        for names in itertools.combinations(FILTERS, n):
            for before in (None, 5):
                query, params = q.jobs_page_query(JobFilter(**{k: values[k] for k in names}), before)
                texts.append(query.as_string(None))
                assert ("window" in params) == ("error" in names)
    assert len(texts) == len(index_blocks()) + 2 ** (len(FILTERS) + 1)
    assert not [t for t in texts if re.search(r"\bOFFSET\b", t, re.I)]


def next_link(html: str) -> str | None:
    """The page's link onward: "older »" after a full page, or the error search's continue link."""
    found = re.search(r'<a href="([^"]+)" id="(?:next-page|continue-search)">', html)
    return found.group(1).replace("&amp;", "&") if found else None


def searched(html: str) -> str | None:
    """The text of the page's search-window note, whitespace collapsed."""
    found = re.search(r'<p class="search-window"[^>]*>(.*?)</p>', html, re.S)
    return " ".join(found.group(1).split()) if found else None


@pytest.fixture
def errored(db_url) -> list[int]:
    """400 jobs, newest first by id; every 7th has no errors; queues a and b. Returns the ids of the
    343 jobs with errors, newest first. All their errors say "haystack"; needles are set per test."""
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(
            "INSERT INTO belay_jobs (queue, worker, state, ready_at, inserted_at, finished_at, errors) "
            "SELECT CASE WHEN g %% 3 = 0 THEN 'b' ELSE 'a' END, 'w', "
            "       CASE WHEN g %% 7 = 0 THEN 'succeeded' ELSE 'failed' END, %(t)s, %(t)s, %(t)s, "
            "       CASE WHEN g %% 7 = 0 THEN '[]'::jsonb ELSE jsonb_build_array(jsonb_build_object("
            "           'attempt', 1, 'at', '2026-11-30T12:00:00+00:00', 'error', 'haystack', 'detail', 'row ' || g)) END "
            "FROM generate_series(1, 400) g ORDER BY g",
            {"t": SEEDED},
        )
        return [r[0] for r in c.execute("SELECT id FROM belay_jobs WHERE errors <> '[]' ORDER BY id DESC")]


def plant_needles(db_url, ids) -> None:
    """A second error entry whose detail holds the needle (mixed case: the search ignores case)."""
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(
            "UPDATE belay_jobs SET errors = errors || jsonb_build_array(jsonb_build_object("
            "'attempt', 2, 'at', '2026-11-30T12:00:01+00:00', 'error', 'timeout', 'detail', 'a NeEdLe in it')) "
            "WHERE id = ANY(%s)",
            (list(ids),),
        )


def follow(http: httpx.Client, url: str | None) -> list[tuple[list[int], str | None, str | None]]:
    """Every page from `url` on: (its job ids, its search-window note, its link onward)."""
    pages = []
    while url:
        html = http.get(url).text
        url = next_link(html)
        pages.append((ids_on(html), searched(html), url))
        assert len(pages) < 50, "the links onward never end"
    return pages


def test_an_error_text_match_older_than_the_window_is_found_by_following_the_continue_links(db_url, errored):
    E = errored
    assert len(E) == 343 and E[150] == E[149] - 1  # the window's edge falls between two jobs with errors
    # A full page inside the first window, a match at the second window's lowest id and one just below
    # it (an off-by-one continuation drops or repeats one of them), and the oldest job with errors.
    plant_needles(db_url, [*E[:70], E[149], E[150], E[-1]])
    with psycopg.connect(db_url) as c:
        expected = [
            r[0] for r in c.execute("SELECT id FROM belay_jobs WHERE errors::text ILIKE '%needle%' ORDER BY id DESC")
        ]
        expected_a = [
            r[0]
            for r in c.execute(
                "SELECT id FROM belay_jobs WHERE queue = 'a' AND errors::text ILIKE '%needle%' ORDER BY id DESC"
            )
        ]
    with served(db_url, error_window=100) as base, httpx.Client(base_url=base) as http:
        pages = follow(http, "/jobs?error=needle")
        combined = follow(http, "/jobs?error=needle&queue=a")
    assert [ids for ids, _, _ in pages] == [E[:50], [*E[50:70], E[149]], [E[150]], [E[-1]]]
    assert [job for ids, _, _ in pages for job in ids] == expected
    assert pages[0][1] is None  # a full page: plain "older »", no note
    assert pages[0][2] == f"/jobs?error=needle&before={E[49]}"
    assert pages[1][1] == (
        f"No more matches among the 100 jobs with errors below id {E[49]}: searched down to id {E[149]}. "
        "Older jobs with errors are not searched yet."
    )
    assert pages[1][2] == f"/jobs?error=needle&before={E[149]}"
    assert pages[2][2] == f"/jobs?error=needle&before={E[249]}"
    assert pages[3][1] == (
        f"Searched all 93 jobs with errors below id {E[249]}, down to id {E[-1]}: no more matches; "
        "the search is complete."
    )
    # With another filter too, each page still examines the next 100 jobs with errors (not the next
    # 100 jobs of queue a with errors, a walk whose length the data decides) and filters within them.
    windows = [E[:100], E[100:200], E[200:300], E[300:]]
    assert [ids for ids, _, _ in combined] == [[job for job in w if job in expected_a] for w in windows]
    assert [job for ids, _, _ in combined for job in ids] == expected_a
    assert [link for _, _, link in combined] == [f"/jobs?queue=a&error=needle&before={w[-1]}" for w in windows[:3]] + [
        None
    ]


def test_an_error_search_that_finds_nothing_reports_each_searched_range_until_the_oldest(db_url, errored):
    E = errored
    with served(db_url, error_window=100) as base, httpx.Client(base_url=base) as http:
        first = http.get("/jobs", params={"error": "absent text"}).text
        pages = follow(http, "/jobs?error=absent+text")
    assert "No jobs match." in first and "each page searches at most 100 jobs with errors" in first
    assert [ids for ids, _, _ in pages] == [[], [], [], []]
    assert [note for _, note, _ in pages] == [
        f"No more matches among the newest 100 jobs with errors: searched down to id {E[99]}. "
        "Older jobs with errors are not searched yet.",
        f"No more matches among the 100 jobs with errors below id {E[99]}: searched down to id {E[199]}. "
        "Older jobs with errors are not searched yet.",
        f"No more matches among the 100 jobs with errors below id {E[199]}: searched down to id {E[299]}. "
        "Older jobs with errors are not searched yet.",
        f"Searched all 43 jobs with errors below id {E[299]}, down to id {E[-1]}: no more matches; "
        "the search is complete.",
    ]
    assert [link for _, _, link in pages] == [
        f"/jobs?error=absent+text&before={E[99]}",
        f"/jobs?error=absent+text&before={E[199]}",
        f"/jobs?error=absent+text&before={E[299]}",
        None,
    ]
    # 343 = 7 × 49: the last window is exactly full, and the search still ends there (no empty page).
    with served(db_url, error_window=49) as base, httpx.Client(base_url=base) as http:
        pages = follow(http, "/jobs?error=absent+text")
    ranges = [f" searched down to id {E[k]}. Older jobs with errors are not searched yet." for k in range(48, 300, 49)]
    assert [note.split(":")[1] for _, note, _ in pages] == [*ranges, " no more matches; the search is complete."]
    assert pages[-1][1].startswith(f"Searched all 49 jobs with errors below id {E[293]}, down to id {E[-1]}")


def test_a_filtered_page_keeps_its_filters_on_the_next_page(db_url):
    with PgStore(db_url) as store:
        store.apply(ops.Enqueue(SEEDED, tuple(ops.JobSpec("a" if i % 2 else "b", "noop") for i in range(130))))
    with served(db_url) as base, httpx.Client(base_url=base) as http:
        first = http.get("/jobs", params={"queue": "a"}).text
        nxt = re.search(r'<a href="([^"]+)" id="next-page">', first).group(1).replace("&amp;", "&")
        assert "queue=a" in nxt
        second = http.get(nxt).text
    with psycopg.connect(db_url) as c:
        expected = [r[0] for r in c.execute("SELECT id FROM belay_jobs WHERE queue = 'a' ORDER BY id DESC")]
    assert ids_on(first) + ids_on(second) == expected


def test_capped_tile_counts_equal_the_exact_counts_below_the_cap_and_are_marked_at_it(db_url, world):
    q = DashboardQueries()
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert q.ensure_indexes(conn) == list(INDEXES)
        exact = {t.queue: t.counts for t in q.tiles(conn, NOW, indexed=False)}
        bounded = q.tiles(conn, NOW, indexed=True)
        assert {t.queue: t.counts for t in bounded} == exact
        assert all(not t.capped for t in bounded)
        tight = {t.queue: t for t in q.tiles(conn, NOW, indexed=True, cap=2, terminal_cap=1)}
    emails = tight["emails"]
    assert emails.counts == {
        s: min(n, 1 if s in ("succeeded", "failed", "cancelled") else 2) for s, n in exact["emails"].items()
    }
    assert emails.capped == {
        s for s, n in exact["emails"].items() if n >= (1 if s in ("succeeded", "failed", "cancelled") else 2)
    }


def test_the_index_variants_are_additive_idempotent_and_used_by_the_tiles(db_url):
    q = DashboardQueries()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO belay_jobs (queue, worker, state, ready_at, inserted_at, finished_at) "
            "SELECT 'q' || (g %% 3), 'w', CASE WHEN g %% 10 = 0 THEN 'ready' ELSE 'succeeded' END, %(t)s, %(t)s, "
            "%(t)s - make_interval(secs => g) FROM generate_series(1, 20000) g",
            {"t": SEEDED},
        )
        assert sorted(q.ensure_indexes(conn)) == sorted(INDEXES)
        assert q.ensure_indexes(conn) == []
        conn.execute("ANALYZE belay_jobs")
        assert conn.execute("SELECT version FROM belay_meta").fetchone()[0] == 4
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                psycopg.sql.SQL("EXPLAIN ") + q.q("dash_pair_counts"), {"cap": 10, "terminal_cap": 10}
            )
        )
        assert "belay_jobs_dash_queue_state_idx" in plan and "Seq Scan" not in plan, plan
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                psycopg.sql.SQL("EXPLAIN ") + q.q("dash_finished_since"), {"since": SEEDED - timedelta(minutes=1)}
            )
        )
        assert "belay_jobs_prune_idx" in plan and "Seq Scan" not in plan, plan
        query, params = q.jobs_page_query(JobFilter(state="held"), None)
        plan = "\n".join(r[0] for r in conn.execute(psycopg.sql.SQL("EXPLAIN ") + query, {**params, "limit": 51}))
        assert "belay_jobs_dash_state_idx" in plan, plan


def test_actions_with_the_bearer_token_apply_the_client_operations(db_url, world):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http:
        r = http.post(f"/jobs/{world.held_job}/cancel", headers=auth)
        assert r.status_code == 303 and "cancelled" in r.headers["location"]
        r = http.post(f"/jobs/{world.held_job}/retry", headers=auth)
        assert r.status_code == 303 and "retried" in r.headers["location"]
        r = http.post(
            "/signals",
            headers=auth,
            data={"scope": "orders", "name": "paid", "payload": '{"amount": 3}', "back": "//evil.example/x"},
        )
        assert r.status_code == 303 and r.headers["location"].startswith("/?msg=")  # never an open redirect
        r = http.post(f"/jobs/{world.ready_job}/steer", headers=auth, data={"payload": '{"hint": "<shorter>"}'})
        assert r.status_code == 303
        r = http.post("/signals", headers=auth, data={"scope": "orders", "name": "bad", "payload": "{not json"})
        assert r.status_code == 400 and "JSON" in r.text
        r = http.post(f"/jobs/{world.ready_job}/cancel", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 403 and "does not match" in r.text
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT state FROM belay_jobs WHERE id = %s", (world.held_job,)).fetchone()[0] == "held"
        signals = dict(c.execute("SELECT scope || '/' || name, payload FROM belay_signals").fetchall())
        assert c.execute("SELECT state FROM belay_jobs WHERE id = %s", (world.ready_job,)).fetchone()[0] == "ready"
    assert signals["orders/paid"] == {"amount": 3}
    assert signals[f"job:{world.ready_job}/$steer"] == {"hint": "<shorter>"}
    assert "orders/bad" not in signals


def test_a_session_acts_only_with_its_csrf_token_and_from_its_own_origin(db_url, world):
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http:
        assert http.post("/login", data={"token": "nope"}).status_code == 403
        assert http.post("/login", data={"token": TOKEN}).status_code == 303
        page = http.get(f"/jobs/{world.held_job}").text
        csrf = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page).group(1)
        r = http.post(
            f"/jobs/{world.held_job}/cancel", data={"csrf_token": csrf}, headers={"Origin": "http://evil.example"}
        )
        assert r.status_code == 403 and "cross-origin" in r.text
        r = http.post(f"/jobs/{world.held_job}/cancel", data={})
        assert r.status_code == 403 and "CSRF" in r.text
        r = http.post(
            f"/jobs/{world.held_job}/cancel", data={"csrf_token": csrf, "confirm": "yes"}, headers={"Origin": base}
        )
        assert r.status_code == 303
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT state FROM belay_jobs WHERE id = %s", (world.held_job,)).fetchone()[0] == "cancelled"


def test_sessions_expire_after_their_lifetime_and_when_idle_and_end_at_logout():
    clock = [1000.0]
    sessions = Sessions(ttl=100, idle=30, clock=lambda: clock[0])
    a_cookie, a = sessions.create("token")
    b_cookie, _ = sessions.create("token")
    assert sessions.get(a_cookie) is a and sessions.get(a_cookie + "x") is None
    for _ in range(3):  # used every 25 s: never idle for 30 s ...
        clock[0] += 25
        assert sessions.get(a_cookie) is a
    clock[0] += 25
    assert sessions.get(a_cookie) is None  # ... but 100 s after its login it is over
    assert sessions.get(b_cookie) is None  # idle for 100 s
    c_cookie, c = sessions.create("token")
    assert sessions.get(c_cookie) is c and sessions.end(c_cookie) and sessions.get(c_cookie) is None
    assert len(sessions) == 0 and c.csrf != a.csrf
    assert Auth("t", sessions=sessions).session(sessions.create("anonymous")[0]) is None  # token: logins only


def test_the_dashboard_refuses_to_bind_beyond_loopback_without_a_token(monkeypatch):
    monkeypatch.delenv("BELAY_DASHBOARD_TOKEN", raising=False)
    with pytest.raises(BindRefused, match="--token"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", "t")
    check_bind("::1", None)
    result = CliRunner().invoke(main, ["dashboard", "--database-url", "postgresql://unused/x", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "loopback only" in result.output


def test_bad_filters_and_unknown_pages_get_clear_errors(db_url, tmp_path):
    (tmp_path / "run1").mkdir()
    (tmp_path / "run1" / "history.jsonl").write_text("{}")
    with served(db_url, reports_dir=tmp_path) as base, httpx.Client(base_url=base) as http:
        r = http.get("/jobs", params={"state": "bogus"})
        assert r.status_code == 400 and "state must be one of" in r.text
        r = http.get("/jobs", params={"parent": "abc"})
        assert r.status_code == 400 and "parent must be a job id" in r.text
        assert http.get("/jobs/999999").status_code == 404
        assert http.get("/workflows/nope").status_code == 404
        assert http.get("/reports/run1/history.jsonl").status_code == 404
        assert http.get("/reports/..%2F..%2Fetc/report.html").status_code == 404
        r = http.get("/")
        assert "script-src 'self'" in r.headers["content-security-policy"]


def test_error_text_search_matches_literally():
    assert like_pattern("50%_off\\") == "%50\\%\\_off\\\\%"


def test_a_custom_schema_is_read_and_indexed_in_that_schema(db_url):
    from impl.migrate import migrate

    with psycopg.connect(db_url, autocommit=True) as conn:
        migrate(conn, "tenant_a")
        assert sorted(DashboardQueries("tenant_a").ensure_indexes(conn)) == sorted(INDEXES)
        assert DashboardQueries("public").index_names(conn) == set()
    with PgStore(db_url, schema="tenant_a") as store:
        job = store.apply(ops.Enqueue(SEEDED, (ops.JobSpec("tenant_q", "noop"),))).ids[0]
    with served(db_url, schema="tenant_a") as base, httpx.Client(base_url=base) as http:
        tiles = http.get("/fragments/tiles").text
        assert 'data-queue="tenant_q"' in tiles and "full scan" not in tiles
        assert ids_on(http.get("/jobs").text) == [job]
        assert http.get(f"/jobs/{job}").status_code == 200


# --- issue 29: sessions, authorizer, audit, outage, JSON answers, forms ---------------------------


def login(http: httpx.Client, job_id: int) -> str:
    """Log in with the token; the CSRF token of the session (from a job page's forms)."""
    assert http.post("/login", data={"token": TOKEN}).status_code == 303
    return re.search(r'name="csrf_token" value="([0-9a-f]+)"', http.get(f"/jobs/{job_id}").text).group(1)


def job_state(db_url, job_id: int) -> str:
    with psycopg.connect(db_url) as c:
        return c.execute("SELECT state FROM belay_jobs WHERE id = %s", (job_id,)).fetchone()[0]


def test_after_logout_the_old_cookie_and_its_csrf_token_are_refused(db_url, world):
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http:
        csrf = login(http, world.held_job)
        cookie = http.cookies.get("belay_dashboard_session")
        assert http.post("/logout").status_code == 303
        assert "belay_dashboard_session" not in http.cookies
        http.cookies.set("belay_dashboard_session", cookie)  # an attacker kept the old cookie
        r = http.post(f"/jobs/{world.held_job}/cancel", data={"csrf_token": csrf, "confirm": "yes"})
        assert r.status_code == 403 and "session has ended" in r.text
        assert 'id="actions"' not in http.get(f"/jobs/{world.held_job}").text
    assert job_state(db_url, world.held_job) == "held"


def test_an_expired_session_is_refused_and_a_new_login_works(db_url, world):
    clock = [0.0]
    sessions = Sessions(ttl=3600, idle=600, clock=lambda: clock[0])
    with served(db_url, token=TOKEN, sessions=sessions) as base, httpx.Client(base_url=base) as http:
        csrf = login(http, world.held_job)
        clock[0] += 601  # idle too long
        r = http.post(f"/jobs/{world.held_job}/cancel", data={"csrf_token": csrf, "confirm": "yes"})
        assert r.status_code == 403 and "session has ended" in r.text
        assert job_state(db_url, world.held_job) == "held"
        csrf = login(http, world.held_job)
        r = http.post(f"/jobs/{world.held_job}/cancel", data={"csrf_token": csrf, "confirm": "yes"})
        assert r.status_code == 303
    assert job_state(db_url, world.held_job) == "cancelled"


def test_cancel_and_retry_from_a_form_ask_for_confirmation_first(db_url, world):
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http:
        csrf = login(http, world.held_job)
        r = http.post(f"/jobs/{world.held_job}/cancel", data={"csrf_token": csrf})
        assert r.status_code == 200 and 'id="confirm-yes"' in r.text and f"Cancel job {world.held_job}?" in r.text
        assert job_state(db_url, world.held_job) == "held"
        assert re.search(r'name="confirm" value="yes"', r.text)
        r = http.post(f"/jobs/{world.held_job}/cancel", data={"csrf_token": csrf, "confirm": "yes"})
        assert r.status_code == 303 and job_state(db_url, world.held_job) == "cancelled"
        r = http.post(f"/jobs/{world.held_job}/retry", data={"csrf_token": csrf})
        assert r.status_code == 200 and f"Retry job {world.held_job}?" in r.text
        assert job_state(db_url, world.held_job) == "cancelled"


def test_actions_answer_json_with_status_codes_when_asked_and_redirect_forms(db_url, world):
    js = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http:
        r = http.post(f"/jobs/{world.held_job}/cancel", headers=js)
        assert (r.status_code, r.json()["outcome"], r.json()["ok"]) == (200, "cancelled", True)
        r = http.post(f"/jobs/{world.held_job}/cancel", headers=js)
        assert (r.status_code, r.json()["outcome"], r.json()["state"]) == (409, "not_cancellable", "cancelled")
        r = http.post(f"/jobs/{world.ready_job}/retry", headers=js)
        assert (r.status_code, r.json()["outcome"]) == (409, "not_retryable")
        r = http.post("/jobs/999999/cancel", headers=js)
        assert (r.status_code, r.json()["outcome"]) == (404, "not_found")
        r = http.post(f"/jobs/{world.ready_job}/steer", headers=js, data={"payload": "{oops"})
        assert r.status_code == 400 and r.json()["outcome"] == "bad_input" and "JSON" in r.json()["message"]
        r = http.post("/signals", headers=js, data={"scope": "orders", "name": "paid", "payload": "1"})
        assert (r.status_code, r.json()["outcome"], r.json()["woken"]) == (200, "signalled", [])
        r = http.post(f"/jobs/{world.ready_job}/cancel", headers={**js, "Authorization": "Bearer wrong"})
        assert (
            r.status_code == 403
            and r.json()["outcome"] == "refused"
            and r.headers["content-type"].startswith("application/json")
        )
        r = http.post(f"/jobs/{world.ready_job}/cancel", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 303 and "cancelled" in r.headers["location"]  # a form post: the redirect
    with served(db_url) as base, httpx.Client(base_url=base) as http:  # read-only
        r = http.post(f"/jobs/{world.running_job}/cancel", headers={"Accept": "application/json"})
        assert r.status_code == 403 and "read-only" in r.json()["message"]


def test_a_bad_steer_payload_shows_the_form_again_with_what_was_typed_and_the_error(db_url, world):
    typed = '{"hint": "shorter", <b>oops'
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http:
        csrf = login(http, world.ready_job)
        r = http.post(f"/jobs/{world.ready_job}/steer", data={"csrf_token": csrf, "payload": typed})
        assert r.status_code == 400
        assert 'id="steer-form"' in r.text and f"Job {world.ready_job}" in r.text  # the job page itself
        value = re.search(r'<input name="payload" id="steer-payload"[^>]* value="([^"]*)"', r.text).group(1)
        assert value == "{&#34;hint&#34;: &#34;shorter&#34;, &lt;b&gt;oops"  # what was typed, escaped
        error = re.search(r'<p class="error" id="steer-error">([^<]*)</p>', r.text).group(1)
        assert error.startswith("steer payload must be JSON")
        r = http.post(
            "/signals",
            data={
                "csrf_token": csrf,
                "scope": "orders",
                "name": "paid",
                "payload": "[1,",
                "back": f"/jobs/{world.ready_job}",
            },
        )
        assert r.status_code == 400 and 'id="signal-error"' in r.text and 'value="[1,"' in r.text
        assert 'value="paid"' in r.text
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM belay_signals WHERE name IN ('$steer', 'paid')").fetchone()[0] == 0


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def audit_lines():
    log = logging.getLogger(LOGGER)
    handler = Captured()
    log.addHandler(handler)
    yield handler.lines
    log.removeHandler(handler)


def test_every_action_is_one_parseable_audit_line_naming_who_what_which_job_and_outcome(db_url, world, audit_lines):
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with served(db_url, token=TOKEN) as base, httpx.Client(base_url=base) as http:
        http.post(f"/jobs/{world.held_job}/cancel", headers=bearer)
        http.post(
            "/signals", headers=bearer, data={"scope": "orders", "name": 'x\nwho=admin outcome="ok"', "payload": ""}
        )
        http.post(f"/jobs/{world.ready_job}/steer", headers=bearer, data={"payload": "{bad"})
        http.post(f"/jobs/{world.ready_job}/cancel", headers={"Authorization": "Bearer wrong"})
        csrf = login(http, world.ready_job)
        http.post(f"/jobs/{world.ready_job}/retry", data={"csrf_token": csrf, "confirm": "yes"})
    assert all("\n" not in line for line in audit_lines)
    fields = [audit.parse(line) for line in audit_lines]
    actions = [f for f in fields if f["action"] not in ("login", "logout")]
    assert [(f["who"], f["action"], f.get("job"), f["status"], f["outcome"]) for f in actions] == [
        ("bearer", "cancel_job", str(world.held_job), "200", "cancelled"),
        ("bearer", "signal", None, "200", "signalled"),
        ("bearer", "steer", str(world.ready_job), "400", "bad_input"),
        ("bearer (wrong token)", "cancel_job", str(world.ready_job), "403", "refused"),
        (actions[-1]["who"], "retry_job", str(world.ready_job), "409", "not_retryable"),
    ]
    assert actions[1]["signal"] == 'x\nwho=admin outcome="ok"' and actions[1]["scope"] == "orders"
    assert re.fullmatch(r"token-session:[0-9a-f]{8}", actions[-1]["who"])
    assert [f["outcome"] for f in fields if f["action"] == "login"] == ["logged_in"]


def test_belay_dashboard_emits_its_audit_lines_and_takes_an_authorizer(db_url, world, tmp_path):
    port = free_port("127.0.0.1")
    cmd = [sys.executable, "-m", "impl.cli", "dashboard", "--database-url", db_url, "--port", str(port)]
    cmd += ["--authorizer", "tests.dashboard_world:authorizer"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    env.pop("BELAY_DASHBOARD_TOKEN", None)
    err = (tmp_path / "stderr").open("w+")
    proc = subprocess.Popen(cmd, stderr=err, stdout=subprocess.DEVNULL, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base + "/jobs", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "stderr").read_text()
                time.sleep(0.2)
        js = {"Accept": "application/json"}
        r = httpx.post(f"{base}/jobs/{world.held_job}/cancel", headers=js)  # no token: the authorizer decides
        assert (r.status_code, r.json()["outcome"]) == (200, "cancelled")
        r = httpx.post(f"{base}/jobs/{world.ready_job}/steer", headers=js, data={"payload": "1"})
        assert r.status_code == 403 and "steering is not allowed here" in r.json()["message"]
        deadline = time.monotonic() + 10
        while "action=steer" not in (tmp_path / "stderr").read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)
    lines = [ln for ln in (tmp_path / "stderr").read_text().splitlines() if "belay.dashboard.audit" in ln]
    parsed = [audit.parse(ln.split("belay.dashboard.audit ", 1)[1]) for ln in lines]
    assert [(f["action"], f["job"], f["outcome"]) for f in parsed] == [
        ("cancel_job", str(world.held_job), "cancelled"),
        ("steer", str(world.ready_job), "refused"),
    ]
    assert job_state(db_url, world.held_job) == "cancelled"


def test_the_authorizer_gets_the_mcp_tool_names_and_arguments_and_refuses_by_falsy_or_raising(db_url, world):
    calls = []

    def authorizer(tool, arguments, request):
        calls.append((tool, arguments, request.who))
        if arguments.get("job_id") == world.running_job:
            return False
        if tool == "signal" and arguments["name"] == "forbidden":
            raise PermissionError("not that signal")
        return True

    js = {"Accept": "application/json"}
    with served(db_url, authorizer=authorizer) as base, httpx.Client(base_url=base) as http:
        page = http.get(f"/jobs/{world.held_job}").text  # authorizer-only: controls and an anonymous session
        assert 'id="act-cancel"' in page and "actions decided by the authorizer" in page
        csrf = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page).group(1)
        r = http.post(f"/jobs/{world.held_job}/cancel", data={"csrf_token": csrf})
        assert r.status_code == 200 and 'id="confirm-yes"' in r.text and not calls  # asked, not yet acted
        r = http.post(f"/jobs/{world.held_job}/cancel", data={"csrf_token": csrf, "confirm": "yes"})
        assert r.status_code == 303 and job_state(db_url, world.held_job) == "cancelled"
        r = http.post(f"/jobs/{world.held_job}/cancel", data={"confirm": "yes"})  # the session, but no CSRF
        assert r.status_code == 403 and "CSRF" in r.text
        http.cookies.clear()
        r = http.post(f"/jobs/{world.running_job}/cancel", headers=js)
        assert (
            r.status_code == 403 and r.json()["message"] == "refused by the authorizer: cancel_job; nothing was changed"
        )
        r = http.post("/signals", headers=js, data={"scope": "s", "name": "forbidden", "payload": '{"a": 1}'})
        assert r.status_code == 403 and "PermissionError: not that signal" in r.json()["message"]
        r = http.post(f"/jobs/{world.ready_job}/steer", headers=js, data={"payload": '{"hint": 1}'})
        assert r.status_code == 200
    assert [(t, a) for t, a, _ in calls] == [
        ("cancel_job", {"job_id": world.held_job}),
        ("cancel_job", {"job_id": world.running_job}),
        ("signal", {"scope": "s", "name": "forbidden", "payload": {"a": 1}}),
        ("steer", {"job_id": world.ready_job, "payload": {"hint": 1}}),
    ]
    assert calls[0][2].startswith("anonymous-session:") and calls[1][2] == "anonymous"
    assert job_state(db_url, world.running_job) == "running"
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM belay_signals WHERE name = 'forbidden'").fetchone()[0] == 0
    # with a token too: the token admits, then the authorizer decides (a two-argument one, as for MCP)
    seen = []
    with served(db_url, token=TOKEN, authorizer=lambda tool, args: seen.append(tool) or False) as base:
        r = httpx.post(f"{base}/jobs/{world.ready_job}/cancel", headers={**js, "Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 403 and seen == ["cancel_job"]
        r = httpx.post(f"{base}/jobs/{world.ready_job}/cancel", headers=js)
        assert r.status_code == 403 and "log in" in r.json()["message"] and seen == ["cancel_job"]
    assert job_state(db_url, world.ready_job) == "ready"


def test_a_database_outage_answers_503_pages_fast_and_recovers(db_url, world, caplog):
    target = psycopg.conninfo.conninfo_to_dict(db_url)
    proxy = Proxy(target.get("host") or "127.0.0.1", int(target.get("port") or 5432))
    url = proxy.url("dash", db_url)
    try:
        with served(url, db_wait=1.5, statement_timeout=3) as base, httpx.Client(base_url=base, timeout=30) as http:
            assert http.get("/").status_code == 200
            proxy.partition("dash")
            for path, kind in (
                ("/", "text/html"),
                ("/jobs", "text/html"),
                (f"/jobs/{world.journal_job}", "text/html"),
                ("/fragments/tiles", "text/plain"),
                ("/fragments/jobs", "text/plain"),
                ("/api/charts", "application/json"),
                ("/crons", "text/html"),
            ):
                t = time.monotonic()
                r = http.get(path)
                took = time.monotonic() - t
                assert r.status_code == 503, (path, r.status_code, r.text[:300])
                assert r.headers["content-type"].startswith(kind) and r.headers["retry-after"] == "5"
                assert "unreachable" in r.text and "Traceback" not in r.text
                assert took < 5, (path, took)
            page = http.get("/jobs").text
            assert 'id="db-banner" class="banner" role="alert">Database unreachable since' in page
            r = http.post(
                f"/jobs/{world.held_job}/cancel", headers={"Accept": "application/json"}
            )  # read-only: refused before the database
            assert r.status_code == 403
            proxy.heal("dash")
            deadline = time.monotonic() + 20
            while http.get("/").status_code != 200:
                assert time.monotonic() < deadline, "the dashboard did not recover"
                time.sleep(0.3)
            assert http.get("/fragments/tiles").status_code == 200
    finally:
        proxy.close()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], [
        r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR
    ]
    assert any("the database is unreachable" in r.getMessage() for r in caplog.records)


def test_an_action_during_an_outage_answers_503_json_and_changes_nothing(db_url, world):
    target = psycopg.conninfo.conninfo_to_dict(db_url)
    proxy = Proxy(target.get("host") or "127.0.0.1", int(target.get("port") or 5432))
    url = proxy.url("dash", db_url)
    js = {"Accept": "application/json", "Authorization": f"Bearer {TOKEN}"}
    try:
        with served(url, token=TOKEN, db_wait=1.5) as base, httpx.Client(base_url=base, timeout=30) as http:
            proxy.partition("dash")
            t = time.monotonic()
            r = http.post(f"/jobs/{world.held_job}/cancel", headers=js)
            assert r.status_code == 503 and r.json()["outcome"] == "db_unavailable" and time.monotonic() - t < 5
            r = http.post(f"/jobs/{world.held_job}/cancel", headers={"Authorization": f"Bearer {TOKEN}"})
            assert r.status_code == 503 and "unreachable" in r.text
    finally:
        proxy.close()
    assert job_state(db_url, world.held_job) == "held"


def test_the_live_fragments_follow_the_database(db_url, world):
    with served(db_url) as base, httpx.Client(base_url=base) as http:
        before = http.get(f"/fragments/jobs/{world.ready_job}").text
        assert '<div id="job-head">' in before and '<div id="job-body">' in before and 'id="actions"' not in before
        assert re.search(r'id="job-state">ready<', before)
        rows = http.get("/fragments/jobs", params={"queue": "emails"}).text
        assert rows.startswith('<tbody id="job-rows">')
        with PgStore(db_url) as store:
            job = dashboard_world.claim_one(store, NOW, "emails")
            store.apply(w.Ack(NOW, job.id, job.attempt, w.Succeed({"sent": True})))
            new = store.apply(ops.Enqueue(NOW, (ops.JobSpec("emails", "send", {"to": "z@example.com"}),))).ids[0]
        after = http.get(f"/fragments/jobs/{world.ready_job}").text
        assert re.search(r'id="job-state">succeeded<', after) and "&#34;sent&#34;: true" in after
        rows = http.get("/fragments/jobs", params={"queue": "emails"}).text
        assert ids_on(rows)[0] == new and f'data-id="{world.ready_job}" data-state="succeeded"' in rows
        assert http.get("/fragments/jobs/999999").status_code == 404
        page = http.get("/jobs?queue=emails").text
        assert 'data-poll-url="/fragments/jobs?queue=emails"' in page


def test_tiles_show_the_per_node_limit(db_url, world):
    with served(db_url) as base, httpx.Client(base_url=base) as http:
        tiles = http.get("/fragments/tiles").text
    emails = tiles.split('data-queue="emails"', 1)[1].split("</section>", 1)[0]
    assert re.search(r'<dt>limit per node</dt><dd class="node-limit">4</dd>', emails)
    llm = tiles.split('data-queue="llm"', 1)[1].split("</section>", 1)[0]
    assert re.search(r'<dd class="node-limit">—</dd>', llm) and "<dd>5</dd>" in llm  # global_limit 5


def test_the_crons_page_shows_expressions_next_slots_last_fired_jobs_and_paused(db_url, world):
    with served(db_url) as base, httpx.Client(base_url=base) as http:
        html = http.get("/crons").text
    rows = dict(re.findall(r'<tr class="cron-row" data-name="([^"]+)"(.*?)</tr>', html, re.S))
    assert list(rows) == ["every-minute", "paused-hourly", "static-ping"]
    every = rows["every-minute"]
    assert "<code>* * * * *</code>" in every and 'data-paused="no"' in every and "active" in every
    # NOW is 12:01:00: the next minute slots after it
    assert re.findall(r'<span class="slot">([^<]+)</span>', every) == [
        "2026-11-30 12:02:00.000Z",
        "2026-11-30 12:03:00.000Z",
        "2026-11-30 12:04:00.000Z",
    ]
    last = world.cron_jobs["every-minute"][-1]
    assert f'<a href="/jobs/{last}">{last}</a>' in every and "slot 2026-11-30 12:00:00.000Z" in every
    paused = rows["paused-hourly"]
    assert 'data-paused="yes"' in paused and ">paused<" in paused and "never fired" in paused
    assert re.findall(r'<span class="slot">([^<]+)</span>', paused) == [
        "2026-11-30 13:00:00.000Z",
        "2026-11-30 14:00:00.000Z",
        "2026-11-30 15:00:00.000Z",
    ]
    static = rows["static-ping"]
    assert 'data-source="static"' in static and f">{world.cron_jobs['static-ping'][-1]}</a>" in static


def test_the_charts_count_finished_jobs_per_minute_by_outcome_and_claim_latency(db_url):
    # jobs with known times: queue "a" finishes 3 jobs at 11:58 (2 succeeded, 1 failed), 1 cancelled at
    # 12:00; claim latencies at 11:57 of 100, 200, 300, 400 ms; queue "b" one job finished 2 h ago.
    now = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
    rows = [
        ("a", "succeeded", 1, "11:57:00", "11:57:00.1", "11:58:10"),
        ("a", "succeeded", 1, "11:57:00", "11:57:00.2", "11:58:20"),
        ("a", "failed", 1, "11:57:00", "11:57:00.3", "11:58:30"),
        ("a", "cancelled", 1, "11:57:00", "11:57:00.4", "12:00:05"),
        ("a", "succeeded", 2, "11:58:00", "11:30:00", "11:59:00"),  # a retried job: no first-claim latency
        ("a", "running", 1, "11:59:00", "11:59:02", None),
        ("b", "succeeded", 1, "09:00:00", "09:00:01", "10:00:00"),  # outside the hour
        ("a", "cancelled", 0, "11:00:00", None, "11:59:30"),  # never claimed
    ]

    def at(hms):
        return None if hms is None else datetime.fromisoformat(f"2026-11-30T{hms}+00:00")

    with psycopg.connect(db_url, autocommit=True) as c:
        for queue, state, attempt, ready, started, finished in rows:
            c.execute(
                "INSERT INTO belay_jobs (queue, worker, state, attempt, ready_at, inserted_at, started_at, finished_at, "
                "lease_until, leased_by) VALUES (%s, 'w', %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    queue,
                    state,
                    attempt,
                    at(ready),
                    at(ready),
                    at(started),
                    at(finished),
                    now + timedelta(seconds=30) if state == "running" else None,
                    "n1" if state == "running" else None,
                ),
            )
    with served(db_url) as base, httpx.Client(base_url=base) as http:
        app_now = http.get("/api/charts")  # the served clock is NOW (12:01): a different hour
        assert app_now.status_code == 200
    with psycopg.connect(db_url) as c:
        data = DashboardQueries().charts(c, now)
    assert list(data["queues"]) == ["a"] and len(data["minutes"]) == 60
    assert data["minutes"][-1] == "2026-11-30T12:00:00+00:00" and data["minutes"][0] == "2026-11-30T11:01:00+00:00"
    a = data["queues"]["a"]
    i = data["minutes"].index
    fin = a["finished"]
    assert fin["succeeded"][i("2026-11-30T11:58:00+00:00")] == 2 and fin["failed"][i("2026-11-30T11:58:00+00:00")] == 1
    assert (
        fin["succeeded"][i("2026-11-30T11:59:00+00:00")] == 1 and fin["cancelled"][i("2026-11-30T11:59:00+00:00")] == 1
    )
    assert fin["cancelled"][-1] == 1
    assert a["totals"] == {"succeeded": 3, "failed": 1, "cancelled": 2, "claimed": 5}
    lat = a["claim_latency_ms"]
    k = i("2026-11-30T11:57:00+00:00")
    assert (lat["n"][k], lat["p50"][k], lat["p95"][k], lat["max"][k]) == (4, 250.0, 385.0, 400.0)
    k = i("2026-11-30T11:59:00+00:00")
    assert (lat["n"][k], lat["p50"][k]) == (1, 2000.0)  # the running job
    assert sum(lat["n"]) == 5 and lat["p50"][i("2026-11-30T11:30:00+00:00")] is None
    assert data["outcomes"] == ["succeeded", "failed", "cancelled"]
