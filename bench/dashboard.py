"""Dashboard benchmark: the tiles' queries and one job-list page over a large belay_jobs.

    .venv/bin/python -m bench.dashboard [--jobs 1000000] [--repeat 15] [--explain]

Fills belay_jobs on $BELAY_DATABASE_URL or an embedded PostgreSQL (a fresh database) with `--jobs`
rows in one SQL statement (not measured): 6 queues, 12 kinds, ~94 % succeeded, 3 % failed (with an
error entry), 1 % cancelled, 1.5 % ready, 0.3 % running, 0.1 % held and awaiting, finished over the
last week, 1 in 50 a workflow member, 1 in 100 a child. Then VACUUM ANALYZE, and measures — side by
side in one run, first without and then with the dashboard index variants (impl/store/sql/dashboard_indexes.sql)
— the median and p95 of: the tile queries (all four, as the page runs them), the charts' query
(the last hour per queue and minute), the crons page, the first job-list page
unfiltered and under each filter, a deep keyset page, and the same pages through HTTP (uvicorn, in
process). An error-text search examines at most ERROR_WINDOW jobs with errors per page; its worst
cases are measured too: text that matches nothing, text that only the oldest jobs carry (the fill
marks the 20 oldest jobs with errors), combined with other filters, below a deep cursor, the window
sizes side by side, and the whole walk of "continue" links down to the old match over HTTP; over HTTP
also /api/charts, /crons and the live fragments of the job list and a job page.
`--explain` prints EXPLAIN (ANALYZE, BUFFERS) of the tile queries and three pages (one error-text).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
from psycopg import sql

from impl.http.server import running
from impl.ops.dashboard import create_app
from impl.ops.dashboard.queries import ERROR_WINDOW, DashboardQueries, JobFilter, JobsPage
from impl.provision import TemplateDatabases, provision, redact
from impl.store.migrate import migrate

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

FILL = """
INSERT INTO belay_jobs (queue, worker, input, state, attempt, max_attempts, ready_at, inserted_at, started_at,
                        finished_at, errors, workflow_id, wf_name, parent_id)
SELECT 'queue_' || (g %% 6),
       'kind_' || (g %% 12),
       jsonb_build_object('n', g),
       s.state,
       CASE WHEN s.state IN ('ready', 'held', 'awaiting') THEN 0 ELSE 1 END,
       3,
       %(now)s - make_interval(secs => (g %% 604800)),
       %(now)s - make_interval(secs => (g %% 604800) + 5),
       CASE WHEN s.state IN ('ready', 'held', 'awaiting') THEN NULL ELSE %(now)s - make_interval(secs => (g %% 604800)) END,
       CASE WHEN s.state IN ('succeeded', 'failed', 'cancelled') THEN %(now)s - make_interval(secs => (g %% 604800) - 1) END,
       CASE WHEN s.state = 'failed' THEN jsonb_build_array(jsonb_build_object(
           'attempt', 1, 'at', '2026-11-30T00:00:00+00:00', 'error', 'upstream_' || (g %% 97), 'detail', 'HTTP 503 from host ' || (g %% 13)))
            ELSE '[]'::jsonb END,
       CASE WHEN g %% 50 = 0 THEN 'wf-' || (g / 500) END,
       CASE WHEN g %% 50 = 0 THEN 'm' || g END,
       CASE WHEN g %% 100 = 1 THEN greatest(g - 1, 1) END
FROM generate_series(1, %(n)s) g
CROSS JOIN LATERAL (SELECT CASE
    WHEN g %% 1000 < 940 THEN 'succeeded'
    WHEN g %% 1000 < 970 THEN 'failed'
    WHEN g %% 1000 < 980 THEN 'cancelled'
    WHEN g %% 1000 < 995 THEN 'ready'
    WHEN g %% 1000 < 998 THEN 'running'
    WHEN g %% 1000 < 999 THEN 'held'
    ELSE 'awaiting' END AS state) s
