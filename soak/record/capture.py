"""Capture every committed change of the Belay tables through a logical replication slot.

Set-up (`Capture.open`, before any worker or driver writes): `REPLICA IDENTITY FULL` on every Belay
table (updates and deletes then carry the whole old row), a publication over them, and a `pgoutput`
slot. Needs `wal_level = logical` and the REPLICATION attribute (or superuser); without them `open`
raises `CaptureUnavailable` with the reason, and the soak reports history checking as skipped.

A thread polls the slot over an ordinary connection (whole transactions, commit order) and appends each
transaction to a file: commit LSN, end LSN, commit time, xid and the raw pgoutput messages. Decoding
happens at replay time, off the soak's critical path.

Consuming with explicit flush feedback (issue 27). Each poll is
  1. `pg_logical_slot_peek_binary_changes` — decodes and returns changes but consumes nothing;
  2. the new transactions are written as one gzip member (one frame per poll) and the file is fsynced;
  3. only then `pg_replication_slot_advance(slot, <end LSN of the last transaction written>)`.
This is how pg_recvlogical and Debezium acknowledge a position: the server forgets a transaction only
after the consumer holds it durably. The earlier `pg_logical_slot_get_binary_changes` confirmed the
changes inside the server before the reply reached the client, and whenever a candidate restart point
had become valid (the `pg_log_standby_snapshot()` before each poll makes that so on almost every poll)
`LogicalConfirmReceivedLocation` saved the slot to disk at once: a server crash (or a dropped
connection) after that but before the client had the rows lost those transactions for good —
tests/test_capture_crash.py reproduces it with `consume_mode="get"`, kept only to show the gap.

The price: the advance decodes the same WAL a second time (a logical slot can only be moved by
decoding up to the target), measured in `stats["peek_s"]` and `stats["advance_s"]`.

Redelivery: a crash may lose an advance (the server persists an advanced position lazily), or the
connection may die between the fsync and the advance; the next peek then returns transactions already
written. Commit LSNs strictly increase in commit order, so a transaction whose commit LSN is not above
the last one written is dropped (counted in `stats["redelivered"]`).

Self-check: before each peek the slot's `confirmed_flush_lsn` is read. It may lag our last advance
(a lost advance: redelivery follows) but must never be ahead of it; if it is, or the slot is gone, the
range from our position on is recorded in `stats["lost_ranges"]` and the replay treats it as a gap.

File format: a sequence of gzip members, one per poll that wrote something, each fsynced; inside, the
binary records above. `read_transactions` streams it (constant memory), reads the pre-issue-27
uncompressed files too, and stops cleanly at a member torn by a harness crash (`reader.truncated`).

The slot is dropped by `close()` — run it in a `finally` (a forgotten slot pins WAL forever).
"""

from __future__ import annotations

import os
import re
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

import psycopg
from psycopg import sql

from soak.record.pgoutput import PG_EPOCH

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
GZIP_MAGIC = b"\x1f\x8b"
GZIP_LEVEL = 6  # 204 B/job in a default soak, 0.1 s CPU for the run (levels 1: 250, 3: 230, 9: 199)
CONSUME_MODES = ("peek", "get")


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
    def commit_time(self) -> datetime:
        from datetime import timedelta

        return PG_EPOCH + timedelta(microseconds=self.commit_us)


def slot_name(run_id: str) -> str:
    return ("belay_history_" + re.sub(r"[^a-z0-9_]", "_", run_id.lower()))[:63]


def parse_lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def encode_transaction(tx: Transaction) -> bytes:
    parts = [_HEADER.pack(tx.commit_lsn, tx.end_lsn, tx.commit_us, tx.xid, len(tx.messages))]
    for m in tx.messages:
        parts.append(_LEN.pack(len(m)))
        parts.append(m)
    return b"".join(parts)


def write_transaction(out: BinaryIO, tx: Transaction) -> None:
    """One uncompressed record (the pre-issue-27 format, still read; tests build files with it)."""
    out.write(encode_transaction(tx))


def write_frame(out: BinaryIO, txs: list[Transaction], fsync: bool = True) -> int:
    """Append one gzip member holding `txs` and make it durable; returns the bytes written."""
    frame = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
    data = frame.compress(b"".join(encode_transaction(t) for t in txs)) + frame.flush()
    out.write(data)
    out.flush()
    if fsync:
        os.fsync(out.fileno())
    return len(data)


