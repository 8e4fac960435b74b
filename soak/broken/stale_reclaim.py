"""Broken (history-only): the reclaim pass reads expired leases in one transaction and writes them in
another, without re-checking the row (River #1302's shape: a rescuer overwrote a job that completed
after its read). The write is computed from the stale read — errors = the errors it read plus a
lease_expired entry — and applied by id alone. Another sweeper, or the row's own late ack, moves the
row on in between; the stale write then makes a finished row ready again (or rewrites a re-claimed
one), and the job simply runs once more. Attempts already exhausted are left alone. The final
snapshot shows a job that succeeded — only the committed history shows the terminal row rewritten.

    soak/run.sh --worker '"$BELAY_SOAK_PYTHON" -m soak.broken.stale_reclaim'

Expected: the final-state checker VALID; the history checker INVALID with an illegal transition
(terminal_exit: succeeded→ready, or a reclaim of a row another attempt holds).
Self-contained: register it in the broken-worker catalogue by module name."""

from __future__ import annotations

import time

from psycopg import sql
from psycopg.types.json import Jsonb

from impl.store import PgStore
from model import worker_ops as w
from soak.reference_worker import main

SLOW_PASS_S = 1.0  # between the read and the write: what a slow or paused sweeper pass looks like


READ = (
    "SELECT id, attempt, max_attempts, errors FROM {jobs} WHERE state = 'running' AND lease_until <= %(now)s "
    "ORDER BY id LIMIT %(limit)s"
)
WRITE = (
    "UPDATE {jobs} SET state = 'ready', ready_at = %(ready_at)s, errors = %(errors)s, lease_until = NULL, "
    "leased_by = NULL WHERE id = %(id)s RETURNING id, queue"
)


class StaleReclaimStore(PgStore):
    def _reclaim(self, op: w.Reclaim, conn=None) -> w.Reclaimed:
        with self.transaction(op.now) as tx:  # the read: no row lock held past this commit
            rows = tx.cur.execute(sql.SQL(READ).format(**self.q.names), {"now": op.now, "limit": op.limit}).fetchall()
        rows = [r for r in rows if r["attempt"] < r["max_attempts"]]  # exhausted ones: left to nobody
        if not rows:
            return w.Reclaimed((), ())
        time.sleep(SLOW_PASS_S)
        retried = []
        with self.transaction(op.now) as tx:  # the write: computed from the stale read, no state/attempt guard
            for row in rows:
                errors = [*row["errors"], w.error_entry(row["attempt"], op.now, "lease_expired", None)]
                done = tx.cur.execute(
                    sql.SQL(WRITE).format(**self.q.names),
                    {"id": row["id"], "errors": Jsonb(errors), "ready_at": op.backoff.retry_at(op.now, row["attempt"])},
                ).fetchone()
                if done is not None:
                    tx.pokes.add(done["queue"])
                    retried.append(row["id"])
        return w.Reclaimed(tuple(retried), ())


if __name__ == "__main__":
    main(store_class=StaleReclaimStore)
