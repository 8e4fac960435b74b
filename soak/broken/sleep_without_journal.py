"""Broken: a durable sleep parks the job until its wake time but never journals `$sleep:<name>`, so the
resumed job does not know it already slept and sleeps again — forever.

Expected verdict: invalid, P7 (a sleeper resumed without a journaled `$sleep:` step)."""

from __future__ import annotations

from impl.store import PgStore
from model import worker_ops as w
from soak.reference_worker import main


class ForgetfulSleepStore(PgStore):
    def _sleep(self, op, conn):
        with self.transaction(op.now) as tx:
            if tx.one("fence", {"id": op.job_id, "attempt": op.attempt}) is None:
                return w.Stale(op.job_id, op.attempt)
            # BUG: no insert_step of $sleep:<name>
            tx.one("sleep_until", {"id": op.job_id, "attempt": op.attempt, "until": op.until})
            return w.Slept(op.job_id, op.until)


if __name__ == "__main__":
    main(store_class=ForgetfulSleepStore)
