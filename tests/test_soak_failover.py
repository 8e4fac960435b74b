"""Failover of the soak's embedded cluster to a streaming standby (soak/faults/failover.py, issue 13), and the
network + failover nemesis in a reduced soak of the reference worker (soak/faults/netfaults.py).

CI runs: the focused asynchronous failover (committed work is lost and check D1 names it) and a 16 s
soak with partitions, stalls, a connection stall, SIGSTOP and synchronous failovers that must not be
invalid (D1 valid). BELAY_SOAK_TESTS=1 adds the asynchronous failover as a whole soak (exit 1, D1 invalid).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from impl.provision import ClusterConfig, EmbeddedCluster
from impl.store import PgStore
from impl.store.migrate import migrate
from impl.store.snapshot import snapshot
from model import ops
from model import worker_ops as w
from soak.faults.failover import Replication, primary_settings
from soak.faults.proxy import Proxy
from soak.judges.durability import check_durability
from soak.record.history import History, events_path, read_events

ROOT = Path(__file__).resolve().parents[1]


def _writer(url: str, stop: threading.Event, done: list[int]) -> None:
    """Enqueue, claim and ack jobs one at a time as fast as it can, shrugging off the failover."""
    store = PgStore(url, pool_size=1, notify=False, call_timeout=2.0)
    try:
        while not stop.is_set():
            try:
                now = datetime.now(UTC)
                [_job_id] = store.apply(ops.Enqueue(now, (ops.JobSpec("q", "k", {}),))).ids
                for job in store.apply(w.Claim(now, "q", "n1", 5)).jobs:
                    store.apply(w.Ack(datetime.now(UTC), job.id, job.attempt, w.Succeed({"ok": 1})))
                    done.append(job.id)
            except psycopg.Error:
                time.sleep(0.05)
    finally:
        store.close()


def _failover_once(mode: str):
    primary = EmbeddedCluster(ClusterConfig(extra_settings=primary_settings(mode))).start()
    proxy = Proxy("127.0.0.1", primary.port)
    history = History()
    rep = Replication(primary, proxy, history, mode, lag=1.0)
    try:
        with psycopg.connect(primary.url, autocommit=True) as c:
            migrate(c)
        rep.add_standby()
        url = proxy.url("w1", primary.url)
        stop, done = threading.Event(), []
        t = threading.Thread(target=_writer, args=(url, stop, done), daemon=True)
        t.start()
        deadline = time.monotonic() + 30
        while len(done) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(done) >= 20, "the writer made no progress before the failover"
        rep.failover(replace_standby=False)
        n = len(done)
        while len(done) < n + 5 and time.monotonic() < deadline + 30:  # it reconnects to the new primary
            time.sleep(0.05)
        stop.set()
        t.join(10)
        assert len(done) >= n + 5, "the writer did not resume on the promoted standby through the same address"
        with psycopg.connect(url, autocommit=True) as c:
            state = snapshot(c)
        return check_durability(state, history.snapshot()), history
    finally:
        proxy.close()
        rep.close()


def test_an_asynchronous_failover_loses_committed_work_and_d1_names_it():
    result, history = _failover_once("async")
    assert result.verdict == "invalid", result.to_json()
    assert any("was lost" in c for c in result.counterexamples)
    watched = next(e for e in history.snapshot() if e["type"] == "failover_watch")["jobs"]
    assert result.violations <= len(watched)


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("BELAY_SOAK_TESTS"),
    reason="set BELAY_SOAK_TESTS=1 (the sync soak below covers synchronous failover in CI)",
)
def test_a_synchronous_failover_loses_nothing():
    result, _ = _failover_once("sync")
    assert result.verdict == "valid", result.to_json()


def _soak(tmp_path: Path, *args: str) -> tuple[int, dict, list[dict]]:
    out = subprocess.run(
        [sys.executable, "-m", "soak.run", "--report", str(tmp_path), "--no-progress", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode != 3, out.stdout[-4000:] + out.stderr[-4000:]
    results = json.loads((tmp_path / "latest" / "results.json").read_text())
    history = list(read_events(events_path(tmp_path / "latest")))
    return out.returncode, results, history


def test_a_soak_with_partitions_stalls_and_synchronous_failovers_finds_no_violation(tmp_path):
    """Reduced form of the issue's acceptance run: the verdict may be `unknown` (20 s is too short to
    be sure of a cron minute) but never invalid, and D1 must be valid."""
    code, results, history = _soak(
        tmp_path,
        "--duration",
        "16",
        "--heal",
        "3",
        "--workers",
        "4",
        "--lease-ttl",
        "4",
        "--rate",
        "20",
        "--kill-every",
        "0",
        "--stop-every",
        "7",
        "--db-restart-every",
        "0",
        "--partition-every",
        "5",
        "--stall-every",
        "6",
        "--stall-conn-every",
        "8",
        "--failover-every",
        "8",
        "--replication",
        "sync",
        "--seed",
        "11",
    )
    kinds = Counter(e["type"] for e in history)
    assert kinds["net_partition"] >= 1 and kinds["net_stall"] >= 1 and kinds["failover_end"] >= 1, kinds
    assert code in (0, 2), results["invariants"]
    assert not [k for k, v in results["invariants"].items() if v["verdict"] == "invalid"], results["invariants"]
    assert results["invariants"]["D1"]["verdict"] == "valid", results["invariants"]["D1"]
    assert results["faults"]["failover"] >= 1 and results["faults"]["partition"] >= 1


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("BELAY_SOAK_TESTS"), reason="set BELAY_SOAK_TESTS=1 to run a ~1 min soak")
def test_a_soak_with_asynchronous_failovers_is_invalid_and_names_the_lost_work(tmp_path):
    code, results, _ = _soak(
        tmp_path,
        "--duration",
        "20",
        "--heal",
        "4",
        "--workers",
        "3",
        "--lease-ttl",
        "4",
        "--rate",
        "20",
        "--kill-every",
        "0",
        "--stop-every",
        "0",
        "--db-restart-every",
        "0",
        "--failover-every",
        "8",
        "--replication",
        "async",
        "--seed",
        "12",
    )
    assert code == 1
    d1 = results["invariants"]["D1"]
    assert d1["verdict"] == "invalid" and "was lost" in d1["first_counterexample"], d1
