"""The soak report states the verdict the exit code states (issue 51).

A run whose invariants, duties and coverage are VALID but whose committed history (trace validation)
is INVALID exits 1; results.json (`verdict`, `exit_code`), summary.md's heading and report.html's
heading must all say INVALID. The report used to be written before the history's verdict was folded
in, and said VALID. Pure: a hand-built run (tests/test_soak_checker.py's baseline), no database.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from model.state import from_rows
from soak.hook import HistoryCheck, final_verdict
from soak.judges.refine import RefinementResult
from soak.judges.replay import HistoryResult
from soak.run import write_artifacts
from tests.test_soak_checker import baseline

META = {
    "run_id": "r51",
    "worker": "soak/reference-worker",
    "workers": 2,
    "lease_ttl": 10,
    "seed": 1,
    "duration": 60,
    "heal": 10,
    "database": "embedded",
    "db_faults": "enabled",
}


def _run(tmp_path: Path, checks: str, history: HistoryResult | None) -> tuple[Path, dict, int]:
    r = baseline()
    result = replace(r.check(), verdict=checks)  # what the invariants, duties and coverage concluded
    state = from_rows(r.jobs.values(), r.steps, r.events, r.signals)
    run_dir = tmp_path / "r51"
    (run_dir / "workers").mkdir(parents=True)
    hist = HistoryCheck("postgresql://unused", run_dir, None, None)
    hist.result = history
    results, code = write_artifacts(run_dir, result, state, r.history, dict(META), hist, history)
    return run_dir, results, code


def _stated(run_dir: Path) -> tuple[str, int, str, str]:
    data = json.loads((run_dir / "results.json").read_text())
    summary = (run_dir / "summary.md").read_text().splitlines()[0]
    h1 = re.search(r"<h1>(.*?)</h1>", (run_dir / "report.html").read_text()).group(1)
    return data["verdict"], data["exit_code"], summary, h1


def _invalid_history() -> HistoryResult:
    from soak.hook import merge

    return merge(HistoryResult("valid"), RefinementResult("invalid", why="1 transaction(s) no operation explains"))


@pytest.mark.parametrize("checks", ["valid", "unknown"])
def test_a_run_the_committed_history_makes_invalid_is_reported_invalid_in_every_file(tmp_path, checks):
    run_dir, results, code = _run(tmp_path, checks, _invalid_history())
    assert code == 1
    verdict, exit_code, summary, h1 = _stated(run_dir)
    assert (verdict, exit_code) == ("invalid", 1), (verdict, exit_code)
    assert results["verdict"] == "invalid" and results["checks_verdict"] == checks
    assert "**INVALID** (exit 1)" in summary and "VALID**" not in summary.replace("INVALID**", ""), summary
    assert h1.endswith("INVALID (exit 1)"), h1
    # the history's own section is still added (results.json keeps it)
    assert json.loads((run_dir / "results.json").read_text())["history"]["verdict"] == "invalid"


@pytest.mark.parametrize(
    ("checks", "history", "want"),
    [
        ("valid", HistoryResult("valid"), ("valid", 0)),
        ("valid", HistoryResult("unknown"), ("valid", 0)),  # combine_exit: only an invalid history decides
        ("unknown", HistoryResult("valid"), ("unknown", 2)),
        ("invalid", HistoryResult("valid"), ("invalid", 1)),
        ("valid", None, ("valid", 0)),
    ],
)
def test_every_file_states_the_exit_codes_verdict(tmp_path, checks, history, want):
    run_dir, _results, code = _run(tmp_path, checks, history)
    assert code == want[1] and final_verdict(checks, history) == want
    verdict, exit_code, summary, h1 = _stated(run_dir)
    assert (verdict, exit_code) == want
    assert f"**{want[0].upper()}** (exit {want[1]})" in summary
    assert h1.endswith(f": {want[0].upper()} (exit {want[1]})"), h1
