"""Broken: the shutdown grace is 1 s instead of 10–15 s (PROTOCOL.md §1): on SIGTERM the worker stops
claiming, waits one second, then exits 0, abandoning what still runs to lease expiry.

Expected verdict: invalid, P4 (a job left to lease expiry by a node that exited before a 10 s grace)."""

from __future__ import annotations

import logging
import os

from impl.runtime import Termination
from soak.reference_worker import build


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    worker = build(dict(os.environ))
    termination = Termination()
    worker.start()
    termination.wait()
    worker.stop(grace=1.0)  # BUG: the grace must be at least 10 s
    os._exit(0)


if __name__ == "__main__":
    main()
