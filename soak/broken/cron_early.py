"""Broken: crons fire the slot of the minute that is about to begin (the plan is computed a minute ahead:
ceiling instead of floor), so each slot's job is inserted up to 60 s before its slot is due (§8.5 "for
each due minute slot").

Expected verdict: invalid, P12 (a cron job inserted before its slot)."""

from __future__ import annotations

from datetime import timedelta

from impl.store import PgStore
from model import worker_ops as w
from model.cron import cron_job, cron_plan
from model.rows import CronRow
from soak.reference_worker import main


class EarlyCronStore(PgStore):
    def _fire_crons(self, op: w.FireCrons, conn=None) -> w.CronsFired:
        with self.transaction(op.now) as tx:
            rows = [CronRow(**r) for r in tx.all("cron_rows")]
            ahead = op.now + timedelta(minutes=1)  # BUG: slots up to a minute from now count as due
            plan = cron_plan(op.static, rows, op.since + timedelta(minutes=1), ahead, op.queues)
            if not plan:
                return w.CronsFired(())
            self._insert(tx, [self._row(cron_job(c, slot), op.now) for c, slot in plan])
            return w.CronsFired(())


if __name__ == "__main__":
    main(store_class=EarlyCronStore)
