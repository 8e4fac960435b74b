"""What the HTTP API tests share (test_http_api, test_http_fastpath, test_http_hot_routes): the API served
on a fresh database with a fake clock, and the few requests every one of them makes.

    from tests.http_support import http_api, http_clock  # noqa: F401  (the fixtures `api` and `clock`)

(Registered as `api` and `clock`, imported under other names: a test's `api` parameter shadows no import.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from impl.http.testing import FakeClock, serve_api


@pytest.fixture(name="clock")
def http_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(name="api")
def http_api(db_url: str, clock: FakeClock) -> Iterator[Any]:
    with serve_api(db_url, clock=clock) as served:
        yield served


def make_tasks(api: Any, n: int, queue: str = "q", **fields: Any) -> list[str]:
    """Create `queue` unless it exists, then `n` tasks in it; their task ids."""
    if not any(q["name"] == queue for q in api.get("/queues").json()["queues"]):
        assert api.post("/queues", json={"name": queue}).status_code == 201
    out = []
    for _ in range(n):
        r = api.post(f"/queues/{queue}/tasks", json={"task_name": "work", **fields})
        assert r.status_code == 201, r.text
        out.append(r.json()["task_id"])
    return out


def claim_tasks(api: Any, limit: int, queue: str = "q", timeout: int = 30) -> list[dict]:
    """Claim up to `limit` tasks of `queue` (a 200 answer); the claimed tasks."""
    r = api.post(f"/queues/{queue}/tasks/claim", json={"limit": limit, "claim_timeout": timeout})
    assert r.status_code == 200, r.text
    return r.json()["tasks"]


def job(db_url: str, run_or_task: str) -> dict | None:
    """The belay_jobs row behind a task id (`task_<job>`) or a run id (`run_<job>_<attempt>`); None if gone."""
    with psycopg.connect(db_url, row_factory=dict_row) as c:
        return c.execute("SELECT * FROM belay_jobs WHERE id = %s", (int(run_or_task.split("_")[1]),)).fetchone()
