"""The broken-worker catalogue (soak/broken/) and the harness's handling of a worker that cannot stay up.

Fast, in CI: the catalogue's shape, `--worker /bin/false` ending INVALID within a minute with a clear
message, and the CI subset of variants (`fast=True`) each caught with its expected row. The full matrix
is `python -m soak.broken` (~20 min; set BELAY_SOAK_TESTS=1 to run it here)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from soak.broken import VARIANTS

ROOT = Path(__file__).resolve().parents[1]
ROWS = {f"I{i}" for i in range(1, 10)} | {f"P{i}" for i in range(1, 11)}


def test_the_catalogue_has_at_least_16_variants_each_expecting_a_known_row_and_importable():
    assert len(VARIANTS) >= 16
    for name, v in VARIANTS.items():
        assert set(v.expects) <= ROWS and v.expects, name
        module = importlib.import_module(f"soak.broken.{name}")
        assert module.__doc__ and "Expected verdict: invalid" in module.__doc__, name


def soak(tmp_path: Path, worker: str, *options: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "soak.run", "--worker", worker, "--report", str(tmp_path), "--no-progress", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    results = tmp_path / "latest" / "results.json"
    assert results.exists(), out.stdout[-3000:] + out.stderr[-3000:]
    return out, json.loads(results.read_text())


def test_a_worker_that_cannot_stay_up_ends_the_run_invalid_within_a_minute(tmp_path: Path):
    t0 = time.monotonic()
    out, results = soak(tmp_path, "/bin/false", "--duration", "60", "--seed", "3")
    assert time.monotonic() - t0 < 60
    assert out.returncode == 1 and results["verdict"] == "invalid"
    assert "could not stay up" in results["duties"]["P1"]["first_counterexample"]
    assert "could not stay up" in out.stdout
    assert len(list((tmp_path / "latest" / "workers").glob("*.log"))) < 40  # backoff, not thousands of restarts


FAST = {
    "exits_on_db_loss": (
        "--duration",
        "14",
        "--db-restart-every",
        "4",
        "--kill-every",
        "0",
        "--stop-every",
        "0",
        "--term-every",
        "0",
        "--heal",
        "2",
        "--drain-timeout",
        "10",
    )
}


@pytest.mark.parametrize("name", sorted(FAST))
def test_a_fast_broken_variant_is_caught_with_its_row(tmp_path: Path, name: str):
    out, results = soak(tmp_path, f'"$BELAY_SOAK_PYTHON" -m soak.broken.{name}', *FAST[name], "--seed", "5")
    rows = {**results["invariants"], **results["duties"]}
    invalid = {k for k, v in rows.items() if v["verdict"] == "invalid"}
    assert results["verdict"] == "invalid" and invalid & set(VARIANTS[name].expects), (invalid, out.stdout[-3000:])


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("BELAY_SOAK_TESTS"), reason="set BELAY_SOAK_TESTS=1 to run the ~20 min matrix")
def test_every_broken_variant_is_caught(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-m", "soak.broken", "--report", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert out.returncode == 0, out.stdout
