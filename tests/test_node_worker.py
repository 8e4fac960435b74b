"""The foreign Node.js soak worker (soak/workers/node, issue 51 item 4), certified by a short soak with
every contract-legal alternative of BELAY_ALT switched on (soak/workers/node/README.md lists them).

Skipped when `node` is missing. When its `node_modules/` is absent the test runs `npm ci` there (CI runs
`npm ci --prefix soak/workers/node` beforehand); without npm it is skipped too, saying why.
BELAY_NODE_TEST_ALT (comma-separated, may be empty) replaces the list of switches, to certify one
alternative alone: `BELAY_NODE_TEST_ALT=iso_z .venv/bin/python -m pytest tests/test_node_worker.py`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.foreign_soak import soak_is_never_invalid

ROOT = Path(__file__).resolve().parents[1]
NODE_DIR = ROOT / "soak" / "workers" / "node"
WORKER = "soak/workers/node/belay-node-worker"
LEGAL_ALTS = [
    "split_spawn",
    "children_each",
    "iso_z",
    "reclaim_each",
    "cron_each",
    "clear_children_apart",
    "renew_per_queue",
    "claim_one",
]


def _node_worker_ready() -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the Node.js foreign worker cannot run")
    if (NODE_DIR / "node_modules" / "pg").is_dir():
        return
    if shutil.which("npm") is None:
        pytest.skip("soak/workers/node/node_modules is missing and npm is not installed to run `npm ci`")
    out = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


def test_the_worker_lists_exactly_the_shared_alternative_names():
    """The names are shared with the other helpers' trace validation: the worker must know each legal one
    (and the illegal probe) and refuse an unknown one rather than silently run the default shape."""
    _node_worker_ready()
    text = (NODE_DIR / "worker.js").read_text()
    for name in [*LEGAL_ALTS, "step_then_spend"]:
        assert f"'{name}'" in text, name
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    out = subprocess.run(
        ["node", str(NODE_DIR / "worker.js")],
        env={**os.environ, "BELAY_ALT": "split_spawn,no_such_alternative", "BELAY_DATABASE_URL": "postgresql://unused"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 64 and "no_such_alternative" in out.stderr, (out.returncode, out.stderr)


def _node_eval(script: str, alt: str = "") -> object:
    out = subprocess.run(
        ["node", "-e", f"const w = require('./worker.js'); console.log(JSON.stringify({script}));"],
        cwd=NODE_DIR,
        env={**os.environ, "BELAY_ALT": alt},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_the_default_timestamp_spelling_is_pythons_isoformat_and_iso_z_is_javascripts():
    """Trace validation compares a `$sleep:<name>` value with the model's string exactly (README "Gaps" 4):
    the default spelling must be Python's `isoformat()` of the same instant, including the form without a
    fraction when the microseconds are 0 (a soak met it once in ~100 sleeps)."""
    _node_worker_ready()
    instants = [
        datetime(2026, 12, 6, 21, 35, 13, 0, tzinfo=UTC),
        datetime(2026, 12, 6, 21, 35, 13, 490_000, tzinfo=UTC),
        datetime(2026, 12, 6, 21, 35, 13, 5_000, tzinfo=UTC),
    ]
    millis = [int(d.timestamp() * 1000) for d in instants]
    script = "[" + ",".join(f"w.iso(new Date({m}))" for m in millis) + "]"
    assert _node_eval(script) == [d.isoformat() for d in instants]
    assert _node_eval(script, alt="iso_z") == [
        d.isoformat(timespec="milliseconds").replace("+00:00", "Z") for d in instants
    ]
    back = _node_eval("[" + ",".join(f"w.parseIso({json.dumps(d.isoformat())}).getTime()" for d in instants) + "]")
    assert back == millis


def test_the_rate_window_rounds_halves_up_as_trace_validation_requires():
    """Contract §6 writes `round(count(w-period) * (1 - (epoch-w)/period))` without saying how halves round;
    trace validation refused claims admitted under half-to-even (README "Gaps" 3), so halves round up."""
    _node_worker_ready()
    assert _node_eval("[0, 0.49, 0.5, 1.5, 2.5, 2.4999].map(w.roundHalfUp)") == [0, 0, 1, 2, 3, 2]


def test_a_default_soak_of_the_node_worker_with_every_legal_alternative_is_never_invalid(tmp_path: Path):
    _node_worker_ready()
    alts = os.environ.get("BELAY_NODE_TEST_ALT", ",".join(LEGAL_ALTS))
    soak_is_never_invalid(WORKER, tmp_path, {**os.environ, "BELAY_ALT": alts}, label=alts)
