"""The dashboard without a browser: keyset paging, bounded tile counts and their index variants, the
action endpoints (bearer token, sessions, CSRF, Origin), the bind rule, and input validation.

Served by uvicorn on a fresh database per test and read with httpx; the browser-level behaviour is
in test_dashboard_browser.py.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from impl.cli import main
from impl.dashboard import create_app
from impl.dashboard.auth import Auth, BindRefused, check_bind
from impl.dashboard.queries import INDEXES, DashboardQueries, JobFilter, dashboard_blocks, like_pattern
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
