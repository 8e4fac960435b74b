"""A Registry of test kinds for tests/test_runtime.py, run in-process and by `belay worker` subprocesses
(`--app tests.apps.runtime_app`).

Kinds observe themselves through side tables written on autocommit connections of their own — never
inside a Belay transaction — so what they record survives a crash of the worker, an aborted attempt or
a stale ack, and is exactly what happened, not what was journaled:

- rt_exec: one row per execution of something (a job body, a step function), with the node, pid,
  attempt and wall-clock interval; `what` names the thing executed.
- rt_gate: a job that must wait for the test blocks until a row with its gate name appears (the test
  opens gates; a job never waits for a fixed time to learn anything). The gate "*" opens every gate:
  test teardown uses it so no execution outlives its test.

`install(conn)` creates both tables in a fresh database.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta
from typing import Any

from impl.worker import JobContext, Registry, SignalTimeout, Snooze
from model import worker_ops as w
from model.ops import JobSpec

SIDE_TABLES = """
CREATE TABLE IF NOT EXISTS rt_exec (
    id         bigserial PRIMARY KEY,
    job_id     bigint NOT NULL,
    attempt    int NOT NULL,
    what       text NOT NULL,
    node       text,
    pid        int NOT NULL,
    started_ns bigint NOT NULL,
    ended_ns   bigint,
    value      text
);
CREATE TABLE IF NOT EXISTS rt_gate (name text PRIMARY KEY);
"""

GATE_SAFETY_S = 60.0  # a gate nobody opens ends the job with an error instead of hanging a test run

registry = Registry()
QUEUE = "rt"


def install(conn: Any) -> None:
    """Create the side tables (idempotent)."""
    conn.execute(SIDE_TABLES)


def record(ctx: JobContext, what: str, started_ns: int, ended_ns: int | None = None, value: Any = None) -> None:
    """An autocommit INSERT on a connection of the worker's pool: outside every Belay transaction."""
    with ctx.store.pool.connection() as c:
        c.execute(
            "INSERT INTO rt_exec (job_id, attempt, what, node, pid, started_ns, ended_ns, value) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (
                ctx.id,
                ctx.attempt,
                what,
                ctx.job.leased_by,
                os.getpid(),
                started_ns,
                ended_ns,
                None if value is None else str(value),
            ),
        )


def wait_gate(ctx: JobContext, name: str) -> None:
    """Block this execution until the test opens gate `name` (inserts it into rt_gate)."""
    deadline = time.monotonic() + GATE_SAFETY_S
    while time.monotonic() < deadline:
        with ctx.store.pool.connection() as c:
            if c.execute("SELECT 1 FROM rt_gate WHERE name IN (%s, '*')", (name,)).fetchone():
                return
        time.sleep(0.02)
    raise TimeoutError(f"gate {name!r} was never opened")


def recorded_step(ctx: JobContext, name: str, *, cost: tuple[int, int] | None = None) -> str:
    """A step whose function draws a fresh random token and records that it ran (and what it drew)."""

    def fn() -> str:
        token = uuid.uuid4().hex
        record(ctx, f"step:{name}", time.time_ns(), value=token)
        return token

    return ctx.step(name, fn, cost=cost)


# --- kinds -----------------------------------------------------------------------------------------


@registry.kind("interval", queue=QUEUE)
def interval(ctx: JobContext, input: dict) -> int:
    """Run for input["ms"] milliseconds and record the execution interval."""
    started = time.time_ns()
    time.sleep(input.get("ms", 0) / 1000)
    record(ctx, "body", started, time.time_ns())
    return ctx.id


@registry.kind("block_first_attempt", queue=QUEUE)
def block_first_attempt(ctx: JobContext, input: dict) -> dict:
    """Record the execution; attempt 1 blocks on gate `input["gate"]` (a test kills the worker meanwhile)."""
    record(ctx, "body", time.time_ns())
    if ctx.attempt == 1:
        wait_gate(ctx, input["gate"])
    return {"attempt": ctx.attempt}


@registry.kind("gated", queue=QUEUE)
def gated(ctx: JobContext, input: dict) -> dict:
    """Record the execution, then block on gate `<input["gate"]>:<attempt>`; return the attempt."""
    record(ctx, "body", time.time_ns())
    wait_gate(ctx, f"{input['gate']}:{ctx.attempt}")
    record(ctx, "body_end", time.time_ns())
    return {"attempt": ctx.attempt}


