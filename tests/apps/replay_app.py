"""Job code for tests/test_replay.py, in versions: `registry` (v1, what the jobs ran with) and the
same kinds changed after the jobs ran — `renamed` (a step renamed), `inserted` (a step inserted),
`spawn_removed` (a spawn and its await removed), `spawn_changed` (one more child), `await_changed`
(a different signal awaited), `result_changed` (code outside any step changed the result).

`run_one(store, registry, queue, now)` claims one job and runs it in-process exactly as the runtime's
executor does (JobContext, outcome_for, a fenced ack), so tests get real journals without threads.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from impl.worker import JobContext, Registry, outcome_for
from model import worker_ops as w
from model.ops import JobSpec

QUEUE = "replay"


def build(
    *,
    rename: bool = False,
    insert: bool = False,
    spawn: int | None = 2,
    await_name: str = "approve",
    result_extra: bool = False,
) -> Registry:
    reg = Registry()

    @reg.kind("pipeline", queue=QUEUE)
    def pipeline(ctx, input):
        fetched = ctx.step("fetch", lambda: {"n": input["n"]}, cost=(100, 7))
        if insert:
            ctx.step("validate", lambda: True)
        ctx.emit({"progress": 0.5})
        kids: tuple[int, ...] = ()
        if spawn is not None:
            kids = ctx.spawn("pages", [JobSpec(QUEUE, "page", {"i": i}) for i in range(spawn)])
            ctx.await_children()
        total = ctx.step("summarise" if rename else "summarize", lambda: fetched["n"] * 2, cost=(150, 10))
        out = {"total": total, "children": len(kids)}
        if result_extra:
            out["version"] = 2
        return out

    @reg.kind("page", queue=QUEUE)
    def page(ctx, input):
        return ctx.step("render", lambda: f"page {input['i']}")

    @reg.kind("approval", queue=QUEUE)
    def approval(ctx, input):
        draft = ctx.step("draft", lambda: "draft text")
        verdict = ctx.await_signal(await_name)
        return ctx.step("publish", lambda: {"draft": draft, "verdict": verdict})

    return reg


registry = build()
renamed = build(rename=True)
inserted = build(insert=True)
spawn_removed = build(spawn=None)
spawn_changed = build(spawn=3)
await_changed = build(await_name="approved")
result_changed = build(result_extra=True)


def run_one(store, registry: Registry, now: datetime, queue: str = QUEUE) -> int | None:
    """Claim one job of `queue` and run it to its ack (or park); the job id, or None when none was due."""
    claimed = store.apply(w.Claim(now, queue, "replay-test", 1, timedelta(minutes=5))).jobs
    if not claimed:
        return None
    job = claimed[0]
    kind = registry.kinds[job.worker]
    ctx = JobContext(job, store, lambda: now)
    value = error = None
    try:
        value = kind.fn(ctx, job.input)
    except BaseException as exc:  # noqa: BLE001 - mapped to an outcome like the runtime does
        error = exc
    outcome = outcome_for(kind, ctx, error, value, now)
    if outcome is not None:
        store.apply(w.Ack(now, job.id, job.attempt, outcome))
    return job.id


def drain(store, registry: Registry, clock: Callable[[], datetime], queue: str = QUEUE) -> list[int]:
    """Run jobs until none is due; the ids run, in order."""
    ran = []
    while (job_id := run_one(store, registry, clock(), queue)) is not None:
        ran.append(job_id)
    return ran
