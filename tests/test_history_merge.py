"""soak/hook.merge: the committed-history verdict of a soak is the trace validation's, made
invalid by a finding of the rule replay — valid only when both are (issue 30)."""

from __future__ import annotations

import pytest

from soak.hook import combine_exit, merge
from soak.judges.refine import RefinementResult
from soak.judges.replay import HistoryResult


@pytest.mark.parametrize(
    ("rules", "refinement", "verdict"),
    [
        ("valid", "valid", "valid"),
        ("valid", "invalid", "invalid"),  # a transaction no model operation explains: no rule needed
        ("invalid", "valid", "invalid"),
        ("valid", "unknown", "unknown"),  # e.g. a gap: never valid
        ("unknown", "valid", "unknown"),
        ("unknown", "invalid", "invalid"),
    ],
)
def test_verdicts(rules, refinement, verdict):
    h = merge(HistoryResult(rules), RefinementResult(refinement, why="because", transactions=3, validated=2))
    assert h.verdict == verdict
    assert h.rules_verdict == rules
    assert h.refinement is not None and h.refinement["verdict"] == refinement
    assert f"trace validation {refinement}" in h.line()
    assert "2 of 3 transactions explained" in h.line()


def test_an_invalid_refinement_fails_a_run_the_checks_passed():
    h = merge(HistoryResult("valid"), RefinementResult("invalid", why="1 transaction(s) no operation explains"))
    assert combine_exit(0, h) == 1 and combine_exit(2, h) == 1
    assert "no operation explains" in h.line()
    ok = merge(HistoryResult("valid"), RefinementResult("valid"))
    assert combine_exit(0, ok) == 0 and combine_exit(2, ok) == 2
