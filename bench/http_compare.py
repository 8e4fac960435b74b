"""HTTP throughput before/after: an earlier revision's server and this tree's, back to back, same client.

    .venv/bin/python -m bench.http_compare --before 6da22c8 [--rounds 2] [--tasks 3000] [--batch 1 10]
        [--client lean|threads]

The earlier revision is extracted with `git archive` into a temporary directory and served the way its
`belay serve` did: one uvicorn process, `log_level="info"` (access log on), and uvicorn's pure-Python
HTTP/1.1 parser (h11) and asyncio loop — what uvicorn chose before httptools and uvloop were
dependencies (pinned here, because uvicorn would now pick them up for the old code too). This tree is
served by `belay serve` as it is (`--workers`, default its own). Both run against the same embedded
PostgreSQL with a fresh queue of ready tasks per measurement, and one of `bench.http`'s clients
(`--client`: `lean`, the default — one event loop sending httpx's request bytes over keep-alive
connections — or `threads`, one httpx.Client per thread; both claim up to `batch` runs and complete
each with its own request, checking status codes). Every measurement ends by counting the completed
tasks in the database (it must equal what the client counted). Rounds alternate before/after, so a
change in the machine's load hits both. Prints which client ran, one JSON line per measurement (with
CPU ms per task of the server process, of the client and of PostgreSQL — which a loaded machine
disturbs far less than the rate — and the 1-minute load average), the paired ratio of each round,
and a summary of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg

from bench import proc_cpu_seconds
from bench.http import CLIENTS, client_label, completed, fill, run
from impl.http.server import free_port
from impl.provision import provision, redact
from impl.store.migrate import migrate

ROOT = Path(__file__).resolve().parents[1]

OLD_SERVE = (
    "import sys, os, uvicorn\n"
    "import impl\n"
    "from impl.http import create_app\n"
    "if not os.path.abspath(impl.__file__).startswith(os.path.abspath(sys.argv[3]) + os.sep):\n"
    "    sys.exit(f'the before server imported {impl.__file__}, not the code of the earlier revision')\n"
    "uvicorn.run(create_app(sys.argv[1]), host='127.0.0.1', port=int(sys.argv[2]), log_level='info', "
    "http='h11', loop='asyncio')\n"
)
# `python -c` puts the current directory first on sys.path, before PYTHONPATH: started from a checkout,
# the "before" server would import that checkout's code. Each server runs with its own tree as its
# working directory, and the before server checks where `impl` came from.


def start(cmd: list[str], env: dict[str, str], port: int, cwd: str) -> subprocess.Popen:
    log = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the server process; closed after it exits
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    log.seek(0)
    raise RuntimeError(f"server {cmd} did not start: {log.read()[-3000:].decode(errors='replace')}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its live children (the workers of a multi-process
    server), from /proc; 0.0 where /proc is unavailable."""
    pids = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                pids += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return sum(proc_cpu_seconds(p) or 0.0 for p in pids)


