"""Broken: the sweeper never runs the `$children` reconciler (§8.4 MUST, the R2 backstop).

A parent whose children were finished without a `$children` delivery (the harness's lost wake-ups,
or any SDK bug) stays parked forever.
Expected verdict: invalid, I9 (a parent awaits `$children` although all its children are terminal)."""

from __future__ import annotations

from impl.store import PgStore
from model import worker_ops as w
from soak.reference_worker import main


class NoReconcilerStore(PgStore):
    def _reconcile(self, op, conn):
        return w.Reconciled(())  # BUG: no R2 backstop


if __name__ == "__main__":
    main(store_class=NoReconcilerStore)
