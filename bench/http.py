"""HTTP benchmark: claims + completes per second through the Durable Execution API.

    .venv/bin/python -m bench.http [--tasks 3000] [--workers 8] [--batch 1] [--client lean|threads]

Starts `belay serve` as a subprocess (uvicorn, one process) on a free loopback port against
$BELAY_DATABASE_URL or an embedded PostgreSQL (default durability), fills a queue with ready tasks
(one SQL statement, not measured), then `workers` concurrent clients each loop: claim up to `batch`
runs (`POST /queues/{queue}/tasks/claim`), then complete each run with its own request
(`POST /runs/{run_id}/complete`), checking every status code and answer. At the end the completed
tasks are counted in the database and must equal the completions the clients counted. Prints tasks/s
(one claimed run + one complete each), HTTP requests/s, the client's own CPU ms per task and which
client ran.

Two clients do exactly that protocol:
- `lean` (default): one event loop (uvloop when installed), `workers` keep-alive HTTP/1.1 connections,
  requests written as bytes — byte for byte what httpx sends (templates built by httpx once) — and
  responses parsed by httptools' C parser, so the benchmark's own CPU stays well below the server's
  and the server, not the client, sets the rate.
- `threads`: `workers` threads, each with an httpx.Client — the earlier client, whose own CPU per task
  came to exceed the server's on a 2-core machine (it then capped both servers alike).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httptools
import httpx
import psycopg

from impl.http.server import free_port
from impl.provision import provision, redact
from impl.store.migrate import migrate

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def fill(url: str, queue: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(
            "INSERT INTO belay_jobs (queue, worker, state, ready_at, inserted_at, max_attempts) "
            "SELECT %s, 'noop', 'ready', %s, %s, 1 FROM generate_series(1, %s)",
            (queue, NOW, NOW, n),
        )


def completed(url: str, queue: str) -> int:
    """How many of the queue's tasks the database holds as completed (succeeded)."""
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT count(*) FROM belay_jobs WHERE queue = %s AND state = 'succeeded'", (queue,)).fetchone()
    return row[0] if row else 0


def serve(url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "impl.ops.cli", "serve", "--database-url", url, "--port", str(port)],
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


def run_threads(base: str, queue: str, workers: int, batch: int) -> tuple[int, int, float]:
    """The earlier client: `workers` threads, each an httpx.Client."""
    done = [0] * workers
    requests = [0] * workers

    def loop(i: int) -> None:
        with httpx.Client(base_url=base, timeout=30) as c:
            while True:
                r = c.post(f"/queues/{queue}/tasks/claim", json={"limit": batch, "claim_timeout": 60})
                assert r.status_code == 200, r.text
                tasks = r.json()["tasks"]
                requests[i] += 1
                if not tasks:
                    return
                for t in tasks:
                    r = c.post(f"/runs/{t['run_id']}/complete", json={"result": None})
                    assert r.status_code == 200, r.text
                    requests[i] += 1
                    done[i] += 1

    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            loop(i)
        except BaseException as exc:  # noqa: BLE001 - a failed check ends the run with its error, not a lower count
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(workers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(done), sum(requests), time.perf_counter() - started


class Connection:
    """One keep-alive HTTP/1.1 connection of the lean client: a request is written as bytes, its
    response read until httptools' parser reports the message complete."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.body: list[bytes] = []
        self.complete = False

    # httptools parser callbacks
    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True

    async def send(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        self.body, self.complete = [], False
        parser = httptools.HttpResponseParser(self)
        while not self.complete:
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("the server closed the connection mid-response")
            parser.feed_data(data)
        return parser.get_status_code(), b"".join(self.body)


def request_bytes(client: httpx.Client, path: str, body: object) -> tuple[bytes, bytes]:
    """(request line's method and target up to the path's end, the rest) of the request httpx.Client
    sends for `POST path` with a JSON body — byte for byte the same headers and body, so the server
    parses exactly what it parses for the threads client."""
    r = client.build_request("POST", path, json=body)
    headers = b"".join(k + b": " + v + b"\r\n" for k, v in r.headers.raw)
    return b"POST " + r.url.raw_path, b" HTTP/1.1\r\n" + headers + b"\r\n" + r.content


def run_lean(base: str, queue: str, workers: int, batch: int) -> tuple[int, int, float]:
    """The lean client: `workers` keep-alive connections in one event loop (see the module docstring)."""
    with httpx.Client(base_url=base) as templates:
        claim = b"".join(
            request_bytes(templates, f"/queues/{queue}/tasks/claim", {"limit": batch, "claim_timeout": 60})
        )
        runs_prefix, _ = request_bytes(templates, "/runs/", None)
        _, complete_rest = request_bytes(templates, "/runs/x/complete", {"result": None})
    split = urlsplit(base)
    host, port = split.hostname or "127.0.0.1", split.port or 80
    done = [0] * workers
    requests = [0] * workers

    async def loop(i: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        c = Connection(reader, writer)
        try:
            while True:
                status, body = await c.send(claim)
                assert status == 200, (status, body)
                tasks = json.loads(body)["tasks"]
                requests[i] += 1
                if not tasks:
                    return
                for t in tasks:
                    run = t["run_id"]
                    status, body = await c.send(runs_prefix + run.encode() + b"/complete" + complete_rest)
                    assert status == 200, (status, body)
                    assert json.loads(body) == {"run_id": run, "status": "completed"}, body
                    requests[i] += 1
                    done[i] += 1
        finally:
            writer.close()

    async def main() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(loop(i) for i in range(workers)))
        return time.perf_counter() - started

    seconds = _event_loop_run(main())
    return sum(done), sum(requests), seconds


def _event_loop_run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def lean_loop_name() -> str:
    try:
        import uvloop  # noqa: F401 - only asks whether it is installed
    except ImportError:
        return "asyncio"
    return "uvloop"


CLIENTS = {"lean": run_lean, "threads": run_threads}


def client_label(name: str) -> str:
    """Which client ran, as printed with the figures."""
    if name == "lean":
        return f"lean (one {lean_loop_name()} event loop, keep-alive HTTP/1.1, httptools parser)"
    return "threads (one httpx.Client per thread)"


def run(base: str, queue: str, workers: int, batch: int, client: str = "lean") -> tuple[int, int, float]:
    return CLIENTS[client](base, queue, workers, batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1, help="claim limit per request")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="lean", help="benchmark client (module docstring)")
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
            cpu = time.process_time()
            tasks, requests, seconds = run(base, queue, args.workers, args.batch, args.client)
            cpu = time.process_time() - cpu
            in_db = completed(db.url, queue)
            assert in_db == tasks == args.tasks, f"clients completed {tasks}, the database holds {in_db}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        result = {
            "client": client_label(args.client),
            "tasks": tasks,
            "completed_in_db": in_db,
            "workers": args.workers,
            "batch": args.batch,
            "seconds": round(seconds, 2),
            "claims_completes_per_s": round(tasks / seconds, 1),
            "requests_per_s": round(requests / seconds, 1),
            "client_cpu_ms_per_task": round(1000 * cpu / max(tasks, 1), 3),
            "database": f"{db.kind}: {redact(db.url)}",
        }
        print(json.dumps(result))
    finally:
        db.close()


if __name__ == "__main__":
    main()
