"""Belay benchmarks: throughput (runtime vs the pure-SQL claim+ack loop on the same database),
insert → result latency, and worker memory over a long run. Prints its figures.

    .venv/bin/python -m bench.run throughput [--jobs 20000] [--unbatched-limit 10] [--batched-limit 200]
                                             [--chunk 100] [--notify]
    .venv/bin/python -m bench.run latency [--rounds 500] [--no-fsync-too]
    .venv/bin/python -m bench.run memory [--jobs 100000]
    .venv/bin/python -m bench.run telemetry [--jobs 5000 --rounds 3]   # runtime with telemetry off vs on

PostgreSQL: $BELAY_DATABASE_URL or an embedded cluster with default durability (fsync and
synchronous_commit on), on this machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import compile_sources
from impl.client import Client
from impl.provision import provision, redact
from impl.runtime import QueueConfig, Worker, WorkerConfig
from impl.store.migrate import migrate
from impl.worker import Registry
from model.queues import QueueOpts
from soak.report.memory import MiB, rss_bytes

ROOT = Path(__file__).resolve().parents[1]

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def rss_mib() -> float:
    rss = rss_bytes()
    return rss / MiB if rss is not None else float("nan")


# The queues this process filled (their rows are the bench's own), and whether the bench started the server
# itself (an embedded cluster or a container) rather than being pointed at $BELAY_DATABASE_URL.
FILLED: set[str] = set()
OWN_SERVER = False


def fill(url: str, queue: str, n: int, worker: str = "noop") -> None:
    """Insert n trivial ready jobs with one statement (not part of any measured figure) into a table that
    every drain finds alike: the earlier drains' rows (already counted and checked; only the queues this
    bench filled) deleted and vacuumed away, the new rows vacuumed and analyzed, then a CHECKPOINT —
    before every mode alike, as bench.peers settles every system's database before its drain. On a server
    the bench started itself, autovacuum is off for belay_jobs from the first fill on: a vacuum that lands
    inside one drain of a few seconds and not another was the largest spread between rounds (issue 33).
    (Only the drains': the latency bench, which fills nothing, keeps it — a table never analyzed was
    planned worse and cost its round trips ~0.4 ms. Never on $BELAY_DATABASE_URL's database.)"""
    with psycopg.connect(url, autocommit=True) as c:
        if OWN_SERVER:
            c.execute("ALTER TABLE belay_jobs SET (autovacuum_enabled = off)")
        if FILLED:
            c.execute("DELETE FROM belay_jobs WHERE queue = ANY(%s)", (sorted(FILLED),))
        c.execute("VACUUM belay_jobs")
        FILLED.add(queue)
        c.execute(
            "INSERT INTO belay_jobs (queue, worker, state, ready_at, inserted_at) "
            "SELECT %s, %s, 'ready', %s, %s FROM generate_series(1, %s)",
            (queue, worker, NOW, NOW, n),
        )
        c.execute("VACUUM ANALYZE belay_jobs")
        c.execute("CHECKPOINT")


def remaining(url: str, queue: str) -> int:
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute(
            "SELECT count(*) FROM belay_jobs WHERE queue = %s AND state <> 'succeeded'", (queue,)
        ).fetchone()[0]


CLAIM = """UPDATE belay_jobs SET state = 'running', attempt = attempt + 1, lease_until = %(until)s,
  leased_by = 'sql', started_at = COALESCE(started_at, %(now)s)
WHERE id IN (SELECT id FROM belay_jobs WHERE queue = %(q)s AND state = 'ready'
             AND (ready_at IS NULL OR ready_at <= %(now)s)
             ORDER BY priority, ready_at NULLS FIRST, id LIMIT %(n)s FOR UPDATE SKIP LOCKED)
RETURNING id, attempt"""
ACK = """UPDATE belay_jobs AS j SET state = 'succeeded', finished_at = %(now)s, lease_until = NULL, leased_by = NULL,
  result = '\\x6e756c6c'::bytea
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS v(id, attempt)
WHERE j.id = v.id AND j.state = 'running' AND j.attempt = v.attempt"""


def registry(chunk: int = 100) -> Registry:
    reg = Registry()

    @reg.kind("noop", queue="unbatched")
    def noop(ctx, _input):
        return None

    @reg.kind("noop_chunk", queue="batched", chunk={"size": chunk, "gather_ms": 20})
    def noop_chunk(contexts):
        return [None] * len(contexts)

    return reg


def succeeded(conn: psycopg.Connection, queue: str) -> int:
    return conn.execute(
        "SELECT count(*) FROM belay_jobs WHERE queue = %s AND state = 'succeeded'", (queue,)
    ).fetchone()[0]


# The drain's clock stops when the database shows no job of the queue left to do. The probe reads two
# partial indexes (ready rows of the queue; running rows), so polling it every few milliseconds costs
# PostgreSQL little: a count(*) of the queue's succeeded rows, polled the same way, cost as much server
# CPU as the drain itself and halved the figure it measured. An exact count confirms every job succeeded
# once the probe says the queue is empty.
UNFINISHED = """SELECT EXISTS (SELECT 1 FROM belay_jobs WHERE queue = %(q)s AND state = 'ready')
    OR EXISTS (SELECT 1 FROM belay_jobs WHERE state = 'running' AND lease_until IS NOT NULL AND queue = %(q)s)"""


def probe_connection(url: str) -> psycopg.Connection:
    """The probe's connection. Its session plans no bitmap scans: a bitmap scan of belay_jobs_lease_idx
    visited the heap page of every row that was ever running (their index entries stay until vacuum) on
    every probe, 0.7 ms of PostgreSQL CPU each, a tenth of a core at 5 ms polling; a plain index scan
    marks those entries dead the first time and skips them after."""
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("SET enable_bitmapscan = off")
    return conn


def unfinished(conn: psycopg.Connection, queue: str) -> bool:
    return conn.execute(UNFINISHED, {"q": queue}).fetchone()[0]


def pure_sql(url: str, queue: str, n: int, batch: int, concurrency: int = 1) -> float:
    """The physical reference: claim `batch` rows in one transaction, ack them in another, repeat,
    on `concurrency` connections at once (the runtime's concurrency, so it is a fair ceiling)."""
    import threading

    fill(url, queue, n)
    counts = [0] * concurrency

    def loop(k: int) -> None:
        with psycopg.connect(url, autocommit=True) as c:
            while True:
                now = datetime.now(UTC)
                rows = c.execute(CLAIM, {"q": queue, "n": batch, "now": now, "until": now}).fetchall()
                if not rows:
                    return
                c.execute(ACK, {"now": now, "ids": [r[0] for r in rows], "attempts": [r[1] for r in rows]})
                counts[k] += len(rows)

    started = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    with psycopg.connect(url, autocommit=True) as c:
        done = succeeded(c, queue)
    assert done == n == sum(counts), (done, n, counts)
    return n / elapsed


def runtime(
    url: str,
    queue: str,
    n: int,
    *,
    limit: int,
    kind: str,
    chunk: int = 100,
    notify: bool = False,
    telemetry: tuple = (),
) -> tuple[float, float, float]:
    """Drain n pre-inserted jobs with a Worker: jobs/s (the clock stops when the database shows all n
    succeeded) and RSS before/after."""
    fill(url, queue, n, worker=kind)
    config = WorkerConfig(
        node=f"bench-{queue}", queues=(QueueConfig(queue, QueueOpts(limit, limit)),), sweep_interval=3600, notify=notify
    )
    before = rss_mib()
    with probe_connection(url) as probe:
        started = time.perf_counter()
        worker = Worker(url, registry(chunk), config, telemetry=telemetry).start()
        deadline = started + 600
        while unfinished(probe, queue) and time.perf_counter() < deadline:
            time.sleep(0.005)
        elapsed = time.perf_counter() - started
        done = succeeded(probe, queue)
    after = rss_mib()
    worker.stop(grace=5)
    left = remaining(url, queue)
    assert left == 0 and done == n, f"{left} jobs not succeeded ({done} of {n} when the probe saw none left)"
    return n / elapsed, before, after


RUNTIME_PROCESS = """
import logging, os, sys, time
from bench.run import registry
from impl.runtime import QueueConfig, Worker, WorkerConfig
from model.queues import QueueOpts
logging.disable(logging.WARNING)
e = os.environ
queue, limit = e["BENCH_QUEUE"], int(e["BENCH_LIMIT"])
config = WorkerConfig(
    node="bench-" + queue, queues=(QueueConfig(queue, QueueOpts(limit, limit)),), sweep_interval=3600,
    notify=e["BENCH_NOTIFY"] == "1",
)
Worker(e["BENCH_URL"], registry(int(e["BENCH_CHUNK"])), config, telemetry=()).start()
while True:  # until the bench kills the process
    time.sleep(3600)
"""


def runtime_process(
    url: str, queue: str, n: int, *, limit: int, kind: str, chunk: int = 100, notify: bool = False
) -> float:
    """`runtime`, with the worker in a process of its own, as `belay worker` and bench.peers run it: the
    clock runs from the worker's first claim (the earliest `started_at` of the drained jobs: the
    interpreter's start and imports, ~0.3 s, are not the runtime's speed) until the probe (this process,
    its own connection, every 5 ms) sees all n succeeded. Nothing the bench does shares the worker's GIL.
    Both ends are wall-clock times of this machine."""
    import subprocess
    import sys

    fill(url, queue, n, worker=kind)
    env = {
        **os.environ,
        "BENCH_URL": url,
        "BENCH_QUEUE": queue,
        "BENCH_LIMIT": str(limit),
        "BENCH_CHUNK": str(chunk),
        "BENCH_NOTIFY": "1" if notify else "0",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with probe_connection(url) as probe:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", RUNTIME_PROCESS], env=env, cwd=ROOT)
        try:
            deadline = started + 600
            while unfinished(probe, queue) and time.perf_counter() < deadline and proc.poll() is None:
                time.sleep(0.005)
            ended = time.time()
            done = succeeded(probe, queue)
            first = probe.execute("SELECT min(started_at) FROM belay_jobs WHERE queue = %s", (queue,)).fetchone()[0]
        finally:
            proc.kill()
            proc.wait()
    assert done == n, f"the worker process drained {done} of {n} (exit {proc.returncode})"
    return n / (ended - first.timestamp())


def cmd_throughput(url: str, args: argparse.Namespace) -> dict:
    n = args.jobs
    unbatched = {"limit": args.unbatched_limit, "kind": "noop", "notify": args.notify}
    batched = {"limit": args.batched_limit, "kind": "noop_chunk", "chunk": args.chunk, "notify": args.notify}
    figures = {
        "jobs": n,
        "pure_sql_single": pure_sql(url, "sql1", n, 1, concurrency=args.unbatched_limit),
        "pure_sql_batched": pure_sql(url, "sql100", n, args.chunk),
        # the headline: the worker in a process of its own, observed from this one (as bench.peers does)
        "runtime_unbatched": runtime_process(url, "unbatched", n, **unbatched),
        "runtime_batched": runtime_process(url, "batched", n, **batched),
        # the same in this process (the figure this bench printed until issue 33): the probe, the pure-SQL
        # loops' imports and the worker share one interpreter
        "runtime_unbatched_in_process": runtime(url, "unbatched_ip", n, **unbatched)[0],
        "runtime_batched_in_process": runtime(url, "batched_ip", n, **batched)[0],
    }
    figures["ratio_unbatched"] = figures["runtime_unbatched"] / figures["pure_sql_single"]
    figures["ratio_batched"] = figures["runtime_batched"] / figures["pure_sql_batched"]
    print(f"every figure drains the same {n} jobs; completion is counted in the database by this process")
    print(
        f"pure SQL single-row claim+ack, {args.unbatched_limit} connections : {figures['pure_sql_single']:8.0f} jobs/s"
    )
    print(
        f"runtime unbatched, limit {args.unbatched_limit} (own process)     : {figures['runtime_unbatched']:8.0f} jobs/s "
        f"({figures['ratio_unbatched']:.0%} of the reference; in this process "
        f"{figures['runtime_unbatched_in_process']:.0f})"
    )
    print(f"pure SQL batched, {args.chunk} per transaction          : {figures['pure_sql_batched']:8.0f} jobs/s")
    print(
        f"runtime batched, chunk {args.chunk}, limit {args.batched_limit} (own process): "
        f"{figures['runtime_batched']:8.0f} jobs/s ({figures['ratio_batched']:.0%} of the reference; in this "
        f"process {figures['runtime_batched_in_process']:.0f})"
    )
    return figures


LATENCY_WORKER = """
import logging, os
from impl.runtime import QueueConfig, Termination, Worker, WorkerConfig
from impl.worker import Registry
from model.queues import QueueOpts
logging.disable(logging.WARNING)
reg = Registry()

@reg.kind("echo", queue="lat")
def echo(ctx, value):
    return value

notify = os.environ["BENCH_NOTIFY"] == "1"
config = WorkerConfig(node="lat", queues=(QueueConfig("lat", QueueOpts(10, 10)),), sweep_interval=3600,
                      notify=notify)
term = Termination()
worker = Worker(os.environ["BENCH_URL"], reg, config, telemetry=()).start()
print("ready", flush=True)
term.wait()
worker.stop(grace=2)
"""


# The stages of one insert→result sample, between the marks cmd_latency records.
STAGES = (
    "enqueue (client: insert + commit)",
    "commit → claim starts (wake-up, poll)",
    "claim starts → ack starts (claim + commit, run)",
    "ack starts → result read (ack + commit, notify)",
)


FLOOR_ROUNDS = 300


def commit_floor(url: str) -> float:
    """The p50 of three durable one-row commits in a row (ms): what an insert → result round trip costs at the
    least (the enqueue's, the claim's and the ack's commit), measured on the same database and disk."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SET synchronous_commit = on")
        c.execute("DROP TABLE IF EXISTS bench_floor_t")
        c.execute("CREATE TABLE bench_floor_t (id int PRIMARY KEY, v int)")  # logged: its commits flush the WAL
        c.execute("INSERT INTO bench_floor_t VALUES (1, 0)")
        times = []
        for _ in range(FLOOR_ROUNDS):
            started = time.perf_counter()
            for _ in range(3):
                c.execute("UPDATE bench_floor_t SET v = v + 1 WHERE id = 1")
            times.append((time.perf_counter() - started) * 1000)
        c.execute("DROP TABLE bench_floor_t")
    return statistics.median(times)


def cmd_latency(url: str, args: argparse.Namespace) -> dict:
    """Insert → result across processes: the worker idles (listening) in its own process; this process
    is one long-lived client (one pool, one LISTEN connection for results)."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    figures: dict[str, Any] = {"commit_floor_ms": commit_floor(url)}
    print(
        f"the three commits' floor (three one-row autocommit UPDATEs in a row, synchronous_commit=on, p50 of "
        f"{FLOOR_ROUNDS}): {figures['commit_floor_ms']:.2f} ms; issue 33's target for the accelerator's p50: "
        f"<= {figures['commit_floor_ms'] + 0.5:.2f} ms"
    )
    modes = [("accelerator", True, "on"), ("polling only", False, "on")]
    if args.no_fsync_too:
        modes.append(("accelerator, synchronous_commit=off", True, "off"))
    for mode, notify, commit in modes:
        with psycopg.connect(url, autocommit=True) as c:  # new sessions (worker, client) take the setting
            db_name = psycopg.sql.Identifier(c.info.dbname)
            c.execute(psycopg.sql.SQL("ALTER DATABASE {} SET synchronous_commit = {}").format(db_name, commit))
        env = {
            **os.environ,
            "BENCH_URL": url,
            "BENCH_NOTIFY": "1" if notify else "0",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        }
        proc = subprocess.Popen(
            [sys.executable, "-c", LATENCY_WORKER], env=env, cwd=root, stdout=subprocess.PIPE, text=True
        )
        samples = []
        stages: dict[str, list[float]] = {name: [] for name in STAGES}
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            with Client(url) as client:
                for i in range(args.warmup + args.rounds):
                    started, wall = time.perf_counter(), time.time()
                    job = client.enqueue("lat", "echo", {"i": i})
                    enqueued = time.time()
                    done = client.await_result(job.id, timeout=10, listen=notify)
                    if i >= args.warmup:
                        samples.append((time.perf_counter() - started) * 1000)
                        # Where the time goes: the job row's started_at / finished_at are the worker's
                        # claim and ack `now` (taken just before each statement), on this machine's clock.
                        marks = (wall, enqueued, done.started_at.timestamp(), done.finished_at.timestamp(), time.time())
                        for name, a, b in zip(STAGES, marks, marks[1:], strict=False):
                            stages[name].append((b - a) * 1000)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        samples.sort()
        p50 = statistics.median(samples)
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        figures[mode] = {"p50_ms": p50, "p99_ms": p99, "synchronous_commit": commit}
        print(
            f"insert→result, worker in another process, {mode:<12}: p50 {p50:6.2f} ms  p99 {p99:6.2f} ms "
            f"({args.rounds} rounds after {args.warmup} warm-up)"
        )
        for name, values in stages.items():
            values.sort()
            figures[mode][f"{name}_p50_ms"] = statistics.median(values)
            print(
                f"    {name:<44} p50 {statistics.median(values):6.2f} ms  "
                f"p99 {values[min(len(values) - 1, int(len(values) * 0.99))]:6.2f} ms"
            )
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(psycopg.sql.SQL("ALTER DATABASE {} RESET synchronous_commit").format(db_name))
    return figures


def cmd_memory(url: str, args: argparse.Namespace) -> dict:
    rate, before, after = (
        runtime(url, "memory", args.jobs, limit=200, kind="noop_chunk")
        if args.batched
        else runtime(url, "memory", args.jobs, limit=10, kind="noop")
    )
    print(f"worker RSS over {args.jobs} jobs: {before:.1f} MiB at start, {after:.1f} MiB at end ({rate:.0f} jobs/s)")
    return {"jobs": args.jobs, "rss_start_mib": before, "rss_end_mib": after, "jobs_per_s": rate}


def cmd_telemetry(url: str, args: argparse.Namespace) -> dict:
    """Runtime throughput with telemetry off (no handlers) and on (the default logger writing one line per
    job to a log file, plus Prometheus metrics), interleaved round by round in one run; medians compared."""
    import tempfile

    from impl import telemetry

    log_path = os.path.join(tempfile.mkdtemp(prefix="belay-bench-"), "jobs.log")
    logger = logging.getLogger("belay.bench")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    # The handler and format `belay worker` logs through (impl/ops/cli.py), writing to a file; --unbatched-log
    # uses the stdlib's line-at-a-time FileHandler instead, to show what batching saves.
    log_file = open(log_path, "a")  # noqa: SIM115 - closed with the handler below
    handler: logging.Handler = (
        logging.StreamHandler(log_file) if args.unbatched_log else telemetry.BatchingStreamHandler(log_file)
    )
    handler.setFormatter(telemetry.SecondCachingFormatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    metrics = telemetry.PrometheusMetrics()
    # the default logger as `belay worker` attaches it (attach_default_logger: records built in the background)
    default = telemetry.DefaultLogger(logging.INFO, logger, background=True)
    modes = {"off": (), "on": (default, metrics)}
    rates: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}  # this process's CPU µs per job (all threads)
    # The same without this (main) thread, which inserts the jobs and polls the database every 5 ms until
    # they are done (a cost per second, not per job): the worker's threads and the log flusher only.
    wcpu: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            cpu_before, main_before = time.process_time(), time.thread_time()
            rate = runtime(url, f"tel_{mode}_{r}", args.jobs, limit=10, kind="noop", telemetry=modes[mode])[0]
            if mode == "on":  # the round's deferred work in the round's CPU time (its clock has stopped)
                default.flush()
                metrics.fold()
                handler.flush()
            spent, main = time.process_time() - cpu_before, time.thread_time() - main_before
            cpu[mode].append(spent / args.jobs * 1e6)
            wcpu[mode].append((spent - main) / args.jobs * 1e6)
            rates[mode].append(rate)
            print(
                f"round {r + 1} telemetry {mode:<3}: {rate:8.0f} jobs/s, {cpu[mode][-1]:6.0f} CPU µs/job "
                f"({wcpu[mode][-1]:6.0f} in the worker's threads)"
            )
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    cpu_off, cpu_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    wcpu_off, wcpu_on = statistics.median(wcpu["off"]), statistics.median(wcpu["on"])
    wcpu_pairs = [a / b for a, b in zip(wcpu["on"], wcpu["off"], strict=True)]
    pairs = [a / b for a, b in zip(rates["on"], rates["off"], strict=True)]  # each round ran both, back to back
    paired = statistics.median(pairs)
    default.flush()
    handler.flush()
    with open(log_path) as f:
        lines = sum(1 for _ in f)
    # The handlers alone, on this thread: what the runtime pays per job (job.start, claim, job.stop), each
    # event given to the handlers that take it, as the runtime does; the log lines are formatted and
    # written (by the flusher thread, counted in this process's CPU time) before the clock stops.
    handlers = modes["on"]
    meta = {"job_id": 1, "kind": "noop", "worker": "noop", "queue": "q", "attempt": 1, "node": "n"}
    started = time.process_time()  # CPU time: what the handlers cost, whatever else runs on the machine
    for _ in range(20000):
        for event in ("job.start", "claim", "job.stop"):
            if event in telemetry.taken(handlers):
                m = (
                    {"queue": "q", "node": "n", "demand": 1, "claimed": 1, "duration_ms": 0.5}
                    if event == "claim"
                    else meta
                )
                m = {**meta, "state": "succeeded", "duration_ms": 1} if event == "job.stop" else m
                for h in handlers:
                    if telemetry.takes(h, event):
                        h(event, m)
    default.flush()  # the queued lines' records built and handed to the log handler
    metrics.fold()
    handler.flush()
    per_job_us = (time.process_time() - started) / 20000 * 1e6
    handler.close()
    log_file.close()
    print(
        f"median telemetry off: {off:8.0f} jobs/s; on (default logger + Prometheus): {on:8.0f} jobs/s "
        f"({on / off:.1%} of off; target >= 95%); {lines} log lines written\n"
        f"median of the rounds' paired on/off ratios: {paired:.1%} (rounds: {' '.join(f'{x:.2f}' for x in pairs)})"
    )
    print(
        f"median CPU per job: off {cpu_off:.0f} µs, on {cpu_on:.0f} µs ({cpu_on / cpu_off:.1%} of off); "
        f"the handlers alone: {per_job_us:.1f} CPU µs per job ({per_job_us / cpu_off:.1%} of a job's CPU)\n"
        f"median CPU per job in the worker's threads: off {wcpu_off:.0f} µs, on {wcpu_on:.0f} µs "
        f"({wcpu_on / wcpu_off:.1%} of off; paired: {statistics.median(wcpu_pairs):.1%})"
    )
    return {
        "off": rates["off"],
        "on": rates["on"],
        "median_off": off,
        "median_on": on,
        "ratio": on / off,
        "paired_ratios": pairs,
        "paired_ratio_median": paired,
        "cpu_us_per_job_off": cpu["off"],
        "cpu_us_per_job_on": cpu["on"],
        "cpu_ratio": cpu_on / cpu_off,
        "worker_cpu_us_per_job_off": wcpu["off"],
        "worker_cpu_us_per_job_on": wcpu["on"],
        "worker_cpu_ratio": wcpu_on / wcpu_off,
        "worker_cpu_paired_ratio_median": statistics.median(wcpu_pairs),
        "handlers_us_per_job": per_job_us,
        "log_lines": lines,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--jobs", type=int, default=20000, help="jobs drained by every mode (default %(default)s)")
    t.add_argument("--unbatched-limit", type=int, default=10, help="runtime limit and pure-SQL connections")
    t.add_argument("--batched-limit", type=int, default=200)
    t.add_argument("--chunk", type=int, default=100, help="chunk size, and the pure-SQL batch size")
    t.add_argument(
        "--notify",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="the pg_notify accelerator in the draining worker",
    )
    lat = sub.add_parser("latency")
    lat.add_argument("--rounds", type=int, default=500)
    lat.add_argument("--warmup", type=int, default=20)
    lat.add_argument(
        "--no-fsync-too",
        action="store_true",
        help="also measure the accelerator with synchronous_commit=off (the same path without waiting for the "
        "disk: how much of the figure is the three fsync'd commits)",
    )
    m = sub.add_parser("memory")
    m.add_argument("--jobs", type=int, default=100000)
    m.add_argument("--batched", action="store_true")
    tel = sub.add_parser("telemetry")
    tel.add_argument("--jobs", type=int, default=5000)
    tel.add_argument("--rounds", type=int, default=3)
    tel.add_argument(
        "--unbatched-log", action="store_true", help="log through logging.StreamHandler (a write+flush per line)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    compile_sources()
    db = provision()
    global OWN_SERVER
    OWN_SERVER = db.kind != "env"
    try:
        print(f"PostgreSQL: {db.reason} at {redact(db.url)}")
        with psycopg.connect(db.url, autocommit=True) as c:
            migrate(c)
            print(
                "durability:",
                ", ".join(f"{k}={c.execute(f'SHOW {k}').fetchone()[0]}" for k in ("fsync", "synchronous_commit")),
            )
        figures = {
            "throughput": cmd_throughput,
            "latency": cmd_latency,
            "memory": cmd_memory,
            "telemetry": cmd_telemetry,
        }[args.cmd](db.url, args)
        print(json.dumps(figures, default=float))
    finally:
        db.close()


if __name__ == "__main__":
    main()
