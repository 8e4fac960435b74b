"""Broken: the reclaim pass retries an expired lease whatever the attempt (off by two: `attempt <
max_attempts + 2`), so a job whose last attempt lost its lease runs attempts past its budget — the
independent Node worker's "attempts 7 and 8 of 6" (issue 30). The committed-history check names the
reclaim transaction; the final rows show it too.

Expected verdict: invalid, P16 (attempt > max_attempts)."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from impl.store import PgStore
from model import worker_ops as w
from soak.reference_worker import main


class GenerousReclaimStore(PgStore):
    def _reclaim(self, op: w.Reclaim, conn=None) -> w.Reclaimed:
        with self.transaction(op.now) as tx:
            retried, failed = [], []
            for row in tx.all("expired_leases", {"now": op.now, "limit": op.limit}):
                entry = Jsonb([w.error_entry(row["attempt"], op.now, "lease_expired", None)])
                if row["attempt"] < row["max_attempts"] + 2:  # BUG: the budget is max_attempts
                    done = tx.one(
                        "reclaim_retry",
                        {"id": row["id"], "entry": entry, "ready_at": op.backoff.retry_at(op.now, row["attempt"])},
                    )
                    tx.pokes.add(done["queue"])  # type: ignore[index]
                    retried.append(row["id"])
                else:
                    failed.append(tx.one("reclaim_fail", {"id": row["id"], "entry": entry, "now": op.now}))
            self._terminal(tx, failed)  # type: ignore[arg-type]
            return w.Reclaimed(tuple(retried), tuple(r["id"] for r in failed))  # type: ignore[index]


if __name__ == "__main__":
    main(store_class=GenerousReclaimStore)