"""


def timed(fn, repeat: int) -> tuple[float, float]:
    fn()  # warm
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.95))]


CASES = [
    ("page: no filter", JobFilter(), None),
    ("page: state=failed", JobFilter(state="failed"), None),
    ("page: state=held (0.1 %)", JobFilter(state="held"), None),
    ("page: queue=queue_3", JobFilter(queue="queue_3"), None),
    ("page: queue=queue_3 & state=ready", JobFilter(queue="queue_3", state="ready"), None),
    ("page: kind=kind_7", JobFilter(kind="kind_7"), None),
    ("page: workflow=wf-100", JobFilter(workflow="wf-100"), None),
    ("page: parent=5001", JobFilter(parent=5001), None),
    ("page: error text 'upstream_42'", JobFilter(error="upstream_42"), None),
    ("page: error text absent", JobFilter(error="no such text"), None),
    ("page: error text only in oldest jobs", JobFilter(error="ancient_marker"), None),
    ("page: error absent & queue=queue_3", JobFilter(queue="queue_3", error="no such text"), None),
    ("page: error absent & state=held", JobFilter(state="held", error="no such text"), None),
    ("page: error absent, before id 300000", JobFilter(error="no such text"), 300_000),
    ("page: keyset deep (before id 300000)", JobFilter(), 300_000),
]


def measure(url: str, repeat: int, label: str) -> None:
    q = DashboardQueries()
    with psycopg.connect(url, autocommit=True) as conn:
        indexed = "belay_jobs_dash_queue_state_idx" in q.index_names(conn)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"\n== {label} (index variants: {'yes' if indexed else 'no'}; load average {load} on {os.cpu_count()} CPUs) =="
        )
        med, p95 = timed(lambda: conn.execute("SELECT count(*) FROM generate_series(1, 100000)").fetchone(), repeat)
        print(
            f"  {'reference: count(*) of 100,000 series':<40} median {med:8.2f} ms   p95 {p95:8.2f} ms   (machine speed now)"
        )
        med, p95 = timed(lambda: q.tiles(conn, NOW, indexed=indexed), repeat)
        tiles = q.tiles(conn, NOW, indexed=indexed)
        print(f"  {'tiles (4 queries)':<40} median {med:8.2f} ms   p95 {p95:8.2f} ms   ({len(tiles)} queues)")
        med, p95 = timed(lambda: q.charts(conn, NOW), repeat)
        charts = q.charts(conn, NOW)
        finished = sum(
            sum(t["totals"][s] for s in ("succeeded", "failed", "cancelled")) for t in charts["queues"].values()
        )
        print(
            f"  {'charts (1 query, last hour)':<40} median {med:8.2f} ms   p95 {p95:8.2f} ms   "
            f"({len(charts['queues'])} queues, {finished:,} jobs finished in the hour)"
        )
        med, p95 = timed(lambda: q.crons(conn, NOW), repeat)
        print(
            f"  {'crons page (2 queries)':<40} median {med:8.2f} ms   p95 {p95:8.2f} ms   ({len(q.crons(conn, NOW))} crons)"
        )
        for name, filters, before in CASES:
            med, p95 = timed(lambda filters=filters, before=before: q.jobs_page(conn, filters, before), repeat)
            page = q.jobs_page(conn, filters, before)
            print(f"  {name:<40} median {med:8.2f} ms   p95 {p95:8.2f} ms   ({len(page.rows)} rows{window(page)})")
        for size in (1_000, 2_500, ERROR_WINDOW, 10_000, 40_000):
            filters = JobFilter(error="no such text")
            med, p95 = timed(lambda size=size, filters=filters: q.jobs_page(conn, filters, window=size), repeat)
            page = q.jobs_page(conn, filters, window=size)
            name = f"  error absent, window {size:,}" + (" (default)" if size == ERROR_WINDOW else "")
            print(f"{name:<42} median {med:8.2f} ms   p95 {p95:8.2f} ms   ({len(page.rows)} rows{window(page)})")
    app = create_app(url, clock=lambda: NOW)
    with running(app) as base, httpx.Client(base_url=base, timeout=60) as http:
        for name, path in (
            ("HTTP GET /fragments/tiles", "/fragments/tiles"),
            ("HTTP GET /jobs", "/jobs"),
            ("HTTP GET /jobs?state=held", "/jobs?state=held"),
            ("HTTP GET /api/charts", "/api/charts"),
            ("HTTP GET /crons", "/crons"),
            ("HTTP GET /fragments/jobs (live list)", "/fragments/jobs"),
            ("HTTP GET /fragments/jobs/5001 (live job)", "/fragments/jobs/5001"),
        ):
            med, p95 = timed(lambda path=path: http.get(path).raise_for_status(), repeat)
            print(f"  {name:<40} median {med:8.2f} ms   p95 {p95:8.2f} ms")
        # The whole walk to a match among the oldest jobs: each request one bounded window.
        samples, url, found = [], "/jobs?error=ancient_marker", 0
        while url:
            t = time.perf_counter()
            html = http.get(url).raise_for_status().text
            samples.append((time.perf_counter() - t) * 1000)
            found += len(re.findall(r'<tr class="job-row"', html))
            nxt = re.search(r'<a href="([^"]+)" id="(?:next-page|continue-search)">', html)
            url = nxt.group(1).replace("&amp;", "&") if nxt else None
        print(
            f"  {'HTTP walk to the oldest matches':<40} {len(samples)} pages, {found} matches; per page median "
            f"{statistics.median(samples):.2f} ms, max {max(samples):.2f} ms; total {sum(samples):.0f} ms"
        )


def window(page: JobsPage) -> str:
    s = page.searched
    return "" if s is None else f"; examined {s.examined:,} with errors, down to id {s.lowest}, more: {s.more}"


def explain(url: str) -> None:
    q = DashboardQueries()
    with psycopg.connect(url, autocommit=True) as conn:
        for title, query, params in (
            ("tile counts (dash_pair_counts)", q.q("dash_pair_counts"), {"cap": 10_000, "terminal_cap": 1_000}),
            ("finished in the last minute", q.q("dash_finished_since"), {"since": NOW - timedelta(minutes=1)}),
            ("oldest ready", q.q("dash_oldest_ready"), {"now": NOW}),
            (
                "charts (dash_charts)",
                q.q("dash_charts"),
                {"since": NOW - timedelta(minutes=59, seconds=NOW.second), "until": NOW + timedelta(minutes=1)},
            ),
            ("crons (dash_crons)", q.q("dash_crons"), {}),
            ("first page, no filter", *q.jobs_page_query(JobFilter(), None)),
            ("first page, state=held", *q.jobs_page_query(JobFilter(state="held"), None)),
            ("first page, error text absent", *q.jobs_page_query(JobFilter(error="no such text"), None)),
            ("first page, error text only in oldest jobs", *q.jobs_page_query(JobFilter(error="ancient_marker"), None)),
        ):
            params = {**params, "limit": 51}
            plan = conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ") + query, params).fetchall()
            print(f"\n-- EXPLAIN {title}")
            for (line,) in plan:
                print("   " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    with provision() as db:
        templates = TemplateDatabases(db.url)
        name = f"belay_bench_dash_{uuid.uuid4().hex[:6]}"
        templates.create_template(name, lambda conn: migrate(conn))
        url = templates.clone(name)
        print(f"database: {redact(url)} ({db.kind})")
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                t = time.perf_counter()
                conn.execute(FILL, {"now": NOW, "n": args.jobs})
                conn.execute(
                    "INSERT INTO belay_queues (name, opts, updated_at) VALUES "
                    "('queue_1', '{\"global_limit\": 5}', %(now)s), "
                    '(\'queue_2\', \'{"rate": {"allowed": 10, "period": 1}}\', %(now)s)',
                    {"now": NOW},
                )
                conn.execute(
                    "INSERT INTO belay_crons (name, expression, worker, input, opts, paused, updated_at) "
                    "SELECT 'cron_' || g, '*/' || (g %% 30 + 1) || ' * * * *', 'kind_' || (g %% 12), '{}', "
                    "jsonb_build_object('queue', 'queue_' || (g %% 6)), g %% 5 = 0, %(now)s FROM generate_series(1, 20) g",
                    {"now": NOW},
                )
                conn.execute(  # each cron's fired jobs: 1 in 1,000 jobs carries a cron slot
                    "UPDATE belay_jobs SET cron_name = 'cron_' || ((id / 1000) % 20 + 1), cron_slot = inserted_at "
                    "WHERE id % 1000 = 7"
                )
                conn.execute(
                    "UPDATE belay_jobs SET errors = errors || jsonb_build_array(jsonb_build_object('attempt', 2, "
                    "'at', '2026-11-30T00:00:01+00:00', 'error', 'ancient_marker', 'detail', 'only the oldest')) "
                    "WHERE id IN (SELECT id FROM belay_jobs WHERE errors <> '[]' ORDER BY id LIMIT 20)"
                )
                conn.execute("VACUUM ANALYZE belay_jobs")
                size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('belay_jobs'))").fetchone()[0]
                print(f"filled {args.jobs:,} jobs in {time.perf_counter() - t:.1f} s; belay_jobs with indexes: {size}")
            measure(url, args.repeat, "without the dashboard index variants")
            with psycopg.connect(url, autocommit=True) as conn:
                t = time.perf_counter()
                created = DashboardQueries().ensure_indexes(conn)
                conn.execute("VACUUM ANALYZE belay_jobs")
                sizes = conn.execute(
                    "SELECT string_agg(relname || ' ' || pg_size_pretty(pg_relation_size(oid)), ', ') "
                    "FROM pg_class WHERE relname LIKE 'belay_jobs_dash_%%'"
                ).fetchone()[0]
                print(f"\ncreated {', '.join(created)} in {time.perf_counter() - t:.1f} s ({sizes})")
            measure(url, args.repeat, "with the dashboard index variants")
            if args.explain:
                explain(url)
        finally:
            dbname = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
            templates.drop(dbname)
            templates.drop(name)


if __name__ == "__main__":
    main()
