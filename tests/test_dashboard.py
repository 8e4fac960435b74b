"""The dashboard without a browser: keyset paging, bounded tile counts and their index variants, the
action endpoints (bearer token, sessions, CSRF, Origin), the bind rule, and input validation.

Served by uvicorn on a fresh database per test and read with httpx; the browser-level behaviour is
in test_dashboard_browser.py.
"""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from impl.cli import main
from impl.dashboard import create_app
from impl.dashboard.auth import Auth, BindRefused, check_bind
from impl.dashboard.queries import (
    FILTERS,
    INDEXES,
    DashboardQueries,
    JobFilter,
    dashboard_blocks,
    index_blocks,
    like_pattern,
)
from impl.http.server import running
from impl.store import PgStore
from model import ops
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
        assert conn.execute("SELECT version FROM belay_meta").fetchone()[0] == 3
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
        r = http.post(f"/jobs/{world.held_job}/cancel", data={"csrf_token": csrf}, headers={"Origin": base})
        assert r.status_code == 303
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT state FROM belay_jobs WHERE id = %s", (world.held_job,)).fetchone()[0] == "cancelled"


def test_sessions_and_csrf_tokens_are_bound_to_the_dashboard_token():
    one, other = Auth("one"), Auth("other")
    cookie = one.new_session()
    nonce = one.session_nonce(cookie)
    assert nonce is not None and other.session_nonce(cookie) is None
    assert one.session_nonce(cookie[:-1] + ("0" if cookie[-1] != "0" else "1")) is None
    assert one.csrf_ok(nonce, one.csrf_for(nonce)) and not other.csrf_ok(nonce, one.csrf_for(nonce))
    assert Auth(None).session_nonce(cookie) is None and not Auth(None).token_matches("")


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
