"""Broken: within one priority, claims take the most recently due job first (ready_at DESC, id DESC)
instead of §6's priority ASC, ready_at ASC NULLS FIRST, id ASC. Priorities are still honoured, so P5's
priority-0-against-5 comparison cannot see it; older jobs are overtaken by newer ones.

Expected verdict: invalid, P5 (the committed claims: a claimed row later in §6 order than a claimable row
of the same queue that no concurrent transaction held)."""

from __future__ import annotations

from soak.broken.base import patched_queries
from soak.reference_worker import main

NewestFirstStore = patched_queries(
    claim_plain=(
        "ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC",
        "ORDER BY priority ASC, ready_at DESC NULLS LAST, id DESC",
    )
)

if __name__ == "__main__":
    main(store_class=NewestFirstStore)
