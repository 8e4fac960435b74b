"""How the cost per job grows with the backlog and the fleet (issue 54): bench.peers's fair method, swept.

    .venv/bin/python -m bench.scale [--backlog 10000,100000,1000000] [--fleet 1,2,4,8] [--fleet-jobs 20000]
        [--fleet-queues 1,8] [--rounds 1] [--systems belay,belay-batched,pgqueuer] [--out reports/scale-<ts>/]
    .venv/bin/python -m bench.scale --quick --out /tmp/x     # a CI smoke run: tiny backlogs, 1 and 2 processes

Every measurement is one round of bench.peers's method (bench/peers.py): a fresh database per system per
round on the one embedded PostgreSQL the bench provisions, the system's own schema and its own batch
enqueue, ANALYZE + CHECKPOINT, then the drain observed from the bench's process only — the clock runs
from starting the worker process(es) until SQL on the system's own tables shows all N finished; CPU is
/proc's user + system time of the worker processes and of the PostgreSQL backends serving the database.
Rounds are interleaved (the systems' order alternates) so a noisy neighbour hurts every system alike.

Two sweeps:

  backlog   N = each --backlog value, ONE worker process per system: drain rate, CPU µs per job, and
            buffers — the deterministic-ish figure machine load does not move:
              table buffers/job   Δ(heap + index blocks hit + read) of the system's queue table in
                                  pg_statio_user_tables over the drain, ÷ N (every system)
              buffers/claim scan  Belay only: Δ(idx_blks_hit + idx_blks_read) ÷ Δidx_scan of the claim
                                  indexes (belay_jobs_claim_order_idx, belay_jobs_claim_idx) in
                                  pg_statio/pg_stat_user_indexes — the real worker's claim scans — over
                                  the drain and per fifth of it (the fifths show the growth with the
                                  jobs already claimed)
              explain             Belay only: EXPLAIN (ANALYZE, BUFFERS) of the claim's ready scan
                                  (claim_plain's `ready` CTE without FOR UPDATE, so it locks nothing) run
                                  by the probe at 0 %, 50 % and 90 % of the drain: plan node and buffers
                                  (a sequential scan would show here: "no plan that degrades")
  fleet     N = --fleet-jobs, P = each --fleet value worker processes (one node each) on one queue, and
            on 8 queues with limits — Belay: each queue per-node limit 10, global_limit 40 (batched 200 /
            400), so claims serialize on the queue's admission lock; pgqueuer: 8 entrypoints, each with
            `concurrency_limit` 40 (batch 100: 400), its limit held across all workers in SQL —: aggregate drain rate, CPU µs per job (all worker
            processes + backends), backends seen waiting on a lock (pg_stat_activity, sampled every
            poll: the claim conflicts one sees from outside) and rolled-back transactions per job.
            p99 claim latency is not measured: it needs timing inside the worker, which this bench
            never does (see docs/benchmarks.md, "Scale").

Output in --out: rounds/<sweep>-<system>-<param>-r<k>.json (one file per round), scale.json (all rounds
and the medians) and the plots backlog-rate.png, backlog-buffers.png, backlog-fifths.png, fleet-rate.png,
fleet-cpu.png (matplotlib, Agg). Figures, never assertions.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import compile_sources, proc_cpu_seconds
from bench.peers import (
    PGQUEUER_FINISHED,
    POLL_S,
    _backends_cpu,
    _fmt,
    belay_setup,
    drop_database,
    fresh_database,
    load_average,
    package_versions,
    per_job,
    pgqueuer_enqueue,
    pgqueuer_setup,
    settle,
    settled_counters,
    stop_worker,
)
from impl.provision import ClusterConfig, provision, redact

ROOT = Path(__file__).resolve().parents[1]
BATCH = 1000
MULTI_QUEUES = 8
CLAIM_INDEXES = ("belay_jobs_claim_order_idx", "belay_jobs_claim_idx")

# The worker: bench.peers's Belay drain, with the queue count a parameter (1: the queue "bench", as in
# bench.peers; k > 1: queues bench-0..bench-k-1, one kind each, global_limit 40 per queue).
BELAY_DRAIN = """
import os, time, logging
from impl.runtime import QueueConfig, Worker, WorkerConfig
from impl.worker import Registry
from model.queues import QueueOpts
logging.disable(logging.WARNING)
url, mode, k = os.environ["BENCH_URL"], os.environ["BENCH_MODE"], int(os.environ["BENCH_QUEUES"])
names = ["bench"] if k == 1 else [f"bench-{i}" for i in range(k)]
reg = Registry()
queues = []
for i, q in enumerate(names):
    kind = "noop" if k == 1 else f"noop{i}"
    if mode == "batched":
        reg.kind(kind, queue=q, chunk={"size": 100, "gather_ms": 20})(lambda contexts: [None] * len(contexts))
        opts = QueueOpts(200, 200) if k == 1 else QueueOpts(200, 200, global_limit=400)
    else:
        reg.kind(kind, queue=q)(lambda ctx, _input: None)
        opts = QueueOpts(10, 10) if k == 1 else QueueOpts(10, 10, global_limit=40)
    queues.append(QueueConfig(q, opts))
