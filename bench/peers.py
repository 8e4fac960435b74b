"""Belay beside other PostgreSQL job queues: the same workload, one database, interleaved rounds.

    .venv/bin/python -m bench.peers [--jobs 20000] [--rounds 5] [--systems a,b] [--json reports/peers.json]
    pip install '.[peers]'      # the peer systems: pgqueuer, procrastinate, chancy, dbos

For every system, each round: a fresh database on the one embedded PostgreSQL the bench provisions
(fsync and synchronous_commit on, as provisioned), the system's own schema installed its own way,
N no-op jobs enqueued with the system's batch API (1,000 per call; timed: bulk enqueue jobs/s), then
ANALYZE and CHECKPOINT (`settle`), then drained by ONE worker process, run as the system's own
documentation or CLI runs it. Every system is
observed the same way, from outside its process: the drain clock runs from starting the worker process
until SQL on the system's own tables — polled every 50 ms by the bench's own process on its own
connection, never inside the worker — shows all N finished (never the system's own counters); a drain
that shows failed jobs stops at once. The worker process measures nothing; the bench terminates it.
Rounds are interleaved, alternating the order, so a noisy neighbour hurts every system alike;
the table shows medians and the median of per-round (paired) ratios to Belay batched.
Per job, the database work of each drain (commits and rows written from pg_stat_database, WAL bytes
and syncs from pg_stat_wal; the enqueue's too, in the JSON) explains the differences.

Each system runs at its default-like setting and at its high-throughput setting. Belay unbatched holds at
most 10 jobs in flight (limit 10); pgqueuer's batch 10 dequeues 10 jobs per query with no cap on the jobs
in flight (its QueueManager.run default max_concurrent_tasks=None); the others run 10 or 50 at once:

  Belay           enqueue_many; batched kind (chunk 100, limit 200) / unbatched (limit 10)
  pgqueuer        Queries.enqueue over lists; QueueManager.run(batch_size=100) / its default 10, on one
                  asyncpg connection under uvloop, as its `pgq run` does
  procrastinate   Task.batch_defer_async; worker concurrency 50 / 10 (asyncio jobs, LISTEN/NOTIFY)
  chancy          Chancy.push_many(batch_size=1000); AsyncExecutor (its choice for many small I/O
                  jobs) with eager_polling, queue concurrency 50 / 10
  dbos            no batch enqueue API: DBOSClient.enqueue_in_transaction, 1,000 per transaction;
                  queue worker_concurrency 50 / 10, polling_interval_sec 0.01 (our choice: at the
                  default 1 s a worker starts at most worker_concurrency workflows a second)

A peer whose package is missing is skipped with the reason printed; one that fails (cannot run here)
is listed under "not run" with the error, in the table and the JSON — never silently dropped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from bench import compile_sources, proc_cpu_seconds
from impl.provision import provision, redact
from impl.store.migrate import migrate

ROOT = Path(__file__).resolve().parents[1]
BATCH = 1000  # jobs per enqueue call, for every system


# --- database work, from PostgreSQL's own statistics -------------------------------------------------


def db_counters(admin_url: str, url: str) -> dict[str, float]:
    """pg_stat_database for url's database, read through admin_url (another database) so that reading
    adds no transactions to the count; pg_stat_wal is server-wide (nothing else runs there)."""
    from urllib.parse import urlsplit

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(admin_url, autocommit=True) as c:
        c.execute("SELECT pg_stat_clear_snapshot()")
        commits, ins, upd, dele = c.execute(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database WHERE datname = %s",
            (name,),
        ).fetchone()
        wal = c.execute("SELECT wal_bytes, wal_sync FROM pg_stat_wal").fetchone()
    return {"commits": commits, "rows_written": ins + upd + dele, "wal_bytes": float(wal[0]), "wal_syncs": wal[1]}


def settled_counters(admin_url: str, url: str, settle: float = 0.2, limit: float = 5.0) -> dict[str, float]:
    """The counters once they stop moving: backends of a process that just exited flush their
    statistics as they end, a moment after the client is gone."""
    deadline = time.monotonic() + limit
    last = db_counters(admin_url, url)
    while time.monotonic() < deadline:
        time.sleep(settle)
        now = db_counters(admin_url, url)
        if now == last:
            break
        last = now
    return last


def package_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in ("psycopg", "pgqueuer", "procrastinate", "chancy", "dbos"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def per_job(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    return {k: round((after[k] - before[k]) / n, 3) for k in before}


# --- the systems ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class System:
    name: str
    label: str
    package: str | None  # the import name that must exist, None for Belay

    def available(self) -> str | None:
        if self.package and importlib.util.find_spec(self.package) is None:
            return f"{self.package} is not installed (pip install '.[peers]')"
        return None


POLL_S = 0.05  # the observer's cadence, the same for every system

# CPU seconds of the last drain, read from /proc by `_python` (None where /proc cannot show them: not Linux,
# or a PostgreSQL server on another machine); run_round reports them per job.
_last_cpu: dict[str, float | None] = {}
_CPU_KEYS = ("worker", "postgresql")


def _thread_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of a single-threaded process (a PostgreSQL backend) in nanoseconds' precision
    (/proc/<pid>/schedstat; /proc's stat counts clock ticks, 10 ms, more than a small drain's backend uses)."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        return proc_cpu_seconds(pid)


def _backends_cpu(probe: psycopg.Connection) -> float | None:
    """CPU seconds used so far by the PostgreSQL backends serving the drain's database, the bench's own
    probe excepted (the same probe for every system); None unless every one of them can be read here."""
    pids = [
        r[0]
        for r in probe.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    ]
    seconds = [_thread_cpu_seconds(pid) for pid in pids]
    return None if any(x is None for x in seconds) else sum(x for x in seconds if x is not None)


def stop_worker(proc: subprocess.Popen, terminate: bool = True) -> None:
    """Terminate a drain's worker process (unless the caller already did), kill it after 15 s, and close its
    stderr pipe."""
    if terminate:
        proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def _python(code: str, url: str, timeout: float, finished_sql: str, n: int) -> float:
    """Run a system's worker in its own process and time its drain from outside it, the same way for
    every system: the clock starts when the process is started and stops when `finished_sql` — run by
    this (the bench's) process every POLL_S on its own autocommit connection — shows all n finished
    (first column) with none failed (second). The worker process only works: it measures nothing and
    runs until it is terminated."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "BENCH_URL": url,
    }
    with psycopg.connect(url, autocommit=True) as probe:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        try:
            while True:
                ok, failed = probe.execute(finished_sql).fetchone()
                if failed:
                    raise RuntimeError(f"{failed} jobs failed")
                if ok >= n:
                    elapsed = time.perf_counter() - started
                    # Observed from outside, the same way for every system, before the worker is stopped:
                    # the worker process's CPU since it started, and its backends' (born for this drain).
                    _last_cpu.update(worker=proc_cpu_seconds(proc.pid), postgresql=_backends_cpu(probe))
                    return elapsed
                if proc.poll() is not None:
                    raise RuntimeError(f"drain process exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
                if time.perf_counter() - started > timeout:
                    raise RuntimeError(f"drain not finished after {timeout} s ({ok} of {n})")
                time.sleep(POLL_S)
        finally:
            stop_worker(proc)


# Belay ------------------------------------------------------------------------------------------------


AUTOVACUUM_PARAMS = (
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_cost_delay",
    "vacuum_index_cleanup",
)


def belay_setup(url: str, pg_autovacuum_defaults: bool = False) -> None:
    """Migrate. `migrate` also sets belay_jobs' autovacuum storage parameters (docs/decisions.md); with
    `pg_autovacuum_defaults` they are reset, so the table vacuums on PostgreSQL's defaults (a baseline)."""
    with psycopg.connect(url, autocommit=True) as c:
        migrate(c)
        if pg_autovacuum_defaults:
            c.execute(f"ALTER TABLE belay_jobs RESET ({', '.join(AUTOVACUUM_PARAMS)})")


def belay_enqueue(url: str, n: int) -> float:
    from impl.client import Client
    from model.ops import JobSpec

    client = Client(url)
    try:
        started = time.perf_counter()
        for start in range(0, n, BATCH):
            client.enqueue_many([JobSpec(queue="bench", worker="noop") for _ in range(min(BATCH, n - start))])
        return time.perf_counter() - started
    finally:
        client.close()


BELAY_DRAIN = """
import os, time, logging
from impl.runtime import QueueConfig, Worker, WorkerConfig
from impl.worker import Registry
from model.queues import QueueOpts
import psycopg
logging.disable(logging.WARNING)
url, mode = os.environ["BENCH_URL"], os.environ["BENCH_MODE"]
reg = Registry()
if mode == "batched":
    @reg.kind("noop", queue="bench", chunk={"size": 100, "gather_ms": 20})
    def noop(contexts):
        return [None] * len(contexts)
    opts = QueueOpts(200, 200)
else:
    @reg.kind("noop", queue="bench")
    def noop(ctx, _input):
        return None
    opts = QueueOpts(10, 10)
config = WorkerConfig(queues=(QueueConfig("bench", opts),), notify=True, sweep_interval=3600)
worker = Worker(url, reg, config).start()
while True:  # until the bench terminates the process
    time.sleep(3600)
"""
BELAY_FINISHED = (
    "SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state = 'failed') "
    "FROM belay_jobs WHERE queue = 'bench'"
)


def belay_drain(mode: str):
    def drain(url: str, n: int) -> float:
        os.environ["BENCH_N"], os.environ["BENCH_MODE"] = str(n), mode
        return _python(BELAY_DRAIN, url, 600, BELAY_FINISHED, n)

    return drain


# pgqueuer ---------------------------------------------------------------------------------------------


def pgqueuer_setup(url: str) -> None:
    import asyncio

    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    async def install() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            await Queries(PsycopgDriver(conn)).install()
        finally:
            await conn.close()

    asyncio.run(install())


def pgqueuer_enqueue(url: str, n: int, entrypoints: int = 1) -> float:
    """n jobs through Queries.enqueue in batches of BATCH: entrypoint "noop", or noop0..noop{k-1} round robin."""
    import asyncio

    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    async def go() -> float:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            q = Queries(PsycopgDriver(conn))
            started = time.perf_counter()
            for start in range(0, n, BATCH):
                k = min(BATCH, n - start)
                names = (
                    ["noop"] * k if entrypoints == 1 else [f"noop{j % entrypoints}" for j in range(start, start + k)]
                )
                await q.enqueue(names, [None] * k, [0] * k)
            return time.perf_counter() - started
        finally:
            await conn.close()

    return asyncio.run(go())


PGQUEUER_DRAIN = """
# As pgqueuer's own `pgq run` runs a worker: one asyncpg connection (AsyncpgDriver) on uvloop.
import os, logging
import asyncpg, uvloop
from pgqueuer.db import AsyncpgDriver
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
logging.disable(logging.WARNING)
url, batch = os.environ["BENCH_URL"], int(os.environ["BENCH_BATCH"])

async def main():
    conn = await asyncpg.connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint("noop")
    async def noop(job):
        return None

    await qm.run(batch_size=batch)

uvloop.run(main())
"""
# completion as the database shows it: the job rows logged successful (and none logged as an exception)
PGQUEUER_FINISHED = (
    "SELECT count(*) FILTER (WHERE status = 'successful'), count(*) FILTER (WHERE status = 'exception') "
    "FROM pgqueuer_log"
)


def pgqueuer_drain(batch: int):
    def drain(url: str, n: int) -> float:
        os.environ["BENCH_N"], os.environ["BENCH_BATCH"] = str(n), str(batch)
        return _python(PGQUEUER_DRAIN, url, 600, PGQUEUER_FINISHED, n)

    return drain


# procrastinate ----------------------------------------------------------------------------------------
# Its batch API is Task.batch_defer_async (one procrastinate_defer_jobs_v1 call over an array of rows);
# its worker runs `concurrency` asyncio jobs, fetching one job per query, woken by LISTEN/NOTIFY.


def _procrastinate_app(url: str):
    import logging

    import procrastinate

    # it warns about an App made in __main__ (it cannot find tasks there); this side only defers by name
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))


