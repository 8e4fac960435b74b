"""Broken: await-children checks the children once, then clears `$children` and parks — without the second
check after the clear (§8.4: re-verify, clear a stale `$children`, re-verify, then park). A child that
finishes between the first check and the clear delivers `$children`, which the clear then deletes: the
parent parks awaiting children that are all terminal, and only the R2 reconciler wakes it.

The race is milliseconds wide; this variant holds it open for 0.3 s after the first check (a slow
network would), so it happens in a short soak. The reference SDK, with the same pause, would re-verify
and return the children's results.

Expected verdict: invalid, refine (the park transaction deletes the `$children` signal and parks a parent
whose children are all terminal in the model's state before it: an AwaitChildren of the model returns
instead), or I9 / P10 when the reconciler's rescue shows."""

from __future__ import annotations

import time

from impl.store import PgStore
from impl.store.worker_store import _Rollback
from model import worker_ops as w
from soak.reference_worker import main


class NoReverifyStore(PgStore):
    def _await_children(self, op: w.AwaitChildren, conn=None):
        scope = f"job:{op.job_id}"
        try:
            with self.transaction(op.now) as tx:
                if tx.one("fence_check", {"id": op.job_id, "attempt": op.attempt}) is None:
                    return w.Stale(op.job_id, op.attempt)
                done, ids = self._children_done(tx, op.job_id)
                if done:
                    return w.ChildrenDone(ids)
                time.sleep(0.3)  # the race window held open (see the docstring)
                tx.one("lock_scope", {"scope": scope})
                tx.cur.execute(self.q.q("clear_signal"), {"scope": scope, "name": "$children"})
                # BUG: no second _children_done here
                parked = self._park(tx, op.job_id, op.attempt, scope, "$children", op.deadline)
                if parked is None:
                    raise _Rollback(w.Stale(op.job_id, op.attempt))
                return parked
        except _Rollback as rollback:
            return rollback.result


if __name__ == "__main__":
    main(store_class=NoReverifyStore)
