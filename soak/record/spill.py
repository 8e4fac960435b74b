"""A dict that keeps its least recently used entries in a SQLite file: the history checks' memory is
bounded by the entries in use, not by the length of the run (issue 27, item 3).

    d = SpillDict(hot=5_000)             # like a dict; default_factory= makes it a defaultdict
    d[k] = v; d[k]; k in d; del d[k]
    d.spill()                            # between two transactions: move entries past `hot` to disk

The replay (soak/judges/replay/) and the trace validation (soak/judges/refine/) hold every row the
history ever wrote — the final state must equal the snapshot, and a terminal row can be touched again (a
prune reads it, an operator retry revives it, a unique key or cron slot is judged against it). A long run
is almost all terminal rows nobody touches again. They move to disk when the hot part grows past `hot`
entries and come back, unchanged, the first time they are read: every lookup sees the same mapping as a
plain dict, so the checks' verdicts do not depend on `hot` (tests/test_spill.py runs a whole history
with `hot=8` and compares).

Spilling happens only in `spill()`, which the callers run between transactions: a reference a
caller holds to a mutable value (a job's list of transitions, its steps by name) stays the stored value
for the whole transaction. Values are pickled; keys must be picklable to equal bytes for equal keys
(ints, strings, tuples of them — the tables' primary keys).

Why SQLite (stdlib) and not shelve/dbm: dbm.dumb rewrites its index in memory, gdbm is not always
present, and SQLite gives deletes, counts and an ordered scan with bounded memory.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
import tempfile
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any

_FILTER_SLOTS = 1 << 20  # counters of the filter of keys on disk that are not ints (2 MiB, made on first use)
_FILTER_MAX = 0xFFFF  # a counter that reaches it stays there: "maybe on disk" for good (never a false "not")
HOT = 5_000  # entries kept in memory per map (a soak's live jobs are a few hundred to a few thousand; 20,000
# cost ~90 MiB more at the peak of a long run's replay and made it ~20 % faster)
_MISSING = object()
BATCH = 500  # keys per `IN (…)` lookup of peek_many / get_many (SQLite allows 32,766 parameters)


class _Scratch:
    """A throwaway SQLite file in the temporary directory (no journal, no fsync), removed on close."""

    _db: sqlite3.Connection | None = None
    _path: str | None = None

    def _open(self, prefix: str, cache_kib: int, directory: str | None) -> sqlite3.Connection:
        fd, self._path = tempfile.mkstemp(prefix=prefix, suffix=".sqlite", dir=directory)
        os.close(fd)
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute(f"PRAGMA cache_size = -{int(cache_kib)}")
        self._db = db
        return db

    def _stream(self, db: sqlite3.Connection, sql: str, args: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of one query, fetched a thousand at a time."""
        cur = db.execute(sql, args)
        while rows := cur.fetchmany(1000):
            yield from rows

    def _rows_in(self, db: sqlite3.Connection, columns: str, blobs: list[bytes]) -> Iterator[tuple[Any, ...]]:
        """`columns` of the rows whose key blob is one of `blobs`, one `IN (…)` query per BATCH keys."""
        for i in range(0, len(blobs), BATCH):
            part = blobs[i : i + BATCH]
            yield from db.execute(f"SELECT {columns} FROM kv WHERE k IN ({','.join('?' * len(part))})", part)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._path is not None:
            try:
                os.unlink(self._path)
            except OSError:
                pass
            self._path = None

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, sqlite3.Error, AttributeError, TypeError):  # at interpreter exit modules may be gone
            pass