def procrastinate_setup(url: str) -> None:
    import asyncio

    async def install() -> None:
        app = _procrastinate_app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(install())


def procrastinate_enqueue(url: str, n: int) -> float:
    import asyncio

    async def go() -> float:
        app = _procrastinate_app(url)
        task = app.configure_task("noop", queue="bench")
        async with app.open_async():
            started = time.perf_counter()
            for start in range(0, n, BATCH):
                await task.batch_defer_async(*({} for _ in range(min(BATCH, n - start))))
            return time.perf_counter() - started

    return asyncio.run(go())


PROCRASTINATE_DRAIN = """
import asyncio, os, time, logging
import procrastinate
logging.disable(logging.WARNING)
url, conc = os.environ["BENCH_URL"], int(os.environ["BENCH_CONCURRENCY"])
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

@app.task(name="noop", queue="bench")
async def noop():
    return None

async def main():
    async with app.open_async():
        await app.run_worker_async(queues=["bench"], concurrency=conc, wait=True, install_signal_handlers=False)

asyncio.run(main())
"""
PROCRASTINATE_FINISHED = (
    "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed') "
    "FROM procrastinate_jobs"
)


def procrastinate_drain(concurrency: int):
    def drain(url: str, n: int) -> float:
        os.environ["BENCH_N"], os.environ["BENCH_CONCURRENCY"] = str(n), str(concurrency)
        return _python(PROCRASTINATE_DRAIN, url, 900, PROCRASTINATE_FINISHED, n)

    return drain


