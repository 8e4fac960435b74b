"""Read a whole Belay database into a `model.state.State` (one REPEATABLE READ transaction), so the
§11 invariant predicates and the model comparison run on real rows exactly as on the model's."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import psycopg
from psycopg import pq, sql
from psycopg.rows import dict_row, tuple_row

from impl.store.pgrows import job_from_row, job_from_tuple, step_from_row
from impl.store.queries import SchemaSQL
from model.rows import CronRow, Event, QueueRow, RateWindow, Signal
from model.state import State, from_rows

_SQL: dict[str, SchemaSQL] = {}  # composed once per schema: snapshot runs after every compared step
_NAMES = (
    "meta",
    "snapshot_jobs",
    "snapshot_steps",
    "snapshot_events",
    "snapshot_signals",
    "snapshot_rate",
    "snapshot_queues",
    "snapshot_crons",
    "snapshot_seq",
)


def snapshot(conn: psycopg.Connection, schema: str = "public") -> State:
    """A consistent snapshot of every table, plus the sequence's next id and the meta row."""
    q = _SQL.get(schema)
    if q is None:
        q = _SQL[schema] = SchemaSQL(schema)
    if conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        # BEGIN, the nine reads and COMMIT in one pipeline: one round trip (the model comparison takes a
        # snapshot after every step; three round trips were a fifth of its time)
        with conn.pipeline():
            conn.execute(_BEGIN)
            cursors = _reads(conn, q)
            conn.execute(b"COMMIT")
        fetched = {name: cur.fetchall() for name, cur in cursors.items()}
    else:
        with conn.transaction():
            conn.execute(b"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            with conn.pipeline():  # one round trip for all nine reads
                cursors = _reads(conn, q)
            fetched = {name: cur.fetchall() for name, cur in cursors.items()}

    def rows(name: str) -> list[dict]:
        return fetched[name]

    meta = rows("meta")[0]
    return from_rows(
        [job_from_tuple(r) for r in fetched["snapshot_jobs"]],
        [step_from_row(r) for r in rows("snapshot_steps")],
        [Event(**r) for r in rows("snapshot_events")],
        [Signal(**r) for r in rows("snapshot_signals")],
        [RateWindow(**r) for r in rows("snapshot_rate")],
        [QueueRow(**r) for r in rows("snapshot_queues")],
        [CronRow(**r) for r in rows("snapshot_crons")],
        version=meta["version"],
        contract_major=meta["contract_major"],
        next_id=rows("snapshot_seq")[0]["next_id"],
    )


_BEGIN = b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def _reads(conn: psycopg.Connection, q: SchemaSQL) -> dict[str, psycopg.Cursor[Any]]:
    """The nine reads, sent (in a pipeline: results fetched later); job rows as tuples (job_from_tuple)."""
    cursors: dict[str, psycopg.Cursor[Any]] = {
        name: conn.cursor(row_factory=tuple_row if name == "snapshot_jobs" else dict_row) for name in _NAMES
    }
    for name, cur in cursors.items():
        cur.execute(q.qb(name))
    return cursors


# A long soak's end-of-run snapshot: the big tables streamed into a mapping of the caller's (a disk-backed
# table: soak/record/spill.py DiskTable), so memory does not grow with the run (issue 27, item 3).
BigTable = Callable[[Iterator[tuple[Any, Any]]], Mapping[Any, Any]]


def snapshot_streamed(
    conn: psycopg.Connection, schema: str = "public", *, big: BigTable, big_over: int = 10_000
) -> State:
    """The same State as `snapshot`, but jobs, steps and events with more than `big_over` rows are read
    through server-side cursors and handed to `big` (an iterator of (key, row) in key order) instead of
    being held in dicts. One REPEATABLE READ transaction, as `snapshot`."""
    q = SchemaSQL(schema)
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")

        def small(name: str) -> list[dict]:
            with conn.cursor(row_factory=dict_row) as cur:
                return cur.execute(q.q(name)).fetchall()

        def table(name: str, make: Callable[[dict], Any], key: Callable[[Any], Any]) -> Mapping[Any, Any]:
            # counted first, in the same snapshot: a big table goes to `big` row by row, never through a
            # list of its first `big_over` rows (50,000 jobs held at once were a 100 MiB peak, issue 27)
            counted = conn.execute(sql.SQL("SELECT count(*) FROM ({}) AS counted").format(q.q(name))).fetchone()
            n = counted[0] if counted else 0
            with conn.cursor(name=f"belay_snapshot_{name}", row_factory=dict_row) as cur:
                cur.itersize = 2000
                cur.execute(q.q(name))
                rows = ((key(r), r) for r in map(make, cur))
                return MappingProxyType(dict(rows)) if n < big_over else big(rows)

        meta = small("meta")[0]
        jobs = table("snapshot_jobs", job_from_row, lambda j: j.id)
        steps = table("snapshot_steps", step_from_row, lambda s: (s.job_id, s.name))
        events = table("snapshot_events", lambda r: Event(**r), lambda e: (e.job_id, e.seq))
        signals = [Signal(**r) for r in small("snapshot_signals")]
        rate = [RateWindow(**r) for r in small("snapshot_rate")]
        queues = [QueueRow(**r) for r in small("snapshot_queues")]
        crons = [CronRow(**r) for r in small("snapshot_crons")]
        next_id = small("snapshot_seq")[0]["next_id"]
    rest = from_rows((), (), (), signals, rate, queues, crons)
    return State(
        jobs,
        steps,
        events,
        rest.signals,
        rest.rate,
        rest.queues,
        rest.crons,
        meta["version"],
        meta["contract_major"],
        next_id,
    )
