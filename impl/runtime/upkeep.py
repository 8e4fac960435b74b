"""Table upkeep: a node vacuums and analyzes belay_jobs when its statistics say the claim needs it (issue 54).

Not part of the wire contract: VACUUM and ANALYZE change no row, so the schema (the protocol) and every
SDK's view of it are untouched; any SDK may do the same, or leave it to autovacuum and the operator.

Why a worker does it at all (docs/benchmarks.md, "Why buffers per claim grow with the jobs already
claimed"): the claim walks `belay_jobs_claim_order_idx` from its oldest entries, and the entries of the
rows it already claimed stay in that partial index until a VACUUM removes them. So every claim reads one
more leaf page per ~165 jobs claimed since the last vacuum. `migrate` sets the table's autovacuum
parameters (a vacuum once 5,000 row versions are dead, whatever the table's size), but autovacuum visits
a database at most once per `autovacuum_naptime` (a server setting, 1 min by default), so at 2,000 jobs/s
the claim walks up to ~700 dead pages before each reset. A node that runs `VACUUM` itself once
`vacuum_dead_rows` row versions are dead bounds that walk by vacuum_dead_rows / 330 pages at any rate (two
dead versions per job: the claim's and the ack's); above a million rows the threshold grows with the square
root of the table (`vacuum_threshold`), because each VACUUM costs more there.

The second rule closes the generic-plan window: a claim prepared while the table was empty or never
analyzed plans a sequential scan of the table (measured: 1,639 buffers, 34–49 ms per claim on a
100,000-job backlog) until the first autoanalyze, up to a naptime later. When the planner's row estimate
(`pg_class.reltuples`, -1 before the first ANALYZE) is below half the live rows and at least
`analyze_rows` rows are live, the node runs `ANALYZE`, which invalidates the cached plans. (Not at
migration time: an ANALYZE of the empty table makes the generic plan worse — measured, docs/benchmarks.md.)

Both statements run with SKIP_LOCKED, so nodes never queue behind each other or behind autovacuum. A role
that does not own the table (PostgreSQL would skip it with a warning at every pass) turns upkeep off once,
with one log line.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from impl.store.deadline import connection_defaults

log = logging.getLogger("belay")

STATS_SQL = """
SELECT s.n_live_tup, s.n_dead_tup, c.reltuples,
       pg_has_role(c.relowner, 'USAGE') OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relid = to_regclass(%s)
"""


@dataclass(frozen=True)
class TableStats:
    """What the statistics system says of belay_jobs (n_live_tup, n_dead_tup; reltuples -1 = never analyzed)."""

    live: int
    dead: int
    reltuples: float
    may_maintain: bool = True  # the role owns the table (or is a superuser): VACUUM/ANALYZE would not be skipped


@dataclass(frozen=True)
class Upkeep:
    """What a pass decided: VACUUM (which also refreshes reltuples), ANALYZE, both or neither."""

    vacuum: bool
    analyze: bool


# The table size up to which `vacuum_dead_rows` is the threshold as given; above it the threshold grows with
# the square root of the table. A VACUUM's index passes read every index of the table, so its price grows
# with the table's rows N; the claim's walk it saves grows with the jobs claimed between two vacuums, K. Per
# job that is a·N/K + b·K, least at K ∝ √N.
VACUUM_SCALE_FROM_ROWS = 1_000_000


def vacuum_threshold(vacuum_dead_rows: int, reltuples: float) -> int:
    """Dead row versions that call for a VACUUM: `vacuum_dead_rows`, times √(rows / 1,000,000) above a
    million rows."""
    rows = max(reltuples, 0.0)
    if rows <= VACUUM_SCALE_FROM_ROWS:
        return vacuum_dead_rows
    return int(vacuum_dead_rows * math.sqrt(rows / VACUUM_SCALE_FROM_ROWS))


def decide(stats: TableStats, vacuum_dead_rows: int, analyze_rows: int) -> Upkeep:
    """The rule (pure): vacuum once `vacuum_threshold` row versions are dead; analyze once at least
    `analyze_rows` rows are live and the planner believes fewer than half of them exist. 0 turns a rule off."""
    vacuum = vacuum_dead_rows > 0 and stats.dead >= vacuum_threshold(vacuum_dead_rows, stats.reltuples)
    analyze = analyze_rows > 0 and stats.live >= analyze_rows and max(stats.reltuples, 0.0) * 2 < stats.live
    return Upkeep(vacuum, analyze)


def statement(schema: str, what: Upkeep) -> sql.Composed | None:
    """The one statement carrying out a decision (None for neither)."""
    table = sql.Identifier(schema, "belay_jobs")
    if what.vacuum:
        # INDEX_CLEANUP ON: with the default (AUTO) a VACUUM skips the index passes when under 2 % of the
        # heap's pages hold dead items — on a large table the very passes that remove the claim index's
        # entries of claimed rows.
        options = sql.SQL("SKIP_LOCKED, INDEX_CLEANUP ON" + (", ANALYZE" if what.analyze else ""))
        return sql.SQL("VACUUM ({}) {}").format(options, table)
    if what.analyze:
        return sql.SQL("ANALYZE (SKIP_LOCKED) {}").format(table)
    return None


class TableUpkeep:
    """One node's upkeep: its own autocommit connection (a VACUUM of a large table outlasts a store call's
    deadline, and must not hold a pool slot a claim needs), a pass every `interval` seconds."""

    def __init__(self, conninfo: str, schema: str, vacuum_dead_rows: int, analyze_rows: int) -> None:
        self.conninfo = conninfo
        self.schema = schema
        self.vacuum_dead_rows = vacuum_dead_rows
        self.analyze_rows = analyze_rows
        self.vacuums = 0
        self.analyzes = 0
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def enabled(self) -> bool:
        return self.vacuum_dead_rows > 0 or self.analyze_rows > 0

    def stats(self) -> TableStats | None:
        conn = self._connection()
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(STATS_SQL, (f"{sql.Identifier(self.schema).as_string(conn)}.belay_jobs",)).fetchone()
        if row is None:
            return None
        return TableStats(int(row[0]), int(row[1]), float(row[2]), bool(row[3]))

    def once(self) -> Upkeep:
        """One pass: read the statistics, decide, run the statement. Returns what was done."""
        stats = self.stats()
        if stats is None:
            return Upkeep(False, False)
        if not stats.may_maintain:
            # PostgreSQL would skip the table with a WARNING in its log at every pass: say it once, stop
            log.warning("belay table upkeep off: this role does not own belay_jobs (VACUUM/ANALYZE left to autovacuum)")
            self.vacuum_dead_rows = self.analyze_rows = 0
            return Upkeep(False, False)
        what = decide(stats, self.vacuum_dead_rows, self.analyze_rows)
        query = statement(self.schema, what)
        if query is not None:
            self._connection().execute(query)
            self.vacuums += what.vacuum
            self.analyzes += what.analyze
            log.debug(
                "belay upkeep: %s (live %s, dead %s, reltuples %s)", what, stats.live, stats.dead, stats.reltuples
            )
        return what

    def loop(self, stopped: threading.Event, interval: float) -> None:
        while self.enabled and not stopped.wait(interval):
            try:
                self.once()
            except Exception as exc:  # noqa: BLE001 — upkeep never stops a worker; the next pass retries
                log.warning("belay table upkeep failed: %s", exc)
                self.close()
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            # keepalives and a connect timeout (a stalled path ends the pass, the next pass reconnects)
            self._conn = psycopg.connect(self.conninfo, autocommit=True, **connection_defaults(self.conninfo))
        return self._conn