# chancy -----------------------------------------------------------------------------------------------
# Its batch API is Chancy.push_many (one transaction per batch_size jobs, one INSERT per job inside);
# its worker runs a queue with an executor; the AsyncExecutor is the documented choice for many small
# I/O-bound jobs, and eager_polling refills free slots at once instead of waiting for the poll interval.
# Job state changes are buffered and written in batches (send_outgoing_interval, 1 s).


async def chancy_noop() -> None:
    """The no-op job chancy runs (chancy imports jobs by their dotted path)."""


def chancy_setup(url: str) -> None:
    import asyncio

    from chancy import Chancy

    async def install() -> None:
        async with Chancy(url) as chancy:
            await chancy.migrate()

    asyncio.run(install())


def chancy_enqueue(url: str, n: int) -> float:
    import asyncio

    from chancy import Chancy, Job

    async def go() -> float:
        # by its dotted path: Job.from_func would name __main__ when this module runs as `python -m bench.peers`
        job = Job(func="bench.peers.chancy_noop", queue="bench")
        async with Chancy(url) as chancy:
            started = time.perf_counter()
            async for _refs in chancy.push_many([job] * n, batch_size=BATCH):
                pass
            return time.perf_counter() - started

    return asyncio.run(go())


CHANCY_DRAIN = """
import asyncio, os, logging
from chancy import Chancy, Queue, Worker
logging.disable(logging.WARNING)
url, conc = os.environ["BENCH_URL"], int(os.environ["BENCH_CONCURRENCY"])

async def main():
    async with Chancy(url) as chancy:
        await chancy.declare(Queue("bench", concurrency=conc, executor=Chancy.Executor.Async,
                                   polling_interval=1, eager_polling=True), upsert=True)
        async with Worker(chancy, register_signal_handlers=False):
            await asyncio.Event().wait()  # until the bench terminates the process

asyncio.run(main())
"""
CHANCY_FINISHED = (
    "SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state = 'failed') FROM chancy_jobs"
)


