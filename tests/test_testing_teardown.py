"""impl.testing's session teardown (issue 21: a blind `except Exception: pass` found by ruff S110/BLE001).

Dropping the template databases at the end of a session is best effort, but a failure must be visible:
it used to be swallowed silently (a leaked template, a broken server, even a typo in the drop code),
and a programming error must still surface rather than be caught at all."""

from __future__ import annotations

import logging

import psycopg
import pytest

from impl import testing


class _Templates:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error
        self.dropped: list[str] = []

    def drop(self, name: str) -> None:
        if self.error is not None:
            raise self.error
        self.dropped.append(name)


class _Provisioned:
    closed = False

    def close(self) -> None:
        self.closed = True


def _databases(error: BaseException | None) -> testing.TestDatabases:
    dbs = testing.TestDatabases.__new__(testing.TestDatabases)  # no server: only close() is under test
    dbs.templates = _Templates(error)  # a stand-in for TemplateDatabases
    dbs.provisioned = _Provisioned()  # a stand-in for Provisioned
    dbs.template, dbs.blank = "belay_tpl_x", "belay_blank_x"
    return dbs


def test_a_template_that_cannot_be_dropped_is_reported_and_the_server_still_closes(caplog):
    dbs = _databases(psycopg.OperationalError("server closed the connection"))
    with caplog.at_level(logging.WARNING, logger="impl.testing"):
        dbs.close()
    assert dbs.provisioned.closed
    assert "could not drop template database belay_tpl_x" in caplog.text
    assert "could not drop template database belay_blank_x" in caplog.text


def test_a_programming_error_in_teardown_is_not_swallowed():
    dbs = _databases(AttributeError("no such attribute"))
    with pytest.raises(AttributeError):
        dbs.close()


def test_teardown_drops_both_templates_then_closes_the_server():
    dbs = _databases(None)
    dbs.close()
    assert dbs.templates.dropped == ["belay_tpl_x", "belay_blank_x"]
    assert dbs.provisioned.closed
