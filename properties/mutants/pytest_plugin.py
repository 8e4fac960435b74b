"""A pytest plugin the mutant runner loads in the mutated copy (`-p properties.mutants.pytest_plugin`).

* `--mutant-report PATH`: append one JSON line per failing test report (and per failed collection) to
  PATH, with the wall-clock instant it happened, so the runner knows which test killed the mutant and
  how long that took — independent of how pytest formats its summary or how long teardown takes.
* Registers the Hypothesis profile `mutants`: the state machine's `ci` profile (derandomized, same
  examples, same step counts) without the shrink and explain phases. Shrinking a counterexample makes it
  readable, not more or less detected; a kill matrix only needs the detection. Select it with
  BELAY_HYPOTHESIS_PROFILE=mutants (the runner does). The target phase stays: without it Hypothesis
  generates a different run from the same seed (issue 51 item 5: `ack_succeed_many` executed 76 times
  instead of the ci profile's ~560, below its statement-coverage floor, so every mutant that reached that
  gate was "killed" by it whatever it did). `MUTANTS_PHASES` is the one place that says which phases run;
  properties/test_mutants.py checks that the profile generates exactly what `ci` generates.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

_CONFIG: dict[str, Any] = {}


def _phases() -> tuple[Any, ...]:
    try:
        from hypothesis import Phase
    except ImportError:
        return ()
    return (Phase.explicit, Phase.reuse, Phase.generate, Phase.target)


# The ci profile's phases less shrink and explain (which only act once a test has failed).
MUTANTS_PHASES = _phases()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mutant-report", default=None, help="append failing test reports to this JSON-lines file")


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG["report"] = config.getoption("--mutant-report")


def _message(report: Any) -> str:
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:300]


def _record(nodeid: str, when: str, report: Any) -> None:
    path = _CONFIG.get("report")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"nodeid": nodeid, "when": when, "message": _message(report), "at": time.time()}) + "\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _record(report.nodeid, report.when, report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _record(report.nodeid, "collect", report)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Derive `mutants` from the `ci` profile once test_stateful.py (which registers it) is imported."""
    try:
        from hypothesis import settings
        from hypothesis.errors import InvalidArgument
    except ImportError:
        return
    try:
        base = settings.get_profile("ci")
    except InvalidArgument:
        return
    settings.register_profile("mutants", base, phases=MUTANTS_PHASES, database=None)
