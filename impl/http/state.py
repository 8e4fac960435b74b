"""What the HTTP app holds for its lifetime (`Belay`, app.state.belay) and the long polls' `Waker`.

Kept apart from impl/http/app.py so that impl/http/hot.py (the routes answered before Starlette) can name
`Belay` without importing the app that imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime

from psycopg_pool import AsyncConnectionPool

from impl.http import fastpath as fast
from impl.http.openapi import served_document
from impl.http.service import HttpService
from impl.store import PgStore
from impl.store.pgrows import listen_for_pokes
from model import ops

log = logging.getLogger("belay.http")


class Waker:
    """Wakes long-polling claims: local pokes (this server made work ready) and pg_notify pokes (any
    node did). Lossy by assumption (§9): every waiter also re-polls at the floor interval. A per-queue
    generation counter closes the gap between an empty claim and the wait that follows it."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.generation: dict[str | None, int] = {}
        self.waiters: dict[str, set[asyncio.Event]] = {}

    def seen(self, queue: str) -> tuple[int, int]:
        return self.generation.get(queue, 0), self.generation.get(None, 0)

    def poke(self, queue: str | None) -> None:
        """Thread-safe: a queue's waiters (None: every waiter)."""
        if self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._poke, queue)

    def _poke(self, queue: str | None) -> None:
        self.generation[queue] = self.generation.get(queue, 0) + 1
        for q, events in self.waiters.items():
            if queue is None or q == queue:
                for event in events:
                    event.set()

    async def wait(self, queue: str, seen: tuple[int, int], timeout: float) -> None:
        if self.seen(queue) != seen:
            return
        event = asyncio.Event()
        self.waiters.setdefault(queue, set()).add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self.waiters[queue].discard(event)


class Belay:
    """What the app holds for its lifetime (app.state.belay)."""

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str,
        token: str | None,
        clock: Callable[[], datetime],
        pool_size: int,
        poll_interval: float,
        sweep_interval: float | None,
        notify: bool,
        node: str,
        max_long_poll: float | None,
    ) -> None:
        self.conninfo = conninfo
        self.max_long_poll = max_long_poll
        self.schema = schema
        self.token = token
        self.clock = clock
        self.pool_size = pool_size
        self.poll_interval = poll_interval
        self.sweep_interval = sweep_interval
        self.notify = notify
        self.node = node
        self.waker = Waker()
        self.store: PgStore | None = None
        self.async_pool: AsyncConnectionPool | None = None  # the event loop's own, for the fast paths
        self.completions: fast.CompletionBatcher | None = None  # completeRun's, on async_pool
        self.service: HttpService | None = None
        self.stopped = threading.Event()
        self.threads: list[threading.Thread] = []
        self.documents = {bearer: served_document(bearer=bearer) for bearer in (False, True)}

    def open(self) -> None:
        self.store = PgStore(self.conninfo, schema=self.schema, pool_size=self.pool_size)
        try:
            self.store.apply(ops.CheckCompat())
        except Exception:
            self.store.close()
            raise
        self.service = HttpService(self.store, node=self.node, on_ready=self.waker.poke)
        loops = [self._sweep_loop] if self.sweep_interval else []
        if self.notify:
            loops.append(self._listen_loop)
        for loop in loops:
            t = threading.Thread(target=loop, name=f"belay-http{loop.__name__}", daemon=True)
            t.start()
            self.threads.append(t)

    def close(self) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=5)
        if self.store is not None:
            self.store.close()

    def sweep_once(self, now: datetime | None = None):
        if self.service is None:
            raise RuntimeError("the app is not open: no sweep before open()")
        return self.service.sweep_once(self.clock() if now is None else now)

    def _sweep_loop(self) -> None:
        while not self.stopped.wait(self.sweep_interval):
            try:
                self.sweep_once()
            except Exception as exc:  # noqa: BLE001 - the next pass retries; the server keeps serving
                log.error("belay http sweeper pass failed: %s", exc)

    def _listen_loop(self) -> None:
        """The pg_notify accelerator (§9.2): pokes wake long polls; never load-bearing."""
        listen_for_pokes(self.conninfo, self.schema, self.stopped, self.waker.poke, "http listener")
