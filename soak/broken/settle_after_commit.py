"""Broken (history-only): workflow settlement (§7 "after any terminal write: settle under the workflow
lock") runs in a transaction of its own *after* the terminal write committed, instead of in the same
transaction. Between the two commits the database holds a member that finished while its dependents
are still held (or a failed dep beside a dependent not yet doomed): settlement is not a fixpoint in a
committed state (§11.5). The second transaction repairs it at once, so the final snapshot is clean;
only the committed history shows the broken intermediate states.

    soak/run.sh --worker '"$BELAY_SOAK_PYTHON" -m soak.broken.settle_after_commit'

Expected: the final-state checker VALID; the history checker INVALID, I5 after the terminal commit.
Self-contained: register it in the broken-worker catalogue by module name."""

from __future__ import annotations

import threading

from impl.runtime import utc_now
from impl.store import PgStore
from soak.reference_worker import main


class SettleAfterCommitStore(PgStore):
    _deferred = threading.local()

    def _after_terminal(self, tx, terminal) -> None:
        terminal = list(terminal)
        pending = getattr(self._deferred, "workflows", None)
        if pending is None:
            pending = self._deferred.workflows = set()
        pending.update(t["workflow_id"] for t in terminal if t["workflow_id"])
        self._notify_parents(tx, [(t["id"], t["parent_id"]) for t in terminal])  # without settlement

    def apply(self, op, conn=None):
        result = super().apply(op, conn)
        pending = getattr(self._deferred, "workflows", None)
        if pending:
            self._deferred.workflows = set()
            with self.transaction(utc_now()) as tx:  # settlement, one commit too late
                doomed_children = []
                for workflow_id in sorted(pending):
                    tx.one("lock_workflow", {"workflow_id": workflow_id})
                    _, doomed = self._settle(tx, workflow_id)
                    doomed_children += [(d["id"], d["parent_id"]) for d in doomed]
                self._notify_parents(tx, doomed_children)
        return result


if __name__ == "__main__":
    main(store_class=SettleAfterCommitStore)
