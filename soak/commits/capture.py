"""Capture every committed change of the Belay tables through a logical replication slot.

Set-up (`Capture.open`, before any worker or driver writes): `REPLICA IDENTITY FULL` on every Belay
table (updates and deletes then carry the whole old row), a publication over them, and a `pgoutput`
slot. Needs `wal_level = logical` and the REPLICATION attribute (or superuser); without them `open`
raises `CaptureUnavailable` with the reason, and the soak reports history checking as skipped.

A thread polls `pg_logical_slot_get_binary_changes` (whole transactions, commit order) on an ordinary
connection and appends each transaction to a binary file: commit LSN, end LSN, commit time, xid and
the raw pgoutput messages. Decoding happens at replay time, off the soak's critical path.

Crash-restarts: the slot is crash-safe, but its confirmed position is persisted lazily, so after a
PostgreSQL crash transactions already read may be delivered again. Commit LSNs strictly increase in
commit order, so a transaction whose commit LSN is not above the last one written is a redelivery and
is dropped (counted in `stats["redelivered"]`). Nothing is lost: the slot holds WAL from its confirmed
position on, and a poll interrupted by the crash consumes nothing.

The slot is dropped by `close()` — run it in a `finally` (a forgotten slot pins WAL forever).
"""

from __future__ import annotations

import re
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from soak.commits.pgoutput import PG_EPOCH

TABLES = (
    "belay_meta",
    "belay_jobs",
    "belay_steps",
    "belay_events",
    "belay_signals",
    "belay_rate",
    "belay_queues",
    "belay_crons",
)
_HEADER = struct.Struct(">QQqII")  # commit lsn, end lsn, commit time µs, xid, number of messages
_LEN = struct.Struct(">I")
_COMMIT = struct.Struct(">BQQq")
_BEGIN = struct.Struct(">QqI")


class CaptureUnavailable(RuntimeError):
    """The server does not allow logical capture (the reason is the message)."""


@dataclass(frozen=True)
class Transaction:
    """One committed transaction as captured: raw pgoutput messages, Begin and Commit included."""

    commit_lsn: int
    end_lsn: int
    commit_us: int  # µs since 2000-01-01 UTC
    xid: int
    messages: tuple[bytes, ...]

    @property
    def commit_time(self):
        from datetime import timedelta

        return PG_EPOCH + timedelta(microseconds=self.commit_us)


def slot_name(run_id: str) -> str:
    return ("belay_history_" + re.sub(r"[^a-z0-9_]", "_", run_id.lower()))[:63]


def write_transaction(out, tx: Transaction) -> None:
    out.write(_HEADER.pack(tx.commit_lsn, tx.end_lsn, tx.commit_us, tx.xid, len(tx.messages)))
    for m in tx.messages:
        out.write(_LEN.pack(len(m)))
        out.write(m)


def read_transactions(path: Path) -> Iterator[Transaction]:
    """The transactions of a capture file in commit order."""
    with open(path, "rb") as f:
        data = f.read()
    pos, n = 0, len(data)
    while pos < n:
        if pos + _HEADER.size > n:
            raise ValueError(f"{path}: truncated transaction header at byte {pos}")
        lsn, end, us, xid, count = _HEADER.unpack_from(data, pos)
        pos += _HEADER.size
        msgs = []
        for _ in range(count):
            (size,) = _LEN.unpack_from(data, pos)
            pos += 4
            msgs.append(data[pos : pos + size])
            pos += size
        yield Transaction(lsn, end, us, xid, tuple(msgs))


def _check_capable(conn: psycopg.Connection) -> None:
    level = conn.execute("SHOW wal_level").fetchone()[0]
    if level != "logical":
        raise CaptureUnavailable(f"the server runs with wal_level = {level}, not logical")
    row = conn.execute("SELECT rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user").fetchone()
    if not row or not row[0]:
        raise CaptureUnavailable("the role has neither SUPERUSER nor REPLICATION (needed for a replication slot)")
    free = conn.execute(
        "SELECT current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)"
    ).fetchone()[0]
    if free < 1:
        raise CaptureUnavailable("no free replication slot (max_replication_slots)")


