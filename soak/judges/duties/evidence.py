"""What the duty judges read besides the snapshot: the lease and priority samples (kept on disk), each
attempt's facts from the fault log and the workers' observations, and the shared constants of the duties.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from soak.record.spill import TimeSeries, _Scratch

TERMINAL = ("succeeded", "failed", "cancelled")
SKEW_SLACK = 1.0  # seconds of clock disagreement tolerated when comparing a worker's timestamps with the harness's
DRAIN_LIMIT = 15.0  # PROTOCOL §1: grace ≤ 15 s
GRACE_MIN = 10.0  # PROTOCOL §1: grace ≥ 10 s
CLAIM_SETTLE = 1.5  # a claim in flight at SIGTERM has committed this long after it (else: claimed after SIGTERM)
STAMP_SLACK = 0.05  # rounding between a worker's timestamps and the harness clock (same machine)
PARKING_KINDS = ("awaiter", "parent", "sleeper")  # the soak kinds that park (P15)
SAMPLE_EVERY = 0.5  # s: the harness's lease-sample interval (soak/workload/scenarios.py sample_every)
SAMPLE_HIDES = 0.9  # × ttl/3: a gap between two lease samples this long may hide a renewal (P14)


SAMPLE_TYPES = ("lease_sample", "priority_sample")  # two a second for the whole run: kept on disk


class Samples:
    """The lease samples in time order as (at, {(job, attempt): (node, lease_until, kind)}) — each one
    consistent read of every running row — streamed from the run's TimeSeries (issue 27: a long run's
    samples are never all in memory)."""

    def __init__(self, series: TimeSeries) -> None:
        self.series = series

    @staticmethod
    def _rows(e: Mapping[str, Any]) -> dict[tuple[int, int], tuple[str, float | None, str]]:
        return {(int(j), int(a)): (n, u, k) for j, a, n, u, k in e.get("rows", ())}

    def __iter__(self) -> Iterator[tuple[float, dict[tuple[int, int], tuple[str, float | None, str]]]]:
        for at, e in self.series.by_time():
            yield at, self._rows(e)

    def __len__(self) -> int:
        return len(self.series)

    def first_at_or_after(self, t: float) -> tuple[float, dict[tuple[int, int], tuple[str, float | None, str]]] | None:
        found = self.series.first_at_or_after(t)
        return None if found is None else (found[0], self._rows(found[1]))


Key = tuple[int, int]  # (job id, attempt)


class AttemptFacts(_Scratch):
    """What the lease samples say of each attempt they saw running — its node and kind, when it was first
    and last seen, its first and latest lease_until, whether a renewal was seen — in a SQLite scratch
    table (issue 27: a two-hour soak sees ~80,000 attempts; five dicts of them were a growing part of the
    check). Built by `sample()` in time order: only the attempts of the latest sample stay in memory (an
    attempt is seen while it runs, then never again; one that comes back is read back from disk)."""

    def __init__(self, directory: str | None = None) -> None:
        db = self._open("belay-attempts-", 2048, directory)
        db.execute(
            "CREATE TABLE att (job INTEGER NOT NULL, attempt INTEGER NOT NULL, node TEXT, kind TEXT, "
            "first_at REAL NOT NULL, last_at REAL NOT NULL, first_until REAL, last_until REAL, "
            "renewed INTEGER NOT NULL, PRIMARY KEY (job, attempt)) WITHOUT ROWID"
        )
        db.execute("BEGIN")
        self._live: dict[Key, list[Any]] = {}  # the attempts of the latest sample, being updated

    def _conn(self) -> Any:
        if self._db is None:
            raise ValueError("the attempt facts are closed")
        return self._db

    def _row(self, key: Key) -> list[Any] | None:
        live = self._live.get(key)
        if live is not None:
            return live
        row = (
            self._conn()
            .execute(
                "SELECT node, kind, first_at, last_at, first_until, last_until, renewed FROM att WHERE job = ? AND attempt = ?",
                key,
            )
            .fetchone()
        )
        return None if row is None else list(row)

    def sample(self, at: float, rows: Iterable[tuple[Key, str | None, float | None, str]]) -> list[Key]:
        """One lease sample's rows ((job, attempt), node, lease_until, kind); returns the attempts seen for
        the first time."""
        new: list[Key] = []
        seen: dict[Key, list[Any]] = {}
        for key, node, until, kind in rows:
            rec = self._live.pop(key, None) or self._row(key)
            if rec is None:
                rec = [node, kind, at, at, until, until, 0]
                new.append(key)
            else:
                if node:
                    rec[0] = node
                rec[1], rec[3] = kind, at
                if until is not None:
                    if rec[5] is not None and until > rec[5] + 0.05:
                        rec[6] = 1
                    rec[5] = until
            seen[key] = rec
        self._store(self._live)  # attempts that left the samples
        self._live = seen
        return new

    def _store(self, recs: Mapping[Key, list[Any]]) -> None:
        if recs:
            self._conn().executemany(
                "INSERT OR REPLACE INTO att VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [(*k, *r) for k, r in recs.items()]
            )

    def finish(self) -> None:
        self._store(self._live)
        self._live = {}
        db = self._conn()
        db.execute("CREATE INDEX att_node ON att (node, first_at)")
        db.execute("COMMIT")

    def _field(self, key: Key, i: int) -> Any:
        rec = self._row(key)
        return None if rec is None else rec[i]

    def node(self, key: Key) -> str | None:
        node: str | None = self._field(key, 0)
        return node

    def first_at(self, key: Key) -> float | None:
        at: float | None = self._field(key, 2)
        return at

    def first_until(self, key: Key) -> float | None:
        until: float | None = self._field(key, 4)
        return until

    def last_until(self, key: Key) -> float | None:
        until: float | None = self._field(key, 5)
        return until

    def of_node(self, node: str) -> Iterator[tuple[float, Key, float | None, str]]:
        """(first seen, (job, attempt), first lease_until, kind) of the node's attempts, by first seen."""
        cur = self._conn().execute(
            "SELECT first_at, job, attempt, first_until, kind FROM att WHERE node = ? ORDER BY first_at, job, attempt",
            (node,),
        )
        while rows := cur.fetchmany(1000):
            for at, job, attempt, until, kind in rows:
                yield at, (job, attempt), until, kind

    def renewed(self) -> int:
        n: int = self._conn().execute("SELECT count(*) FROM att WHERE renewed = 1").fetchone()[0]
        return n

    def longer_than(self, seconds: float) -> list[Key]:
        rows = self._conn().execute(
            "SELECT job, attempt FROM att WHERE last_at - first_at > ? ORDER BY job, attempt", (seconds,)
        )
        return [(j, a) for j, a in rows]

    def __len__(self) -> int:
        n: int = self._conn().execute("SELECT count(*) FROM att").fetchone()[0]
        return n + len(self._live)