upkeep_env = os.environ.get("BENCH_UPKEEP", "on")  # on: the defaults; off; or a vacuum_dead_rows value
if upkeep_env == "off":
    upkeep = {"vacuum_dead_rows": 0, "analyze_rows": 0}
else:
    upkeep = {} if upkeep_env == "on" else {"vacuum_dead_rows": int(upkeep_env)}
notify = os.environ.get("BENCH_NOTIFY", "on") == "on"  # off: no pg_notify accelerator (a diagnosis)
config = WorkerConfig(queues=tuple(queues), notify=notify, sweep_interval=3600, **upkeep)
worker = Worker(url, reg, config).start()
while True:  # until the bench terminates the process
    time.sleep(3600)
"""
# The limit: bench.run's pure-SQL claim+ack loop (one claim UPDATE of `batch` rows, one ack UPDATE, repeat)
# on `conns` connections, with the node's table upkeep running beside it as in a Belay worker — so that at
# a large backlog it measures the server's cost per job, not a table no VACUUM reaches.
SQL_DRAIN = """
import os, threading, time
from datetime import UTC, datetime
import psycopg
from bench.run import ACK, CLAIM
from impl.runtime.upkeep import TableUpkeep
url, batch, conns = os.environ["BENCH_URL"], int(os.environ["BENCH_BATCH"]), int(os.environ["BENCH_CONNS"])
def loop():
    with psycopg.connect(url, autocommit=True) as c:
        while True:
            now = datetime.now(UTC)
            rows = c.execute(CLAIM, {"q": "bench", "n": batch, "now": now, "until": now}).fetchall()
            if not rows:
                time.sleep(0.025)
                continue
            c.execute(ACK, {"now": now, "ids": [r[0] for r in rows], "attempts": [r[1] for r in rows]})
for _ in range(conns):
    threading.Thread(target=loop, daemon=True).start()
upkeep = TableUpkeep(url, "public", 50_000, 1_000)
while True:  # until the bench terminates the process
    if os.environ.get("BENCH_UPKEEP", "on") == "on":
        upkeep.once()
    time.sleep(2.0)
"""
# pgqueuer as bench.peers runs it (PGQUEUER_DRAIN: its `pgq run` shape, one asyncpg connection on uvloop),
# with the queue count a parameter: 1 — the entrypoint "noop", no limit (bench.peers's drain exactly); k > 1 —
# entrypoints noop0..noop{k-1}, each with `concurrency_limit` BENCH_LIMIT, pgqueuer's limit "enforced at the
# database level across all workers" (pgqueuer.qm.QueueManager.entrypoint, 1.4.0+: named seats) — the
# equivalent of the Belay queues' global_limit (40 per queue for batch 10, 400 for batch 100).
PGQUEUER_DRAIN_QUEUES = """
import os, logging
import asyncpg, uvloop
from pgqueuer.db import AsyncpgDriver
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
logging.disable(logging.WARNING)
url, batch, k = os.environ["BENCH_URL"], int(os.environ["BENCH_BATCH"]), int(os.environ["BENCH_QUEUES"])
limit = int(os.environ.get("BENCH_LIMIT", "0"))

async def main():
    conn = await asyncpg.connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    async def noop(job):
        return None

    if k == 1:
        qm.entrypoint("noop")(noop)
    else:
        for i in range(k):
            qm.entrypoint(f"noop{i}", concurrency_limit=limit)(noop)
    await qm.run(batch_size=batch)

uvloop.run(main())
"""


def pgqueuer_enqueue_queues(url: str, n: int, k: int) -> float:
    """bench.peers's pgqueuer enqueue (batches of BATCH through Queries.enqueue), over k entrypoints."""
    return pgqueuer_enqueue(url, n, entrypoints=k)


BELAY_FINISHED_ANY = (
    "SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state = 'failed') FROM belay_jobs"
)
# claim_plain's `ready` CTE (impl/store/sql/worker.sql), read-only: the scan every claim starts with.
CLAIM_READY_SCAN = (
    "SELECT id, priority, ready_at FROM belay_jobs "
    "WHERE queue = %(queue)s AND state = 'ready' AND (ready_at IS NULL OR ready_at <= %(now)s) "
    "ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC LIMIT %(take)s"
)


def belay_enqueue_queues(url: str, n: int, k: int) -> float:
    from impl.client import Client
    from model.ops import JobSpec

    names = ["bench"] if k == 1 else [f"bench-{i}" for i in range(k)]
    kinds = ["noop"] if k == 1 else [f"noop{i}" for i in range(k)]
    client = Client(url)
    try:
        started = time.perf_counter()
        for start in range(0, n, BATCH):
            client.enqueue_many(
                [JobSpec(queue=names[j % k], worker=kinds[j % k]) for j in range(start, min(start + BATCH, n))]
            )
        return time.perf_counter() - started
    finally:
        client.close()


