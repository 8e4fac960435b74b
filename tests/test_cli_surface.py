"""The CLI's surface (issue 53): `--app` loads a module from the working directory as celery, rq and
uvicorn do; ports are range-checked as usage errors; every failure line starts `belay: error:`; usage
errors (an empty signal scope or name among them) exit 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from impl.ops.cli import main

ROOT = Path(__file__).resolve().parents[1]
OPSAPP = """
from impl.worker import Registry

registry = Registry()


@registry.kind("opsapp.hello", queue="opsapp")
def hello(ctx):
    return "hi"
"""


def belay(*args: str, db_url: str | None = None):
    env = {"BELAY_DATABASE_URL": db_url} if db_url else {}
    return CliRunner().invoke(main, list(args), env=env)


def test_worker_app_loads_a_module_from_the_working_directory(db_url, tmp_path):
    """As installed (`belay` is a console script: the working directory is not on sys.path; `python -P`
    reproduces that), run from the folder holding opsapp.py."""
    (tmp_path / "opsapp.py").write_text(OPSAPP)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "impl.ops.cli", "worker", "--app", "opsapp", "--database-url", db_url],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        seen = ""
        while time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            seen += line
            if "running queues" in line:
                break
        assert "running queues" in seen and "opsapp" in seen, seen
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=60)[0]
    assert "No module named" not in seen + rest


@pytest.mark.parametrize(
    "args",
    [
        ("dashboard", "--port", "99999"),
        ("dashboard", "--port", "-1"),
        ("serve", "--port", "65536"),
        ("worker", "--app", "tests.apps.runtime_app", "--metrics-port", "70001"),
        ("db", "--port", "99999"),
    ],
    ids=lambda a: "-".join(a[:1] + a[-2:]),
)
def test_a_port_out_of_range_is_a_usage_error(args, db_url):
    """A subprocess with a timeout: before the fix the dashboard and the server announced the port and
    went on serving elsewhere (this call would hang)."""
    r = subprocess.run(
        [sys.executable, "-m", "impl.ops.cli", *args],
        cwd=ROOT,
        env={**os.environ, "BELAY_DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "65535" in r.stderr and "Traceback" not in r.stderr and "OverflowError" not in r.stderr


def test_every_failure_line_starts_belay_error(db_url):
    for args in (("jobs", "show", "999999"), ("retry", "999999"), ("cancel", "999999")):
        r = belay(*args, db_url=db_url)
        assert r.exit_code == 1, (args, r.output)
        assert r.stderr.startswith("belay: error: "), (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("scope,name", [("", "paid"), ("orders", ""), ("  ", "paid")])
def test_an_empty_signal_scope_or_name_is_a_usage_error(db_url, scope, name):
    r = belay("signal", scope, name, db_url=db_url)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and ("scope" in r.output or "name" in r.output)


def test_a_replay_without_the_app_says_it_could_not_judge_rather_than_unclean(db_url):
    """`belay replay --json` and the MCP tool replay_dry_run share Replay.to_json: without --app nothing
    was re-executed, so `clean` is null (unknown), not false (a divergence)."""
    from datetime import UTC, datetime

    from impl.ops.replay import dry_run
    from impl.store import PgStore
    from model import ops

    with PgStore(db_url) as store:
        [job] = store.apply(ops.Enqueue(datetime.now(UTC), (ops.JobSpec("q", "k"),))).outcomes
    report = dry_run(db_url, job.id, None).to_json()
    assert (report["executed"], report["clean"]) == (False, None)
    assert any("--app" in n for n in report["notes"]), report["notes"]
    r = belay("replay", str(job.id), "--json", db_url=db_url)
    assert r.exit_code == 0 and '"clean": null' in r.output, r.output


def test_a_queue_named_with_a_newline_is_one_row_told_apart_from_one_with_a_space(db_url):
    from datetime import UTC, datetime

    from impl.store import PgStore
    from model import ops

    now = datetime.now(UTC)
    with PgStore(db_url) as store:
        store.apply(ops.Enqueue(now, (ops.JobSpec("a\nb", "k"), ops.JobSpec("a b", "k"), ops.JobSpec("[red]x", "k"))))
    r = belay("stats", db_url=db_url)
    assert r.exit_code == 0, r.output
    rows = [line for line in r.output.splitlines() if "│" in line and ("a" in line or "x" in line)]
    assert len(rows) == 3, r.output  # three queues, one line each
    assert any('"a\\nb"' in line for line in rows) and any("│ a b " in line for line in rows), r.output
    assert any("[red]x" in line for line in rows), r.output  # a name is never read as rich markup