class TransactionReader:
    """Iterates the transactions of a capture file in commit order, streaming (memory bounded by one
    poll's frame). After iteration: `truncated` is True when the file ended inside a frame or a record
    (a harness crash mid-write) — the complete transactions before it were all delivered —, `frames`
    counts gzip members, `compressed` says which format the file has."""

    CHUNK = 1 << 16

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.truncated = False
        self.truncated_bytes = 0
        self.frames = 0
        self.compressed: bool | None = None

    def _chunks(self, f: BinaryIO) -> Iterator[bytes]:
        head = f.read(2)
        f.seek(0)
        self.compressed = head == GZIP_MAGIC
        if not self.compressed:
            while chunk := f.read(self.CHUNK):
                yield chunk
            return
        d = zlib.decompressobj(31)
        fed = False
        while chunk := f.read(self.CHUNK):
            data = chunk
            while data:
                fed = True
                out = d.decompress(data, self.CHUNK * 16)
                if out:
                    yield out
                while d.unconsumed_tail and not d.eof:
                    out = d.decompress(d.unconsumed_tail, self.CHUNK * 16)
                    if out:
                        yield out
                if d.eof:
                    self.frames += 1
                    data = d.unused_data
                    d = zlib.decompressobj(31)
                    fed = False
                else:
                    data = b""
        if fed:  # the last member never ended: torn by a crash mid-write
            self.truncated = True

    def __iter__(self) -> Iterator[Transaction]:
        buf = bytearray()
        pos = 0
        with open(self.path, "rb") as f:
            for chunk in self._chunks(f):
                if pos:
                    del buf[:pos]
                    pos = 0
                buf += chunk
                while True:
                    got = _parse_one(buf, pos)
                    if got is None:
                        break
                    tx, pos = got
                    yield tx
        if len(buf) > pos:
            self.truncated = True
            self.truncated_bytes = len(buf) - pos


def _parse_one(buf: bytearray, pos: int) -> tuple[Transaction, int] | None:
    n = len(buf)
    if pos + _HEADER.size > n:
        return None
    lsn, end, us, xid, count = _HEADER.unpack_from(buf, pos)
    p = pos + _HEADER.size
    msgs = []
    for _ in range(count):
        if p + 4 > n:
            return None
        (size,) = _LEN.unpack_from(buf, p)
        p += 4
        if p + size > n:
            return None
        msgs.append(bytes(buf[p : p + size]))
        p += size
    return Transaction(lsn, end, us, xid, tuple(msgs)), p