# key → (label, table, setup, enqueue(url, n, queues), code, env, finished_sql, take per claim)
SYSTEMS: dict[str, dict[str, Any]] = {
    "belay": {
        "label": "Belay default kind (limit 10)",
        "table": "belay_jobs",
        "setup": belay_setup,
        "enqueue": belay_enqueue_queues,
        "code": BELAY_DRAIN,
        "env": {"BENCH_MODE": "unbatched"},
        "finished": BELAY_FINISHED_ANY,
        "take": 10,
        "queues_ok": True,
    },
    "belay-batched": {
        "label": "Belay batched (chunk 100, limit 200)",
        "table": "belay_jobs",
        "setup": belay_setup,
        "enqueue": belay_enqueue_queues,
        "code": BELAY_DRAIN,
        "env": {"BENCH_MODE": "batched"},
        "finished": BELAY_FINISHED_ANY,
        "take": 100,
        "queues_ok": True,
    },
    "pgqueuer": {
        "label": "pgqueuer (batch 10, its default)",
        "table": "pgqueuer",
        "setup": pgqueuer_setup,
        "enqueue": pgqueuer_enqueue_queues,
        "code": PGQUEUER_DRAIN_QUEUES,
        "env": {"BENCH_BATCH": "10", "BENCH_LIMIT": "40"},
        "finished": PGQUEUER_FINISHED,
        "take": 10,
        "queues_ok": True,
    },
    "pgqueuer-100": {
        "label": "pgqueuer (batch 100)",
        "table": "pgqueuer",
        "setup": pgqueuer_setup,
        "enqueue": pgqueuer_enqueue_queues,
        "code": PGQUEUER_DRAIN_QUEUES,
        "env": {"BENCH_BATCH": "100", "BENCH_LIMIT": "400"},
        "finished": PGQUEUER_FINISHED,
        "take": 100,
        "queues_ok": True,
    },
    "sql-10": {
        "label": "pure-SQL claim+ack loop (1 connection, 10 per claim)",
        "table": "belay_jobs",
        "setup": belay_setup,
        "enqueue": belay_enqueue_queues,
        "code": SQL_DRAIN,
        "env": {"BENCH_BATCH": "10", "BENCH_CONNS": "1"},
        "finished": BELAY_FINISHED_ANY,
        "take": 10,
        "queues_ok": False,
    },
    "sql-100": {
        "label": "pure-SQL claim+ack loop (2 connections, 100 per claim)",
        "table": "belay_jobs",
        "setup": belay_setup,
        "enqueue": belay_enqueue_queues,
        "code": SQL_DRAIN,
        "env": {"BENCH_BATCH": "100", "BENCH_CONNS": "2"},
        "finished": BELAY_FINISHED_ANY,
        "take": 100,
        "queues_ok": False,
    },
}


# The same kinds with the node's table upkeep off (impl/runtime/upkeep.py): what it changes.
for _kind, _label in (("belay", "Belay default kind"), ("belay-batched", "Belay batched")):
    SYSTEMS[f"{_kind}-no-upkeep"] = {
        **SYSTEMS[_kind],
        "label": f"{_label}, table upkeep off",
        "env": {**SYSTEMS[_kind]["env"], "BENCH_UPKEEP": "off"},
    }


# --- observation from the bench's own connection ------------------------------------------------------


def one(conn: psycopg.Connection, query: str, params: Any = None) -> tuple[Any, ...]:
    """The single row a query must return."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query[:60]!r}")
    return row


def statio(probe: psycopg.Connection, table: str) -> dict[str, float]:
    """Cumulative block counts of `table` and of the claim indexes (0 where absent)."""
    probe.execute("SELECT pg_stat_clear_snapshot()")
    row = probe.execute(
        "SELECT coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0) + coalesce(idx_blks_hit, 0) "
        "+ coalesce(idx_blks_read, 0) FROM pg_statio_user_tables WHERE relname = %s",
        (table,),
    ).fetchone()
    claim = one(
        probe,
        "SELECT coalesce(sum(s.idx_blks_hit + s.idx_blks_read), 0), coalesce(sum(u.idx_scan), 0) "
        "FROM pg_statio_user_indexes s JOIN pg_stat_user_indexes u USING (indexrelid) "
        "WHERE s.indexrelname = ANY(%s)",
        (list(CLAIM_INDEXES),),
    )
    return {"table_blks": float(row[0]) if row else 0.0, "claim_blks": float(claim[0]), "claim_scans": float(claim[1])}


def explain_claim(probe: psycopg.Connection, take: int, queues: int) -> dict[str, Any]:
    """The claim's ready scan as the planner runs it now: top plan node, scan nodes, buffers."""
    q = "bench" if queues == 1 else "bench-0"
    plan = one(
        probe,
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + CLAIM_READY_SCAN,
        {"queue": q, "now": datetime.now(UTC), "take": take},
    )[0][0]["Plan"]
    nodes: list[str] = []

    def walk(node: dict) -> None:
        if "Scan" in node["Node Type"]:
            nodes.append(f"{node['Node Type']}" + (f" on {node['Index Name']}" if "Index Name" in node else ""))
        for child in node.get("Plans", ()):
            walk(child)

    walk(plan)
    return {
        "scans": nodes,
        "buffers": plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0),
        "rows": plan.get("Actual Rows"),
    }


