"""Broken: a kind that kills its own process (`flaky` mode exit, `costed` crash_at_crossing) does so
without first recording the `exit` observation (PROTOCOL.md §1), so the harness cannot tell the
deliberate exit from a crash.

Expected verdict: invalid, P1 (a self-exit without an `exit` observation)."""

from __future__ import annotations

import os
import sys

import soak.reference_worker as ref


def die(ctx, reason: str) -> None:
    sys.stderr.flush()
    os._exit(75)  # BUG: no `exit` observation first


if __name__ == "__main__":
    ref.die = die
    ref.main()