def chancy_drain(concurrency: int):
    def drain(url: str, n: int) -> float:
        os.environ["BENCH_N"], os.environ["BENCH_CONCURRENCY"] = str(n), str(concurrency)
        return _python(CHANCY_DRAIN, url, 900, CHANCY_FINISHED, n)

    return drain


# dbos -------------------------------------------------------------------------------------------------
# DBOS has no batch enqueue; the closest documented form is DBOSClient.enqueue_in_transaction, so a
# batch is BATCH enqueues in one caller-owned transaction. Its worker dequeues up to worker_concurrency
# workflows per poll of the queue (polling_interval_sec); each workflow writes its status rows.


def dbos_setup(url: str) -> None:
    exe = Path(sys.executable).with_name("dbos")
    done = subprocess.run([str(exe), "migrate", "-s", url], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"dbos migrate failed: {done.stderr[-2000:]}")


def dbos_enqueue(url: str, n: int) -> float:
    import sqlalchemy as sa
    from dbos import DBOSClient

    engine = sa.create_engine(_sqlalchemy_url(url))
    client = DBOSClient(system_database_engine=engine)
    try:
        options = {"queue_name": "bench", "workflow_name": "noop"}
        started = time.perf_counter()
        for start in range(0, n, BATCH):
            with engine.begin() as conn:
                for _ in range(min(BATCH, n - start)):
                    client.enqueue_in_transaction(conn, options)  # type: ignore[arg-type]
        return time.perf_counter() - started
    finally:
        client.destroy()
        engine.dispose()


