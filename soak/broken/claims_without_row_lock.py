"""Broken: the claim selects its candidates without `FOR UPDATE SKIP LOCKED` (§6). Two nodes claiming at
once choose the same rows; the second claim's UPDATE waits for the first to commit, re-checks only
`id IN (chosen)` and leases the row again — attempt + 1, another node — while the first node runs it.
The soak's three workers claim concurrently (busy poll 25 ms), so the race happens without help.

Expected verdict: invalid, refine (a claim transaction that leases a row already running: no Claim of
the model takes a running row), or I2 (two executions of one attempt's row)."""

from __future__ import annotations

from soak.broken.base import patched_queries
from soak.reference_worker import main

# str.replace: both halves of predicate C (ready, due) lose their row lock
UnlockedClaimStore = patched_queries(claim_plain=("\n    FOR UPDATE SKIP LOCKED", ""))  # BUG

if __name__ == "__main__":
    main(store_class=UnlockedClaimStore)
