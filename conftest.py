"""Shared pytest fixtures: a PostgreSQL for the session and a fresh migrated database per test."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from impl.lifecycle import interrupt_on_signals
from impl.testing import TestDatabases, session_databases


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM/SIGHUP stop the run like Ctrl-C: session fixtures tear down the embedded cluster."""
    interrupt_on_signals()


# Which test was running when the process died (a segfault in an extension module kills pytest before it
# reports anything; its faulthandler traceback goes to stderr, this file names the test): scripts/test.sh
# prints it when pytest dies of a signal.
RUNNING = Path(os.environ.get("BELAY_TEST_RUNNING", Path(__file__).parent / "reports" / "pytest-running.txt"))


def _mark(text: str) -> None:
    try:
        RUNNING.parent.mkdir(parents=True, exist_ok=True)
        RUNNING.write_text(text + "\n")
    except OSError:
        pass


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    _mark(f"running {nodeid}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _mark(f"finished (exit {int(exitstatus)})")


@pytest.fixture(scope="session")
def databases() -> TestDatabases:
    dbs = session_databases()
    yield dbs
    dbs.close()


@pytest.fixture
def db_url(databases: TestDatabases) -> str:
    """A fresh database with migrations 1–4 applied."""
    with databases.fresh() as url:
        yield url


@pytest.fixture
def blank_db_url(databases: TestDatabases) -> str:
    """A fresh, empty database (no Belay schema)."""
    with databases.fresh(migrated=False) as url:
        yield url


@pytest.fixture
def conn(db_url: str) -> psycopg.Connection:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


@pytest.fixture
def store(db_url: str):
    from impl.store import PgStore

    with PgStore(db_url) as s:
        yield s


@pytest.fixture
def now() -> datetime:
    """A fixed instant: tests pass time explicitly, as the clock rule demands."""
    return datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
