"""Broken: the sweeper never fires crons (§8.5; PROTOCOL.md §1: fire crons from `belay_crons` rows).

Expected verdict: invalid, I6 (a due minute slot without its job)."""

from __future__ import annotations

from impl.store import PgStore
from model import worker_ops as w
from soak.reference_worker import main


class NoCronStore(PgStore):
    def _fire_crons(self, op, conn=None):
        return w.CronsFired(())  # BUG: no slot is ever inserted


if __name__ == "__main__":
    main(store_class=NoCronStore)
