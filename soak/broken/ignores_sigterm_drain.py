"""Broken: on SIGTERM the worker exits at once (status 0) instead of draining: running jobs are
abandoned to lease expiry (PROTOCOL.md §1: stop claiming, let running jobs finish within the grace).

Expected verdict: invalid, P4 (a job running on the node at SIGTERM ended by lease expiry)."""

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
    print("SIGTERM: exiting at once", file=sys.stderr, flush=True)
    os._exit(0)  # BUG: no drain


if __name__ == "__main__":
    main()
