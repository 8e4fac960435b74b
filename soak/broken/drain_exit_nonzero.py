"""Broken: the worker drains correctly on SIGTERM but then exits with status 1 (PROTOCOL.md §1: exit 0).

Expected verdict: invalid, P4 (a nonzero exit status after SIGTERM)."""

from __future__ import annotations

import logging
import os
import sys

from impl.runtime import Termination
from soak.reference_worker import build


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    worker = build(dict(os.environ))
    termination = Termination()
    worker.start()
    termination.wait()
    worker.stop()
    sys.stderr.flush()
    os._exit(1)  # BUG: a drained worker exits 0


if __name__ == "__main__":
    main()