class Evidence:
    """What the history says, indexed once for the duties and the coverage table. The lease and priority
    samples (`SAMPLE_TYPES`: most of a long run's history) go to disk-backed series; `samples` gives
    further sample events (a stream read from history.jsonl) when `history` leaves them out."""

    def __init__(
        self, history: Sequence[Mapping[str, Any]], ttl: float, samples: Iterable[Mapping[str, Any]] = ()
    ) -> None:
        self.ttl = ttl
        self.by_type: dict[str | None, Any] = defaultdict(list)  # event type → its events
        self.series: dict[str | None, TimeSeries] = {t: TimeSeries() for t in SAMPLE_TYPES}
        t0 = float("inf")
        for e in itertools.chain(history, samples):
            t0 = min(t0, float(e["t"]))
            kind = e.get("type")
            if kind in self.series:
                self.series[kind].append(float(e.get("at", e["t"])), e)
            else:
                self.by_type[kind].append(e)
        for kind, series in self.series.items():
            self.by_type[kind] = series  # iterated as recorded, like the other types' lists
        self.t0 = t0 if t0 != float("inf") else 0.0
        # per (job, attempt) seen running: node, kind, first and last seen, first and latest lease_until,
        # renewed — on disk but for the latest sample's attempts (AttemptFacts)
        self.attempts = AttemptFacts()
        self.skewed_nodes = {
            e["node"]: float(e["clock_skew"]) for e in self.by_type["worker_start"] if e.get("clock_skew")
        }
        self.skew_seen: dict[str, float] = {}
        # every lease sample in time order: (at, {(job, attempt): (node, lease_until, kind)}) — a sample
        # lists every running row of one consistent read (soak/workload/scenarios.py)
        self.samples = Samples(self.series["lease_sample"])
        for at, e in self.series["lease_sample"].by_time():
            rows = [((int(j), int(a)), node, until, kind) for j, a, node, until, kind in e.get("rows", ())]
            self.attempts.sample(at, rows)
            for _key, node, until, _kind in rows:
                if until is not None and node in self.skewed_nodes and (ahead := until - at - ttl) > 0.1:
                    self.skew_seen[node] = max(self.skew_seen.get(node, 0.0), ahead)
        self.attempts.finish()
        self.max_skew = max([0.0, *self.skewed_nodes.values()])

    def close(self) -> None:
        for series in self.series.values():
            series.close()
        self.attempts.close()

    def long_attempts(self) -> list[tuple[int, int]]:
        """Attempts seen holding their lease for longer than the ttl (they needed a renewal)."""
        return self.attempts.longer_than(self.ttl)


def _errors_for(job: Any, attempt: int, error: str) -> list[Mapping[str, Any]]:
    return [e for e in job.errors if isinstance(e, Mapping) and e.get("attempt") == attempt and e.get("error") == error]


def _ts(value: Any) -> float:
    from datetime import datetime

    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value)).timestamp()