def _sqlalchemy_url(url: str) -> str:
    return "postgresql+psycopg://" + url.split("://", 1)[1]


DBOS_DRAIN = """
import os, time, logging
import psycopg
from dbos import DBOS
logging.disable(logging.WARNING)
url, conc = os.environ["BENCH_URL"], int(os.environ["BENCH_CONCURRENCY"])
poll = float(os.environ["BENCH_POLL"])
DBOS(config={"name": "bench", "system_database_url": url, "log_level": "ERROR", "executor_id": "bench"})

@DBOS.workflow(name="noop")
def noop():
    return None

DBOS.launch()
DBOS.register_queue("bench", worker_concurrency=conc, polling_interval_sec=poll, on_conflict="always_update")
while True:  # until the bench terminates the process
    time.sleep(3600)
"""
DBOS_FINISHED = (
    "SELECT count(*) FILTER (WHERE status = 'SUCCESS'), "
    "count(*) FILTER (WHERE status IN ('ERROR', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')) FROM dbos.workflow_status"
)


def dbos_drain(concurrency: int, poll: float):
    def drain(url: str, n: int) -> float:
        os.environ["BENCH_N"], os.environ["BENCH_CONCURRENCY"], os.environ["BENCH_POLL"] = (
            str(n),
            str(concurrency),
            str(poll),
        )
        return _python(DBOS_DRAIN, url, 900, DBOS_FINISHED, n)

    return drain


# name → (system, setup, enqueue, drain)
SYSTEMS = {
    "belay-batched": (
        System("belay-batched", "Belay batched (chunk 100, limit 200)", None),
        belay_setup,
        belay_enqueue,
        belay_drain("batched"),
    ),
    "belay-unbatched": (
        System("belay-unbatched", "Belay unbatched (limit 10)", None),
        belay_setup,
        belay_enqueue,
        belay_drain("unbatched"),
    ),
    "pgqueuer-10": (
        System("pgqueuer-10", "pgqueuer (batch 10, its default)", "pgqueuer"),
        pgqueuer_setup,
        pgqueuer_enqueue,
        pgqueuer_drain(10),
    ),
    "pgqueuer-100": (
        System("pgqueuer-100", "pgqueuer (batch 100)", "pgqueuer"),
        pgqueuer_setup,
        pgqueuer_enqueue,
        pgqueuer_drain(100),
    ),
    "procrastinate-10": (
        System("procrastinate-10", "procrastinate (concurrency 10)", "procrastinate"),
        procrastinate_setup,
        procrastinate_enqueue,
        procrastinate_drain(10),
    ),
    "procrastinate-50": (
        System("procrastinate-50", "procrastinate (concurrency 50)", "procrastinate"),
        procrastinate_setup,
        procrastinate_enqueue,
        procrastinate_drain(50),
    ),
    "chancy-10": (
        System("chancy-10", "chancy (async, concurrency 10)", "chancy"),
        chancy_setup,
        chancy_enqueue,
        chancy_drain(10),
    ),
    "chancy-50": (
        System("chancy-50", "chancy (async, concurrency 50)", "chancy"),
        chancy_setup,
        chancy_enqueue,
        chancy_drain(50),
    ),
    "dbos-10": (
        System("dbos-10", "dbos (worker concurrency 10)", "dbos"),
        dbos_setup,
        dbos_enqueue,
        dbos_drain(10, 0.01),
    ),
    "dbos-50": (
        System("dbos-50", "dbos (worker concurrency 50)", "dbos"),
        dbos_setup,
        dbos_enqueue,
        dbos_drain(50, 0.01),
    ),
}


def fresh_database(admin_url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    name = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as c:
        c.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    return urlunsplit(urlsplit(admin_url)._replace(path="/" + name))


def drop_database(admin_url: str, url: str) -> None:
    from urllib.parse import urlsplit

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(admin_url, autocommit=True) as c:
        c.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(psycopg.sql.Identifier(name)))