def drain(system: dict, url: str, n: int, procs: int, queues: int, timeout: float) -> dict[str, Any]:
    """Start `procs` worker processes and observe the drain from outside: samples of (seconds, done,
    statio) every poll, lock waiters, EXPLAIN samples (Belay), CPU of workers and backends at the end."""
    env = {
        **os.environ,
        **system["env"],
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "BENCH_URL": url,
        "BENCH_N": str(n),
        "BENCH_QUEUES": str(queues),
    }
    belay = system["table"] == "belay_jobs"
    explain_at = [0.0, 0.5, 0.9] if belay else []
    explains: list[dict[str, Any]] = []
    samples: list[tuple[float, int, dict[str, float]]] = []
    lock_waiters: list[int] = []
    lock_kinds: dict[str, int] = {}  # waiters summed over the samples, by wait_event
    # CPU of the workers and their backends when the first job is seen done: what came before is start-up
    # (imports, connections, the first plans), the same for every system and paid once per process.
    first: dict[str, Any] | None = None
    with psycopg.connect(url, autocommit=True) as probe:
        if belay:
            explains.append({"at": 0.0, "done": 0, **explain_claim(probe, system["take"], queues)})
            explain_at.pop(0)
        start_io = statio(probe, system["table"])
        started = time.perf_counter()
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(system["code"])],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=ROOT,
            )
            for _ in range(procs)
        ]
        try:
            while True:
                ok, failed = one(probe, system["finished"])
                now = time.perf_counter() - started
                if failed:
                    raise RuntimeError(f"{failed} jobs failed")
                if ok >= n:
                    cpu_workers = [proc_cpu_seconds(p.pid) for p in workers]
                    cpu_pg = _backends_cpu(probe)
                    break
                if first is None and ok > 0:
                    first = {
                        "done": ok,
                        "seconds": now,
                        "cpu_workers": [proc_cpu_seconds(p.pid) for p in workers],
                        "cpu_pg": _backends_cpu(probe),
                    }
                samples.append((now, ok, statio(probe, system["table"])))
                waiting = probe.execute(
                    "SELECT wait_event, count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' GROUP BY wait_event"
                ).fetchall()
                lock_waiters.append(sum(k for _, k in waiting))
                for event, k in waiting:  # which lock: advisory, transactionid, tuple, object (NOTIFY's) ...
                    lock_kinds[event] = lock_kinds.get(event, 0) + k
                if explain_at and ok >= explain_at[0] * n:
                    explains.append(
                        {"at": explain_at.pop(0), "done": ok, **explain_claim(probe, system["take"], queues)}
                    )
                for p in workers:
                    if p.poll() is not None:
                        raise RuntimeError(f"drain process exited {p.returncode}: {p.stderr.read()[-2000:]}")  # type: ignore[union-attr]
                if now > timeout:
                    raise RuntimeError(f"drain not finished after {timeout} s ({ok} of {n})")
                time.sleep(POLL_S)
        finally:
            for p in workers:
                p.terminate()  # all at once first, so that a fleet stops together
            for p in workers:
                stop_worker(p, terminate=False)
        # the backends flush their statistics as they end, a moment after the workers are gone
        time.sleep(1.5)
        end_io = statio(probe, system["table"])
    samples.append((now, n, end_io))
    return {
        "seconds": now,
        "start_io": start_io,
        "end_io": end_io,
        "samples": samples,
        "explains": explains,
        "lock_waiters": lock_waiters,
        "lock_kinds": lock_kinds,
        "cpu_workers": cpu_workers,
        "cpu_pg": cpu_pg,
        "first": first,
    }


def fifths(samples: list[tuple[float, int, dict[str, float]]], n: int) -> list[dict[str, float | None]]:
    """Per fifth of the drain (by jobs done): its rate and the claim index's buffers per scan. Statistics
    reach pg_statio when a backend flushes them (at most once a second), so a fifth shorter than that may
    show None."""
    out = []
    first = next((i for i, s in enumerate(samples) if s[1] > 0), 0)  # from the first job done: not the start-up
    marks = [first] + [
        next((i for i, s in enumerate(samples) if s[1] >= n * f / 5), len(samples) - 1) for f in range(1, 6)
    ]
    for a, b in itertools.pairwise(marks):
        (t0, d0, io0), (t1, d1, io1) = samples[a], samples[b]
        scans = io1["claim_scans"] - io0["claim_scans"]
        out.append(
            {
                "done_from": d0,
                "done_to": d1,
                "rate": (d1 - d0) / (t1 - t0) if t1 > t0 else None,
                "buffers_per_claim_scan": (io1["claim_blks"] - io0["claim_blks"]) / scans if scans > 0 else None,
            }
        )
    return out


# Claim latency, read from the server's log (--claim-latency): PostgreSQL logs a sample of the round's
# statements with their duration (log_min_duration_sample = 0, log_statement_sample_rate), and the claims
# are the logged statements that take rows with FOR UPDATE SKIP LOCKED — every system's dequeue (Belay's
# claim, alone or in one statement with acks; pgqueuer's dequeue). Server-side execution time: no network,
# no client. Only with an embedded cluster (the bench reads its log file).
LATENCY_SAMPLE_RATE = 0.25
_LOG_ENTRY = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.\d]* \w+ \[\d+\] ")
_DURATION = re.compile(r"LOG:  duration: ([\d.]+) ms  (?:statement|execute [^:]*): ")


