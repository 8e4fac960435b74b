"""Planted bugs that only trace validation (soak.judges.refine) is meant to see: the reference worker
with one named query of impl/sql edited, so that the implementation disagrees with model/.

    soak/run.sh --worker '"$BELAY_SOAK_PYTHON" -m soak.refine_planted claim_resets_started_at'
    python -m soak.judges.refine reports/latest          # INVALID, naming the first claim that differs

Variants (argv[1]):
  claim_resets_started_at  the claim writes started_at = now on every attempt (the model keeps the first
                           claim's time: COALESCE(started_at, now)); no invariant reads started_at.
  reclaim_past_max         the reclaim pass reads max_attempts + 2, so an expired lease at attempt 6 of 6
                           is retried (attempts 7 and 8 of 6 run); leases are never renewed and `slow`
                           sleeps 12 s without its steps, so every attempt expires and starts over
                           (run with --lease-ttl 3; the reclaim backoff is a flat 1 s).
  signal_keeps_first_payload  a redelivered signal keeps its first payload (§8.1 is upsert-latest; the model
                           replaces it): a parent's second `$children` names only the first child. Neither
                           the invariants nor the history's transition rules read a signal's payload.
  snooze_credits_two       a snooze adds 2 to max_attempts instead of 1 (the model: one).
Not part of the broken-worker catalogue: these exist to show the refinement check failing.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from typing import Any

from impl.store import PgStore
from impl.worker import JobContext, Registry
from model import worker_ops as w
from soak.broken.base import patched_queries
from soak.reference_worker import main, registry

VARIANTS = {
    "claim_resets_started_at": {
        "claim_plain": ("started_at = COALESCE(started_at, %(now)s)", "started_at = %(now)s"),
    },
    "reclaim_past_max": {
        "expired_leases": (
            "SELECT id, attempt, max_attempts FROM",
            "SELECT id, attempt, max_attempts + 2 AS max_attempts FROM",
        ),
        "renew_leases": ("WHERE id = ANY(%(ids)s)", "WHERE false AND id = ANY(%(ids)s)"),
    },
    "signal_keeps_first_payload": {
        "upsert_signal": ("SET payload = EXCLUDED.payload", "SET payload = {signals}.payload"),
    },
    "snooze_credits_two": {
        "ack_snooze": ("max_attempts = max_attempts + 1", "max_attempts = max_attempts + 2"),
    },
}


def _never_done(ctx: JobContext, input: dict) -> dict:
    """`slow` without its steps: every attempt outlives its (never renewed) lease and starts over."""
    ctx.emit({"phase": "start", "attempt": ctx.attempt, "node": ctx.job.leased_by, "pid": os.getpid()})
    time.sleep(float(input.get("seconds", 12)))
    return {"node": ctx.job.leased_by, "attempt": ctx.attempt}


def _past_max_store() -> type[PgStore]:
    base = patched_queries(**VARIANTS["reclaim_past_max"])

    class PastMax(base):  # type: ignore[valid-type, misc]
        def _reclaim(self, op: w.Reclaim, conn: Any = None) -> w.Reclaimed:
            # a flat 1 s reclaim backoff, so that eight attempts fit in a short soak
            return super()._reclaim(replace(op, backoff=w.Backoff(1, 1, 1)), conn)

    return PastMax


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in VARIANTS:
        sys.exit(f"usage: python -m soak.refine_planted {{{','.join(VARIANTS)}}}")
    if name == "reclaim_past_max":
        reg = Registry()
        reg.kinds = dict(registry.kinds)
        reg.kinds["slow"] = replace(registry.kinds["slow"], fn=_never_done)
        main(store_class=_past_max_store(), reg=reg)
    else:
        main(store_class=patched_queries(**VARIANTS[name]))
