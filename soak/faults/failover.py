"""Failover for the soak: a streaming standby of the embedded cluster, a nemesis that kills the primary
and promotes the standby, and check D1 — committed work survives failover (issue 13; docs/failover.md).

`Replication` owns the primary (the soak's `EmbeddedCluster`, started with `primary_settings(mode)`) and
a standby built from it with `pg_basebackup -R` (same binaries), streaming through the proxy's `repl`
route. `failover()`:

  1. partitions the replication route for `lag` seconds (a network hiccup between primary and standby —
     with asynchronous replication the primary keeps committing what the standby never receives; with
     synchronous replication those commits wait);
  2. reads, from the primary, every job inserted or finished since shortly before the partition: the
     commits any client could have observed (`failover_watch` in the history: the evidence);
  3. kill -9 of the primary (every postgres process), `pg_promote()` on the standby, the proxy's routes
     re-pointed at it (workers reconnect through the address they already have);
  4. a new standby from the new primary, so the next failover has one.

D1 (soak/judges/durability.py) then compares each watched commit with the final snapshot: a job that no longer exists (or whose id
now belongs to a job inserted at another time) is a lost enqueue — its ledger row went with it; a job
watched terminal that is no longer terminal with the same state and finish time is a lost ack.
Synchronous mode must leave D1 valid; asynchronous mode, with enough traffic during the lag, invalid
with the lost jobs named.

Caveat (PostgreSQL, documented): a transaction whose wait for the synchronous standby is cancelled (the
client gave up) stays committed *locally* and becomes visible without being replicated. The lag here
(default 1 s) is shorter than a worker's call deadline (impl/store/deadline.py, ≥ 2 s), so no worker gives up
during it; a deployment must not combine short client timeouts with a synchronous standby that can lag.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from impl.provision import ClusterConfig, EmbeddedCluster
from soak.faults.proxy import Proxy
from soak.record.history import History

MODES = ("sync", "async")
WATCH_SLACK = 2.0  # seconds before the partition from which commits are watched


def primary_settings(mode: str) -> dict[str, str]:
    """Settings of a primary that streams to a standby; `sync` makes every commit wait for it."""
    if mode not in MODES:
        raise ValueError(f"replication mode must be one of {MODES}, got {mode!r}")
    # synchronous_standby_names is set by ALTER SYSTEM once the first standby streams (Replication.add_standby):
    # on the command line it would block the harness's own setup commits before any standby exists, and
    # it could not be changed later. pg_basebackup copies postgresql.auto.conf, so a promoted standby keeps it.
    return {
        "wal_level": "replica",
        "max_wal_senders": "10",
        "wal_keep_size": "256MB",
        "hot_standby": "on",
        "synchronous_commit": "on",
    }


class Replication:
    def __init__(
        self, primary: EmbeddedCluster, proxy: Proxy, history: History, mode: str, *, lag: float = 1.0
    ) -> None:
        self.primary = primary
        self.proxy = proxy
        self.history = history
        self.mode = mode
        self.lag = lag
        self.standby: EmbeddedCluster | None = None
        self.failovers = 0
        self.lock = threading.Lock()
        self.repl_port = proxy.listen("repl")

    # --- standby -------------------------------------------------------------------------------------------

    def add_standby(self, timeout: float = 120.0) -> EmbeddedCluster:
        """pg_basebackup the primary (through the `repl` route) into a new cluster and start it streaming."""
        t0 = time.monotonic()
        standby = EmbeddedCluster(ClusterConfig(extra_settings=primary_settings(self.mode)))
        standby._prepare()
        data = standby.data_dir
        data.mkdir(mode=0o700)
        standby._chown(data)
        conninfo = f"host=127.0.0.1 port={self.repl_port} user=postgres application_name=belay_standby"
        standby._run(
            [
                str(standby.bindir / "pg_basebackup"),
                "-D",
                str(data),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "-d",
                conninfo,
            ],
            "pg_basebackup of the primary",
        )
        standby.start()
        self.standby = standby
        self._wait_streaming(timeout, None)
        if self.mode == "sync":
            with psycopg.connect(self.primary.url, autocommit=True, connect_timeout=5) as c:
                c.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                c.execute("SELECT pg_reload_conf()")
            self._wait_streaming(timeout, "sync")
        self.history.record("standby_ready", mode=self.mode, took=round(time.monotonic() - t0, 3))
        return standby

    def _wait_streaming(self, timeout: float, want: str | None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.primary.url, autocommit=True, connect_timeout=2) as c:
                    rows = c.execute("SELECT state, sync_state FROM pg_stat_replication").fetchall()
                if any(r[0] == "streaming" and (want is None or r[1] == want) for r in rows):
                    return
            except psycopg.Error:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby did not reach streaming ({want or 'any'}) within {timeout:.0f}s")
            time.sleep(0.1)

    # --- the fault -----------------------------------------------------------------------------------------

    def watch(self, since: datetime) -> list[list[Any]]:
        """Jobs inserted or finished at or after `since`, read on the primary: [id, worker, state, attempt,
        inserted_at, finished_at] (ISO strings)."""
        with psycopg.connect(self.primary.url, autocommit=True, connect_timeout=2) as c:
            rows = c.execute(
                "SELECT id, worker, state, attempt, inserted_at, finished_at FROM belay_jobs "
                "WHERE inserted_at >= %(s)s OR finished_at >= %(s)s ORDER BY id",
                {"s": since},
            ).fetchall()
        return [[r[0], r[1], r[2], r[3], r[4].isoformat(), r[5].isoformat() if r[5] else None] for r in rows]

    def failover(self, *, replace_standby: bool = True) -> None:
        with self.lock:
            if self.standby is None:
                raise RuntimeError("failover needs a standby (add_standby)")
            t0 = time.monotonic()
            self.history.record("failover_begin", mode=self.mode, lag=self.lag)
            since = datetime.now(UTC) - timedelta(seconds=WATCH_SLACK)
            self.proxy.partition("repl")
            time.sleep(self.lag)
            try:
                watched = self.watch(since)
            except psycopg.Error as exc:  # the primary is already unreachable: nothing observable to lose
                watched = []
                self.history.record("nemesis_error", fault="failover_watch", error=str(exc)[:200])
            self.history.record("failover_watch", since=since.isoformat(), jobs=watched)
            old, new = self.primary, self.standby
            old.crash()
            with psycopg.connect(new.url, autocommit=True, connect_timeout=5) as c:
                ok = c.execute("SELECT pg_promote(true, 60)").fetchone()[0]
            if not ok:
                raise RuntimeError("pg_promote() did not finish within 60 s")
            self.proxy.retarget("127.0.0.1", new.port)
            self.proxy.heal("repl")
            self.primary, self.standby = new, None
            old.destroy()
            self.failovers += 1
            self.history.record(
                "failover_end", mode=self.mode, took=round(time.monotonic() - t0, 3), watched=len(watched)
            )
        if replace_standby:
            self.add_standby()

    def close(self) -> None:
        for c in (self.standby, self.primary):
            if c is not None:
                c.destroy()
