"""The upstream Go client (clients/go of cornelmarck/durable-execution) against `belay serve`: the
program tests/upstream/go/main.go calls every exported method of *client.Client (it checks that by
reflection) and what each answer means; every answer it received is then validated here against the
OpenAPI (upstream_support.SpecChecker).

    BELAY_UPSTREAM=/work/upstream/checkout .venv/bin/pytest tests/upstream/test_upstream_go.py -q

Built offline (GOPROXY=off, GOTOOLCHAIN=local): the client needs only the standard library and the
upstream module's api/v1 types, reached through a `replace` to $BELAY_UPSTREAM. Skipped, with the
reason, when $BELAY_UPSTREAM is unset or no `go` is on PATH (Debian: apt-get install golang-go).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from upstream_support import SpecChecker, belay_serve, upstream_dir

HERE = Path(__file__).resolve().parent / "go"
UPSTREAM, WHY = upstream_dir("clients/go/client.go", "api/v1/task.go")
GO = shutil.which("go")
pytestmark = [
    pytest.mark.skipif(UPSTREAM is None, reason=WHY),
    pytest.mark.skipif(GO is None, reason="no go toolchain on PATH (apt-get install golang-go)"),
]


def build(tmp: Path) -> Path:
    assert UPSTREAM is not None and GO is not None
    src = tmp / "src"
    src.mkdir()
    for name in ("main.go", "go.mod"):
        shutil.copy(HERE / name, src / name)
    env = {**os.environ, "GOPROXY": "off", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "GOWORK": "off"}
    module = "github.com/cornelmarck/durable-execution"
    subprocess.run([GO, "mod", "edit", f"-replace={module}={UPSTREAM}"], cwd=src, env=env, check=True)
    out = tmp / "upstreamgo"
    done = subprocess.run([GO, "build", "-o", str(out), "."], cwd=src, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_every_method_of_the_go_client(db_url: str, tmp_path: Path) -> None:
    binary = build(tmp_path)
    answers = tmp_path / "answers.jsonl"
    with belay_serve(db_url) as base:
        run = subprocess.run([str(binary), base, str(answers)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.rstrip().endswith("ok"), run.stdout + run.stderr
    checker = SpecChecker()
    for line in answers.read_text().splitlines():
        a = json.loads(line)
        checker.check(a["method"], a["path"], a["status"], a["body"].encode())
    checker.assert_clean()
    every = {op["operationId"] for _, _, op in checker.routes}
    assert {op for op, _ in checker.seen} == every
    assert "methods 17 called 17" in run.stdout, run.stdout