@registry.kind("tokens", queue=QUEUE)
def tokens(ctx: JobContext, input: dict) -> list[str]:
    """Three memoized token steps; attempt 1 dies (os._exit(137), like kill -9) right after step 2."""
    first = recorded_step(ctx, "s1")
    second = recorded_step(ctx, "s2")
    if ctx.attempt == 1 and input.get("crash"):
        os._exit(137)
    third = recorded_step(ctx, "s3")
    return [first, second, third]


@registry.kind("paid", queue=QUEUE)
def paid(ctx: JobContext, input: dict) -> str:
    """input["steps"] paid steps of input["cost"] µ$ each."""
    for i in range(1, input["steps"] + 1):
        recorded_step(ctx, f"paid{i}", cost=(input["cost"], 0))
    return "all paid"


@registry.kind("timed", queue=QUEUE)
def timed(ctx: JobContext, input: dict) -> str:
    """Record start and end around a sleep of input["s"] seconds (a job that takes a while)."""
    started = time.time_ns()
    time.sleep(input["s"])
    record(ctx, "body", started, time.time_ns())
    return "done"


@registry.kind("work", queue=QUEUE)
def work(ctx: JobContext, input: dict) -> int:
    """One memoized step and a short pause: enough round trips to be caught mid-flight by a restart."""
    doubled = ctx.step("double", lambda: input["n"] * 2)
    time.sleep(input.get("s", 0))
    return doubled


@registry.kind("await_signal", queue=QUEUE)
def await_signal(ctx: JobContext, input: dict) -> Any:
    record(ctx, "body", time.time_ns())
    try:
        return {"payload": ctx.await_signal("go", timeout=input.get("timeout"))}
    except SignalTimeout as exc:
        return {"timeout": str(exc)}


@registry.kind("napper", queue=QUEUE)
def napper(ctx: JobContext, input: dict) -> str:
    record(ctx, "body", time.time_ns())
    before = recorded_step(ctx, "before")
    ctx.sleep("nap", input["s"])
    record(ctx, "after_sleep", time.time_ns())
    return before


@registry.kind("parent", queue=QUEUE)
def parent(ctx: JobContext, input: dict) -> dict:
    record(ctx, "body", time.time_ns())
    ids = ctx.spawn("kids", [JobSpec(QUEUE, "child", {"n": n}) for n in input["ns"]])
    children = ctx.await_children()
    from model.envelope import decode

    return {"ids": list(ids), "results": [decode(c.result) for c in children], "states": [c.state for c in children]}


@registry.kind("child", queue=QUEUE)
def child(ctx: JobContext, input: dict) -> int:
    return input["n"] * 10


@registry.kind("steerable", queue=QUEUE)
def steerable(ctx: JobContext, input: dict) -> Any:
    """Report that it runs, then wait (bounded) for a steering message and return it."""
    record(ctx, "body", time.time_ns())
    deadline = time.monotonic() + GATE_SAFETY_S
    while time.monotonic() < deadline:
        message = ctx.steering()
        if message is not None:
            return message
        time.sleep(0.02)
    raise TimeoutError("never steered")


@registry.kind("emitter", queue=QUEUE)
def emitter(ctx: JobContext, input: dict) -> list[int]:
    return [ctx.emit({"progress": p}) for p in input["progress"]]


@registry.kind("cancellable", queue=QUEUE)
def cancellable(ctx: JobContext, input: dict) -> str:
    """Step a, wait for the test's gate, then step b: the step boundary where a cancel is honoured."""
    recorded_step(ctx, "a")
    wait_gate(ctx, input["gate"])
    recorded_step(ctx, "b")
    return "finished"


@registry.kind("always_fails", queue=QUEUE, backoff=w.Backoff(base_s=1, factor=1, max_s=1))
def always_fails(ctx: JobContext, input: dict) -> None:
    record(ctx, "body", time.time_ns())
    raise RuntimeError(f"boom on attempt {ctx.attempt}")


@registry.kind("many_waits", queue=QUEUE, backoff=w.Backoff(base_s=0, factor=1, max_s=0))
def many_waits(ctx: JobContext, input: dict) -> int:
    """Sleeps durably more times than max_attempts, then raises once: a wait spends no attempt, so
    the raise is still retried (every park kind is pinned on the store by the conformance suite)."""
    record(ctx, "body", time.time_ns())
    for i in range(input["waits"]):
        ctx.sleep(f"nap{i}", 0.02)
    if ctx.attempt == input["waits"] + 1:
        raise RuntimeError("the first real error, after every wait")
    return ctx.attempt


@registry.kind("snoozer", queue=QUEUE)
def snoozer(ctx: JobContext, input: dict) -> str:
    record(ctx, "body", time.time_ns())
    if ctx.attempt == 1:
        raise Snooze(timedelta(seconds=input["s"]))
    return "woke"