class SpillDict(_Scratch, MutableMapping[Any, Any]):
    def __init__(
        self,
        items: Any = (),
        *,
        hot: int = HOT,
        default_factory: Callable[[], Any] | None = None,
        directory: str | None = None,
    ) -> None:
        if hot < 1:
            raise ValueError(f"hot must be at least 1, got {hot}")
        self._hot: OrderedDict[Any, Any] = OrderedDict()
        self._cap = hot
        self._default = default_factory
        self._dir = directory
        self._cold = 0  # entries on disk
        self.spilled = 0  # entries ever moved to disk (a statistic)
        self.faulted = 0  # entries ever read back
        # Which keys may be on disk, so that a lookup of a key that is not (a new row's id, a job without
        # steps) answers without a query: one bit per non-negative int key (exact), a counting filter over
        # hash(key) for any other key (a collision only costs the query). A long run's validation looks up
        # absent keys for almost every transaction (tests/test_spill.py; issue 54 target 5).
        self._int_bits = bytearray()
        self._other: array[int] | None = None
        for k, v in items.items() if hasattr(items, "items") else items:
            self._hot[k] = v

    # --- the filter of keys on disk -------------------------------------------------------------------

    def _mark(self, key: Any) -> None:
        if type(key) is int and key >= 0:
            bits = self._int_bits
            i = key >> 3
            if i >= len(bits):
                bits.extend(bytes(max(i + 1 - len(bits), len(bits) // 2)))
            bits[i] |= 1 << (key & 7)
            return
        if self._other is None:
            self._other = array("H", bytes(2 * _FILTER_SLOTS))
        slot = hash(key) & (_FILTER_SLOTS - 1)
        if self._other[slot] < _FILTER_MAX:
            self._other[slot] += 1

    def _unmark(self, key: Any) -> None:
        if type(key) is int and key >= 0:
            self._int_bits[key >> 3] &= ~(1 << (key & 7)) & 0xFF
            return
        assert self._other is not None
        slot = hash(key) & (_FILTER_SLOTS - 1)
        if self._other[slot] < _FILTER_MAX:
            self._other[slot] -= 1

    def _maybe_cold(self, key: Any) -> bool:
        """False when `key` is certainly not on disk."""
        if not self._cold:
            return False
        if type(key) is int and key >= 0:
            i = key >> 3
            bits = self._int_bits
            return i < len(bits) and bool(bits[i] & (1 << (key & 7)))
        other = self._other
        return other is not None and other[hash(key) & (_FILTER_SLOTS - 1)] > 0

    # --- the disk part -------------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            db = self._open("belay-spill-", 8192, self._dir)  # 8 MiB of SQLite page cache
            db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        assert self._db is not None
        return self._db

    @staticmethod
    def _k(key: Any) -> bytes:
        return pickle.dumps(key, protocol=5)

    def _take_cold(self, key: Any) -> Any:
        """The value of `key` on disk, removed from there (the caller makes it hot), else _MISSING."""
        if not self._maybe_cold(key):
            return _MISSING
        db = self._conn()
        k = self._k(key)
        row = db.execute("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()
        if row is None:
            return _MISSING
        db.execute("DELETE FROM kv WHERE k = ?", (k,))
        self._cold -= 1
        self._unmark(key)
        self.faulted += 1
        return pickle.loads(row[0])

    def _drop_cold(self, key: Any) -> bool:
        if not self._maybe_cold(key):
            return False
        n = self._conn().execute("DELETE FROM kv WHERE k = ?", (self._k(key),)).rowcount
        self._cold -= n
        if n:
            self._unmark(key)
        return n > 0

    def spill(self) -> int:
        """Move the least recently used entries past `hot` to disk; returns how many moved."""
        over = len(self._hot) - self._cap
        if over <= 0:
            return 0
        over += self._cap // 10  # spill in batches, not one entry per call
        batch = []
        for _ in range(min(over, len(self._hot))):
            k, v = self._hot.popitem(last=False)
            batch.append((self._k(k), pickle.dumps(v, protocol=5)))
            self._mark(k)
        db = self._conn()
        db.execute("BEGIN")
        db.executemany("INSERT INTO kv (k, v) VALUES (?, ?)", batch)
        db.execute("COMMIT")
        self._cold += len(batch)
        self.spilled += len(batch)
        return len(batch)

    def close(self) -> None:
        super().close()
        self._cold = 0
        self._int_bits = bytearray()
        self._other = None

    def __reduce__(self) -> Any:  # pickles as a plain dict (save_state of a replayed state)
        return (dict, (list(self.items()),))

    # --- the mapping ---------------------------------------------------------------------------------

    def _find(self, key: Any) -> Any:
        """The value (made hot, most recently used), else _MISSING."""
        hot = self._hot
        if key in hot:
            hot.move_to_end(key)
            return hot[key]
        v = self._take_cold(key)
        if v is not _MISSING:
            hot[key] = v
        return v

    def __getitem__(self, key: Any) -> Any:
        hot = self._hot
        if key in hot:  # _find's first case inlined: the hot path of every lookup
            hot.move_to_end(key)
            return hot[key]
        v = self._find(key)
        if v is _MISSING:
            if self._default is None:
                raise KeyError(key)
            v = self._hot[key] = self._default()
        return v

    def get(self, key: Any, default: Any = None) -> Any:
        hot = self._hot
        if key in hot:
            hot.move_to_end(key)
            return hot[key]
        v = self._find(key)
        return default if v is _MISSING else v

    def __setitem__(self, key: Any, value: Any) -> None:
        hot = self._hot
        if key not in hot:
            self._drop_cold(key)
        hot[key] = value
        hot.move_to_end(key)

    def __delitem__(self, key: Any) -> None:
        if key in self._hot:
            del self._hot[key]
            self._drop_cold(key)  # never both, but cheap to be sure
            return
        if not self._drop_cold(key):
            raise KeyError(key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        if key in self._hot:
            return self._hot.pop(key)
        v = self._take_cold(key)
        if v is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        return v

    def __contains__(self, key: object) -> bool:
        if key in self._hot:
            return True
        if not self._maybe_cold(key):
            return False
        return self._conn().execute("SELECT 1 FROM kv WHERE k = ?", (self._k(key),)).fetchone() is not None

    def __len__(self) -> int:
        return len(self._hot) + self._cold

    def peek_many(self, keys: Iterable[Any], values: bool = True) -> dict[Any, Any]:
        """The entries of `keys` this mapping holds, read without changing what is hot (nothing faulted in,
        no recency moved): the hot ones from memory, the rest in one query per BATCH keys. With
        `values=False` only which keys are held (each maps to None; nothing is unpickled)."""
        out: dict[Any, Any] = {}
        cold: dict[bytes, Any] = {}
        hot = self._hot
        for k in keys:
            if k in hot:
                out[k] = hot[k] if values else None
            elif self._maybe_cold(k):
                cold[self._k(k)] = k
        if cold:
            for row in self._rows_in(self._conn(), "k, v" if values else "k", list(cold)):
                out[cold[row[0]]] = pickle.loads(row[1]) if values else None
        return out

    def _cold_rows(self) -> Iterator[tuple[bytes, bytes]]:
        if not self._cold:
            return
        yield from self._stream(self._conn(), "SELECT k, v FROM kv")

    def __iter__(self) -> Iterator[Any]:
        yield from list(self._hot)
        for k, _ in self._cold_rows():
            yield pickle.loads(k)

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        """Every entry, the disk part streamed (nothing is made hot): do not mutate while iterating."""
        yield from list(self._hot.items())
        for k, v in self._cold_rows():
            yield pickle.loads(k), pickle.loads(v)

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        for _, v in self.items():
            yield v

    def keys(self) -> Iterator[Any]:  # type: ignore[override]
        return iter(self)

    def stats(self) -> dict[str, int]:
        return {"hot": len(self._hot), "cold": self._cold, "spilled": self.spilled, "faulted": self.faulted}


class DiskTable(_Scratch, Mapping[Any, Any]):
    """A read-only mapping written once, in key order, to a SQLite file; `cache` values stay in memory
    (least recently used dropped: the disk copy is the truth). Iteration is in key order — int keys
    numerically, tuple keys by their first int then the rest — so `values()` is what
    `sorted(d.values(), key=<key>)` would give, without holding every value at once.

        t = DiskTable.build(((job.id, job) for job in rows), cache=5_000)

    Used for the end-of-run snapshot of a long soak (impl.store.snapshot.snapshot_streamed with `disk_table`,
    in soak/run.py and soak/hook.py): the invariant and duty checks read it like the dict a short
    run gets.
    """

    ordered = True  # iterates in key order (model.state.in_key_order streams it instead of sorting)

    def __init__(self, cache: int = 5_000, directory: str | None = None) -> None:
        self._cache: OrderedDict[Any, Any] = OrderedDict()
        self._cap = max(1, cache)
        db = self._open("belay-table-", 8192, directory)
        db.execute("CREATE TABLE kv (o INTEGER NOT NULL, n INTEGER NOT NULL, k BLOB NOT NULL, v BLOB NOT NULL)")
        self._n = 0

    @classmethod
    def build(cls, rows: Any, cache: int = 5_000, directory: str | None = None) -> DiskTable:
        t = cls(cache, directory)
        db = t._conn()
        db.execute("BEGIN")
        batch: list[tuple[int, int, bytes, bytes]] = []
        for key, value in rows:
            batch.append((_order(key), t._n, SpillDict._k(key), pickle.dumps(value, protocol=5)))
            t._n += 1
            if len(batch) >= 2000:
                db.executemany("INSERT INTO kv VALUES (?, ?, ?, ?)", batch)
                batch.clear()
        db.executemany("INSERT INTO kv VALUES (?, ?, ?, ?)", batch)
        db.execute("CREATE UNIQUE INDEX kv_k ON kv (k)")  # also refuses a key given twice
        db.execute("CREATE INDEX kv_o ON kv (o, n)")
        db.execute("COMMIT")
        return t

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise ValueError("the table is closed")
        return self._db

    def __getitem__(self, key: Any) -> Any:
        cache = self._cache
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        row = self._conn().execute("SELECT v FROM kv WHERE k = ?", (SpillDict._k(key),)).fetchone()
        if row is None:
            raise KeyError(key)
        value = pickle.loads(row[0])
        cache[key] = value
        if len(cache) > self._cap:
            cache.popitem(last=False)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def get_many(self, keys: Iterable[Any]) -> dict[Any, Any]:
        """The rows of `keys` the table holds, in one query per BATCH keys (the cache left as it is)."""
        out: dict[Any, Any] = {}
        wanted: dict[bytes, Any] = {}
        for k in keys:
            if k in self._cache:
                out[k] = self._cache[k]
            else:
                wanted[SpillDict._k(k)] = k
        for kb, vb in self._rows_in(self._conn(), "k, v", list(wanted)):
            out[wanted[kb]] = pickle.loads(vb)
        return out

    def __contains__(self, key: object) -> bool:
        if key in self._cache:
            return True
        return self._conn().execute("SELECT 1 FROM kv WHERE k = ?", (SpillDict._k(key),)).fetchone() is not None

    def __len__(self) -> int:
        return self._n

    def _rows(self, what: str) -> Iterator[Any]:
        return self._stream(self._conn(), f"SELECT {what} FROM kv ORDER BY o, n")

    def __iter__(self) -> Iterator[Any]:
        for (k,) in self._rows("k"):
            yield pickle.loads(k)

    def rows_at(self, order: int) -> list[tuple[Any, Any]]:
        """The (key, value) rows at one position of the order: for (job_id, …) keys, one job's rows."""
        rows = self._conn().execute("SELECT k, v FROM kv WHERE o = ? ORDER BY n", (order,)).fetchall()
        return [(pickle.loads(k), pickle.loads(v)) for k, v in rows]

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        for k, v in self._rows("k, v"):
            yield pickle.loads(k), pickle.loads(v)

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        for (v,) in self._rows("v"):
            yield pickle.loads(v)

    def keys(self) -> Iterator[Any]:  # type: ignore[override]
        return iter(self)

    def __reduce__(self) -> Any:  # pickles as a plain dict
        return (dict, (list(self.items()),))


def _order(key: Any) -> int:
    """The key's position in the table's iteration order: an int key itself, a tuple key its first int.
    Rows must be given in key order within equal positions (the snapshot's ORDER BY does that)."""
    if isinstance(key, int):
        return key
    if isinstance(key, tuple) and key and isinstance(key[0], int):
        return key[0]
    return 0


def disk_table(rows: Iterator[tuple[Any, Any]]) -> DiskTable:
    """The `big` table builder of impl.store.snapshot.snapshot_streamed and replay.load_state."""
    return DiskTable.build(rows)


def on_disk(state: Any, cache: int = 5_000) -> Any:
    """The same State with jobs, steps and events in DiskTables (tests compare the checks on both)."""
    from dataclasses import replace

    return replace(
        state,
        jobs=DiskTable.build(state.jobs.items(), cache=cache),
        steps=DiskTable.build(state.steps.items(), cache=cache),
        events=DiskTable.build(state.events.items(), cache=cache),
    )


class TimeSeries(_Scratch):
    """Events appended once (a run's lease and priority samples: two a second for hours), read back in
    the order they came or in time order, without holding them in memory (issue 27, item 3).

        s = TimeSeries(); s.append(at, event) …
        for event in s: …                      # as appended
        for at, event in s.by_time(): …        # by `at`, ties as appended
        s.between(t0, t1); s.first_at_or_after(t)
    """

    def __init__(self, directory: str | None = None) -> None:
        db = self._open("belay-series-", 4096, directory)
        db.execute("CREATE TABLE ev (id INTEGER PRIMARY KEY, at REAL NOT NULL, v BLOB NOT NULL)")
        self._pending: list[tuple[float, bytes]] = []
        self._n = 0
        self._indexed = False

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise ValueError("the series is closed")
        if self._pending:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT INTO ev (at, v) VALUES (?, ?)", self._pending)
            self._db.execute("COMMIT")
            self._pending = []
            self._indexed = False
        return self._db

    def append(self, at: float, value: Any) -> None:
        self._pending.append((float(at), pickle.dumps(value, protocol=5)))
        self._n += 1
        if len(self._pending) >= 1000:
            self._conn()

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> Iterator[tuple[float, Any]]:
        for at, v in self._stream(self._conn(), sql, args):
            yield at, pickle.loads(v)

    def _by_at(self) -> sqlite3.Connection:
        db = self._conn()
        if not self._indexed:
            db.execute("CREATE INDEX IF NOT EXISTS ev_at ON ev (at, id)")
            self._indexed = True
        return db

    def __iter__(self) -> Iterator[Any]:
        for _, v in self._rows("SELECT at, v FROM ev ORDER BY id"):
            yield v

    def by_time(self) -> Iterator[tuple[float, Any]]:
        self._by_at()
        return self._rows("SELECT at, v FROM ev ORDER BY at, id")

    def between(self, t0: float, t1: float) -> Iterator[tuple[float, Any]]:
        self._by_at()
        return self._rows("SELECT at, v FROM ev WHERE at >= ? AND at <= ? ORDER BY at, id", (t0, t1))

    def first_at_or_after(self, t: float) -> tuple[float, Any] | None:
        self._by_at()
        return next(self._rows("SELECT at, v FROM ev WHERE at >= ? ORDER BY at, id LIMIT 1", (t,)), None)