def settle(url: str) -> None:
    """Before every drain, for every system alike: ANALYZE the round's database (its tables' statistics,
    as autovacuum would have them by then on a live system; a drain planned on none measures the planner's
    guesses) and CHECKPOINT (no system pays for the previous one's dirty pages)."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("ANALYZE")
        c.execute("CHECKPOINT")


def run_round(admin_url: str, key: str, n: int) -> dict:
    _system, setup, enqueue, drain = SYSTEMS[key]
    url = fresh_database(admin_url)
    try:
        setup(url)
        before_enqueue = settled_counters(admin_url, url)
        enqueue_s = enqueue(url, n)
        settle(url)
        before = settled_counters(admin_url, url)
        _last_cpu.clear()
        drain_s = drain(url, n)
        after = settled_counters(admin_url, url)
        return {
            "enqueue_per_s": n / enqueue_s,
            "drain_per_s": n / drain_s,
            "db_per_job": per_job(before, after, n),
            "enqueue_db_per_job": per_job(before_enqueue, before, n),
            # CPU µs per job of the drain (the worker's from its process start, its backends'), from /proc
            "cpu_us_per_job": {
                k: None if (seconds := _last_cpu.get(k)) is None else round(seconds / n * 1e6, 1) for k in _CPU_KEYS
            },
        }
    finally:
        drop_database(admin_url, url)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def summarise(results: dict[str, list[dict]]) -> dict[str, dict]:
    """Medians per system, and per round the ratio to Belay batched in the same round (paired)."""
    base = results.get("belay-batched")
    table = {}
    for key, rounds in results.items():
        if base is not None:
            drain_ratio: float | None = statistics.median(
                x["drain_per_s"] / b["drain_per_s"] for x, b in zip(rounds, base, strict=True)
            )
            enqueue_ratio: float | None = statistics.median(
                x["enqueue_per_s"] / b["enqueue_per_s"] for x, b in zip(rounds, base, strict=True)
            )
        else:
            drain_ratio = enqueue_ratio = None
        table[key] = {
            "label": SYSTEMS[key][0].label,
            "enqueue_per_s": statistics.median(x["enqueue_per_s"] for x in rounds),
            "drain_per_s": statistics.median(x["drain_per_s"] for x in rounds),
            "enqueue_ratio_to_belay_batched": enqueue_ratio,
            "drain_ratio_to_belay_batched": drain_ratio,
            "db_per_job": {k: statistics.median(x["db_per_job"][k] for x in rounds) for k in rounds[0]["db_per_job"]},
            "enqueue_db_per_job": {
                k: statistics.median(x["enqueue_db_per_job"][k] for x in rounds)
                for k in rounds[0]["enqueue_db_per_job"]
            },
            "cpu_us_per_job": {k: _median_or_none([x["cpu_us_per_job"][k] for x in rounds]) for k in _CPU_KEYS},
            "rounds": rounds,
        }
    return table


def _median_or_none(values: list[float | None]) -> float | None:
    """The median, or None when any round could not be observed."""
    return (
        None if not values or any(v is None for v in values) else statistics.median(v for v in values if v is not None)
    )


# The claims of docs/benchmarks.md: each compares two systems round by round (the same round, so the same noise).
CLAIMS = (
    ("belay-unbatched", "pgqueuer-10", "the default kind ÷ pgqueuer's default"),
    ("belay-batched", "pgqueuer-100", "batched ÷ pgqueuer batch 100"),
)


def paired(results: dict[str, list[dict]]) -> list[dict]:
    """Per-round drain ratios of each claim pair: min, median, max and every round's value."""
    out = []
    for a, b, what in CLAIMS:
        if a in results and b in results and results[a] and len(results[a]) == len(results[b]):
            ratios = [x["drain_per_s"] / y["drain_per_s"] for x, y in zip(results[a], results[b], strict=True)]
            out.append(
                {
                    "pair": f"{a} / {b}",
                    "what": what,
                    "rounds": [round(r, 3) for r in ratios],
                    "min": min(ratios),
                    "median": statistics.median(ratios),
                    "max": max(ratios),
                }
            )
    return out


def print_rounds(results: dict[str, list[dict]]) -> None:
    keys = list(results)
    if not keys:
        return
    print(f"{'drain jobs/s per round':<40} " + " ".join(f"{'r' + str(i + 1):>8}" for i in range(len(results[keys[0]]))))
    for key in keys:
        print(f"{key:<40} " + " ".join(f"{x['drain_per_s']:>8,.0f}" for x in results[key]))
    for row in paired(results):
        print(f"{row['what']:<40} " + " ".join(f"{r:>8.2f}" for r in row["rounds"]) + f"   min {row['min']:.2f}")


