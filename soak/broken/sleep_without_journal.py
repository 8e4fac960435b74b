"""Broken: a durable sleep parks the job until its wake time but never journals `$sleep:<name>`, so the
resumed job does not know it already slept and sleeps again — forever.

Expected verdict: invalid, P7 (a sleeper resumed without a journaled `$sleep:` step). Trace validation
cannot see it: a park until a time with no journal row is a legal snooze (§7); only the kind's own
contract (sleep once) is broken."""

from __future__ import annotations

from impl.store import PgStore
from impl.store.worker_store import PARK_BUDGET
from model import worker_ops as w
from soak.reference_worker import main


class ForgetfulSleepStore(PgStore):
    def _sleep(self, op, conn):
        with self.transaction(op.now) as tx:
            if tx.one("fence", {"id": op.job_id, "attempt": op.attempt}) is None:
                return w.Stale(op.job_id, op.attempt)
            # BUG: no insert_step of $sleep:<name>
            tx.one("sleep_until", {"id": op.job_id, "attempt": op.attempt, "until": op.until, **PARK_BUDGET})
            return w.Slept(op.job_id, op.until)


if __name__ == "__main__":
    main(store_class=ForgetfulSleepStore)