class Capture:
    """One slot + publication on one database and the thread that drains it into `path`."""

    def __init__(
        self, url: str, path: Path, slot: str, schema: str = "public", poll_s: float = 0.5, batch: int = 20000
    ) -> None:
        self.url, self.path, self.slot, self.schema = url, Path(path), slot, schema
        self.publication = slot
        self.poll_s, self.batch = poll_s, batch
        self.start_lsn: str | None = None
        self.last_lsn = 0
        self.stats = {
            "transactions": 0,
            "messages": 0,
            "bytes": 0,
            "redelivered": 0,
            "polls": 0,
            "reconnects": 0,
            "errors": 0,
        }
        self.last_error: str | None = None
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection | None = None
        self._out = None
        self._pending_relations: list[bytes] = []
        self._created = False
        self._lock = threading.Lock()
        self._log_snapshot = True

    # --- set-up and tear-down --------------------------------------------------------------------

    @classmethod
    def open(cls, url: str, path: Path, slot: str, **kw) -> Capture:
        """Prepare the database and create the slot; raise CaptureUnavailable when the server won't."""
        cap = cls(url, path, slot, **kw)
        with psycopg.connect(url, autocommit=True) as c:
            _check_capable(c)
            tables = [sql.Identifier(cap.schema, t) for t in TABLES]
            for t in tables:
                c.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(t))
            c.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(cap.publication)))
            c.execute(
                sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                    sql.Identifier(cap.publication), sql.SQL(", ").join(tables)
                )
            )
            try:
                row = c.execute(
                    "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,)
                ).fetchone()
            except psycopg.Error as exc:
                c.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(cap.publication)))
                raise CaptureUnavailable(f"cannot create a logical replication slot: {exc}") from exc
            cap._created = True
            cap.start_lsn = row[0]
        cap.path.parent.mkdir(parents=True, exist_ok=True)
        cap._out = open(cap.path, "wb")  # noqa: SIM115 - the capture thread writes it until close()
        return cap

    def start(self) -> Capture:
        self._thread = threading.Thread(target=self._run, name="history-capture", daemon=True)
        self._thread.start()
        return self

    def stop(self, drain_timeout: float = 60.0) -> None:
        """Stop polling after everything committed so far has been read (one final complete drain)."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.drain(drain_timeout)

    def drain(self, timeout: float = 60.0) -> int:
        """Poll until a poll delivers nothing; returns how many transactions were delivered."""
        deadline = time.monotonic() + timeout
        delivered = 0
        while self._out is not None:
            try:
                n = self._poll_once()
                delivered += n
                if n == 0:
                    break
            except psycopg.Error as exc:
                self._disconnect(exc)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        if self._out is not None:
            self._out.flush()
        return delivered

    def close(self, timeout: float = 30.0) -> bool:
        """Stop the thread and drop the slot and publication; True once the slot is gone. Retries while
        the server is restarting, up to `timeout` seconds. Safe to call twice."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._out is not None:
            self._out.close()
            self._out = None
        if not self._created:
            return True
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as c:
                    c.execute(
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                        (self.slot,),
                    )
                    c.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(self.publication)))
                self._created = False
                return True
            except psycopg.Error as exc:
                self.last_error = f"dropping slot {self.slot}: {exc}"
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.5)

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- polling -----------------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5, options="-c TimeZone=UTC")
        return self._conn

    def _disconnect(self, exc: BaseException) -> None:
        self.stats["reconnects"] += 1
        self.last_error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - the server is gone anyway
                pass
        self._conn = None

    def _poll_once(self) -> int:
        """One get_changes call; returns how many transactions it delivered (redeliveries included)."""
        with self._lock:
            conn = self._connect()
            if self._log_snapshot:
                # Each call decodes from the slot's restart point, which moves only past a logged
                # running-transactions record; logging one now keeps that point near the confirmed
                # position, so a poll re-reads seconds of WAL, not the whole run (PostgreSQL 16+).
                try:
                    conn.execute("SELECT pg_log_standby_snapshot()")
                except psycopg.errors.UndefinedFunction:
                    self._log_snapshot = False
                except psycopg.errors.InsufficientPrivilege:
                    self._log_snapshot = False
            rows = conn.execute(
                "SELECT data FROM pg_logical_slot_get_binary_changes(%s, NULL, %s, 'proto_version', '1', "
                "'publication_names', %s)",
                (self.slot, self.batch, self.publication),
            ).fetchall()
            self.stats["polls"] += 1
            delivered = 0
            current: list[bytes] = []
            for (data,) in rows:
                data = bytes(data)
                current.append(data)
                if data[:1] == b"C":
                    delivered += 1
                    _, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(data, 1)
                    _, _, xid = _BEGIN.unpack_from(current[0], 1)
                    if commit_lsn <= self.last_lsn:
                        self.stats["redelivered"] += 1
                        self._pending_relations += [m for m in current if m[:1] == b"R"]
                    else:
                        msgs = tuple(self._pending_relations) + tuple(current)
                        self._pending_relations = []
                        write_transaction(self._out, Transaction(commit_lsn, end_lsn, ts, xid, msgs))
                        self.last_lsn = commit_lsn
                        self.stats["transactions"] += 1
                        self.stats["messages"] += len(msgs)
                        self.stats["bytes"] += sum(len(m) for m in msgs)
                    current = []
            if current:
                raise RuntimeError("get_changes returned a partial transaction")
            self._out.flush()
            return delivered

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                if self._poll_once() == 0:
                    self._halt.wait(self.poll_s)
            except psycopg.Error as exc:  # the server crashed or restarts: retry, nothing was consumed
                self._disconnect(exc)
                self._halt.wait(0.2)
            except Exception as exc:  # noqa: BLE001 - keep the soak running; replay reports the gap
                self.stats["errors"] += 1
                self.last_error = repr(exc)
                self._halt.wait(1.0)


__all__ = ["TABLES", "Capture", "CaptureUnavailable", "Transaction", "read_transactions", "slot_name"]
