"""Broken: a child's terminal transition signals `$children` to its parent only when its own count of
non-terminal siblings is zero — the R1 race under READ COMMITTED (the last two children each see the
other still running; neither signals). The R2 reconciler backstop is kept, so the lost wake-up shows
only as latency — and as a parent woken with no `$children` signal ever delivered.

Expected verdict: invalid, P10 (a parent resumed from its park although no child signalled it)."""

from __future__ import annotations

import time

from impl.store import PgStore
from soak.reference_worker import main

WIDEN_RACE_S = 0.05  # between the child's own update and its sibling count, as a slow network would


class CountGatedStore(PgStore):
    def _notify_parents(self, tx, children):
        by_parent: dict[int, list[int]] = {}
        for child, parent in children:
            if parent is not None:
                by_parent.setdefault(parent, []).append(child)
        for parent in sorted(by_parent):
            time.sleep(WIDEN_RACE_S)
            live = tx.cur.execute(
                "SELECT count(*) AS n FROM belay_jobs WHERE parent_id = %s "
                "AND state NOT IN ('succeeded', 'failed', 'cancelled')",
                (parent,),
            ).fetchone()["n"]
            if live == 0:  # BUG: count-gated (R1)
                self._deliver(tx, f"job:{parent}", "$children", {"children": sorted(by_parent[parent])})


if __name__ == "__main__":
    main(store_class=CountGatedStore)