def read_transactions(path: Path) -> TransactionReader:
    """The transactions of a capture file in commit order (a streaming iterable; see TransactionReader)."""
    return TransactionReader(path)


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
    """One slot + publication on one database and the thread that drains it into `path`.

        `consume_mode="peek"` (the default) acknowledges positions after the fsync; `"get"` is the
        pre-issue-27 consumer, kept only so tests can show the gap it causes. `fault`, a test hook, is
        called with a point name ("logged": the running-transactions record is logged, nothing polled yet;
    "fetched": the server's reply is in hand, nothing written; "written": the
        frame is fsynced, the slot not advanced; "advanced") — raising there simulates a lost reply or a
        connection dying at that point. `drop_next_poll = True` plants a gap: the next poll that delivers
        transactions writes none of them and still advances past them (tests of the replay's tainting)."""

    def __init__(
        self,
        url: str,
        path: Path,
        slot: str,
        schema: str = "public",
        poll_s: float = 0.5,
        batch: int = 20000,
        consume_mode: str = "peek",
        fsync: bool = True,
        log_snapshot: bool = True,
    ) -> None:
        if consume_mode not in CONSUME_MODES:
            raise ValueError(f"consume_mode must be one of {CONSUME_MODES}")
        self.url, self.path, self.slot, self.schema = url, Path(path), slot, schema
        self.publication = slot
        self.poll_s, self.batch = poll_s, batch
        self.consume_mode, self.fsync = consume_mode, fsync
        self.start_lsn: str | None = None
        self.last_lsn = 0  # commit LSN of the last transaction written (redelivery dedupe)
        self.acked = 0  # the position we advanced the slot to (peek mode)
        self.written_end = 0  # end LSN of the last poll whose transactions are durable in the file
        self.stats: dict[str, Any] = {
            "consume_mode": consume_mode,
            "transactions": 0,
            "messages": 0,
            "bytes": 0,  # raw pgoutput bytes captured
            "file_bytes": 0,  # compressed bytes written
            "frames": 0,
            "redelivered": 0,
            "polls": 0,
            "advances": 0,
            "peek_s": 0.0,  # server time decoding for the poll (get or peek)
            "advance_s": 0.0,  # server time re-decoding for the advance (peek mode's extra cost)
            "reconnects": 0,
            "errors": 0,
            "lost_ranges": [],  # [from_lsn, to_lsn | None]: positions the slot passed without us
        }
        self.last_error: str | None = None
        self.fault: Callable[[str], None] | None = None
        self.drop_next_poll = False
        self.dropped: list[Transaction] = []  # what a planted drop discarded (tests)
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection | None = None
        self._out = None
        self._pending_relations: list[bytes] = []
        self._created = False
        self._slot_lost = False
        self._lock = threading.Lock()
        self._log_snapshot = log_snapshot

    # --- set-up and tear-down --------------------------------------------------------------------

    @classmethod
    def open(cls, url: str, path: Path, slot: str, **kw: Any) -> Capture:
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
            confirmed = c.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
            cap.acked = parse_lsn(confirmed[0] if confirmed and confirmed[0] else row[0])
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
        while self._out is not None and not self._slot_lost:
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

    def __exit__(self, *exc: object) -> None:
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

    def _hook(self, point: str) -> None:
        if self.fault is not None:
            self.fault(point)

    def _lost(self, lo: int, hi: int | None, why: str) -> None:
        self.stats["lost_ranges"].append([format_lsn(lo), format_lsn(hi) if hi is not None else None])
        self.last_error = why

    def _check_slot(self, conn: psycopg.Connection) -> int | None:
        """The slot's confirmed position; None when the slot is gone (recorded as a lost range from our
        position on). Behind our last advance is fine (a crash lost the advance: redelivery follows)."""
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)
        ).fetchone()
        if row is None:
            self._slot_lost = True
            self._lost(self.acked, None, f"the replication slot {self.slot} is gone")
            return None
        confirmed = parse_lsn(row[0]) if row[0] else 0
        # Up to `written_end` the slot may be ahead of our last *known* advance: an advance the server
        # executed whose reply a crash ate (and a checkpoint saved) moved it over transactions already
        # durable in the file — nothing lost there (issue 27: a false lost range made a default run's
        # history unknown). Only a position past everything written is a loss.
        ours = max(self.acked, self.written_end)
        if confirmed > ours:
            self._lost(ours, confirmed, f"the slot is at {row[0]}, ahead of the {format_lsn(ours)} we wrote and acked")
        self.acked = max(self.acked, confirmed)
        return confirmed

    def _poll_once(self) -> int:
        """One poll; returns how many transactions it delivered (redeliveries included)."""
        with self._lock:
            if self._slot_lost:
                return 0
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
            self._hook("logged")
            peek = self.consume_mode == "peek"
            confirmed = self._check_slot(conn) if peek else 0
            if peek and confirmed is None:
                return 0
            fn = "pg_logical_slot_peek_binary_changes" if peek else "pg_logical_slot_get_binary_changes"
            t0 = time.perf_counter()
            rows = conn.execute(
                f"SELECT data FROM {fn}(%s, NULL, %s, 'proto_version', '1', 'publication_names', %s)",
                (self.slot, self.batch, self.publication),
            ).fetchall()
            self.stats["peek_s"] += time.perf_counter() - t0
            self.stats["polls"] += 1
            self._hook("fetched")
            delivered = 0
            end = 0
            new: list[Transaction] = []
            current: list[bytes] = []
            pending = list(self._pending_relations)
            last = self.last_lsn
            for (data,) in rows:
                data = bytes(data)
                current.append(data)
                if data[:1] == b"C":
                    delivered += 1
                    _, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(data, 1)
                    _, _, xid = _BEGIN.unpack_from(current[0], 1)
                    end = max(end, end_lsn)
                    if commit_lsn <= last:
                        self.stats["redelivered"] += 1
                        pending += [m for m in current if m[:1] == b"R"]
                    else:
                        new.append(Transaction(commit_lsn, end_lsn, ts, xid, tuple(pending) + tuple(current)))
                        pending = []
                        last = commit_lsn
                    current = []
            if current:
                raise RuntimeError(f"{fn} returned a partial transaction")
            dropped_now = bool(new and self.drop_next_poll)
            if dropped_now:  # a planted gap (tests)
                self.drop_next_poll = False
                self.dropped += new
                new = []
            if new:
                self.stats["file_bytes"] += write_frame(
                    cast("BinaryIO", self._out), new, self.fsync
                )  # open while polling
                self.stats["frames"] += 1
                for tx in new:
                    self.stats["transactions"] += 1
                    self.stats["messages"] += len(tx.messages)
                    self.stats["bytes"] += sum(len(m) for m in tx.messages)
            # the transactions are durable (or deliberately dropped): now they may be forgotten
            self._pending_relations = pending
            self.last_lsn = last
            if not dropped_now:
                self.written_end = max(self.written_end, end)
            self._hook("written")
            # advance from where the slot really is: after a lost advance, redeliveries alone must move it
            # too, or every later peek (and a final drain) would return them again forever
            if peek and confirmed is not None and end > confirmed:
                t0 = time.perf_counter()
                conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, format_lsn(end)))
                self._hook("advance_executed")  # (tests: the server advanced, the reply is lost)
                self.stats["advance_s"] += time.perf_counter() - t0
                self.stats["advances"] += 1
                self.acked = max(self.acked, end)
                self._hook("advanced")
            return delivered

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                if self._poll_once() == 0:
                    self._halt.wait(self.poll_s)
            except psycopg.Error as exc:  # the server crashed or restarts: retry (peek consumed nothing)
                self._disconnect(exc)
                self._halt.wait(0.2)
            except Exception as exc:  # noqa: BLE001 - keep the soak running; replay reports the gap
                self.stats["errors"] += 1
                self.last_error = repr(exc)
                self._halt.wait(1.0)


__all__ = [
    "TABLES",
    "Capture",
    "CaptureUnavailable",
    "Transaction",
    "TransactionReader",
    "read_transactions",
    "slot_name",
    "write_frame",
]
