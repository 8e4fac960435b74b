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
    if isinstance(exc, (errors.SerializationFailure, errors.DeadlockDetected, errors.AdminShutdown,
                        errors.CrashShutdown, errors.CannotConnectNow)):
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


def with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy = RetryPolicy(),
    *,
    what: str = "store operation",
    stop: threading.Event | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Call fn; on a transient fault back off and call it again, until it succeeds, a permanent fault
    is raised, `stop` is set, or faults have lasted longer than the policy allows."""
    started = clock()
    delay = policy.initial
    while True:
        try:
            return fn()
        except Exception as exc:  # classified below
            if not is_transient(exc):
                raise
            if clock() - started > policy.max_elapsed or (stop is not None and stop.is_set()):
                raise
            log.warning("belay transient fault during %s (%s: %s); retrying in %.2fs",
                        what, type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc) else "", delay)
            sleep(random.uniform(0, delay) if delay > policy.initial else delay)
            delay = min(delay * 2, policy.maximum)
