"""Failpoints: named points between the statements of a store operation, no-ops unless a test arms them.

    failpoint("ack.after_update")         # in impl/: between the fenced UPDATE and the after-terminal steps

A test arms a point with a hook — usually a `Pause`, which stops the thread that reaches it until the
test releases it — and so forces one schedule of concurrent transactions on the real database, the
schedule the race explorer (model/explorer/) printed as a counterexample:

    with Pause("ack.after_update", thread="C1") as c1:
        start C1's ack in a thread named "C1"
        c1.wait_arrived()                  # C1 has updated its row and holds the row lock, uncommitted
        … run the other side, observe it (pg_stat_activity), …
        c1.release()

Unarmed, `failpoint` costs one truth test of an empty dict. The points (and what is true there):

    store.before_commit            impl/store/client_store.py   a store-owned transaction is about to commit: every
                                                   lock it took is still held
    after_terminal.before_notify   impl/store/client_store.py   settlement is done (workflow lock held), the
                                                   `$children` delivery (scope lock) has not started
    retry.before_settle            impl/store/client_store.py   Retry wrote held/ready, settlement not yet run
    ack.after_update               impl/store/worker_store.py  the fenced ack UPDATE ran (row lock held)
    park.after_check               impl/store/worker_store.py  the park rule read signal_exists, not yet parked
    await_children.before_park     impl/store/worker_store.py  the second re-verify ran (scope lock held)
    reclaim.after_read             impl/store/worker_store.py  the sweeper read its expired leases (row locks
                                                   held: FOR UPDATE SKIP LOCKED), nothing updated yet

Thread-safe; hooks run in the thread that reaches the point.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Hook = Callable[[str], None]

_armed: dict[str, list[Hook]] = {}
_guard = threading.Lock()


def failpoint(name: str) -> None:
    """A named point between two statements: runs the hooks armed on `name`, if any."""
    if _armed:
        hooks = _armed.get(name)
        if hooks:
            for hook in tuple(hooks):
                hook(name)


def arm(name: str, hook: Hook) -> None:
    with _guard:
        _armed.setdefault(name, []).append(hook)


def disarm(name: str, hook: Hook) -> None:
    with _guard:
        hooks = _armed.get(name, [])
        if hook in hooks:
            hooks.remove(hook)
        if not hooks:
            _armed.pop(name, None)


@contextmanager
def armed(name: str, hook: Hook) -> Iterator[Hook]:
    """Arm `hook` on failpoint `name` for the duration of the block."""
    arm(name, hook)
    try:
        yield hook
    finally:
        disarm(name, hook)


def armed_points() -> dict[str, int]:
    """Which points are armed, and with how many hooks (for tests that check they cleaned up)."""
    with _guard:
        return {name: len(hooks) for name, hooks in _armed.items()}


class FailpointTimeout(AssertionError):
    """A forced schedule did not happen: a thread never reached its point, or was never released."""


class Pause:
    """Stops the thread that reaches failpoint `name` until `release()`.

    `thread`: only a thread with that name stops (others pass through); `times`: how many arrivals
    stop before the pause lets everyone through. A paused thread that is never released fails with
    FailpointTimeout after `timeout` seconds rather than hanging the test run. Use as a context manager
    (arms on entry; on exit disarms and releases anyone still paused)."""

    def __init__(self, name: str, *, thread: str | None = None, times: int = 1, timeout: float = 30.0) -> None:
        self.name = name
        self.thread = thread
        self.remaining = times
        self.timeout = timeout
        self._arrived = threading.Event()
        self._released = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, name: str) -> None:
        if self.thread is not None and threading.current_thread().name != self.thread:
            return
        with self._lock:
            if self.remaining <= 0:
                return
            self.remaining -= 1
        self._arrived.set()
        if not self._released.wait(self.timeout):
            raise FailpointTimeout(f"{threading.current_thread().name} paused at {self.name!r} was never released")

    def wait_arrived(self, timeout: float | None = None) -> None:
        """Block until the thread has reached the point (it is now stopped there)."""
        if not self._arrived.wait(self.timeout if timeout is None else timeout):
            who = self.thread or "any thread"
            raise FailpointTimeout(f"{who} never reached failpoint {self.name!r}")

    @property
    def arrived(self) -> bool:
        return self._arrived.is_set()

    def release(self) -> None:
        self._released.set()

    def __enter__(self) -> Pause:
        arm(self.name, self)
        return self

    def __exit__(self, *exc: object) -> None:
        disarm(self.name, self)
        self.release()


class Raise:
    """Raises `exc` in the thread that reaches the point (a crash between two statements)."""

    def __init__(self, name: str, exc: BaseException, *, thread: str | None = None) -> None:
        self.name = name
        self.exc = exc
        self.thread = thread

    def __call__(self, name: str) -> None:
        if self.thread is None or threading.current_thread().name == self.thread:
            raise self.exc

    def __enter__(self) -> Raise:
        arm(self.name, self)
        return self

    def __exit__(self, *exc: object) -> None:
        disarm(self.name, self)
