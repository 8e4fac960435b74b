"""impl.testing.wait_for, the one polling wait of tests/ and properties/: it returns the condition's
truthy value, polls until then, and fails naming what it waited for, with the caller's error type."""

from __future__ import annotations

import itertools

import pytest

from impl.testing import wait_for


def test_returns_the_first_truthy_value_after_polling():
    values = iter([None, 0, "", {"id": 7}])
    assert wait_for(lambda: next(values), 5, "a row", interval=0) == {"id": 7}


def test_fails_after_the_timeout_naming_what_it_waited_for():
    calls = itertools.count()
    with pytest.raises(AssertionError, match=r"gave up after 0\.05s waiting for the LISTEN"):
        wait_for(lambda: next(calls) < 0, 0.05, "the LISTEN", interval=0.01)
    assert next(calls) > 1, "it polled more than once before giving up"


def test_raises_the_callers_error_type():
    class HarnessError(AssertionError):
        pass

    with pytest.raises(HarnessError, match="the slow job"):
        wait_for(lambda: False, 0, "the slow job", error=HarnessError)
