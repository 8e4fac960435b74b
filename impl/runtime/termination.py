"""Shutdown for entry points: `Termination` turns SIGTERM/SIGINT/SIGHUP into a number the main thread
waits for (then `Worker.stop()` gives running jobs `shutdown_grace`).
"""

from __future__ import annotations

import time


class Termination:
    """SIGTERM/SIGINT/SIGHUP handling for entry points: `Termination()` installs the handlers (before the
    worker starts), `wait()` blocks the main thread until one arrives and returns its number.

    The handlers only record the signal and the main thread polls for it: a handler that called
    `threading.Event.set()` could run while the interrupted main thread holds that event's internal
    lock (inside `Event.wait()`) and deadlock the process — a SIGTERM then never stops the worker."""

    def __init__(self) -> None:
        import signal

        self.received: list[int] = []
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda signum, _frame: self.received.append(signum))

    def wait(self, poll: float = 0.1) -> int:
        while not self.received:
            time.sleep(poll)
        return self.received[0]
