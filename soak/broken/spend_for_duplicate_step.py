"""Broken: a step's cost is added to the job's spend even when its journal insert hit a conflict (the
step was already journaled by another execution — §8.2: spend follows the journal). A stale `slow`
attempt that resumes inside its paid `nap` step after a newer attempt journaled it pays twice.

Expected verdict: invalid, I4 (spent_usd_micros differs from the sum of the journaled steps' costs)."""

from __future__ import annotations

from impl.store import PgStore
from impl.store.worker_store import _over_budget
from model import worker_ops as w
from model.envelope import encode_step_value
from soak.reference_worker import main


class DoubleSpendStore(PgStore):
    def _record_step(self, op, conn):
        value = encode_step_value(op.value)
        with self.transaction(op.now) as tx:
            job = tx.one("lock_job_budget", {"id": op.job_id})
            if job is None:
                return w.JobGone(op.job_id)
            params = {
                "job_id": op.job_id,
                "name": op.name,
                "value": value,
                "usd": op.usd_micros,
                "tokens": op.tokens,
                "now": op.now,
            }
            inserted = tx.one("insert_step", params) is not None
            job = tx.one("add_spend", params)  # BUG: also for a duplicate execution
            if not inserted:
                value = bytes(tx.one("read_step", params)["value"])
            return w.Recorded(inserted, value, job["spent_usd_micros"], job["spent_tokens"], _over_budget(job))


if __name__ == "__main__":
    main(store_class=DoubleSpendStore)
