"""Broken (history-only): a retrying ack (a failure with attempts left, or a snooze: the row goes back to
ready) sets lease_until to the ack's own time — moving the lease backwards — and keeps leased_by,
instead of clearing both (§7:
every outcome also SETs lease_until = NULL, leased_by = NULL). The row is ready, so no sweeper or
renewal looks at the lease, and the next claim overwrites it: the final snapshot is clean. Only the
committed history shows the ack's illegal lease write.

    soak/run.sh --worker '"$BELAY_SOAK_PYTHON" -m soak.broken.ack_keeps_lease'

Expected: the final-state checker VALID; the history checker INVALID, rule lease_cleared.
Self-contained: register it in the broken-worker catalogue by module name."""

from __future__ import annotations

from psycopg import sql

from impl.store import PgStore
from impl.store.queries import raw_queries
from model import worker_ops as w
from model.rows import TERMINAL
from soak.reference_worker import main

CLEAR = "lease_until = NULL, leased_by = NULL"
# the ack's time — earlier than the live lease — when the row goes back to ready; leased_by stays. A
# terminal outcome still clears both (a terminal row with a lease would show in the final snapshot).
KEEP = {
    "ack_snooze": "lease_until = %(now)s",
    "ack_error": "lease_until = CASE WHEN %(retry_at)s::timestamptz IS NOT NULL AND attempt < max_attempts "
    "THEN %(now)s::timestamptz END, "
    "leased_by = CASE WHEN %(retry_at)s::timestamptz IS NOT NULL AND attempt < max_attempts "
    "THEN leased_by END",
}


class AckKeepsLeaseStore(PgStore):
    def _ack(self, op: w.Ack, conn=None):
        if not isinstance(op.outcome, (w.Fail, w.Snooze)):
            return super()._ack(op, conn)
        name, params = self._ack_params(op)
        text = raw_queries()[name]
        assert CLEAR in text, f"the lease clearing moved in query {name}; update this fixture"
        query = sql.SQL(text.replace(CLEAR, KEEP[name])).format(**self.q.names)
        with self.transaction(op.now) as tx:
            row = tx.cur.execute(query, params).fetchone()
            if row is None:
                return w.Stale(op.job_id, op.attempt)
            if row["state"] in TERMINAL:
                self._terminal(tx, [row])
            else:
                tx.pokes.add(row["queue"])
            return w.Acked(op.job_id, row["state"])


if __name__ == "__main__":
    main(store_class=AckKeepsLeaseStore)