def tree_cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process, everything it has reaped, and all its live descendants
    (PostgreSQL: the postmaster, its backends and background processes); 0.0 without /proc."""
    if pid is None:
        return 0.0
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        cpu = proc_cpu_seconds(p, reaped=True)
        if cpu is None:
            continue
        total += cpu
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return total


def measure(
    url: str,
    label: str,
    cmd: list[str],
    env: dict[str, str],
    port: int,
    tasks: int,
    workers: int,
    batch: int,
    client: str,
    db_pid: int | None,
    cwd: str,
) -> dict:
    proc = start(cmd, env, port, cwd)
    try:
        base = f"http://127.0.0.1:{port}/api/v1"
        queue = f"cmp-{label}-{batch}-{time.time_ns()}"
        assert httpx.post(f"{base}/queues", json={"name": queue}).status_code == 201
        fill(url, queue, tasks)
        cpu_before, db_before, client_before = cpu_seconds(proc.pid), tree_cpu_seconds(db_pid), time.process_time()
        done, requests, seconds = run(base, queue, workers, batch, client)
        client_cpu = time.process_time() - client_before
        server_cpu = cpu_seconds(proc.pid) - cpu_before
        db_cpu = tree_cpu_seconds(db_pid) - db_before
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    in_db = completed(url, queue)
    if not in_db == done == tasks:
        raise RuntimeError(f"{label}: {tasks} tasks, the client completed {done}, the database holds {in_db}")
    return {
        "server": label,
        "batch": batch,
        "tasks": done,
        "seconds": round(seconds, 2),
        "claims_completes_per_s": round(done / seconds, 1),
        "requests_per_s": round(requests / seconds, 1),
        "server_cpu_ms_per_task": round(1000 * server_cpu / max(done, 1), 2),
        "client_cpu_ms_per_task": round(1000 * client_cpu / max(done, 1), 2),
        "db_cpu_ms_per_task": round(1000 * db_cpu / max(done, 1), 2) if db_pid is not None else None,
        "completed_in_db": in_db,
        "load1": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="git revision of the 'before' server")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=8, help="concurrent client connections")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 10], help="claim limits to measure")
    parser.add_argument("--serve-args", default="", help="extra `belay serve` arguments for this tree")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="lean", help="benchmark client (bench/http.py)")
    args = parser.parse_args()
    print(f"client: {client_label(args.client)}; {args.workers} concurrent connections", flush=True)
    db = provision(dict(os.environ))
    db_pid = db.cluster.pid if db.cluster is not None else None
    results: list[dict] = []
    try:
        with psycopg.connect(db.url, autocommit=True) as conn:
            migrate(conn)
        with tempfile.TemporaryDirectory() as old:
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.before], check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
            for _ in range(args.rounds):
                for batch in args.batch:
                    for label in ("before", "after"):
                        port = free_port()
                        if label == "before":
                            cmd = [sys.executable, "-c", OLD_SERVE, db.url, str(port), old]
                            env, cwd = {**os.environ, "PYTHONPATH": old}, old
                        else:
                            cmd = [
                                sys.executable,
                                "-m",
                                "impl.ops.cli",
                                "serve",
                                "--database-url",
                                db.url,
                                "--port",
                                str(port),
                                *args.serve_args.split(),
                            ]
                            env, cwd = {**os.environ, "PYTHONPATH": str(ROOT)}, str(ROOT)
                        result = measure(
                            db.url, label, cmd, env, port, args.tasks, args.workers, batch, args.client, db_pid, cwd
                        )
                        results.append(result)
                        print(json.dumps(result), flush=True)
    finally:
        db.close()
    print(f"database: {db.kind}: {redact(db.url)}; load average {os.getloadavg()}")
    for i in range(0, len(results), 2):
        before, after = results[i], results[i + 1]
        print(
            json.dumps(
                {
                    "pair": i // 2,
                    "batch": before["batch"],
                    "ratio": round(after["claims_completes_per_s"] / before["claims_completes_per_s"], 2),
                    "cpu_ratio": round(
                        before["server_cpu_ms_per_task"] / max(after["server_cpu_ms_per_task"], 1e-9), 2
                    ),
                }
            )
        )
    for batch in args.batch:
        rows = {
            label: [r for r in results if r["server"] == label and r["batch"] == batch] for label in ("before", "after")
        }

        def median(label: str, key: str, rows: dict[str, list[dict]] = rows) -> float | None:
            values = [r[key] for r in rows[label] if r[key] is not None]
            return round(statistics.median(values), 2) if values else None

        medians = {label: median(label, "claims_completes_per_s") for label in ("before", "after")}
        print(
            json.dumps(
                {
                    "batch": batch,
                    "client": args.client,
                    "median_before": medians["before"],
                    "median_after": medians["after"],
                    "ratio": round(medians["after"] / medians["before"], 2),  # type: ignore[operator]
                    "median_cpu_ms_per_task": {
                        label: {part: median(label, f"{part}_cpu_ms_per_task") for part in ("server", "client", "db")}
                        for label in ("before", "after")
                    },
                }
            )
        )


if __name__ == "__main__":
    main()
