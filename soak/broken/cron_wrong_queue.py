"""Broken: cron slots are inserted into the queue `default` instead of the queue the cron row's opts name.

Expected verdict: invalid, P6 (a cron job in the wrong queue; I1 also finds it never ran)."""

from __future__ import annotations

from dataclasses import replace

from impl.store import PgStore
from model import ops
from model import worker_ops as w
from model.cron import cron_job, cron_plan
from model.rows import CronRow
from soak.reference_worker import main


class WrongQueueCronStore(PgStore):
    def _fire_crons(self, op, conn):
        with self.transaction(op.now) as tx:
            rows = [CronRow(**r) for r in tx.all("cron_rows")]
            plan = cron_plan(op.static, rows, op.since, op.now)
            if not plan:
                return w.CronsFired(())
            specs = [replace(cron_job(c, slot), queue="default") for c, slot in plan]  # BUG: opts queue ignored
            outcomes = self._insert(tx, [self._row(s, op.now) for s in specs])
            return w.CronsFired(
                tuple(
                    w.Fired(c.name, slot, o.id, isinstance(o, ops.Inserted))
                    for (c, slot), o in zip(plan, outcomes, strict=True)
                )
            )


if __name__ == "__main__":
    main(store_class=WrongQueueCronStore)
