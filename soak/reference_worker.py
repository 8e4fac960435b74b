"""The reference soak worker: the nine kinds of soak/PROTOCOL.md on the impl/ Worker SDK.

    BELAY_DATABASE_URL=... BELAY_NODE=w1-1 BELAY_QUEUES=soak BELAY_LEASE_TTL=10 \
        python -m soak.reference_worker          # what soak/reference-worker runs

`registry` holds the kinds; `main()` is the `belay worker`-equivalent entry point (it reads the
environment, nothing else does). Broken variants for the checker's own tests live outside this file
(soak/broken/, the broken-worker catalogue) and reuse `main(store_class=..., worker_class=...)` with patched pieces.

Evidence for the checker lands in the database (PROTOCOL.md §2–§4): every result carries the attempt
that produced it, step values carry fresh random tokens, `slow` records the row it saw before its ack,
and a telemetry sink records the outcome of stale acks and of every `slow` ack in soak_observations.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from impl.runtime import QueueConfig, Termination, Worker, WorkerConfig, default_logger, utc_now
from impl.store import PgStore
from impl.worker import BudgetExceeded, Fail, JobContext, Registry
from model.ops import JobSpec
from model.queues import QueueOpts

QUEUE = "soak"
registry = Registry()

log = logging.getLogger("belay.soak")


class Planned(Exception):
    """A failure the protocol asks for (retryable unless raised as `Fail`)."""


def token() -> str:
    return secrets.token_hex(16)


def _step_value(ctx: JobContext) -> Callable[[], dict]:
    return lambda: {"token": token(), "attempt": ctx.attempt}


def observe(ctx: JobContext, phase: str, observed: dict) -> None:
    """Insert one soak_observations row on an autocommit connection (outside every Belay transaction)."""
    with ctx.store.pool.connection() as c:
        c.execute(
            "INSERT INTO soak_observations (job_id, attempt, node, phase, observed, at) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (ctx.id, ctx.attempt, ctx.job.leased_by, phase, Jsonb(observed), utc_now()),
        )


def die(ctx: JobContext, reason: str) -> None:
    """Kill this whole worker process at once, like kill -9 (no ack, no cleanup) — after recording the
    deliberate exit as an `exit` observation (PROTOCOL.md §1, duty P1), retried until it commits: an exit
    the harness cannot attribute to a kind counts as the worker failing to stay up."""
    deadline = time.monotonic() + 120
    while True:
        try:
            with psycopg.connect(os.environ["BELAY_DATABASE_URL"], autocommit=True, connect_timeout=3) as c:
                c.execute(
                    "INSERT INTO soak_observations (job_id, attempt, node, phase, observed, at) "
                    "VALUES (%s, %s, %s, 'exit', %s, %s)",
                    (ctx.id, ctx.attempt, os.environ.get("BELAY_NODE"), Jsonb({"reason": reason}), utc_now()),
                )
            break
        except psycopg.Error:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
    sys.stderr.flush()
    os._exit(75)


# --- the nine kinds (PROTOCOL.md §3) -------------------------------------------------------------


@registry.kind("echo", queue=QUEUE)
def echo(ctx: JobContext, input: dict) -> dict:
    return {"echo": input.get("v"), "attempt": ctx.attempt}


def echo_chunk(contexts: list[JobContext]) -> dict:
    """`echo` for a chunk of jobs: each result exactly what `echo` returns for that job alone."""
    return {c.id: {"echo": c.job.input.get("v"), "attempt": c.attempt} for c in contexts}


def _with_chunked_echo(reg: Registry, size: int) -> Registry:
    chunked = Registry()
    chunked.kinds = dict(reg.kinds)
    chunked.kinds["echo"] = replace(reg.kinds["echo"], fn=echo_chunk, chunk_size=size, gather_ms=10)
    return chunked


@registry.kind("steps", queue=QUEUE)
def steps(ctx: JobContext, input: dict) -> dict:
    tokens = []
    for i in range(1, int(input["n"]) + 1):
        tokens.append(ctx.step(f"s{i}", _step_value(ctx))["token"])
        if input.get("pause_ms"):
            time.sleep(input["pause_ms"] / 1000)
        if ctx.attempt == 1 and input.get("raise_after") == i:
            raise Planned(f"planned failure after step s{i} on attempt 1")
    return {"tokens": tokens, "attempt": ctx.attempt}


@registry.kind("costed", queue=QUEUE)
def costed(ctx: JobContext, input: dict) -> dict:
    tokens = []
    for i, usd in enumerate(input["costs"], start=1):
        try:
            tokens.append(ctx.step(f"c{i}", _step_value(ctx), cost=(int(usd), 0))["token"])
        except BudgetExceeded:
            if input.get("crash_at_crossing") and ctx.attempt == 1 and ctx.steps_run and ctx.steps_run[-1] == f"c{i}":
                die(ctx, "costed crash_at_crossing")  # the crossing step is journaled, the failure not yet acked
            raise
    return {"tokens": tokens, "attempt": ctx.attempt}


@registry.kind("awaiter", queue=QUEUE)
def awaiter(ctx: JobContext, input: dict) -> dict:
    if input.get("pause_ms"):
        time.sleep(input["pause_ms"] / 1000)  # before the await: the harness may request a cancel here
    return {"payload": ctx.await_signal(input["signal"]), "attempt": ctx.attempt}


@registry.kind("parent", queue=QUEUE)
def parent(ctx: JobContext, input: dict) -> dict:
    queue = input.get("queue") or QUEUE  # "soak-external": children the harness finishes itself
    pause = int(input.get("child_pause_ms") or 0)  # children that take a while: the parent parks first (P10)
    children = [
        JobSpec(queue, "steps", {"n": 1, "raise_after": None, "pause_ms": pause})
        if pause
        else JobSpec(queue, "echo", {"v": f"child-{i}"})
        for i in range(int(input["children"]))
    ]
    ids = ctx.spawn("kids", children)
    ctx.await_children()
    return {"children": list(ids), "attempt": ctx.attempt}


@registry.kind("member", queue=QUEUE)
def member(ctx: JobContext, input: dict) -> dict:
    if input.get("fail"):
        raise Fail(f"member {input.get('member')!r} fails on purpose")
    return {"member": input.get("member"), "attempt": ctx.attempt}


@registry.kind("flaky", queue=QUEUE)
def flaky(ctx: JobContext, input: dict) -> dict:
    pre = ctx.step("pre", _step_value(ctx))["token"]

    def mid() -> dict:
        if ctx.attempt <= int(input.get("until_attempt", 1)):
            if input.get("mode") == "exit":
                die(ctx, "flaky exit")
            raise Planned(f"flaky attempt {ctx.attempt}")
        return {"token": token(), "attempt": ctx.attempt}

    return {"tokens": [pre, ctx.step("mid", mid)["token"]], "attempt": ctx.attempt}


@registry.kind("slow", queue=QUEUE)
def slow(ctx: JobContext, input: dict) -> dict:
    ctx.emit({"phase": "start", "attempt": ctx.attempt, "node": ctx.job.leased_by, "pid": os.getpid()})
    begin = ctx.step("begin", _step_value(ctx))["token"]

    def nap() -> dict:
        deadline = time.monotonic() + float(input["seconds"])
        while time.monotonic() < deadline:  # a SIGSTOP freezes this loop; it resumes where it was
            time.sleep(0.1)
        return {"token": token(), "attempt": ctx.attempt}

    ctx.step("nap", nap, cost=(1, 0))  # a stale attempt resuming here journals a duplicate: no spend for it

    def read() -> Any:
        with ctx.store.pool.connection() as c:
            return c.execute("SELECT state, attempt, leased_by FROM belay_jobs WHERE id = %s", (ctx.id,)).fetchone()

    row = ctx.call(read, "pre_ack read") if ctx.call else read()  # retried through a crash-restart
    observed = {"state": row[0], "attempt": row[1], "leased_by": row[2]} if row else {"state": None}
    observe(ctx, "pre_ack", observed)
    return {"token": begin, "node": ctx.job.leased_by, "attempt": ctx.attempt}


@registry.kind("sleeper", queue=QUEUE)
def sleeper(ctx: JobContext, input: dict) -> dict:
    pre = ctx.step("pre", _step_value(ctx))["token"]
    ctx.sleep("nap", float(input["seconds"]))
    return {"tokens": [pre, ctx.step("post", _step_value(ctx))["token"]], "attempt": ctx.attempt}


# --- ack observations --------------------------------------------------------------------------------


class AckObserver:
    """Telemetry sink: an `ack` observation for every stale ack and every ack of a `slow` job.

    Best effort on its own autocommit connection: a database outage loses observations (the checker
    then has less evidence, never false evidence)."""

    def __init__(self, url: str, node: str) -> None:
        self.url = url
        self.node = node
        self.conn: psycopg.Connection | None = None
        self.lock = threading.Lock()

    def __call__(self, event: str, meta: dict[str, Any]) -> None:
        if event not in ("job.stop", "job.exception"):
            return
        state = meta.get("state")
        if state != "stale" and meta.get("worker") != "slow":
            return
        row = (meta["job_id"], meta["attempt"], self.node, "ack", Jsonb({"state": state}), utc_now())
        with self.lock:
            for _ in range(2):
                try:
                    if self.conn is None or self.conn.closed:
                        self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=3)
                    self.conn.execute(
                        "INSERT INTO soak_observations (job_id, attempt, node, phase, observed, at) "
                        "VALUES (%s, %s, %s, %s, %s, %s)",
                        row,
                    )
                    return
                except psycopg.Error as exc:
                    log.warning("soak observation lost (%s)", exc)
                    self.conn = None


# --- entry point ----------------------------------------------------------------------------------------


def build(
    env: dict[str, str],
    *,
    store_class: type[PgStore] = PgStore,
    worker_class: type[Worker] = Worker,
    reg: Registry = registry,
) -> Worker:
    """A Worker configured from the soak environment (PROTOCOL.md §1); `store_class` lets a test
    fixture swap in a patched store. `BELAY_ECHO_CHUNK=N` (an option of this worker, not of the protocol)
    runs `echo` as a chunk kind of up to N jobs per call (gather 10 ms), so a soak puts the runtime's
    chunk path — gathering, batched acks, a chunk claiming for its own slots — under the same faults."""
    url = env["BELAY_DATABASE_URL"]
    chunk = int(env.get("BELAY_ECHO_CHUNK") or 0)
    if chunk > 0:
        reg = _with_chunked_echo(reg, chunk)
    node = env.get("BELAY_NODE") or f"soak-{os.getpid()}"
    queues = [q.strip() for q in env.get("BELAY_QUEUES", QUEUE).split(",") if q.strip()]
    ttl = float(env.get("BELAY_LEASE_TTL", "10"))
    limit = int(env.get("BELAY_SOAK_CONCURRENCY", "10"))
    opts = QueueOpts.parse({"limit": {"min": limit, "max": limit}})
    config = WorkerConfig(
        node=node, queues=tuple(QueueConfig(q, opts) for q in queues), lease_ttl=ttl, shutdown_grace=10.0, notify=True
    )
    offset = timedelta(seconds=float(env.get("BELAY_CLOCK_OFFSET") or 0))  # PROTOCOL.md §1: simulated skew
    worker = worker_class(
        url, reg, config, clock=lambda: utc_now() + offset, telemetry=(default_logger, AckObserver(url, node))
    )
    if store_class is not PgStore:
        original = worker.store
        worker.store = store_class(
            url,
            schema=original.schema,
            pool_size=original.pool.max_size,
            notify=original.notify,
            call_timeout=original.call_timeout,  # the swapped store keeps the per-call deadline (issue 27)
        )
        original.close()
    return worker


def main(
    *, store_class: type[PgStore] = PgStore, worker_class: type[Worker] = Worker, reg: Registry = registry
) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    worker = build(dict(os.environ), store_class=store_class, worker_class=worker_class, reg=reg)
    termination = Termination()
    worker.start()
    print(
        f"soak worker {worker.config.node} pid {os.getpid()} running queues "
        f"{', '.join(q.name for q in worker.config.queues)} (lease ttl {worker.config.lease_ttl}s)",
        file=sys.stderr,
        flush=True,
    )
    termination.wait()
    drained = worker.stop()
    print(
        f"soak worker {worker.config.node} stopped ({'drained' if drained else 'grace expired'})",
        file=sys.stderr,
        flush=True,
    )
    if not drained:
        # As `belay worker` does (impl/ops/cli.py): jobs that outlived the grace are abandoned to lease expiry,
        # and their executor threads cannot be interrupted — interpreter exit would join them. Seed 2032's
        # two-hour soak: a node under injected latency printed this at +15 s and exited at +17.3 s, after
        # its last jobs' acks failed (P4: exit within 15 s of SIGTERM).
        logging.shutdown()
        os._exit(0)


if __name__ == "__main__":
    main()
