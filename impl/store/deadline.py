"""Client-side deadlines for store calls, and the connection settings a worker should use (issue 13;
docs/connections.md; spec/belay-operations.txt §6 — a node must keep renewing its leases).

A network that *stalls* (packets dropped, a proxy or NAT that stopped forwarding, a frozen server)
makes a query hang with nothing to say so: PostgreSQL's `statement_timeout` never fires because the
server may never see the query; TCP keepalives never fire while the client has a request in flight
and the peer's kernel still acknowledges; `tcp_user_timeout` only helps when the peer stopped
acknowledging. The one bound that holds in every case is a deadline the client enforces itself.

`Watchdog` enforces one: each store call registers its connection with a deadline; a watchdog thread
shuts down the socket of a connection whose call outlived it (`shutdown(2)` wakes the thread blocked
in poll), so the call fails with a connection error — transient (impl/runtime/faults.py) — and is retried on
a fresh connection, while the broken one is discarded by the pool. One stalled connection then costs
one call `limit` seconds, never a worker's lease renewals forever.

`connection_defaults` adds, to a conninfo that does not set them, a connect timeout and TCP keepalives
(plus `tcp_user_timeout`), which bound the kernel-visible failures (a dead peer, an unacknowledged send).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

log = logging.getLogger("belay.deadline")


def connection_defaults(
    conninfo: str, *, connect_timeout: int = 5, keepalive_idle: int = 10, idle_in_transaction: float | None = None
) -> dict[str, Any]:
    """Connection keyword arguments a worker SHOULD use, minus those `conninfo` already sets.

    `idle_in_transaction` (seconds) sets the session's `idle_in_transaction_session_timeout`: when the
    client's path stalls mid-transaction, the client's deadline cuts its socket, but the server keeps
    the transaction — and its row locks — open until it hears something. A lock on one job's row then
    blocks the node's one-statement renewal of *all* its leases for the whole stall (seen in a
    one-hour soak: every renewal cut at the deadline for 10 s, the lease lost). With the timeout the
    server ends such a transaction itself and the renewal goes through."""
    given = conninfo_to_dict(conninfo)
    wanted: dict[str, Any] = {
        "connect_timeout": connect_timeout,  # libpq: whole connection setup, startup packet included
        "keepalives": 1,
        "keepalives_idle": keepalive_idle,  # idle seconds before the first probe
        "keepalives_interval": max(1, keepalive_idle // 3),
        "keepalives_count": 3,
        "tcp_user_timeout": keepalive_idle * 1000 * 2,  # ms unacknowledged data may stay unacknowledged
    }
    if idle_in_transaction is not None:
        wanted["options"] = f"-c idle_in_transaction_session_timeout={max(1, int(idle_in_transaction * 1000))}"
    return {k: v for k, v in wanted.items() if k not in given}


class Watchdog:
    """Cuts the connection of a call that outlives `limit` seconds (see module docstring)."""

    def __init__(self, limit: float, *, name: str = "belay-deadline") -> None:
        if limit <= 0:
            raise ValueError(f"a call deadline must be positive, got {limit}")
        self.limit = limit
        self.cut = 0  # how many calls were cut (for logs and tests)
        self._calls: dict[int, tuple[psycopg.Connection, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def guard(self, conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
        key = id(conn)
        with self._lock:
            self._calls[key] = (conn, time.monotonic() + self.limit)
        try:
            yield conn
        finally:
            with self._lock:
                self._calls.pop(key, None)

    def _loop(self) -> None:
        period = min(max(self.limit / 4, 0.05), 0.5)
        while not self._stop.wait(period):
            now = time.monotonic()
            with self._lock:
                late = [(k, c) for k, (c, deadline) in self._calls.items() if deadline <= now]
                for k, _ in late:
                    self._calls.pop(k, None)
            for _, conn in late:
                self._cut(conn)

    def _cut(self, conn: psycopg.Connection) -> None:
        try:
            fd = conn.pgconn.socket
        except Exception:  # noqa: BLE001 - closed meanwhile: nothing to cut
            return
        try:
            self.cut += 1  # before the shutdown: the woken caller may look at it at once
            with socket.socket(fileno=os.dup(fd)) as s:
                s.shutdown(socket.SHUT_RDWR)
            log.warning(
                "belay store call exceeded its %.1fs deadline: connection cut, the call will be retried", self.limit
            )
        except OSError:
            pass

    def close(self) -> None:
        self._stop.set()


class GuardedPool(ConnectionPool):
    """A psycopg pool whose every borrowed connection is under the watchdog's deadline."""

    def __init__(self, *args: Any, watchdog: Watchdog, **kwargs: Any) -> None:
        self.watchdog = watchdog
        super().__init__(*args, **kwargs)

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection]:
        with super().connection(timeout) as conn, self.watchdog.guard(conn):
            yield conn

    def close(self, timeout: float = 5.0) -> None:
        self.watchdog.close()
        super().close(timeout)
