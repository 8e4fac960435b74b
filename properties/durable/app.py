"""The job kinds that run model/durable.py programs on the real runtime (impl/runtime/, impl/worker.py).

`dx_program` interprets a program (its job input) with the Worker SDK exactly as a job author would:
`ctx.step`, `ctx.sleep`, `ctx.await_signal`, `ctx.spawn`, `ctx.await_children`, `ctx.emit`, raising
and snoozing. Faults that belong inside the job happen here, for real: `os._exit(137)` after a step or in
the middle of one (the node dies like kill -9), a step function that blocks at a gate while the harness
freezes the node with SIGSTOP, a pause before a step while the harness requests a cancel.

Every step function records that it ran in `dx_effect`, on an autocommit connection of the worker's pool
(never inside a Belay transaction), so a duplicate execution is visible whatever the journal says.
Markers in the same table tell the harness where an execution is (`freeze_reached`, `lost_seen`,
`cancel_gate:<i>`, `exec_end`); gates in `dx_gate` hold an execution until the harness opens them.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from impl.worker import JobContext, Registry, Snooze
from model.durable import CHILD_KIND, CHILD_QUEUE, NO_BACKOFF, PROGRAM_KIND, QUEUE, signal_scope
from model.envelope import decode
from model.ops import JobSpec

TABLES = """
CREATE TABLE IF NOT EXISTS dx_effect (
    id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL, what text NOT NULL,
    node text, pid int NOT NULL, at_ns bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS dx_effect_job ON dx_effect (job_id, what);
CREATE TABLE IF NOT EXISTS dx_gate (name text PRIMARY KEY);
"""
GATE_SAFETY_S = 60.0

registry = Registry()


def install(conn: Any) -> None:
    conn.execute(TABLES)


def mark(ctx: JobContext, what: str) -> None:
    """Record that something ran or happened (autocommit, outside every Belay transaction)."""
    with ctx.store.pool.connection() as c:
        c.execute(
            "INSERT INTO dx_effect (job_id, attempt, what, node, pid, at_ns) VALUES (%s, %s, %s, %s, %s, %s)",
            (ctx.id, ctx.attempt, what, ctx.job.leased_by, os.getpid(), time.time_ns()),
        )


def _exists(ctx: JobContext, query: str, params: tuple) -> bool:
    with ctx.store.pool.connection() as c:
        return c.execute(query, params).fetchone() is not None


def wait_gate(ctx: JobContext, name: str, on_poll: Any = None) -> None:
    deadline = time.monotonic() + GATE_SAFETY_S
    while time.monotonic() < deadline:
        if on_poll is not None:
            on_poll()
        if _exists(ctx, "SELECT 1 FROM dx_gate WHERE name IN (%s, '*')", (name,)):
            return
        time.sleep(0.01)
    raise TimeoutError(f"gate {name!r} was never opened")


def _after_zombie(ctx: JobContext, p: dict, faults: set) -> None:
    """An execution after a frozen attempt starts only once that zombie execution ended (so the zombie's
    run up to its next step boundary is one deterministic episode, as the model has it)."""
    for f, _at, attempt in faults:
        if (
            f == "freeze"
            and ctx.attempt > attempt
            and _exists(
                ctx,
                "SELECT 1 FROM dx_effect WHERE job_id = %s AND attempt = %s AND what = 'freeze_reached'",
                (ctx.id, attempt),
            )
        ):
            deadline = time.monotonic() + GATE_SAFETY_S
            while not _exists(
                ctx,
                "SELECT 1 FROM dx_effect WHERE job_id = %s AND attempt = %s AND what = 'exec_end'",
                (ctx.id, attempt),
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError("the frozen attempt never ended")
                time.sleep(0.01)


@registry.kind(PROGRAM_KIND, queue=QUEUE, backoff=NO_BACKOFF)
def program(ctx: JobContext, p: dict) -> list:
    faults = {(f["f"], f["at"], f["attempt"]) for f in p.get("faults", ())}
    uid = p["uid"]
    _after_zombie(ctx, p, faults)
    values: list = []
    try:
        for i, op in enumerate(p["ops"]):
            kind = op["op"]
            if kind == "step":
                if ("cancel", i, ctx.attempt) in faults:
                    mark(ctx, f"cancel_gate:{i}")
                    wait_gate(ctx, f"cancel:{uid}:{i}:{ctx.attempt}")
                values.append(ctx.step(op["name"], _step_fn(ctx, p, i, faults), cost=tuple(op.get("cost", (0, 0)))))
                if ("crash_after", i, ctx.attempt) in faults:
                    os._exit(137)
            elif kind == "raise":
                if ctx.attempt in op["on"]:
                    raise RuntimeError(f"planned raise at op {i} on attempt {ctx.attempt}")
            elif kind == "snooze":
                if ctx.attempt in op["on"]:
                    raise Snooze(timedelta(milliseconds=op["ms"]))
            elif kind == "emit":
                ctx.emit(op["payload"])
            elif kind == "sleep":
                ctx.sleep(op["name"], op["ms"] / 1000)
            elif kind == "await":
                values.append(ctx.await_signal(op["name"], scope=signal_scope(uid)))
            elif kind == "spawn":
                ctx.spawn(op["name"], [JobSpec(CHILD_QUEUE, CHILD_KIND, {"v": v, "uid": uid}) for v in op["values"]])
            elif kind == "await_children":
                values.append([decode(c.result) for c in ctx.await_children()])
        return values
    finally:
        mark(ctx, "exec_end")


def _step_fn(ctx: JobContext, p: dict, i: int, faults: set):
    op = p["ops"][i]

    def fn() -> Any:
        mark(ctx, f"step:{op['name']}")
        if op.get("slow_ms"):
            time.sleep(op["slow_ms"] / 1000)
        if ("crash_mid", i, ctx.attempt) in faults:
            os._exit(137)
        if ("freeze", i, ctx.attempt) in faults:
            mark(ctx, "freeze_reached")
            seen = []

            def watch_lost() -> None:
                if ctx.lost.is_set() and not seen:
                    seen.append(True)
                    mark(ctx, "lost_seen")

            wait_gate(ctx, f"thaw:{p['uid']}", watch_lost)
        return op["value"]

    return fn


@registry.kind(CHILD_KIND, queue=CHILD_QUEUE)
def child(ctx: JobContext, input: dict) -> Any:
    """A child waits until its parent parked on await_children (so the parent's park is deterministic)."""
    wait_gate(ctx, f"children:{input['uid']}")
    return input["v"]
