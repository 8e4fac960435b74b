"""Broken: the reclaim pass retries an expired lease whatever the attempt (off by two: `attempt <
max_attempts + 2`), so a job whose last attempt lost its lease runs attempts past its budget — the
independent Node worker's "attempts 7 and 8 of 6" (issue 30). The committed-history check names the
reclaim transaction; the final rows show it too.

Expected verdict: invalid, P16 (attempt > max_attempts)."""

from __future__ import annotations

from soak.broken.base import patched_queries
from soak.reference_worker import main

# BUG: the budget is max_attempts (the CASE decides retry or fail for every row the reclaim locked)
GenerousReclaimStore = patched_queries(reclaim_many=("j.attempt < j.max_attempts", "j.attempt < j.max_attempts + 2"))


if __name__ == "__main__":
    main(store_class=GenerousReclaimStore)
