"""Read a whole Belay database into a `model.state.State` (one REPEATABLE READ transaction), so the
§11 invariant predicates and the model comparison run on real rows exactly as on the model's."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from impl.pgrows import job_from_row, step_from_row
from impl.queries import SchemaSQL
from model.rows import CronRow, Event, QueueRow, RateWindow, Signal
from model.state import State, from_rows


def snapshot(conn: psycopg.Connection, schema: str = "public") -> State:
    """A consistent snapshot of every table, plus the sequence's next id and the meta row."""
    q = SchemaSQL(schema)
    names = (
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
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        with conn.pipeline():  # one round trip for all nine reads
            cursors = {name: conn.cursor(row_factory=dict_row) for name in names}
            for name, cur in cursors.items():
                cur.execute(q.q(name))
        fetched = {name: cur.fetchall() for name, cur in cursors.items()}

        def rows(name: str) -> list[dict]:
            return fetched[name]

        meta = rows("meta")[0]
        return from_rows(
            [job_from_row(r) for r in rows("snapshot_jobs")],
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
