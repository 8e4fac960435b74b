"""Broken: the claim takes ready rows up to 30 s before they are due (`ready_at <= now + 30 s`), so retries
run before their backoff has passed, snoozes and scheduled jobs start early (§4: a claim moves only ready
rows that are due, or awaiting rows whose deadline has passed, to running).

Expected verdict: invalid, refine (trace validation: a claim transaction leased a row whose ready_at lies
after the claim's `now` beyond the clock-skew tolerance — no Claim of the model explains it)."""

from __future__ import annotations

from soak.broken.base import patched_queries
from soak.reference_worker import main

EarlyClaimStore = patched_queries(
    claim_plain=(
        "state = 'ready' AND (ready_at IS NULL OR ready_at <= %(now)s)",
        "state = 'ready' AND (ready_at IS NULL OR ready_at <= %(now)s + interval '30 seconds')",  # BUG
    )
)

if __name__ == "__main__":
    main(store_class=EarlyClaimStore)
