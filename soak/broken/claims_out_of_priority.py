"""Broken: claims take the highest priority value first (ORDER BY priority DESC) instead of §6's
priority ASC, ready_at ASC NULLS FIRST, id ASC.

Expected verdict: invalid, P5 (priority-5 jobs running while due priority-0 jobs wait unclaimed)."""

from __future__ import annotations

from soak.broken.base import patched_queries
from soak.reference_worker import main

OutOfOrderStore = patched_queries(claim_plain=("ORDER BY priority ASC", "ORDER BY priority DESC"))

if __name__ == "__main__":
    main(store_class=OutOfOrderStore)
