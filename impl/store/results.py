"""§9.2 result notifications, sent after the commit that made the jobs terminal, many per transaction.

The contract (§9.2) makes the accelerator optional — "9.2 pg_notify (optional): ... Payloads: ... result
{"t":"r","id":<job_id>}" — and warns "(the NOTIFY commit lock punishes chattiness)"; it does not tie a result
notification to the transaction of the terminal write. Sent inside each ack, every ack's commit took PostgreSQL's NOTIFY commit lock (one per
database, held through the commit's WAL flush), which serialized the acks of a fleet: 3.5–4 lock waiters at 8
processes, and the drain 8.7–11.1k jobs/s against 12.1–14.5k with the accelerator off
(bench/results/scale-2026-12-07-notify-diagnosis.txt).

So a store hands the ids of jobs it made terminal to one `ResultNotices` after its transaction commits; a
thread sends everything pending in one autocommit statement (`notify_results`), and what arrives while that
statement runs — or within GAP of its start — goes in the next. One NOTIFY commit per batch instead of one per ack; a waiter is woken one
round trip after the commit instead of at it — after it, so the job it re-reads is already terminal. A crash
between the two loses notifications, which the contract allows: awaiters re-read on their own floor
(impl.client.Client.await_result polls at 5 → 200 ms).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from impl.store.pgrows import channel_name

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from impl.store.queries import SchemaSQL

log = logging.getLogger("belay.store")

BATCH = 1000  # ids per statement (each is one pg_notify; the queue page holds ~8 kB of them)
# Under throughput, at most one statement per GAP seconds: what arrives meanwhile joins the next. Without it
# a single worker process sent one statement (a transaction of its own) per ack group — twice the commits of
# the acks alone, +20 µs of worker CPU per job at one process (bench.scale, fleet P = 1: 0.108 → 0.208
# commits per job); with 5 ms, 0.133 at one process but 0.217 at eight (each process's notifier at its cap
# of 200 statements/s). 20 ms caps a process at 50. "Under throughput": the previous statement carried more
# than one notification; a client awaiting one job at a time (bench.run latency) never waits, and one
# awaiting a job among thousands per second is woken within 20 ms — a tenth of Client.await_result's 200 ms
# polling floor.
GAP = 0.020


class ResultNotices:
    """Sends result notifications for ids handed to `add`, after the fact, coalesced. Thread-safe."""

    def __init__(self, pool: ConnectionPool, q: SchemaSQL, gap: float = GAP) -> None:
        self.pool = pool
        self.q = q
        self.gap = gap
        self.sent = 0  # notifications sent
        self.statements = 0  # statements (NOTIFY commits) that sent them
        self.dropped = 0  # notifications lost to a failed statement or to close()'s deadline
        self._pending: list[int] = []
        self._cv = threading.Condition()
        self._closing = False
        self._busy = False
        self._idle = False  # the thread waits for ids: only then does add() wake it
        self._thread: threading.Thread | None = None
        self._channel: str | None = None

    def add(self, ids: Iterable[int]) -> None:
        """Queue the result notifications of jobs whose terminal write has committed."""
        with self._cv:
            if self._closing:
                return
            before = len(self._pending)
            self._pending.extend(ids)
            if len(self._pending) == before:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="belay-results", daemon=True)
                self._thread.start()
            if self._idle:
                self._cv.notify()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything added so far has been sent (or dropped); False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is pending (up to `timeout`), then stop. Later adds are ignored."""
        self.flush(timeout)
        with self._cv:
            self._closing = True
            self.dropped += len(self._pending)
            self._pending.clear()
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        last, size = -self.gap, 0  # when the previous statement started, and how many it carried
        while True:
            with self._cv:
                self._idle = True
                self._cv.wait_for(lambda: self._pending or self._closing)
                self._idle = False
                while size > 1 and not self._closing and (rest := last + self.gap - time.monotonic()) > 0:
                    self._cv.wait(rest)  # what arrives meanwhile joins this statement
                if self._closing:
                    return
                batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
                self._busy = True
            last, size = time.monotonic(), len(batch)
            try:
                self._send(batch)
            except Exception as exc:  # noqa: BLE001 — never load-bearing: the awaiters poll
                with self._cv:
                    self.dropped += len(batch)
                log.warning("result notifications for %d job(s) not sent: %s", len(batch), exc)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _send(self, ids: list[int]) -> None:
        conn: Any
        with self.pool.connection() as conn:
            if self._channel is None:
                self._channel = channel_name(conn.info.dbname, self.q.schema)
            conn.execute(self.q.qb("notify_results"), {"channel": self._channel, "ids": ids})
        with self._cv:
            self.sent += len(ids)
            self.statements += 1
