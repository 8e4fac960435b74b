"""`_Watchdog`: per queue, hands a deferred job or ack that has waited `defer_handoff` behind a long job
to another thread (`_Producer.look`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("belay")


class _Watchdog:
    """A thread that calls `look()` every `tick` seconds while it returns True (something waits that may
    need a hand: `_Producer.look`) and for `QUIET_TICKS` ticks after, then sleeps without a timer until
    `arm()` is called again. `arm` costs an attribute read while it ticks; waking it (an Event.set, a
    futex call) was a seventh of a busy unbatched worker's GIL time when it slept between every group
    commit's deferred jobs, so a busy queue keeps it ticking."""

    QUIET_TICKS = 50

    def __init__(self, name: str, tick: float, look: Callable[[], bool]) -> None:
        self.name, self.tick, self._look = name, tick, look
        self._armed = False
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def arm(self) -> None:
        if self._armed:
            return
        self._armed = True
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._stopped:
                    self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                    self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def _looked(self) -> bool:
        try:
            return self._look()
        except Exception:  # logged; it looks again at the next tick
            log.exception("belay: the hand-off of waiting work failed")
            return True

    def _loop(self) -> None:
        while not self._stopped:
            self._wake.wait()
            self._wake.clear()
            quiet = 0
            while not self._stopped:
                time.sleep(self.tick)
                if self._looked():
                    quiet = 0
                    continue
                quiet += 1
                if quiet < self.QUIET_TICKS:
                    continue
                self._armed = False
                if not self._looked():  # an arm() between the look and the disarming found it still armed
                    break
                self._armed = True
                quiet = 0
