"""The foreign Ruby soak worker (soak/workers/ruby, issue 51), written from the documents alone and certified
by a default-length soak (soak/workers/ruby/README.md says how it was written and which gaps the documents left).

Skipped, saying why, when `ruby` or its `pg` gem (Debian: ruby-pg) is missing — unless BELAY_REQUIRE_RUBY=1,
which CI sets after `apt-get install -y ruby ruby-pg`: then a missing toolchain fails the test instead."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.foreign_soak import soak_is_never_invalid, toolchain_ready

ROOT = Path(__file__).resolve().parents[1]
RUBY_DIR = ROOT / "soak" / "workers" / "ruby"
WORKER = "soak/workers/ruby/belay-ruby-worker"


def _ruby_ready() -> None:
    toolchain_ready(
        "BELAY_REQUIRE_RUBY",
        "ruby",
        [(["ruby", "-e", "require 'pg'"], "the Ruby pg gem is missing")],
        "apt-get install -y ruby ruby-pg",
    )


def _ruby_eval(expr: str) -> object:
    """Evaluate a Ruby expression with worker.rb loaded (its main does not run when required)."""
    script = f"require_relative 'worker'; puts JSON.generate({expr})"
    out = subprocess.run(
        ["ruby", "-e", script],
        cwd=RUBY_DIR,
        env={**os.environ, "BELAY_DATABASE_URL": "postgresql://unused", "BELAY_NODE": "t"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_the_launcher_runs_worker_rb_and_the_worker_parses():
    _ruby_ready()
    launcher = (RUBY_DIR / "belay-ruby-worker").read_text()
    assert 'exec ruby "$(dirname "$0")/worker.rb"' in launcher
    assert os.access(RUBY_DIR / "belay-ruby-worker", os.X_OK)
    out = subprocess.run(["ruby", "-c", str(RUBY_DIR / "worker.rb")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_cron_expressions_match_whole_utc_minutes():
    """Contract §8.5 / sdk-guide §3: five fields, ranges, steps, lists and names, evaluated in UTC."""
    _ruby_ready()
    got = _ruby_eval(
        "[['*/15 * * * *', Time.utc(2026,12,6,10,30)], ['*/15 * * * *', Time.utc(2026,12,6,10,31)], "
        "['0 9-17 * * MON-FRI', Time.utc(2026,12,7,9,0)], ['0 9-17 * * MON-FRI', Time.utc(2026,12,6,9,0)], "
        "['5,10 0 1 jan *', Time.utc(2027,1,1,0,10)]].map { |e, t| Cron.match?(Cron.parse(e), t) }"
    )
    assert got == [True, False, True, False, True]


def test_the_rate_window_rounds_halves_up():
    """Contract §6 `round(count(w-period) * …)` does not say how halves round; trace validation admits claims
    as the model does, which rounds halves up (tests/test_node_worker.py pins the same for the Node worker)."""
    _ruby_ready()
    assert _ruby_eval("[0, 0.49, 0.5, 1.5, 2.5, 2.4999].map { |x| Claimer.new.round_half_up(x) }") == [0, 0, 1, 2, 3, 2]


def test_a_default_soak_of_the_ruby_worker_is_never_invalid(tmp_path: Path):
    _ruby_ready()
    soak_is_never_invalid(WORKER, tmp_path)


def _own_committed_try(db_url: str, job_id: int, kind: str, tried: list[str]) -> str:
    script = (
        "require_relative 'worker'; job = Struct.new(:id, :attempt).new(ARGV[0].to_i, 1); "
        "puts JSON.generate([call('t', tries: 1) { |c| own_committed_try(c, job, ARGV[1].to_sym, ARGV[2..]) }])"
    )
    out = subprocess.run(
        ["ruby", "-e", script, str(job_id), kind, *tried],
        cwd=RUBY_DIR,
        env={**os.environ, "BELAY_DATABASE_URL": db_url, "BELAY_NODE": "t"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])[0]


def test_a_retried_ack_claims_only_its_own_committed_try(db_url: str):
    """A retried ack whose fence matched nothing reports its own earlier try as applied only by that try's marks
    on the row. Regression: the network-fault soak 20261207T001654Z-96a5 was INVALID on I2 when the worker took a
    row that a reclaim had failed at the same attempt (state alone) for its own applied ack."""
    import psycopg

    _ruby_ready()
    t1, t2, other = "2026-12-07T00:00:01.000001Z", "2026-12-07T00:00:02.000002Z", "2026-12-07T00:00:09.000009Z"
    with psycopg.connect(db_url, autocommit=True) as c:

        def row(state: str, finished: str, errors: list[dict]) -> int:
            got = c.execute(
                "INSERT INTO belay_jobs (queue, worker, state, attempt, max_attempts, inserted_at, finished_at, errors) "
                "VALUES ('soak', 'slow', %s, 1, 1, %s, %s, %s::jsonb) RETURNING id",
                (state, finished, finished, json.dumps(errors)),
            ).fetchone()
            assert got is not None
            return int(got[0])

        reclaimed = row("failed", other, [{"attempt": 1, "at": other, "error": "lease_expired", "detail": None}])
        failed_by_us = row("failed", t1, [{"attempt": 1, "at": t1, "error": "budget_exceeded", "detail": None}])
        cancelled_by_us = row("cancelled", t2, [])
    for kind in ("succeed", "fail", "retry", "cancel"):
        assert _own_committed_try(db_url, reclaimed, kind, [t1, t2]) == "stale", kind
    assert _own_committed_try(db_url, failed_by_us, "fail", [t1, t2]) == "failed"
    assert _own_committed_try(db_url, failed_by_us, "fail", [t2]) == "stale"
    assert _own_committed_try(db_url, cancelled_by_us, "cancel", [t1, t2]) == "cancelled"
    assert _own_committed_try(db_url, cancelled_by_us, "cancel", [t1]) == "stale"
