"""The server's hot paths on the event loop's async pool: completeRun coalesced into one statement
for all the requests that arrive together, and claimTasks in one round trip. Both only ever shortcut
the full paths in impl/http/service.py: whatever they do not settle, the full path handles alone.

completeRun (contract §7 succeed, fenced on the run's attempt; §9.2 result notification): concurrent
requests queue here; a drain takes the queued ones — distinct job ids, at most `max_batch` — and runs
`http_complete_batch`, which completes each row under exactly `http_complete_solo`'s conditions with
the request's own `now` and notification. A run the statement does not complete (stale, pending,
in a workflow or with a parent, past its deadline) answers False and its request takes the full path
(409, 404, the Ack with settlement) alone. A batch that fails with an error the database reported
(SQLSTATE: nothing committed) is retried one request at a time, so one request's failure fails no
other; a failure with no SQLSTATE (connection lost: the outcome is unknown) is every request's answer,
exactly as each would have seen it alone. At most `max_in_flight` statements run at once; requests
that arrive while they run form the next batch, so a batch costs no added wait when the server is idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from impl.store.pgrows import job_from_row
from model.store import claim_order


class CompletionBatcher:
    """Coalesces concurrent completeRun fast paths (see the module docstring)."""

    def __init__(self, pool: Any, batch_sql: Any, solo_sql: Any, *, max_batch: int = 64, max_in_flight: int = 2):
        self.pool = pool
        self.batch_sql = batch_sql
        self.solo_sql = solo_sql
        self.max_batch = max_batch
        self.max_in_flight = max_in_flight
        self.pending: list[tuple[dict, asyncio.Future[bool]]] = []
        self.in_flight = 0
        self.drains: set[asyncio.Task] = set()
        self.batches = 0  # statements run (for tests and the bench)
        self.completed = 0

    async def complete(self, params: dict) -> bool:
        """True when the run named by `params` (http_complete_solo's parameters) is now completed by
        this request; False when the full path must decide."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.pending.append((params, future))
        if self.in_flight < self.max_in_flight:
            self.in_flight += 1
            drain = asyncio.create_task(self._drain())
            self.drains.add(drain)
            drain.add_done_callback(self.drains.discard)
        return await future

    def _take(self) -> list[tuple[dict, asyncio.Future[bool]]]:
        """The next batch: queued requests in arrival order with distinct job ids (a second request for
        the same job waits for the next batch, so it sees the first one's outcome)."""
        batch: list[tuple[dict, asyncio.Future[bool]]] = []
        rest: list[tuple[dict, asyncio.Future[bool]]] = []
        ids: set[int] = set()
        for item in self.pending:
            if item[1].done():
                continue  # its request went away before its turn
            if item[0]["id"] in ids or len(batch) >= self.max_batch:
                rest.append(item)
            else:
                ids.add(item[0]["id"])
                batch.append(item)
        self.pending = rest
        return batch

    async def _drain(self) -> None:
        try:
            while self.pending:
                batch = self._take()
                if batch:
                    await self._run(batch)
        finally:
            self.in_flight -= 1

    async def _run(self, batch: list[tuple[dict, asyncio.Future[bool]]]) -> None:
        params = [p for p, _ in batch]
        args = {
            "ids": array_literal(str(p["id"]) for p in params),
            "attempts": array_literal(str(p["attempt"]) for p in params),
            "results": array_literal(f'"\\\\x{p["result"].hex()}"' for p in params),
            "nows": array_literal(f'"{p["now"].isoformat()}"' for p in params),
            "channel": params[0]["channel"],
        }
        try:
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(rendered(self.batch_sql, conn), args)).fetchall()
        except psycopg.Error as exc:
            if exc.sqlstate is None or len(batch) == 1:
                _fail(batch, exc)
            else:  # the database refused the statement: nothing committed; each request alone
                await asyncio.gather(*(self._solo(p, f) for p, f in batch))
            return
        except Exception as exc:  # noqa: BLE001 - handed to every waiting request, which reports it
            _fail(batch, exc)
            return
        self.batches += 1
        done = {row[0] for row in rows}
        self.completed += len(done)
        for p, future in batch:
            if not future.done():
                future.set_result(p["id"] in done)

    async def _solo(self, params: dict, future: asyncio.Future[bool]) -> None:
        try:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(rendered(self.solo_sql, conn), params)).fetchone()
        except Exception as exc:  # noqa: BLE001 - this request's own failure, reported to it alone
            _fail([(params, future)], exc)
            return
        if not future.done():
            future.set_result(row is not None)


def array_literal(elements: Iterable[str]) -> str:
    """A PostgreSQL array literal of elements already in their literal form (numbers; double-quoted
    ISO timestamps; double-quoted bytea hex `"\\\\x…"`, whose backslash the array syntax escapes)."""
    return "{" + ",".join(elements) + "}"


_RENDERED: dict[int, tuple[Any, bytes]] = {}  # id → (the query, kept alive so its id stays its own; bytes)


def rendered(query: Any, conn: Any) -> bytes:
    """A composed query as bytes, rendered once (psycopg would compose it again on every execute)."""
    entry = _RENDERED.get(id(query))
    if entry is None or entry[0] is not query:
        entry = _RENDERED[id(query)] = (query, query.as_bytes(conn))
    return entry[1]


def _fail(batch: list[tuple[dict, asyncio.Future[bool]]], exc: BaseException) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)


async def claim_once(
    pool: Any, claim_sql: Any, now: datetime, queue: str, node: str, take: int, claim_timeout: int
) -> tuple[list[Any], dict[int, Any]] | None:
    """One `http_claim_solo` round: the claimed jobs in claim order and their `$http:task` options,
    or None when the queue does not exist or is not plain (the full path decides)."""
    params = {
        "queue": queue,
        "now": now,
        "take": take,
        "node": node,
        "lease_until": now + timedelta(seconds=claim_timeout),
    }
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = await (await cur.execute(rendered(claim_sql, conn), params)).fetchall()
    if not rows or not rows[0]["plain"]:
        return None
    claimed = [r for r in rows if r["id"] is not None]
    jobs = sorted((job_from_row(r) for r in claimed), key=claim_order)
    return jobs, {r["id"]: r["config"] for r in claimed}


RunSync = Callable[..., Awaitable[Any]]
