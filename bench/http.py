"""HTTP benchmark: claims + completes per second through the Durable Execution API.

    .venv/bin/python -m bench.http [--tasks 3000] [--workers 8] [--batch 1]

Starts `belay serve` as a subprocess (uvicorn, one process) on a free loopback port against
$BELAY_DATABASE_URL or an embedded PostgreSQL (default durability), fills a queue with ready tasks
(one SQL statement, not measured), then `workers` threads each loop: claim up to `batch` runs, complete
each. Prints tasks/s (one claimed run + one complete each) and HTTP requests/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

import httpx
import psycopg

from impl.http.server import free_port
from impl.migrate import migrate
from impl.provision import provision, redact

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def fill(url: str, queue: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(
            "INSERT INTO belay_jobs (queue, worker, state, ready_at, inserted_at, max_attempts) "
            "SELECT %s, 'noop', 'ready', %s, %s, 1 FROM generate_series(1, %s)",
            (queue, NOW, NOW, n),
        )


def serve(url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "impl.cli", "serve", "--database-url", url, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/openapi.json", timeout=1).status_code == 200:
                return proc, f"{base}/api/v1"
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"belay serve did not start: {proc.stderr.read()[-2000:]}")


def run(base: str, queue: str, workers: int, batch: int) -> tuple[int, int, float]:
    done = [0] * workers
    requests = [0] * workers

    def loop(i: int) -> None:
        with httpx.Client(base_url=base, timeout=30) as c:
            while True:
                tasks = c.post(f"/queues/{queue}/tasks/claim", json={"limit": batch, "claim_timeout": 60}).json()[
                    "tasks"
                ]
                requests[i] += 1
                if not tasks:
                    return
                for t in tasks:
                    r = c.post(f"/runs/{t['run_id']}/complete", json={"result": None})
                    assert r.status_code == 200, r.text
                    requests[i] += 1
                    done[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(workers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done), sum(requests), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1, help="claim limit per request")
    args = parser.parse_args()
    db = provision(dict(os.environ))
    try:
        with psycopg.connect(db.url, autocommit=True) as conn:
            migrate(conn)
        proc, base = serve(db.url)
        try:
            queue = f"bench-{int(time.time())}"
            assert httpx.post(f"{base}/queues", json={"name": queue}).status_code == 201
            fill(db.url, queue, args.tasks)
            tasks, requests, seconds = run(base, queue, args.workers, args.batch)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        result = {
            "tasks": tasks,
            "workers": args.workers,
            "batch": args.batch,
            "seconds": round(seconds, 2),
            "claims_completes_per_s": round(tasks / seconds, 1),
            "requests_per_s": round(requests / seconds, 1),
            "database": f"{db.kind}: {redact(db.url)}",
        }
        print(json.dumps(result))
    finally:
        db.close()


if __name__ == "__main__":
    main()
