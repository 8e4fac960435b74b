"""`belay worker --queues A` claims only from A (issue 29, item 1): a real `belay worker` subprocess
over a database with jobs and crons on two queues; and the node it configures runs exactly the named
queues, each with `--limit`.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from click.testing import CliRunner

from impl.client import Client
from impl.ops.cli import main
from impl.testing import wait_for

ROOT = Path(__file__).resolve().parent.parent


def _states(url: str) -> dict[str, list[tuple[str, str | None]]]:
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute("SELECT queue, state, cron_name FROM belay_jobs ORDER BY id").fetchall()
    out: dict[str, list[tuple[str, str | None]]] = {}
    for queue, state, cron in rows:
        out.setdefault(queue, []).append((state, cron))
    return out


def _cron_slots(url: str, name: str) -> list:
    with psycopg.connect(url, autocommit=True) as c:
        return [
            r[0] for r in c.execute("SELECT cron_slot FROM belay_jobs WHERE cron_name = %s ORDER BY cron_slot", (name,))
        ]


def test_belay_worker_queues_slow_claims_only_from_slow_and_fires_only_its_crons(db_url, tmp_path):
    with Client(db_url) as client:
        client.enqueue("slow", "slow_job")
        client.enqueue("fast", "fast_job")
        client.put_cron("tick_slow", "* * * * *", "slow_job", opts={"queue": "slow"})
        client.put_cron("tick_fast", "* * * * *", "fast_job", opts={"queue": "fast"})
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if k != "BELAY_QUEUES"}
    argv = [sys.executable, "-m", "impl.ops.cli", "worker", "--app", "tests.apps.queues_app", "--queues", "slow"]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*argv, "--database-url", db_url, "--limit", "3"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        try:
            # the enqueued slow job and the slow cron's job (its first sweep fires the last minute slot)
            wait_for(
                lambda: [s for s, _ in _states(db_url).get("slow", [])] == ["succeeded", "succeeded"],
                30,
                f"both slow jobs to succeed (log: {log})",
            )
            time.sleep(1.5)  # more claim rounds and sweeper passes: time enough to take 'fast' too
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    text = log.read_text()
    assert "running queues slow" in text, text
    states = _states(db_url)
    # the enqueued job, then one job per minute slot of the slow cron: its first sweep fires the last
    # slot, and a run that crosses a minute boundary fires the next one too (CI saw three jobs at
    # 20:25:58-20:26:00); each slot once, and consecutive
    assert states["slow"][0] == ("succeeded", None), text
    crons = states["slow"][1:]
    assert 1 <= len(crons) <= 2 and all(c == ("succeeded", "tick_slow") for c in crons), (states, text)
    slots = _cron_slots(db_url, "tick_slow")
    assert len(slots) == len(crons) == len(set(slots)), (slots, text)
    assert all((b - a).total_seconds() == 60 for a, b in itertools.pairwise(slots)), (slots, text)
    # the fast job untouched, and no job of the fast queue's cron
    assert states["fast"] == [("ready", None)], (states, text)


def test_the_node_belay_worker_configures_runs_exactly_the_named_queues_with_limit(db_url, monkeypatch):
    """Every queue the node runs has --limit (no unnamed queue with the default 10)."""
    import impl.runtime as runtime

    seen = {}

    class Stop(Exception):
        pass

    def capture(self, *args, **kwargs):
        seen["producers"] = {name: (p.opts.limit_min, p.opts.limit_max) for name, p in self.producers.items()}
        raise Stop

    monkeypatch.setattr(runtime.Worker, "start", capture)
    monkeypatch.setattr("impl.telemetry.attach_default_logger", lambda *a, **k: None)
    for queues, expected in (("slow", {"slow": (3, 3)}), (None, {"slow": (3, 3), "fast": (3, 3)})):
        seen.clear()
        args = ["--debug", "worker", "--app", "tests.apps.queues_app", "--database-url", db_url, "--limit", "3"]
        result = CliRunner().invoke(main, args + (["--queues", queues] if queues else []), env={"BELAY_QUEUES": None})
        assert isinstance(result.exception, Stop), result.output
        assert seen["producers"] == expected, (queues, seen)
