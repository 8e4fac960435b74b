"""Broken: a retry clears the job's pending cancel request — the error ack and the reclaim (its retried
and its failed rows) set `cancel_requested = false` (§7: transitions never clear it; a pending request
survives crashes and retries).
The next attempt then runs to completion instead of being cancelled at its first step boundary.

Expected verdict: invalid, refine (an ack or reclaim transaction writes cancel_requested true → false: no
operation of the model does)."""

from __future__ import annotations

from soak.broken.base import patched_queries
from soak.reference_worker import main

ClearsCancelStore = patched_queries(
    ack_error=(
        "errors = errors || %(entry)s, lease_until",
        "errors = errors || %(entry)s, cancel_requested = false, lease_until",
    ),
    reclaim_many=(
        "lease_until = NULL, leased_by = NULL",
        "lease_until = NULL, leased_by = NULL, cancel_requested = false",
    ),
)

if __name__ == "__main__":
    main(store_class=ClearsCancelStore)
