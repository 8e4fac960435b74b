"""Broken: acks are not fenced — `WHERE id = $id` without `AND state = 'running' AND attempt = $claimed`.

A worker SIGSTOPped past its lease comes back and its ack overwrites the row another attempt owns.
Expected verdict: invalid, I2."""

from __future__ import annotations

from psycopg import sql

from impl.store import PgStore
from impl.store.queries import raw_queries
from model import worker_ops as w
from model.rows import TERMINAL
from soak.reference_worker import main

FENCE = " AND state || '' = 'running' AND attempt = %(attempt)s"  # impl/store/sql/worker.sql's spelling


class UnfencedStore(PgStore):
    def apply(self, op, conn=None):
        if isinstance(op, w.Ack):
            return self._unfenced_ack(op)
        # The runtime groups acks (AckMany, AckClaim: issue 33): the bug is in every ack path, or a grouped
        # ack — most acks since the ack linger — is fenced and the variant proves nothing (found: MISSED).
        if isinstance(op, w.AckMany):
            return w.AckedMany(tuple(self._unfenced_ack(a) for a in op.acks))
        if isinstance(op, w.AckClaim):
            acked = w.AckedMany(tuple(self._unfenced_ack(a) for a in op.acks.acks))
            return w.AckedClaimed(acked, super().apply(op.claim, conn))
        return super().apply(op, conn)

    def _unfenced_ack(self, op: w.Ack):
        name, params = self._ack_params(op)
        text = raw_queries()[name]
        assert FENCE in text, f"the fence moved in query {name}; update this fixture"
        query = sql.SQL(text.replace(FENCE, "")).format(**self.q.names)
        with self.transaction(op.now) as tx:
            row = tx.cur.execute(query, params).fetchone()
            if row is None:
                return w.Stale(op.job_id, op.attempt)
            if row["state"] in TERMINAL:
                self._terminal(tx, [row])
            return w.Acked(op.job_id, row["state"])


if __name__ == "__main__":
    main(store_class=UnfencedStore)
