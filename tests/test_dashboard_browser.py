"""The operator's dashboard (belay-operations.txt, "The dashboard") driven in a real browser.

Playwright for Python drives Debian's Chromium (`executable_path`; Playwright's own browser download
is not used). Each test serves the dashboard with uvicorn on a fresh database seeded by
tests/dashboard_world.py, waits on elements (never sleeps), and compares what the page shows with
what the database holds. Screenshots of each page go to reports/screenshots/dashboard/ (git-ignored,
like every run's artifacts; override with $BELAY_SCREENSHOTS); tests/artifacts/dashboard/ holds the
screenshots of one run, committed for reference (BELAY_SCREENSHOTS=tests/artifacts/dashboard).
Issue 29 adds: the job page and the job list updating live, the charts (bars and latency points
against the database), the banner when the database is unreachable (through soak/faults/proxy.py's TCP
proxy, partitioned and healed), the confirmation before cancel, long names, the crons page.
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from impl.http.server import running
from impl.ops.dashboard import create_app
from impl.ops.dashboard.queries import DashboardQueries
from impl.ops.dashboard.views import STATE_COLOURS
from impl.store import PgStore
from model import ops
from model import worker_ops as w
from soak.faults.proxy import Proxy
from tests import dashboard_world
from tests.dashboard_world import XSS_ERROR, XSS_INPUT

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")
expect = playwright_api.expect

CHROMIUM = os.environ.get("BELAY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(
    os.environ.get("BELAY_SCREENSHOTS", Path(__file__).parent.parent / "reports" / "screenshots" / "dashboard")
)
SEEDED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NOW = SEEDED + timedelta(seconds=60)  # the dashboard's clock: the seeded jobs finished within the last minute
TOKEN = "s3cret-dashboard-token"
WAIT_MS = 20_000  # generous: on a loaded CI machine a page can take seconds; passing runs never wait this long
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def browser():
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).exists()):
        message = f"Chromium not found at {CHROMIUM}: apt-get install -y chromium (or set $BELAY_CHROMIUM)"
        if os.environ.get("BELAY_REQUIRE_CHROMIUM"):  # .ci/run installs it first: there, a missing one fails
            pytest.fail(message)
        pytest.skip(message)
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def world(db_url):
    with PgStore(db_url) as store:
        yield dashboard_world.build(store, SEEDED)


def serve(db_url, *, token=None, reports_dir="reports", clock=lambda: NOW, **kw):
    app = create_app(db_url, token=token, reports_dir=reports_dir, clock=clock, poll_ms=250, **kw)
    return running(app, token=token)


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(WAIT_MS)
    dialogs = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.dialogs = dialogs
    yield pg
    context.close()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def db_counts(db_url, queue: str) -> dict[str, int]:
    with psycopg.connect(db_url) as c:
        return dict(
            c.execute("SELECT state, count(*) FROM belay_jobs WHERE queue = %s GROUP BY state", (queue,)).fetchall()
        )


def db_state(db_url, job_id: int) -> tuple[str, bool]:
    with psycopg.connect(db_url) as c:
        return c.execute("SELECT state, cancel_requested FROM belay_jobs WHERE id = %s", (job_id,)).fetchone()


def tile_count(page, queue: str, state: str):
    return page.locator(f'section.tile[data-queue="{queue}"] td.count[data-state="{state}"]')


def test_tiles_show_the_database_counts_and_update_when_a_job_finishes(db_url, world, browser, page):
    with serve(db_url) as base:
        page.goto(base + "/")
        for queue in ("emails", "llm", "etl"):
            counts = db_counts(db_url, queue)
            for state in ("ready", "running", "held", "succeeded", "failed", "cancelled"):
                expect(tile_count(page, queue, state)).to_have_text(str(counts.get(state, 0)))
        emails = page.locator('section.tile[data-queue="emails"]')
        expect(emails.locator(".finished-1m")).to_have_text("4")  # 2 sent, 1 refused, the XSS render failed
        expect(page.locator('section.tile[data-queue="llm"] dl.facts')).to_contain_text("60 per 60 s")
        expect(page.locator('section.tile[data-queue="llm"] dl.facts')).to_contain_text("input.tenant")
        before = db_counts(db_url, "emails")
        shot(page, "tiles")

        with PgStore(db_url) as store:  # a worker finishes the ready job while the page is open
            job = dashboard_world.claim_one(store, NOW, "emails")
            assert job.id == world.ready_job
            store.apply(w.Ack(NOW, job.id, job.attempt, w.Succeed({"sent": True})))
        expect(tile_count(page, "emails", "succeeded")).to_have_text(str(before["succeeded"] + 1))
        expect(tile_count(page, "emails", "ready")).to_have_text("0")
        expect(emails.locator(".finished-1m")).to_have_text("5")
        assert db_counts(db_url, "emails")["succeeded"] == before["succeeded"] + 1


def test_filtering_the_job_list_by_state_lists_exactly_the_jobs_in_that_state(db_url, world, page):
    with serve(db_url) as base:
        page.goto(base + "/jobs")
        expect(page.locator("tr.job-row")).to_have_count(
            sum(
                db_counts(db_url, q).get(s, 0)
                for q in ("emails", "llm", "etl", "manual", "cron")
                for s in ("ready", "running", "awaiting", "held", "paused", "succeeded", "failed", "cancelled")
            )
        )
        page.select_option('select[name="state"]', "failed")
        page.click('form#filters button[type="submit"]')
        page.wait_for_url("**/jobs?*state=failed*")
        with psycopg.connect(db_url) as c:
            failed = [r[0] for r in c.execute("SELECT id FROM belay_jobs WHERE state = 'failed' ORDER BY id DESC")]
        rows = page.locator("tr.job-row")
        expect(rows).to_have_count(len(failed))
        assert [int(x) for x in rows.evaluate_all("rs => rs.map(r => r.dataset.id)")] == failed
        assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.state)")) == {"failed"}
        shot(page, "jobs-failed")


def test_a_job_page_shows_its_steps_with_costs_against_the_budget_and_its_errors(db_url, world, page):
    with serve(db_url) as base:
        page.goto(f"{base}/jobs/{world.journal_job}")
        steps = page.locator("#steps tr.step-row")
        expect(steps).to_have_count(3)
        assert steps.evaluate_all("rs => rs.map(r => r.dataset.name)") == ["fetch", "llm", "refine"]
        llm, refine = steps.nth(1), steps.nth(2)
        expect(llm.locator("td.usd")).to_have_text("$0.03")
        expect(llm.locator("td.total-usd")).to_have_text("$0.03 / $0.05")
        expect(refine.locator("td.total-usd")).to_have_text("$0.055 / $0.05")  # over the budget here
        expect(refine.locator("td.total-tokens")).to_have_text("3,300 / 3,000")
        expect(refine).to_have_class("step-row over")
        expect(llm).to_have_class("step-row")
        expect(refine.locator("td.preview")).to_have_text('{"summary": "shorter"}')
        errors = page.locator("#errors tr.error-row")
        expect(errors).to_have_count(2)
        expect(errors.nth(0)).to_contain_text("timeout")
        expect(errors.nth(1)).to_contain_text("rate_limited")
        expect(errors.nth(1)).to_contain_text("attempt 2 detail")
        expect(page.locator("#timeline li.tm-error")).to_have_count(2)
        expect(page.locator("#children tbody tr[data-state]")).to_have_count(3)
        expect(page.locator("#signals")).to_contain_text("approve")
        expect(page.locator("#events")).to_contain_text('"progress"')
        expect(page.locator("#job-result")).to_contain_text('"pages": 3')
        expect(page.locator("#cancel-requested-value")).to_have_text("no")
        shot(page, "job")


def test_a_workflow_renders_as_an_svg_with_one_node_per_member_in_its_state(db_url, world, page):
    with serve(db_url) as base:
        page.goto(f"{base}/jobs?workflow={world.workflow_id}")
        page.locator("tr.job-row a", has_text=world.workflow_id).first.click()
        nodes = page.locator("#dag g.node")
        with psycopg.connect(db_url) as c:
            members = dict(
                c.execute(
                    "SELECT wf_name, state FROM belay_jobs WHERE workflow_id = %s", (world.workflow_id,)
                ).fetchall()
            )
        expect(nodes).to_have_count(len(members))
        shown = dict(nodes.evaluate_all("ns => ns.map(n => [n.dataset.member, n.dataset.state])"))
        assert shown == members
        fills = dict(
            nodes.evaluate_all("ns => ns.map(n => [n.dataset.member, n.querySelector('rect').getAttribute('fill')])")
        )
        assert fills == {m: STATE_COLOURS[s] for m, s in members.items()}
        doomed = set(nodes.evaluate_all("ns => ns.filter(n => n.dataset.doomed === 'yes').map(n => n.dataset.member)"))
        assert doomed == {"notify", "archive"}  # fetch failed and neither ignores it
        expect(page.locator('#dag g.node[data-member="report"]')).to_contain_text("ignores failed")
        expect(page.locator('#dag path.edge[data-source="fetch"][data-target="report"]')).to_have_attribute(
            "stroke-dasharray", "5 4"
        )
        expect(page.locator("h1")).to_contain_text("wf-<b>nightly</b>")  # the id is text, not markup
        shot(page, "workflow")
        page.locator('#dag g.node[data-member="fetch"]').click()
        page.wait_for_url(f"**/jobs/{world.workflow_members['fetch']}")
        expect(page.locator("#job-state")).to_have_text("failed")


def test_a_tokenless_dashboard_has_no_controls_and_refuses_a_forged_post(db_url, world, page):
    with serve(db_url) as base:
        page.goto(f"{base}/jobs/{world.held_job}")
        expect(page.locator("#mode")).to_have_text("read-only (no token)")
        expect(page.locator("#actions")).to_have_count(0)
        expect(page.locator("form[action$='/cancel'], form[action$='/retry'], form[action='/signals']")).to_have_count(
            0
        )
        # a cross-site page auto-submitting a form at the dashboard
        page.goto("about:blank")
        page.set_content(
            f'<form id="f" method="post" action="{base}/jobs/{world.held_job}/cancel">'
            f'<input name="csrf_token" value="guess"></form>'
        )
        with page.expect_navigation():
            page.evaluate("document.getElementById('f').submit()")
        expect(page.locator("body")).to_contain_text("read-only")
        response = page.request.post(
            f"{base}/jobs/{world.held_job}/cancel", headers={"Authorization": "Bearer anything"}
        )
        assert response.status == 403
        assert "started without a token" in response.text()
        assert db_state(db_url, world.held_job) == ("held", False)


def test_with_the_token_cancel_changes_the_job_state_in_the_database(db_url, world, page):
    with serve(db_url, token=TOKEN) as base:
        page.goto(f"{base}/jobs/{world.held_job}")
        expect(page.locator("#actions")).to_have_count(0)  # not logged in yet
        response = page.request.post(f"{base}/jobs/{world.held_job}/cancel")
        assert response.status == 403 and "log in" in response.text()
        page.goto(base + "/login")
        page.fill("input[name=token]", "wrong")
        page.click("button[type=submit]")
        expect(page.locator("#login-failed")).to_be_visible()
        page.fill("input[name=token]", TOKEN)
        page.click("button[type=submit]")
        expect(page.locator("#mode")).to_have_text("actions enabled")
        # the session cookie alone is not enough: a POST without the form's CSRF token is refused
        response = page.request.post(f"{base}/jobs/{world.held_job}/cancel", form={"csrf_token": "forged"})
        assert response.status == 403 and "CSRF" in response.text()
        assert db_state(db_url, world.held_job) == ("held", False)

        page.goto(f"{base}/jobs/{world.held_job}")
        page.click("#act-cancel")
        expect(page.locator("#confirm-box")).to_contain_text(f"Job {world.held_job}")  # asked first
        assert db_state(db_url, world.held_job) == ("held", False)
        shot(page, "confirm-cancel")
        page.click("#confirm-yes")
        expect(page.locator("#flash")).to_have_text(f"job {world.held_job} cancelled")
        expect(page.locator("#job-state")).to_have_text("cancelled")
        assert db_state(db_url, world.held_job) == ("cancelled", False)
        shot(page, "job-cancelled")

        page.goto(f"{base}/jobs/{world.running_job}")
        page.click("#act-cancel")
        page.click("#confirm-yes")
        expect(page.locator("#flash")).to_contain_text("cancel requested")
        assert db_state(db_url, world.running_job) == ("running", True)


def test_html_in_a_jobs_input_and_error_is_shown_as_text_and_never_runs(db_url, world, page):
    with serve(db_url) as base:
        page.goto(f"{base}/jobs/{world.xss_job}")
        expect(page.locator("#errors tr.error-row")).to_have_count(1)
        page.wait_for_load_state("load")  # an injected <img> would have fired onerror by now
        assert page.evaluate("window.__pwned") is None  # no injected script or handler ran
        assert page.locator("main img").count() == 0
        assert page.locator("main script").count() == 0
        expect(page.locator("#job-input")).to_contain_text(XSS_INPUT.replace('"', '\\"'))
        expect(page.locator("#errors td.err")).to_have_text(XSS_ERROR)
        expect(page.locator("#errors pre.detail")).to_have_text(XSS_ERROR)
        shot(page, "job-xss")
        page.goto(f"{base}/jobs?error=onerror")
        expect(page.locator("tr.job-row")).to_have_count(1)
        expect(page.locator("tr.job-row td.err")).to_have_text(XSS_ERROR)
        assert page.locator("main img").count() == 0
        assert page.evaluate("window.__pwned") is None
        assert page.dialogs == []


def test_the_reports_page_lists_soak_runs_and_links_each_report(db_url, page, tmp_path):
    run = tmp_path / "20261130-120000-abc"
    run.mkdir()
    (run / "results.json").write_text(
        '{"run_id": "20261130-120000-abc", "verdict": "valid", "exit_code": 0, '
        '"stats": {"jobs_in_database": 1234}, "faults": {"kill -9": 7, "SIGSTOP": 0}, '
        '"meta": {"elapsed_seconds": 93.5, "worker": "soak/reference-worker", "workers": 3}}'
    )
    (run / "report.html").write_text("<html><body><h1>Belay soak 20261130-120000-abc: VALID</h1></body></html>")
    with serve(db_url, reports_dir=tmp_path) as base:
        page.goto(base + "/reports")
        row = page.locator('tr.report-row[data-run="20261130-120000-abc"]')
        expect(row).to_contain_text("valid")
        expect(row).to_contain_text("93.5 s")
        expect(row).to_contain_text("1,234")
        expect(row).to_contain_text("kill -9: 7")
        shot(page, "reports")
        row.locator("a", has_text="report.html").click()
        expect(page.locator("h1")).to_have_text("Belay soak 20261130-120000-abc: VALID")


# --- issue 29 ------------------------------------------------------------------------------------


def finish_ready(db_url, queue: str, result) -> int:
    with PgStore(db_url) as store:
        job = dashboard_world.claim_one(store, NOW, queue)
        store.apply(w.Ack(NOW, job.id, job.attempt, w.Succeed(result)))
        return job.id


def test_the_job_page_updates_live_when_its_job_finishes(db_url, world, page):
    with serve(db_url, token=TOKEN) as base:
        page.goto(base + "/login")
        page.fill("input[name=token]", TOKEN)
        page.click("button[type=submit]")
        page.goto(f"{base}/jobs/{world.ready_job}")
        expect(page.locator("#job-state")).to_have_text("ready")
        page.fill("#steer-payload", '{"typing": "in progress"}')  # a form being typed into survives refreshes
        assert finish_ready(db_url, "emails", {"sent": "live"}) == world.ready_job
        expect(page.locator("#job-state")).to_have_text("succeeded")
        expect(page.locator("#job-result")).to_contain_text('"sent": "live"')
        expect(page.locator("#timeline li.tm-finished")).to_have_count(1)
        assert page.input_value("#steer-payload") == '{"typing": "in progress"}'
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # no reload happened
        shot(page, "job-live")


def test_the_job_list_updates_live(db_url, world, page):
    with serve(db_url) as base:
        page.goto(base + "/jobs?queue=emails")
        first = page.locator("tr.job-row").first
        expect(first).to_have_attribute("data-id", str(world.ready_job))
        with PgStore(db_url) as store:
            new = store.apply(ops.Enqueue(NOW, (ops.JobSpec("emails", "send", {"to": "new@example.com"}),))).ids[0]
        expect(first).to_have_attribute("data-id", str(new))
        finish_ready(db_url, "emails", {"sent": True})  # the older ready job (ids are claimed in order)
        expect(page.locator(f'tr.job-row[data-id="{world.ready_job}"]')).to_have_attribute("data-state", "succeeded")
        with psycopg.connect(db_url) as c:
            expected = [r[0] for r in c.execute("SELECT id FROM belay_jobs WHERE queue = 'emails' ORDER BY id DESC")]
        assert [int(x) for x in page.locator("tr.job-row").evaluate_all("rs => rs.map(r => r.dataset.id)")] == expected


CHART_NOW = datetime(2026, 11, 30, 12, 59, 30, tzinfo=UTC)


def seed_hour(db_url) -> None:
    """600 jobs over the hour before CHART_NOW on queues "api" and "batch": outcomes and claim latencies
    that vary with the minute (so the pictures show something)."""
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(
            "INSERT INTO belay_jobs (queue, worker, state, attempt, ready_at, inserted_at, started_at, finished_at) "
            "SELECT CASE WHEN g %% 3 = 0 THEN 'batch' ELSE 'api' END, 'work', "
            "       CASE WHEN g %% 17 = 0 THEN 'failed' WHEN g %% 41 = 0 THEN 'cancelled' ELSE 'succeeded' END, 1, "
            "       t, t, t + make_interval(secs => (g %% 60) * 0.05 + (g %% 7) * 0.3), "
            "       t + make_interval(secs => 2 + (g %% 60) * 0.05 + (g %% 7) * 0.3) "
            "FROM generate_series(1, 600) g, LATERAL (SELECT %(start)s + make_interval(secs => g * 5.8) AS t) x",
            {"start": CHART_NOW - timedelta(minutes=59, seconds=30)},
        )


def test_the_charts_draw_what_the_tables_hold(db_url, page):
    seed_hour(db_url)
    with serve(db_url, clock=lambda: CHART_NOW) as base:
        page.goto(base + "/")
        chart = page.locator('#charts section.chart[data-queue="api"]')
        expect(chart.locator("rect.bar").first).to_be_visible()
        with psycopg.connect(db_url) as c:
            data = DashboardQueries().charts(c, CHART_NOW)
            db = dict(
                (tuple(k), n)
                for *k, n in c.execute(
                    "SELECT queue, state, count(*) FROM belay_jobs WHERE finished_at >= %s GROUP BY queue, state",
                    (datetime.fromisoformat(data["since"]),),
                )
            )
        for queue in ("api", "batch"):
            card = page.locator(f'#charts section.chart[data-queue="{queue}"]')
            for outcome in ("succeeded", "failed", "cancelled"):
                drawn = card.locator(f'rect.bar[data-outcome="{outcome}"]').evaluate_all(
                    "bs => bs.map(b => Number(b.dataset.n))"
                )
                assert sum(drawn) == db.get((queue, outcome), 0), (queue, outcome)
                assert len(drawn) == sum(1 for n in data["queues"][queue]["finished"][outcome] if n)
            lat = data["queues"][queue]["claim_latency_ms"]
            points = card.locator("circle.lat-p50").evaluate_all("ps => ps.map(p => Number(p.dataset.ms))")
            assert points == [v for v in lat["p50"] if v is not None]
            expect(card.locator("path.lat-p95")).to_have_count(1)
        # the tallest bar of "api" is as tall as the chart's scale says
        heights = chart.locator("rect.bar").evaluate_all("bs => bs.map(b => Number(b.getAttribute('height')))")
        assert max(heights) > 50
        page.locator("#charts").scroll_into_view_if_needed()
        shot(page, "charts")


def test_a_banner_says_the_database_is_unreachable_and_goes_when_it_is_back(db_url, world, page):
    target = psycopg.conninfo.conninfo_to_dict(db_url)
    proxy = Proxy(target.get("host") or "127.0.0.1", int(target.get("port") or 5432))
    try:
        with serve(proxy.url("dash", db_url), db_wait=1.5) as base:
            page.goto(base + "/")
            banner = page.locator("#db-banner")
            expect(tile_count(page, "emails", "ready")).to_have_text("1")
            expect(banner).to_be_hidden()
            proxy.partition("dash")
            expect(banner).to_be_visible()
            expect(banner).to_contain_text(re.compile("database is unreachable", re.I))
            expect(page.locator("#tiles")).to_have_attribute("data-stale", "yes")
            expect(tile_count(page, "emails", "ready")).to_have_text("1")  # the last counts, greyed
            shot(page, "outage-banner")
            response = page.goto(base + "/jobs")
            assert response.status == 503
            expect(page.locator("#unavailable")).to_contain_text("The database is unreachable")
            expect(banner).to_be_visible()
            shot(page, "outage-page")
            proxy.heal("dash")
            page.goto(base + "/")  # (the 503 page would reload itself within 5 s too)
            expect(tile_count(page, "emails", "ready")).to_have_text("1")
            proxy.partition("dash")
            expect(banner).to_be_visible()
            proxy.heal("dash")
            expect(banner).to_be_hidden()
            expect(page.locator("#tiles")).not_to_have_attribute("data-stale", "yes")
    finally:
        proxy.close()


def test_long_names_wrap_inside_their_boxes(db_url, page):
    queue = "tenant-" + "x" * 180
    kind = "kind." + "y" * 150
    with PgStore(db_url) as store:
        store.apply(ops.PutQueue(NOW, queue, {"limit": 3, "global_limit": 9}))
        job = store.apply(ops.Enqueue(NOW, (ops.JobSpec(queue, kind, {"n": 1}),))).ids[0]
    with serve(db_url) as base:
        page.goto(base + "/")
        tile = page.locator(f'section.tile[data-queue="{queue}"]')
        expect(tile.locator(".node-limit")).to_have_text("3")
        assert tile.evaluate("t => t.scrollWidth <= t.clientWidth + 1")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        shot(page, "long-names")
        page.goto(f"{base}/jobs?queue={queue}")
        expect(page.locator("tr.job-row")).to_have_count(1)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.goto(f"{base}/jobs/{job}")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_the_crons_page_lists_each_cron_with_its_next_slots(db_url, world, page):
    with serve(db_url) as base:
        page.goto(base + "/crons")
        rows = page.locator("tr.cron-row")
        expect(rows).to_have_count(3)
        every = page.locator('tr.cron-row[data-name="every-minute"]')
        expect(every.locator(".slot")).to_have_count(3)
        expect(every.locator(".last a")).to_have_text(str(world.cron_jobs["every-minute"][-1]))
        expect(page.locator('tr.cron-row[data-name="paused-hourly"] .status')).to_have_text("paused")
        shot(page, "crons")
        every.locator(".last a").click()
        expect(page.locator("#job-state")).to_have_text("ready")
