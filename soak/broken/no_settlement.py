"""Broken: terminal writes do not settle the workflow (§7 "after any terminal write: settle under the
workflow lock", §8.3): dependents of a finished member stay held, and dependents of a failed one are not
doomed. `$children` delivery is kept.

Expected verdict: invalid, I5 (settlement is not a fixpoint in the final state)."""

from __future__ import annotations

from impl.store import PgStore
from soak.reference_worker import main


class NoSettlementStore(PgStore):
    def _after_terminal(self, tx, terminal) -> None:
        terminal = list(terminal)
        self._notify_parents(tx, [(t["id"], t["parent_id"]) for t in terminal])  # BUG: no _settle


if __name__ == "__main__":
    main(store_class=NoSettlementStore)
