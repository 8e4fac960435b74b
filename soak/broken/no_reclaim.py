"""Broken: the sweeper never reclaims expired leases (§6 "any node reclaims expirees"): the jobs of a
killed or frozen node stay `running` forever.

Expected verdict: invalid, P17 (a lease left expired while workers ran), I1 when the drain finishes."""

from __future__ import annotations

from impl.store import PgStore
from model import worker_ops as w
from soak.reference_worker import main


class NoReclaimStore(PgStore):
    def _reclaim(self, op, conn=None):
        return w.Reclaimed((), ())  # BUG: expired leases are left alone


if __name__ == "__main__":
    main(store_class=NoReclaimStore)
