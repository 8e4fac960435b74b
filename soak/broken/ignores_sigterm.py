"""Broken: SIGTERM is ignored — the worker goes on claiming and running until the harness kills it
(PROTOCOL.md §1: drain and exit 0 within 15 s).

Expected verdict: invalid, P4 (no exit within 15 s of SIGTERM)."""

from __future__ import annotations

import logging
import os
import signal
import threading

from soak.reference_worker import build


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # BUG: no drain at all
    worker = build(dict(os.environ))
    worker.start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