def claim_durations(log_text: str) -> list[float]:
    """The durations (ms) of the logged claim statements in a piece of the server's log."""
    entries: list[list[str]] = []
    for line in log_text.splitlines():
        if _LOG_ENTRY.match(line) or not entries:
            entries.append([line])
        else:
            entries[-1].append(line)
    out = []
    for entry in entries:
        m = _DURATION.search(entry[0])
        if m and "SKIP LOCKED" in " ".join(entry).upper():
            out.append(float(m.group(1)))
    return out


def latency_summary(durations: list[float]) -> dict[str, float | int | None]:
    if not durations:
        return {"sampled_claims": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    q = statistics.quantiles(durations, n=100, method="inclusive") if len(durations) > 1 else durations * 99
    return {
        "sampled_claims": len(durations),
        "p50_ms": round(q[49], 3),
        "p99_ms": round(q[98], 3),
        "max_ms": round(max(durations), 3),
    }


def run_round(
    admin_url: str, key: str, n: int, procs: int, queues: int, server_log: Path | None = None
) -> dict[str, Any]:
    system = SYSTEMS[key]
    url = fresh_database(admin_url)
    try:
        system["setup"](url)
        enqueue_s = system["enqueue"](url, n, queues)
        settle(url)
        before = settled_counters(admin_url, url)
        offset = 0
        if server_log is not None:
            name = url.rsplit("/", 1)[1]
            with psycopg.connect(admin_url, autocommit=True) as c:  # the workers' new sessions take these
                c.execute(f'ALTER DATABASE "{name}" SET log_min_duration_sample = 0')
                c.execute(f'ALTER DATABASE "{name}" SET log_statement_sample_rate = {LATENCY_SAMPLE_RATE}')
            offset = server_log.stat().st_size
        d = drain(system, url, n, procs, queues, timeout=max(600.0, n / 200))
        latency = None
        if server_log is not None:
            with open(server_log, "rb") as f:
                f.seek(offset)
                latency = latency_summary(claim_durations(f.read().decode("utf-8", "replace")))
        after = settled_counters(admin_url, url)
        with psycopg.connect(admin_url, autocommit=True) as c:
            rollbacks = one(
                c, "SELECT xact_rollback FROM pg_stat_database WHERE datname = %s", (url.rsplit("/", 1)[1],)
            )[0]
        io0, io1 = d["start_io"], d["end_io"]
        scans = io1["claim_scans"] - io0["claim_scans"]
        cpu_w = None if any(x is None for x in d["cpu_workers"]) else sum(d["cpu_workers"])
        steady = _after_first(d, n)
        return {
            "system": key,
            "jobs": n,
            "processes": procs,
            "queues": queues,
            "enqueue_per_s": n / enqueue_s,
            "drain_per_s": n / d["seconds"],
            "cpu_us_per_job": {
                "worker": None if cpu_w is None else round(cpu_w / n * 1e6, 1),
                "postgresql": None if d["cpu_pg"] is None else round(d["cpu_pg"] / n * 1e6, 1),
            },
            # the same from the first job seen done to the last (start-up excluded): the per-job cost
            "cpu_us_per_job_after_first": steady,
            "db_per_job": per_job(before, after, n),
            "rollbacks_total": rollbacks,
            "table_buffers_per_job": round((io1["table_blks"] - io0["table_blks"]) / n, 2),
            "claim_scans": scans,
            "buffers_per_claim_scan": round((io1["claim_blks"] - io0["claim_blks"]) / scans, 2) if scans else None,
            "fifths": fifths(d["samples"], n),
            "explains": d["explains"],
            "lock_waiters_mean": round(statistics.mean(d["lock_waiters"]), 3) if d["lock_waiters"] else 0.0,
            "lock_waiters_max": max(d["lock_waiters"], default=0),
            # mean waiters per sample by the lock they wait for
            "lock_waiters_by_kind": {
                k: round(v / len(d["lock_waiters"]), 3) for k, v in sorted(d["lock_kinds"].items())
            },
            "claim_latency": latency,
            "load_average": load_average(),
        }
    finally:
        drop_database(admin_url, url)


def _after_first(d: dict[str, Any], n: int) -> dict[str, float | None] | None:
    """CPU µs per job from the first job seen done to the end, workers and PostgreSQL apart."""
    f = d["first"]
    if f is None or n - f["done"] <= 0:
        return None
    jobs = n - f["done"]

    def delta(end: float | None, start: float | None) -> float | None:
        return None if end is None or start is None else round((end - start) / jobs * 1e6, 1)

    workers = (
        None
        if any(x is None for x in [*d["cpu_workers"], *f["cpu_workers"]])
        else delta(sum(d["cpu_workers"]), sum(f["cpu_workers"]))
    )
    return {"worker": workers, "postgresql": delta(d["cpu_pg"], f["cpu_pg"]), "jobs": jobs}


# --- summary and plots ------------------------------------------------------------------------------


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _sum_cpu(c: dict[str, Any] | None) -> float | None:
    return None if c is None or c["worker"] is None or c["postgresql"] is None else c["worker"] + c["postgresql"]


# Belay's kind against the peer at the same settings (issue 54, target 4: ≥ 1.5× in the median, never behind).
PAIRS = (("belay", "pgqueuer"), ("belay-batched", "pgqueuer-100"))


def ratios(rounds: list[dict]) -> list[dict]:
    """Per sweep point and pair: the drain-rate ratio in each round both ran, their median and minimum."""
    by = {(r["sweep"], r["system"], r["jobs"], r["processes"], r["queues"], r["round"]): r for r in rounds}
    points = sorted({(r["sweep"], r["jobs"], r["processes"], r["queues"]) for r in rounds})
    out = []
    for ours, peer in PAIRS:
        for sweep, jobs, procs, queues in points:
            per_round = []
            for rnd in sorted({r["round"] for r in rounds}):
                a = by.get((sweep, ours, jobs, procs, queues, rnd))
                b = by.get((sweep, peer, jobs, procs, queues, rnd))
                if a and b:
                    per_round.append(round(a["drain_per_s"] / b["drain_per_s"], 3))
            if per_round:
                out.append(
                    {
                        "sweep": sweep,
                        "ours": ours,
                        "peer": peer,
                        "jobs": jobs,
                        "processes": procs,
                        "queues": queues,
                        "per_round": per_round,
                        "median": statistics.median(per_round),
                        "min": min(per_round),
                    }
                )
    return out


def print_ratios(table: list[dict]) -> None:
    for x in table:
        print(
            f"{x['sweep']:<8} {x['ours']:>14} / {x['peer']:<13} jobs {x['jobs']:>9,} procs {x['processes']} "
            f"queues {x['queues']}: median {x['median']:.2f}×, min {x['min']:.2f}×, rounds {x['per_round']}"
        )


def summarise(rounds: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rounds:
        groups.setdefault((r["sweep"], r["system"], r["jobs"], r["processes"], r["queues"]), []).append(r)
    out = []
    for (sweep, system, jobs, procs, queues), rs in groups.items():
        out.append(
            {
                "sweep": sweep,
                "system": system,
                "jobs": jobs,
                "processes": procs,
                "queues": queues,
                "rounds": len(rs),
                "drain_per_s": _median([r["drain_per_s"] for r in rs]),
                "cpu_us_per_job": _median(
                    [
                        None
                        if r["cpu_us_per_job"]["worker"] is None or r["cpu_us_per_job"]["postgresql"] is None
                        else r["cpu_us_per_job"]["worker"] + r["cpu_us_per_job"]["postgresql"]
                        for r in rs
                    ]
                ),
                "cpu_us_per_job_after_first": _median([_sum_cpu(r.get("cpu_us_per_job_after_first")) for r in rs]),
                "table_buffers_per_job": _median([r["table_buffers_per_job"] for r in rs]),
                "buffers_per_claim_scan": _median([r["buffers_per_claim_scan"] for r in rs]),
                "first_to_last_fifth_rate": _median(
                    [
                        r["fifths"][-1]["rate"] / r["fifths"][0]["rate"]
                        if r["fifths"][0]["rate"] and r["fifths"][-1]["rate"]
                        else None
                        for r in rs
                    ]
                ),
                "lock_waiters_mean": _median([r["lock_waiters_mean"] for r in rs]),
                "rollbacks_per_job": _median([r["rollbacks_total"] / r["jobs"] for r in rs]),
                "claim_p99_ms": _median([(r.get("claim_latency") or {}).get("p99_ms") for r in rs]),
                "claim_p50_ms": _median([(r.get("claim_latency") or {}).get("p50_ms") for r in rs]),
            }
        )
    return out


def plots(summary: list[dict], rounds: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def save(fig: Any, name: str) -> None:
        path = out / name
        fig.tight_layout()
        fig.savefig(path, dpi=80)
        plt.close(fig)
        written.append(path)

    backlog = [s for s in summary if s["sweep"] == "backlog"]
    systems = sorted({s["system"] for s in backlog})
    for name, field, ylabel, logy in (
        ("backlog-rate.png", "drain_per_s", "drain jobs/s (one worker process)", False),
        ("backlog-buffers.png", "table_buffers_per_job", "queue-table buffers per job", False),
        ("backlog-claim-buffers.png", "buffers_per_claim_scan", "buffers per claim index scan (Belay)", False),
        ("backlog-cpu.png", "cpu_us_per_job", "CPU µs per job (worker + PostgreSQL)", False),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for system in systems:
            pts = sorted((s["jobs"], s[field]) for s in backlog if s["system"] == system and s[field] is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=system)
        ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("backlog (ready jobs at the start)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend()
        save(fig, name)

    # buffers per claim scan per fifth of the drain: the growth with the jobs already claimed
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rounds:
        if r["sweep"] != "backlog" or not r["system"].startswith("belay"):
            continue
        pts = [(f["done_to"], f["buffers_per_claim_scan"]) for f in r["fifths"] if f["buffers_per_claim_scan"]]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{r['system']} N={r['jobs']:,}")
    ax.set_xlabel("jobs already claimed (end of each fifth of the drain)")
    ax.set_ylabel("buffers per claim index scan")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    save(fig, "backlog-fifths.png")

    fleet = [s for s in summary if s["sweep"] == "fleet"]
    for name, field, ylabel in (
        ("fleet-rate.png", "drain_per_s", "aggregate drain jobs/s"),
        ("fleet-cpu.png", "cpu_us_per_job", "CPU µs per job (workers + PostgreSQL)"),
        ("fleet-cpu-after-first.png", "cpu_us_per_job_after_first", "CPU µs per job after the first job done"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for system, queues in sorted({(s["system"], s["queues"]) for s in fleet}):
            pts = sorted(
                (s["processes"], s[field])
                for s in fleet
                if s["system"] == system and s["queues"] == queues and s[field] is not None
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{system}, {queues} queue(s)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("worker processes (one node each)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
        save(fig, name)
    return written


def print_summary(summary: list[dict]) -> None:
    print(
        f"{'sweep':<8} {'system':<14} {'jobs':>9} {'procs':>5} {'queues':>6} {'drain/s':>9} {'CPU µs/job':>10} "
        f"{'after 1st':>9} {'tbl buf/job':>11} {'buf/claim':>9} {'last/first 5th':>14} {'lock wait':>9} {'rollb/job':>9} "
        f"{'claim p50/p99 ms':>16}"
    )
    for s in summary:
        print(
            f"{s['sweep']:<8} {s['system']:<14} {s['jobs']:>9,} {s['processes']:>5} {s['queues']:>6} "
            f"{_fmt(s['drain_per_s'], ',.0f'):>9} {_fmt(s['cpu_us_per_job'], '.0f'):>10} "
            f"{_fmt(s['cpu_us_per_job_after_first'], '.0f'):>9} "
            f"{_fmt(s['table_buffers_per_job'], '.2f'):>11} {_fmt(s['buffers_per_claim_scan'], '.1f'):>9} "
            f"{_fmt(s['first_to_last_fifth_rate'], '.2f'):>14} {_fmt(s['lock_waiters_mean'], '.2f'):>9} "
            f"{_fmt(s['rollbacks_per_job'], '.4f'):>9} "
            f"{_fmt(s.get('claim_p50_ms'), '.2f') + ' / ' + _fmt(s.get('claim_p99_ms'), '.2f'):>16}"
        )


def markdown(result: dict[str, Any]) -> str:
    """The summary and the ratios of a scale.json as the Markdown tables of docs/benchmarks.md."""

    lines = []
    for sweep in ("backlog", "fleet"):
        rows = [s for s in result["summary"] if s["sweep"] == sweep]
        if not rows:
            continue
        lines += [
            f"**{sweep}** (each figure the median of its rounds)",
            "",
            "| system | jobs | processes | queues | rounds | drain jobs/s | CPU µs/job (all) | CPU µs/job after the first job | "
            "table buffers/job | buffers/claim scan | last ÷ first fifth | lock waiters | claim p50 / p99 ms |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for s in sorted(rows, key=lambda s: (s["queues"], s["system"], s["jobs"], s["processes"])):
            lines.append(
                f"| {s['system']} | {s['jobs']:,} | {s['processes']} | {s['queues']} | {s['rounds']} | "
                f"{_fmt(s['drain_per_s'], ',.0f')} | "
                f"{_fmt(s['cpu_us_per_job'], '.0f')} | {_fmt(s.get('cpu_us_per_job_after_first'), '.0f')} | "
                f"{_fmt(s['table_buffers_per_job'], '.1f')} | {_fmt(s['buffers_per_claim_scan'], '.0f')} | "
                f"{_fmt(s['first_to_last_fifth_rate'], '.2f')} | {_fmt(s['lock_waiters_mean'], '.1f')} | "
                f"{_fmt(s.get('claim_p50_ms'), '.2f')} / {_fmt(s.get('claim_p99_ms'), '.2f')} |"
            )
        lines.append("")
    table = result.get("ratios") or ratios(result["rounds"])
    if table:
        lines += [
            "| ours ÷ peer | sweep | jobs | processes | queues | median | min | per round |",
            "|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for x in table:
            lines.append(
                f"| {x['ours']} ÷ {x['peer']} | {x['sweep']} | {x['jobs']:,} | {x['processes']} | {x['queues']} | "
                f"{x['median']:.2f}× | {x['min']:.2f}× | {', '.join(f'{r:.2f}' for r in x['per_round'])} |"
            )
    return "\n".join(lines) + "\n"


def merge(files: list[Path], out: Path) -> int:
    """The rounds of several runs (e.g. the 1M backlog run apart from the rest) in one summary and plots."""
    runs = [json.loads(f.read_text()) for f in files]
    rounds: list[dict] = []
    for run in runs:  # each run numbers its rounds from 1: renumbered after the runs before it, for the pairing
        offset = max((r["round"] for r in rounds), default=0)
        rounds += [{**r, "round": r["round"] + offset} for r in run["rounds"]]
    summary = summarise(rounds)
    out.mkdir(parents=True, exist_ok=True)
    table = ratios(rounds)
    print_summary(summary)
    print_ratios(table)
    written = plots(summary, rounds, out)
    merged = {
        "merged_from": [
            {"file": str(f), "when": run["when"], "args": run["args"]} for f, run in zip(files, runs, strict=True)
        ],
        "machine": runs[0]["machine"],
        "postgresql": runs[0]["postgresql"],
        "load_average": {
            str(f): [run["load_average_before"], run["load_average_after"]] for f, run in zip(files, runs, strict=True)
        },
        "versions": runs[0]["versions"],
        "summary": summary,
        "ratios": table,
        "rounds": rounds,
        "not_run": {k: v for run in runs for k, v in run["not_run"].items()},
        "plots": [p.name for p in written],
    }
    (out / "scale.json").write_text(json.dumps(merged, indent=1) + "\n")
    print(f"written {out / 'scale.json'} and {', '.join(p.name for p in written)}")
    return 0


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--backlog", default="10000,100000,1000000", help="comma list of backlog sizes ('' to skip)")
    p.add_argument("--fleet", default="1,2,4,8", help="comma list of worker process counts ('' to skip)")
    p.add_argument("--fleet-jobs", type=int, default=20000)
    p.add_argument(
        "--fleet-queues",
        default="1,8",
        help="queue counts for the fleet sweep (k > 1: k queues / entrypoints with limits)",
    )
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--systems", default="belay,belay-batched,pgqueuer", help=f"comma list of {','.join(SYSTEMS)}")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--markdown", default="", help="a scale.json: print its tables as Markdown (no run)")
    p.add_argument(
        "--pg-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting of the embedded cluster (repeatable), e.g. shared_buffers=1GB; the same for every system",
    )
    p.add_argument(
        "--claim-latency",
        action="store_true",
        help="log a sample of the statements (embedded cluster) and report claim p50/p99 — costs throughput",
    )
    p.add_argument("--quick", action="store_true", help="a smoke run: backlog 200,400, fleet 1,2 of 200 jobs")
    p.add_argument(
        "--merge",
        default="",
        help="comma list of scale.json files of earlier runs: no run, their rounds merged into --out's scale.json and plots",
    )
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())), end="")
        return 0
    if args.merge:
        if args.out is None:
            p.error("--merge needs --out")
        return merge([Path(x) for x in args.merge.split(",") if x.strip()], args.out)
    if args.quick:
        args.backlog, args.fleet, args.fleet_jobs, args.rounds = "200,400", "1,2", 200, 1
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
    out = args.out or ROOT / "reports" / f"scale-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
    (out / "rounds").mkdir(parents=True, exist_ok=True)
    backlogs, fleet, fleet_queues = _ints(args.backlog), _ints(args.fleet), _ints(args.fleet_queues)

    # (sweep, jobs, processes, queues) in the order run; systems interleave within each
    plan = [("backlog", n, 1, 1) for n in backlogs]
    plan += [("fleet", args.fleet_jobs, procs, k) for k in fleet_queues for procs in fleet]
    compile_sources()
    load_before = load_average()
    rounds: list[dict] = []
    not_run: dict[str, str] = {}
    settings = dict(kv.split("=", 1) for kv in args.pg_setting)
    db = provision(cluster_config=ClusterConfig.from_env(extra_settings=settings) if settings else None)
    try:
        with psycopg.connect(db.url, autocommit=True) as c:
            server = one(c, "SHOW server_version")[0]
            shown = sorted({"shared_buffers", "autovacuum_naptime", "synchronous_commit", "fsync", *settings})
            server_settings = {name: one(c, f"SHOW {name}")[0] for name in shown}
        server_log = None
        if args.claim_latency:
            if db.cluster is None:
                p.error("--claim-latency reads the embedded cluster's log: unset BELAY_DATABASE_URL")
            server_log = db.cluster.log_path
        print(f"database: {db.kind} PostgreSQL {server} {redact(db.url)}; load average {load_before}", flush=True)
        for r in range(args.rounds):
            for i, (sweep, n, procs, k) in enumerate(plan):
                systems = [s for s in chosen if k == 1 or SYSTEMS[s]["queues_ok"]]
                order = systems if (r + i) % 2 == 0 else systems[::-1]
                for key in order:
                    tag = f"{sweep}-{key}-n{n}-p{procs}-q{k}-r{r + 1}"
                    try:
                        res = run_round(db.url, key, n, procs, k, server_log)
                    except Exception as exc:  # noqa: BLE001 — reported, never dropped
                        not_run[tag] = f"{type(exc).__name__}: {str(exc).strip()[-600:]}"
                        print(f"{tag}: failed: {not_run[tag]}", flush=True)
                        continue
                    res.update(sweep=sweep, round=r + 1)
                    rounds.append(res)
                    (out / "rounds" / f"{tag}.json").write_text(json.dumps(res, indent=1) + "\n")
                    print(
                        f"{tag}: drain {res['drain_per_s']:,.0f}/s, buffers/claim scan {res['buffers_per_claim_scan']}, "
                        f"table buffers/job {res['table_buffers_per_job']} (load {load_average()[0]})",
                        flush=True,
                    )
    finally:
        db.close()
    summary = summarise(rounds)
    print()
    table = ratios(rounds)
    print_summary(summary)
    print_ratios(table)
    written = plots(summary, rounds, out)
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}",
        "postgresql": server,
        "server_settings": server_settings,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "versions": package_versions(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "summary": summary,
        "ratios": table,
        "rounds": rounds,
        "not_run": not_run,
        "plots": [p.name for p in written],
    }
    (out / "scale.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"written {out / 'scale.json'} and {', '.join(p.name for p in written)}")
    return 1 if not rounds else 0


if __name__ == "__main__":
    sys.exit(main())
