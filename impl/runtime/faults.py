"""Transient-fault classification and retry with backoff (BackWave's IStoreFaultClassifier idea).

A worker degrades and retries on faults that go away by themselves — a lost connection, a database
restarting or in recovery, a serialization failure, a deadlock victim — and does not retry forever
on anything else: a permanent error (a missing table, a syntax error, a constraint the contract says
cannot fail) propagates. `is_transient` never mistakes a permanent fault for a transient one: a false
positive would turn a fatal error into an endless retry.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import psycopg
from psycopg import errors
from psycopg_pool import PoolClosed, PoolTimeout

T = TypeVar("T")
log = logging.getLogger("belay.faults")

# SQLSTATE classes and codes that go away by themselves.
_TRANSIENT_CLASSES = ("08",)  # connection exceptions
_TRANSIENT_CODES = {
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "57P01",  # admin_shutdown (the server is shutting down or was killed)
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now (starting up, in recovery)
    "53300",  # too_many_connections
    "55P03",  # lock_not_available
}


def is_transient(exc: BaseException) -> bool:
    """True only for store faults worth degrading and retrying on."""
    if isinstance(exc, PoolClosed):
        return False  # our own shutdown, not the database's weather
    if isinstance(exc, PoolTimeout):
        return True
    if isinstance(
        exc,
        (
            errors.SerializationFailure,
            errors.DeadlockDetected,
            errors.AdminShutdown,
            errors.CrashShutdown,
            errors.CannotConnectNow,
        ),
    ):
        return True
    if isinstance(exc, psycopg.Error):
        code = getattr(exc, "sqlstate", None)
        if code is None:
            # No SQLSTATE: the client lost the server (connection refused, closed, reset).
            return isinstance(exc, psycopg.OperationalError)
        return code in _TRANSIENT_CODES or code[:2] in _TRANSIENT_CLASSES
    return False


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter; gives up after `max_elapsed` seconds of faults."""

    initial: float = 0.05
    maximum: float = 2.0
    max_elapsed: float = 120.0


def is_connectivity_loss(exc: BaseException) -> bool:
    """A transient fault that means "the database cannot be reached" (not a deadlock or a conflict)."""
    if isinstance(exc, PoolTimeout):
        return True
    if isinstance(exc, (errors.AdminShutdown, errors.CrashShutdown, errors.CannotConnectNow)):
        return True
    if isinstance(exc, psycopg.OperationalError):
        code = getattr(exc, "sqlstate", None)
        return code is None or code[:2] == "08"
    return False


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


class Connectivity:
    """A node's view of its database, logged once per change — lost, back — never once per retry.

    `fault()` is told of every connectivity fault a retry loop meets and `ok()` of every success;
    `down_for()` says how long the database has been unreachable (0 while it is reachable), which is
    what `belay worker --exit-on-unreachable` compares with its limit."""

    def __init__(self, logger: logging.Logger | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger or log
        self._clock = clock
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self.outages = 0

    def fault(self, what: str, exc: BaseException) -> None:
        with self._lock:
            if self.down_since is None:
                self.down_since = self._clock()
                self.outages += 1
                self._log.warning(
                    "belay database unreachable (during %s: %s); retrying with backoff", what, _short(exc)
                )
            else:
                self._log.debug("belay database still unreachable (during %s: %s)", what, _short(exc))

    def ok(self) -> None:
        if self.down_since is None:  # the hot path: no lock while the database is reachable
            return
        with self._lock:
            if self.down_since is not None:
                self._log.warning("belay database reachable again after %.1fs", self._clock() - self.down_since)
                self.down_since = None

    def down_for(self) -> float:
        since = self.down_since
        return 0.0 if since is None else self._clock() - since


def with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy = RetryPolicy(),
    *,
    what: str = "store operation",
    stop: threading.Event | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    connectivity: Connectivity | None = None,
) -> T:
    """Call fn; on a transient fault back off and call it again, until it succeeds, a permanent fault
    is raised, `stop` is set, or faults have lasted longer than the policy allows.

    With a `connectivity` tracker, losing the database is logged once per outage (by the tracker)
    instead of once per retry; other transient faults (deadlocks, serialization) log each retry."""
    started = clock()
    delay = policy.initial
    while True:
        try:
            result = fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            if clock() - started > policy.max_elapsed or (stop is not None and stop.is_set()):
                raise
            if connectivity is not None and is_connectivity_loss(exc):
                connectivity.fault(what, exc)
            else:
                log.warning(
                    "belay transient fault during %s (%s: %s); retrying in %.2fs",
                    what,
                    type(exc).__name__,
                    str(exc).strip().splitlines()[0] if str(exc) else "",
                    delay,
                )
            sleep(random.uniform(0, delay) if delay > policy.initial else delay)
            delay = min(delay * 2, policy.maximum)
        else:
            if connectivity is not None:
                connectivity.ok()
            return result
