"""Broken: results name the job's first attempt (`"attempt": 1`) instead of the attempt that produced them
(PROTOCOL.md §2), so a retried job's final ack cannot be attributed to the attempt that held the row.

Expected verdict: invalid, I2 (a succeeded result's attempt is not the row's attempt)."""

from __future__ import annotations

from dataclasses import replace

from soak.reference_worker import main, registry


def _first_attempt(fn):
    def run(ctx, input):
        value = fn(ctx, input)
        return {**value, "attempt": 1} if isinstance(value, dict) else value  # BUG: always attempt 1

    return run


if __name__ == "__main__":
    for name, kind in list(registry.kinds.items()):
        registry.kinds[name] = replace(kind, fn=_first_attempt(kind.fn))
    main()