def print_table(table: dict[str, dict], not_run: dict[str, str]) -> None:
    print(
        f"{'system':<40} {'enqueue/s':>10} {'÷ belay':>7} {'drain/s':>9} {'÷ belay':>7} "
        f"{'commits/job':>11} {'rows/job':>8} {'WAL B/job':>9} {'syncs/job':>9} {'CPU µs/job worker + PG':>23}"
    )
    for row in table.values():
        work, cpu = row["db_per_job"], row["cpu_us_per_job"]
        print(
            f"{row['label']:<40} {row['enqueue_per_s']:>10,.0f} {_fmt(row['enqueue_ratio_to_belay_batched'], '.2f'):>7} "
            f"{row['drain_per_s']:>9,.0f} {_fmt(row['drain_ratio_to_belay_batched'], '.2f'):>7} "
            f"{work['commits']:>11.3f} {work['rows_written']:>8.2f} {work['wal_bytes']:>9.0f} {work['wal_syncs']:>9.3f} "
            f"{_fmt(cpu['worker'], '.0f'):>11} + {_fmt(cpu['postgresql'], '.0f'):<9}"
        )
    for key, why in not_run.items():
        print(f"{SYSTEMS[key][0].label if key in SYSTEMS else key:<40} not run: {why}")
    print(
        "drain/s: N jobs ÷ seconds from starting the worker process until SQL on the system's own tables, polled "
        "every 50 ms from the bench's process, shows all N finished; ÷ belay: median of per-round ratios to Belay batched; per job: drain deltas of "
        "pg_stat_database (commits, rows inserted+updated+deleted) and pg_stat_wal (bytes, syncs); CPU: /proc's "
        "user + system time of the worker process (from its start, imports included) and of the PostgreSQL "
        "backends serving the drain's database (the bench's probe excepted), per job, medians of the rounds."
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma list of %(default)s")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.rounds < 1:
        p.error("--jobs and --rounds must be positive")
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
    not_run: dict[str, str] = {}
    for k in chosen:
        why = SYSTEMS[k][0].available()
        if why:
            not_run[k] = why
            print(f"skipped {k}: {why}")
    chosen = [k for k in chosen if k not in not_run]

    compile_sources()
    load_before = load_average()
    db = provision()
    try:
        with psycopg.connect(db.url, autocommit=True) as c:
            server = c.execute("SHOW server_version").fetchone()[0]
            durability = {
                name: c.execute(psycopg.sql.SQL("SHOW {}").format(psycopg.sql.Identifier(name))).fetchone()[0]
                for name in ("fsync", "synchronous_commit")
            }
        print(
            f"database: {db.kind} PostgreSQL {server} {redact(db.url)} {durability}; {args.jobs} jobs, "
            f"{args.rounds} interleaved rounds; load average {load_before}",
            flush=True,
        )
        results: dict[str, list[dict]] = {k: [] for k in chosen}
        for r in range(args.rounds):
            running = [k for k in chosen if k not in not_run]
            order = running if r % 2 == 0 else list(reversed(running))
            for key in order:
                try:
                    res = run_round(db.url, key, args.jobs)
                except Exception as exc:  # noqa: BLE001 — a peer that cannot run here is reported, never dropped
                    not_run[key] = f"failed in round {r + 1}: {type(exc).__name__}: {str(exc).strip()[-600:]}"
                    print(f"round {r + 1} {key}: {not_run[key]}", flush=True)
                    continue
                results[key].append(res)
                print(
                    f"round {r + 1} {key}: enqueue {res['enqueue_per_s']:,.0f}/s drain {res['drain_per_s']:,.0f}/s "
                    f"(load {load_average()[0]})",
                    flush=True,
                )
    finally:
        db.close()
    load_after = load_average()

    results = {k: v for k, v in results.items() if k not in not_run}
    table = summarise(results)
    print()
    print_rounds(results)
    print()
    print_table(table, not_run)
    print(f"load average before {load_before}, after {load_after} ({os.cpu_count()} cores)")
    out = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "jobs": args.jobs,
        "rounds": args.rounds,
        "batch_per_enqueue_call": BATCH,
        "machine": f"{os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}",
        "postgresql": {"version": server, **durability},
        "load_average_before": load_before,
        "load_average_after": load_after,
        "versions": package_versions(),
        "systems": table,
        "paired": paired(results),
        "not_run": not_run,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
