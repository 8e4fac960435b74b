"""Test support for the HTTP API: a settable clock and a served app with an httpx client.

with serve_api(db_url, clock=clock) as api:
    api.post("/queues", json={"name": "q"})
    api.belay.sweep_once()          # the sweeper, driven by the test (no background loop)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from impl.http.app import Belay, create_app
from impl.http.server import running


class FakeClock:
    """A clock the test moves; thread-safe."""

    def __init__(self, start: datetime = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, at: datetime) -> None:
        with self._lock:
            self._now = at


@dataclass
class Api:
    """An httpx client on /api/v1 of a running server, plus the app's lifetime object."""

    base: str
    client: httpx.Client
    belay: Belay
    app: Any = None  # the BelayApp (its `hot` routes: impl/http/hot.py)

    def __getattr__(self, name: str) -> Any:  # get/post/put/patch/delete/request
        return getattr(self.client, name)


@contextmanager
def serve_api(db_url: str, *, token: str | None = None, **options: Any) -> Iterator[Api]:
    """create_app(db_url, ...) served by uvicorn on a free loopback port; sweeper off by default."""
    options.setdefault("sweep_interval", None)
    app = create_app(db_url, token=token, **options)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with (
        running(app, token=token) as base,
        httpx.Client(base_url=f"{base}/api/v1", headers=headers, timeout=60) as client,
    ):
        yield Api(base, client, app.state.belay, app)
