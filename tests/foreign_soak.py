"""One default soak of a foreign worker and the rule its CI test holds it to (issue 51): never INVALID, the
committed history valid, and UNKNOWN only for a row whose risky scenario did not occur in the minute (the
run's luck, not the worker's). Shared by tests/test_node_worker.py, tests/test_ruby_worker.py and tests/test_perl_worker.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def toolchain_ready(flag: str, program: str, probes: Sequence[tuple[list[str], str]], install: str) -> None:
    """Skip, saying why, when `program` is not on PATH or a probe command fails — unless the environment sets
    `flag`=1 (CI does, after installing the toolchain): then a missing toolchain fails the test instead."""
    import pytest

    def missing(why: str) -> None:
        if os.environ.get(flag) == "1":
            pytest.fail(f"{flag}=1 but {why}")
        pytest.skip(why)

    if shutil.which(program) is None:
        missing(f"{program} is not installed ({install}): the foreign worker cannot run")
    for argv, what in probes:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            missing(f"{what} ({install}): {out.stderr.strip()[-300:]}")


def soak_is_never_invalid(worker: str, report: Path, env: Mapping[str, str] | None = None, label: Any = None) -> dict:
    """Soak `worker` (seed 51, the default settings) into `report`, assert the rule, return results.json."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "soak.run",
            "--worker",
            worker,
            "--report",
            str(report),
            "--seed",
            "51",
            "--no-progress",
        ],
        cwd=ROOT,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode != 3, out.stdout[-4000:] + out.stderr[-4000:]
    results = json.loads((report / "latest" / "results.json").read_text())
    rows = {**results["invariants"], **results["duties"]}
    invalid = {k: v.get("first_counterexample") for k, v in rows.items() if v["verdict"] == "invalid"}
    assert not invalid, (label, invalid)
    unknown = {k: v.get("why_unknown") or "" for k, v in rows.items() if v["verdict"] == "unknown"}
    not_coverage = {k: why for k, why in unknown.items() if "did not occur" not in why}
    assert not not_coverage, (label, not_coverage)
    if unknown:
        print(f"coverage left unknown in this run (scenarios that did not occur): {sorted(unknown)}")
    history = results.get("history") or {}
    refinement = history.get("refinement") or {}
    assert history.get("verdict") == "valid", (
        label,
        history.get("why"),
        refinement.get("unexplained"),
        (refinement.get("findings") or [])[:3],
    )
    expected = ("unknown", 2) if unknown else ("valid", 0)
    assert (results["verdict"], out.returncode) == expected, out.stdout[-4000:]
    return results
