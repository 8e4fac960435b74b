"""The queues page at a hundred queues (issue 53), in a real browser (Debian's Chromium via Playwright,
as tests/test_dashboard_browser.py): the compact table by default past a dozen queues, sorting by
backlog, failures and name, the filter box (tiles and charts alike), the charts one click away, chart
legends on one line, and a queue named "a\\nb" told apart from "a b". The screenshot of the page is
committed in tests/artifacts/dashboard/queues-100.png (BELAY_SCREENSHOTS=tests/artifacts/dashboard)."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from impl.store import PgStore
from model import ops
from tests.test_dashboard_browser import NOW, SHOTS, browser, expect, page, serve  # noqa: F401 - fixtures

N = 100


def seed(db_url: str) -> dict[str, tuple[int, int]]:
    """q-000 … q-099: i % 7 ready jobs, i % 5 failed jobs finished half a minute ago, 1 succeeded in every
    tenth; plus "a\\nb" and "a b". Returns {queue: (backlog, failed)}."""
    expected: dict[str, tuple[int, int]] = {}
    with PgStore(db_url) as store:
        for name in ("a\nb", "a b"):
            store.apply(ops.PutQueue(NOW, name, {"limit": 2}))
            expected[name] = (0, 0)
    rows = []
    for i in range(N):
        q = f"q-{i:03d}"
        rows += [(q, "ready", None)] * (i % 7)
        rows += [(q, "failed", NOW - timedelta(seconds=30))] * (i % 5)
        rows += [(q, "succeeded", NOW - timedelta(seconds=30))] * (1 if i % 10 == 0 else 0)
        expected[q] = (i % 7, i % 5)
    with psycopg.connect(db_url, autocommit=True) as c, c.cursor() as cur:
        cur.executemany(
            "INSERT INTO belay_jobs (queue, worker, state, ready_at, inserted_at, started_at, finished_at) "
            "VALUES (%s, 'w', %s, %s, %s, %s, %s)",
            [(q, st, NOW - timedelta(minutes=5), NOW - timedelta(minutes=5), fin, fin) for q, st, fin in rows],
        )
        for i in range(N):  # queues without any job still have a row
            if i % 7 == 0 and i % 5 == 0 and i % 10:
                cur.execute(
                    "INSERT INTO belay_queues (name, opts, updated_at) VALUES (%s, '{}', %s)", (f"q-{i:03d}", NOW)
                )
    return expected


def view_shot(pg, name: str) -> None:
    """The viewport only (what an operator sees first), not the full page: that is ~16,000 px of charts."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"))


def listed(pg) -> list[str]:
    return pg.locator("#tiles-inner tr.queue-row").evaluate_all(
        "rs => rs.filter(r => r.getAttribute('data-filtered') !== 'out').map(r => r.dataset.queue)"
    )


@pytest.mark.usefixtures("browser")
def test_a_hundred_queues_sort_filter_and_reach_their_charts(db_url, page):  # noqa: F811 - the fixture
    expected = seed(db_url)
    with serve(db_url) as base:
        page.goto(base + "/")
        expect(page.locator("#tiles-inner")).to_have_attribute("data-view", "table")
        rows = page.locator("#tiles-inner tr.queue-row")
        expect(rows).to_have_count(N + 2)
        assert listed(page) == sorted(expected)
        expect(page.locator("#charts section.chart").first).to_be_visible()
        table_height = page.locator("#tiles").evaluate("e => e.getBoundingClientRect().height")
        view_shot(page, "queues-100")

        # the charts: one click from the top, not past a hundred tiles
        page.locator("#to-charts").click()
        expect(page.locator("#charts-heading")).to_be_in_viewport()
        view_shot(page, "queues-100-charts")

        # a legend is one line of swatches (the chart's own display:block no longer hits them)
        legend = page.locator("#charts section.chart .chart-legend").first
        tops = legend.locator(".swatch").evaluate_all("ss => ss.map(s => Math.round(s.getBoundingClientRect().top))")
        assert len(tops) == 5 and len(set(tops)) == 1, tops

        # sort by backlog, then by failures (the select submits the form)
        page.select_option("#queue-sort", "backlog")
        expect(page.locator("#tiles-shown")).to_contain_text("sorted by backlog")
        by_backlog = sorted(expected, key=lambda q: (-expected[q][0], q))
        assert listed(page) == by_backlog
        page.select_option("#queue-sort", "failures")
        expect(page.locator("#tiles-shown")).to_contain_text("sorted by failures")
        assert listed(page) == sorted(expected, key=lambda q: (-expected[q][1], q))

        # the filter: at once on the page (tiles and charts), then from the server on the next poll
        page.fill("#queue-filter", "q-04")
        expect(page.locator("#tiles-shown")).to_contain_text("10 of 102 queues")
        assert sorted(listed(page)) == [f"q-04{i}" for i in range(10)]
        visible_charts = page.locator("#charts section.chart").evaluate_all(
            "cs => cs.filter(c => getComputedStyle(c).display !== 'none').map(c => c.dataset.queue)"
        )
        assert visible_charts and all(q.startswith("q-04") for q in visible_charts), visible_charts
        assert "q=q-04" in page.url

        # "a\nb" and "a b": two rows, told apart
        page.goto(base + "/?q=a")
        names = page.locator("#tiles-inner tr.queue-row td.queue-name a").all_inner_texts()
        assert names == ['"a\\nb"', "a b"], names

        # the tiles view on request, and how much taller it is
        page.goto(base + "/?view=tiles")
        expect(page.locator("#tiles-inner section.tile")).to_have_count(N + 2)
        tiles_height = page.locator("#tiles").evaluate("e => e.getBoundingClientRect().height")
        print(f"\nqueues region at {N + 2} queues: table {table_height:.0f} px, tiles {tiles_height:.0f} px")
        assert table_height * 2 < tiles_height
