"""Belay beside other PostgreSQL job queues: the same workload, one database, interleaved rounds.

    .venv/bin/python -m bench.peers [--jobs 20000] [--rounds 5] [--json reports/peers.json]
    pip install '.[peers]'      # the peer systems (pgqueuer; see PEERS for what each adapter covers)

For every system, each round: N no-op jobs are enqueued with the system's batch API (1,000 per call)
into a fresh database, then drained by ONE worker process at the system's documented high-throughput
settings. The clock of a drain stops when the database shows every job complete (counted with SQL
from the tables, never from a system's own counters). Rounds are interleaved in alternating order so
a noisy neighbour hurts every system alike; the table shows medians and, per round, the ratio to
Belay batched. Per job, the database work of each drain (commits, rows written, WAL bytes and WAL
syncs from pg_stat_database / pg_stat_wal) explains the differences.

A peer whose package is missing is skipped with the reason printed. Adapters exist for Belay and
pgqueuer; procrastinate, dbos and chancy are not covered by this revision (said in the output).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
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

from impl.migrate import migrate
from impl.provision import provision, redact

ROOT = Path(__file__).resolve().parents[1]
BATCH = 1000  # jobs per enqueue call, for every system
NOT_COVERED = {"procrastinate": "no adapter yet", "dbos": "no adapter yet", "chancy": "no adapter yet"}


# --- database work, from PostgreSQL's own statistics -------------------------------------------------


def db_counters(url: str) -> dict[str, float]:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT pg_stat_clear_snapshot()")
        commits, ins, upd, dele = c.execute(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
        wal = c.execute("SELECT wal_bytes, wal_sync FROM pg_stat_wal").fetchone()
    return {"commits": commits, "rows_written": ins + upd + dele, "wal_bytes": float(wal[0]), "wal_syncs": wal[1]}


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


def _python(code: str, url: str, timeout: float) -> float:
    """Run a drain in its own worker process; it prints the seconds it measured."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "BENCH_URL": url,
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"drain process failed: {done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


# Belay ------------------------------------------------------------------------------------------------


def belay_setup(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        migrate(c)


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
url, n, mode = os.environ["BENCH_URL"], int(os.environ["BENCH_N"]), os.environ["BENCH_MODE"]
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
logging.disable(logging.WARNING)
with psycopg.connect(url, autocommit=True) as c:
    started = time.perf_counter()
    worker = Worker(url, reg, config).start()
    while c.execute("SELECT count(*) FROM belay_jobs WHERE queue = 'bench' AND state = 'succeeded'").fetchone()[0] < n:
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
worker.stop(grace=5)
print(elapsed)
"""


def belay_drain(mode: str):
    def drain(url: str, n: int) -> float:
        os.environ["BENCH_N"], os.environ["BENCH_MODE"] = str(n), mode
        return _python(BELAY_DRAIN, url, timeout=600)

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


def pgqueuer_enqueue(url: str, n: int) -> float:
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
                await q.enqueue(["noop"] * k, [None] * k, [0] * k)
            return time.perf_counter() - started
        finally:
            await conn.close()

    return asyncio.run(go())


PGQUEUER_DRAIN = """
import asyncio, os, time, logging
import psycopg
from pgqueuer.db import PsycopgDriver
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
logging.disable(logging.WARNING)
url, n, batch = os.environ["BENCH_URL"], int(os.environ["BENCH_N"]), int(os.environ["BENCH_BATCH"])

async def main():
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    probe = await psycopg.AsyncConnection.connect(url, autocommit=True)
    qm = QueueManager(Queries(PsycopgDriver(conn)))

    @qm.entrypoint("noop")
    async def noop(job):
        return None

    async def watch():
        # completion as the database shows it: the job rows gone and logged successful
        while True:
            cur = await probe.execute("SELECT (SELECT count(*) FROM pgqueuer), "
                                      "(SELECT count(*) FROM pgqueuer_log WHERE status = 'successful')")
            left, ok = await cur.fetchone()
            if left == 0 and ok >= n:
                qm.shutdown.set()
                return time.perf_counter()
            await asyncio.sleep(0.02)

    started = time.perf_counter()
    watcher = asyncio.create_task(watch())
    await qm.run(batch_size=batch)
    ended = await watcher
    print(ended - started)

asyncio.run(main())
"""


def pgqueuer_drain(batch: int):
    def drain(url: str, n: int) -> float:
        os.environ["BENCH_N"], os.environ["BENCH_BATCH"] = str(n), str(batch)
        return _python(PGQUEUER_DRAIN, url, timeout=600)

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


def run_round(admin_url: str, key: str, n: int) -> dict:
    _system, setup, enqueue, drain = SYSTEMS[key]
    url = fresh_database(admin_url)
    try:
        setup(url)
        enqueue_s = enqueue(url, n)
        before = db_counters(url)
        drain_s = drain(url, n)
        after = db_counters(url)
        return {"enqueue_per_s": n / enqueue_s, "drain_per_s": n / drain_s, "db_per_job": per_job(before, after, n)}
    finally:
        drop_database(admin_url, url)


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
    skipped = {k: SYSTEMS[k][0].available() for k in chosen if SYSTEMS[k][0].available()}
    chosen = [k for k in chosen if k not in skipped]
    for k, why in {**skipped, **NOT_COVERED}.items():
        print(f"skipped {k}: {why}")

    db = provision()
    try:
        print(f"database: {db.kind} {redact(db.url)}; {args.jobs} jobs, {args.rounds} interleaved rounds", flush=True)
        results: dict[str, list[dict]] = {k: [] for k in chosen}
        for r in range(args.rounds):
            order = chosen if r % 2 == 0 else list(reversed(chosen))
            for key in order:
                res = run_round(db.url, key, args.jobs)
                results[key].append(res)
                print(
                    f"round {r + 1} {key}: enqueue {res['enqueue_per_s']:,.0f}/s drain {res['drain_per_s']:,.0f}/s",
                    flush=True,
                )
    finally:
        db.close()

    base = "belay-batched" if "belay-batched" in results else None
    table = {}
    print()
    print(
        f"{'system':<40} {'enqueue/s':>10} {'drain/s':>9} {'drain ÷ belay-batched':>22} "
        f"{'commits/job':>11} {'rows/job':>8} {'WAL B/job':>9} {'syncs/job':>9}"
    )
    for key, rounds in results.items():
        enq = statistics.median(x["enqueue_per_s"] for x in rounds)
        drn = statistics.median(x["drain_per_s"] for x in rounds)
        ratio = (
            statistics.median(x["drain_per_s"] / b["drain_per_s"] for x, b in zip(rounds, results[base], strict=True))
            if base
            else None
        )
        work = {k: statistics.median(x["db_per_job"][k] for x in rounds) for k in rounds[0]["db_per_job"]}
        table[key] = {
            "label": SYSTEMS[key][0].label,
            "enqueue_per_s": enq,
            "drain_per_s": drn,
            "drain_ratio_to_belay_batched": ratio,
            "db_per_job": work,
            "rounds": rounds,
        }
        print(
            f"{SYSTEMS[key][0].label:<40} {enq:>10,.0f} {drn:>9,.0f} {ratio if ratio is not None else float('nan'):>22.2f} "
            f"{work['commits']:>11.3f} {work['rows_written']:>8.2f} {work['wal_bytes']:>9.0f} {work['wal_syncs']:>9.3f}"
        )
    out = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "jobs": args.jobs,
        "rounds": args.rounds,
        "machine": f"{os.cpu_count()} cores",
        "systems": table,
        "skipped": {**skipped, **NOT_COVERED},
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
