"""The operator's dashboard (belay-operations.txt, "The dashboard") driven in a real browser.

Playwright for Python drives Debian's Chromium (`executable_path`; Playwright's own browser download
is not used). Each test serves the dashboard with uvicorn on a fresh database seeded by
tests/dashboard_world.py, waits on elements (never sleeps), and compares what the page shows with
what the database holds. Screenshots of each page go to reports/screenshots/dashboard/ (git-ignored,
like every run's artifacts; override with $BELAY_SCREENSHOTS); tests/artifacts/dashboard/ holds the
screenshots of one run, committed for reference.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from impl.dashboard import create_app
from impl.dashboard.views import STATE_COLOURS
from impl.http.server import running
from impl.store import PgStore
from model import worker_ops as w
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
        if os.environ.get("CI"):
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


def serve(db_url, *, token=None, reports_dir="reports"):
    app = create_app(db_url, token=token, reports_dir=reports_dir, clock=lambda: NOW, poll_ms=250)
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
                for q in ("emails", "llm", "etl", "manual")
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
        expect(page.locator("#flash")).to_have_text(f"job {world.held_job} cancelled")
        expect(page.locator("#job-state")).to_have_text("cancelled")
        assert db_state(db_url, world.held_job) == ("cancelled", False)
        shot(page, "job-cancelled")

        page.goto(f"{base}/jobs/{world.running_job}")
        page.click("#act-cancel")
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
