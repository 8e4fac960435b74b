"""Broken: the sweeper prunes terminal jobs as soon as they end (retention 0 for every terminal state),
against PROTOCOL.md §1 ("not prune anything during the run: retention ≥ 1 day") and the operations
guide's retention defaults (a day for succeeded jobs, a week for failed and cancelled ones).

Expected verdict: invalid, I1 (ledger jobs whose rows are gone)."""

from __future__ import annotations

from dataclasses import replace

from impl.store import PgStore
from soak.reference_worker import main


class EagerPruneStore(PgStore):
    def _prune(self, op, conn=None):
        eager = {"succeeded": 0, "failed": 0, "cancelled": 0}  # BUG: no retention at all
        return super()._prune(replace(op, retention=eager), conn)


if __name__ == "__main__":
    main(store_class=EagerPruneStore)
