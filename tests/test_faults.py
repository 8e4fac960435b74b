"""Transient-fault classification and retry with backoff (impl/runtime/faults.py).

Faults are real where that is cheap: errors raised by the server with the SQLSTATE in question, a
backend terminated under its client, a port nobody listens on. `with_retries` runs on an injected
clock and sleep, so its backoff and give-up arithmetic is checked exactly and without waiting.
"""

from __future__ import annotations

import socket
import threading

import psycopg
import pytest
from psycopg import errors
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from impl.runtime.faults import RetryPolicy, is_transient, with_retries
from model.ops import InvalidInput


def raised(conn: psycopg.Connection, statement: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(statement)
    return info.value


def server_error(conn: psycopg.Connection, sqlstate: str) -> psycopg.Error:
    """The error the server sends for `sqlstate`, raised by the server itself."""
    return raised(conn, f"DO $$ BEGIN RAISE EXCEPTION 'fault %' , '{sqlstate}' USING ERRCODE = '{sqlstate}'; END $$")


# --- is_transient ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sqlstate, cls",
    [
        ("40001", errors.SerializationFailure),
        ("40P01", errors.DeadlockDetected),
        ("57P01", errors.AdminShutdown),
        ("57P02", errors.CrashShutdown),
        ("57P03", errors.CannotConnectNow),
        ("08006", errors.ConnectionFailure),
        ("53300", errors.TooManyConnections),
    ],
)
def test_faults_that_go_away_by_themselves_are_transient(conn, sqlstate, cls):
    exc = server_error(conn, sqlstate)
    assert isinstance(exc, cls) and exc.sqlstate == sqlstate
    assert is_transient(exc)


@pytest.mark.parametrize(
    "statement, cls",
    [
        ("SELECT * FROM no_such_table", errors.UndefinedTable),
        ("SELEC 1", errors.SyntaxError),
        ("SELECT 1 / 0", errors.DivisionByZero),
    ],
)
def test_permanent_server_errors_are_not_transient(conn, statement, cls):
    exc = raised(conn, statement)
    assert isinstance(exc, cls)
    assert not is_transient(exc)


def test_a_unique_violation_is_not_transient(conn):
    conn.execute("CREATE TEMP TABLE t (id int PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES (1)")
    exc = raised(conn, "INSERT INTO t VALUES (1)")
    assert isinstance(exc, errors.UniqueViolation)
    assert not is_transient(exc)


def test_a_real_serialization_failure_is_transient(db_url):
    with psycopg.connect(db_url, autocommit=True) as a, psycopg.connect(db_url, autocommit=True) as b:
        a.execute("CREATE TABLE counter (id int PRIMARY KEY, n int)")
        a.execute("INSERT INTO counter VALUES (1, 0)")
        with pytest.raises(errors.SerializationFailure) as info:
            with a.transaction():
                a.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                a.execute("SELECT n FROM counter WHERE id = 1")
                b.execute("UPDATE counter SET n = n + 1 WHERE id = 1")
                a.execute("UPDATE counter SET n = n + 1 WHERE id = 1")
        assert is_transient(info.value)


def test_a_connection_lost_under_its_client_is_transient(db_url):
    with psycopg.connect(db_url, autocommit=True) as admin, psycopg.connect(db_url, autocommit=True) as victim:
        admin.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
        lost = raised(victim, "SELECT 1")  # admin_shutdown, or the socket closed under the client
        assert isinstance(lost, psycopg.OperationalError)
        assert is_transient(lost)
        closed = raised(victim, "SELECT 1")  # "the connection is closed"
        assert isinstance(closed, psycopg.OperationalError) and closed.sqlstate is None
        assert is_transient(closed)


def test_a_server_that_cannot_be_reached_is_transient():
    with socket.socket() as s:  # a port that was free a moment ago: nobody listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", connect_timeout=2)
    assert is_transient(info.value)


def test_a_pool_timeout_is_transient():
    assert is_transient(PoolTimeout("couldn't get a connection after 30.00 sec"))


@pytest.mark.parametrize("exc", [ValueError("bad"), InvalidInput("bad input"), RuntimeError("bug"), KeyError("k")])
def test_errors_that_are_not_store_faults_are_not_transient(exc):
    assert not is_transient(exc)


def test_a_closed_pool_is_not_transient(db_url):
    pool = ConnectionPool(db_url, min_size=1, max_size=1, open=True)
    pool.close()
    with pytest.raises(PoolClosed) as info:
        with pool.connection():
            pass
    assert not is_transient(info.value)


# --- with_retries ----------------------------------------------------------------------------------


class FakeTime:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def failing(faults: list[BaseException], result: object = "ok"):
    """A callable that raises each of `faults` in turn, then returns `result`; counts its calls."""
    calls = []

    def fn() -> object:
        calls.append(len(calls))
        if len(calls) <= len(faults):
            raise faults[len(calls) - 1]
        return result

    return fn, calls


POLICY = RetryPolicy(initial=0.05, maximum=0.4, max_elapsed=5.0)


def test_transient_faults_are_retried_with_capped_exponential_backoff_until_success():
    t = FakeTime()
    faults = [errors.SerializationFailure("conflict")] * 3 + [errors.AdminShutdown("restart")] * 4
    fn, calls = failing(faults, result=42)

    assert with_retries(fn, POLICY, sleep=t.sleep, clock=t.clock) == 42
    assert len(calls) == 8 and len(t.sleeps) == 7
    assert t.sleeps[0] == POLICY.initial, "the first retry waits the initial delay"
    caps = [min(POLICY.initial * 2**i, POLICY.maximum) for i in range(len(t.sleeps))]
    assert all(0 <= slept <= cap for slept, cap in zip(t.sleeps, caps, strict=True)), (t.sleeps, caps)


def test_retries_give_up_after_max_elapsed_and_raise_the_last_fault():
    t = FakeTime()
    last = []

    def fn() -> None:
        last.append(errors.CannotConnectNow(f"starting up #{len(last)}"))
        raise last[-1]

    with pytest.raises(errors.CannotConnectNow) as info:
        with_retries(fn, POLICY, sleep=t.sleep, clock=t.clock)
    assert info.value is last[-1]
    elapsed = t.now - 1000.0
    assert POLICY.max_elapsed < elapsed <= POLICY.max_elapsed + POLICY.maximum
    assert len(last) > 2


def test_permanent_faults_are_raised_at_once_without_sleeping():
    for fault in (errors.UndefinedTable("no such table"), errors.UniqueViolation("dup"), ValueError("bad")):
        t = FakeTime()
        fn, calls = failing([fault])
        with pytest.raises(type(fault)) as info:
            with_retries(fn, POLICY, sleep=t.sleep, clock=t.clock)
        assert info.value is fault
        assert (len(calls), t.sleeps) == (1, [])


def test_a_set_stop_event_ends_retrying_at_the_next_fault():
    t = FakeTime()
    stop = threading.Event()
    stop.set()
    fn, calls = failing([errors.SerializationFailure("conflict")] * 5)
    with pytest.raises(errors.SerializationFailure):
        with_retries(fn, POLICY, stop=stop, sleep=t.sleep, clock=t.clock)
    assert (len(calls), t.sleeps) == (1, [])
