"""Nothing the project starts outlives it: SIGTERM and SIGHUP end an entry point the way Ctrl-C does.

Python's default SIGTERM/SIGHUP handling kills the process without running `finally` blocks or
`atexit` handlers, so an embedded PostgreSQL, worker processes or a pytest run started by that process
would be orphaned. `interrupt_on_signals()` (called by entry points: `belay db`, the soak, the test
suite, the mutant runner) turns the first such signal into a KeyboardInterrupt in the main thread;
cleanup code then runs as it does for Ctrl-C. Later signals are ignored so the cleanup can finish.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A terminating signal arrived; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def interrupt_on_signals(signals: Iterable[int] = DEFAULT_SIGNALS) -> bool:
    """Install the handlers (main thread only; returns False elsewhere, where Python forbids it)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    chosen = tuple(signals)

    def handler(signum: int, _frame: object) -> None:
        for s in chosen:  # a second signal must not abort the cleanup the first one started
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    for s in chosen:
        signal.signal(s, handler)
    return True
