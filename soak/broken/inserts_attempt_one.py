"""Broken: rows the worker inserts itself — spawned children (§8.4) and cron slots (§8.5) — start at
attempt 1, as an SDK counting attempts from one would write them (§5.1: a new row has attempt 0, errors
[], spent 0, cancel_requested false, ready_at and inserted_at = now). Each such job loses one attempt of
its budget and its first claim is attempt 2; nothing else about the rows is wrong.

(A child's ready_at is not a good column to break here: a spawned child's spec may carry scheduled_at,
so an odd ready_at is a spec the model accepts. The initial attempt is not the spec's to choose.)

Expected verdict: invalid, refine (a spawn or cron transaction inserts a row with attempt 1: the model's
Spawn / FireCrons inserts attempt 0)."""

from __future__ import annotations

from psycopg import sql

from impl.store import PgStore
from impl.store.tx import Tx
from model import ops
from soak.reference_worker import main


class AttemptOneStore(PgStore):
    def _insert(self, tx: Tx, rows: list[tuple]) -> list[ops.Inserted | ops.Duplicate]:
        outcomes = super()._insert(tx, rows)
        ids = [o.id for o in outcomes if isinstance(o, ops.Inserted)]
        if ids:  # BUG: the worker's new rows start at attempt 1 (same transaction as the insert)
            tx.cur.execute(sql.SQL("UPDATE {jobs} SET attempt = 1 WHERE id = ANY(%s)").format(**self.q.names), (ids,))
        return outcomes


if __name__ == "__main__":
    main(store_class=AttemptOneStore)
