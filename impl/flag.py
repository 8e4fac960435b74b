"""`Flag`: a threading.Event's interface at the cost of a plain attribute until someone waits on it.

Every running attempt carries two flags (`JobContext.lost`, `JobContext.releasing`, spec
belay-operations.txt "leases"): the renewer and the runtime set and test them, and job code may wait
on them. A threading.Event builds a Condition and a lock when it is created — one per flag per job was
~15 % of a batched drain's CPU (issue 17) — while set/is_set on a Flag are attribute writes and reads
(atomic under the GIL). The Event behind `wait` is made on the first wait only.
"""

from __future__ import annotations

import threading

_MAKING = threading.Lock()  # serializes the lazy creation of a Flag's Event


class Flag:
    """set / is_set / clear / wait, like threading.Event."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        event = self._event
        if event is not None:
            event.set()

    def clear(self) -> None:
        self._set = False
        event = self._event
        if event is not None:
            event.clear()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the flag is set (True) or the timeout passes (False), as Event.wait."""
        if self._set:
            return True
        with _MAKING:
            if self._event is None:
                self._event = threading.Event()
        # A set() that ran before the Event existed wrote _set first and found no Event: carry it over.
        # (One that runs after sees the Event and sets it itself.)
        if self._set:
            self._event.set()
        return self._event.wait(timeout)

    def __repr__(self) -> str:
        return f"<Flag {'set' if self._set else 'unset'}>"
