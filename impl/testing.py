"""Test support shared by tests/ and properties/: one provisioned PostgreSQL per test session, a
template database migrated once, and a fresh clone of it for every test (never shared state).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from impl.provision import Provisioned, TemplateDatabases, provision
from impl.store.migrate import migrate

log = logging.getLogger(__name__)


class TestDatabases:
    """A provisioned server plus a migrated template; `fresh()` hands out throwaway clones."""

    def __init__(self, provisioned: Provisioned) -> None:
        self.provisioned = provisioned
        self.templates = TemplateDatabases(provisioned.url)
        self.template = f"belay_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.templates.create_template(self.template, lambda conn: migrate(conn))
        self.blank = f"belay_blank_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.templates.create_template(self.blank, lambda conn: None)

    @contextmanager
    def fresh(self, *, migrated: bool = True) -> Iterator[str]:
        """A new database (migrated, or empty) for one test; dropped afterwards."""
        url = self.templates.clone(self.template if migrated else self.blank)
        name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        try:
            yield url
        finally:
            self.templates.drop(name)

    def close(self) -> None:
        for name in (self.template, self.blank):
            try:
                self.templates.drop(name)
            except (psycopg.Error, OSError) as exc:  # best effort at teardown, but never silently
                log.warning("could not drop template database %s: %s", name, exc)
        self.provisioned.close()


def session_databases() -> TestDatabases:
    """Provision in the README's order (BELAY_DATABASE_URL, Docker, embedded) — reads the env."""
    return TestDatabases(provision())


def wait_for(
    condition: Callable[[], Any],
    timeout: float,
    what: str = "the condition",
    *,
    interval: float = 0.02,
    error: type[Exception] = AssertionError,
) -> Any:
    """Poll `condition` until it returns something truthy, and return that; raise `error` naming `what`
    after `timeout` seconds. The one wait of tests/ and properties/ (issue 55: it had eight copies)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"gave up after {timeout}s waiting for {what}")
        time.sleep(interval)
