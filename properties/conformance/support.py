"""Helpers for conformance cases: build states through the store's own operations, compare values.

Nothing here touches SQL or a store's internals: a job reaches `failed` by enqueue + claim + ack
Fail(retry_at=None), exactly as a worker would take it there, so every case runs unchanged on any
store that implements the shared vocabulary. Setup steps check their own results too, so a store that
breaks early fails with a message naming the setup step rather than a confusing later mismatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from model import ops
from model import worker_ops as w
from model.envelope import decode
from model.queues import QueueOpts
from model.rows import Job, Signal

QUEUE = "conformance"
NODE = "node-a"
OTHER_NODE = "node-b"
TTL = timedelta(seconds=30)
S = timedelta(seconds=1)
MIN = timedelta(minutes=1)


# ---------------------------------------------------------------------------------------------
# assertions with messages that say what the contract expected


def expect(actual: Any, expected: Any, what: str) -> None:
    """Raise AssertionError unless actual == expected, naming the behaviour checked."""
    if actual != expected:
        raise AssertionError(f"{what}\n  expected: {expected!r}\n  actual:   {actual!r}")


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def expect_raises(exc_type: type[BaseException], fn: Callable[[], Any], what: str) -> BaseException:
    """Run fn; it must raise exc_type (any other outcome, value or exception, fails the case)."""
    try:
        value = fn()
    except exc_type as exc:
        return exc
    except Exception as exc:
        raise AssertionError(
            f"{what}\n  expected: {exc_type.__name__}\n  actual:   {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"{what}\n  expected: {exc_type.__name__}\n  actual:   returned {value!r}")


def fields(job: Job, *names: str) -> dict[str, Any]:
    """Selected columns of a job, for comparisons whose failure message shows only what matters."""
    return {n: getattr(job, n) for n in names}


def errors_of(job: Job) -> list[tuple]:
    """belay_jobs.errors as (attempt, at, error, detail), `at` parsed so encodings may differ."""
    return [(e["attempt"], datetime.fromisoformat(e["at"]), e["error"], e["detail"]) for e in job.errors]


def value_of(raw: bytes | None) -> Any:
    """Decode a §2 envelope (the comparison is by meaning, not by JSON spelling)."""
    return None if raw is None else decode(raw)


# ---------------------------------------------------------------------------------------------
# enqueue and read


def spec(worker: str = "w", queue: str = QUEUE, **kw: Any) -> ops.JobSpec:
    return ops.JobSpec(queue, worker, **kw)


def enqueue(store: Any, now: datetime, *specs: ops.JobSpec) -> ops.Enqueued:
    result = store.apply(ops.Enqueue(now, specs))
    check(isinstance(result, ops.Enqueued), f"setup: Enqueue returned {result!r}, not Enqueued")
    return result


def insert(store: Any, now: datetime, worker: str = "w", queue: str = QUEUE, **kw: Any) -> int:
    """Enqueue one job that must be inserted; its id."""
    (outcome,) = enqueue(store, now, spec(worker, queue, **kw)).outcomes
    check(isinstance(outcome, ops.Inserted), f"setup: enqueueing {worker!r} gave {outcome!r}, not Inserted")
    return outcome.id


def read(store: Any, job_id: int) -> Job:
    job = store.apply(ops.ReadJob(job_id))
    check(isinstance(job, Job), f"ReadJob({job_id}) returned {job!r}; the job should exist")
    return job


def gone(store: Any, job_id: int) -> bool:
    return store.apply(ops.ReadJob(job_id)) == ops.NotFound(job_id)


def state(store: Any, job_id: int) -> str:
    return read(store, job_id).state


def signals(store: Any, *scopes: str) -> tuple[Signal, ...]:
    return tuple(store.apply(ops.ReadSignals(tuple(scopes))))


def signal(store: Any, scope: str, name: str) -> Signal | None:
    return next((s for s in signals(store, scope) if s.name == name), None)


def observe(store: Any, job_ids: Iterable[int], scopes: Iterable[str] = ()) -> dict:
    """Everything readable about some jobs and scopes: for 'changes nothing' comparisons."""
    ids = list(job_ids)
    return {
        "jobs": {i: store.apply(ops.ReadJob(i)) for i in ids},
        "steps": {i: tuple(store.apply(ops.ReadSteps(i))) for i in ids},
        "events": {i: tuple(store.apply(ops.ReadEvents(i))) for i in ids},
        "signals": signals(store, *scopes) if scopes else (),
    }


def expect_unchanged(before: dict, store: Any, what: str) -> None:
    after = observe(store, before["jobs"], sorted({s.scope for s in before["signals"]}))
    for part in ("jobs", "steps", "events", "signals"):
        expect(after[part], before[part], f"{what} (the {part} read back changed)")


# ---------------------------------------------------------------------------------------------
# workflows


def member(name: str, *deps: str, ignore: tuple[str, ...] = (), queue: str = QUEUE) -> ops.WorkflowMember:
    return ops.WorkflowMember(name, spec(f"w_{name}", queue), deps=deps, ignore=ignore)


def workflow(store: Any, now: datetime, workflow_id: str, *members: ops.WorkflowMember) -> dict[str, int]:
    result = store.apply(ops.EnqueueWorkflow(now, workflow_id, members))
    check(isinstance(result, ops.WorkflowEnqueued), f"setup: EnqueueWorkflow returned {result!r}")
    return dict(result.ids)


def wf_states(store: Any, workflow_id: str) -> dict[str, str]:
    return {j.wf_name: j.state for j in store.apply(ops.ReadWorkflow(workflow_id))}


# ---------------------------------------------------------------------------------------------
# worker-driven states


def claim(
    store: Any,
    now: datetime,
    queue: str = QUEUE,
    demand: int = 10,
    node: str = NODE,
    ttl: timedelta = TTL,
    opts: QueueOpts | dict | None = None,
) -> tuple[Job, ...]:
    if isinstance(opts, dict):
        opts = QueueOpts.parse(opts)
    result = store.apply(w.Claim(now, queue, node, demand, ttl, opts or QueueOpts()))
    check(isinstance(result, w.Claimed), f"Claim returned {result!r}, not Claimed")
    return result.jobs


def claimed_ids(store: Any, now: datetime, queue: str = QUEUE, **kw: Any) -> list[int]:
    return [j.id for j in claim(store, now, queue, **kw)]


def claim_job(store: Any, now: datetime, job_id: int, node: str = NODE, ttl: timedelta = TTL) -> Job:
    """Claim exactly this job (it must be first in its queue's claim order); the running row."""
    queue = read(store, job_id).queue
    jobs = claim(store, now, queue, demand=1, node=node, ttl=ttl)
    check(
        [j.id for j in jobs] == [job_id],
        f"setup: claiming queue {queue!r} at {now.isoformat()} should lease job {job_id}; got {[j.id for j in jobs]}",
    )
    return jobs[0]


def ack(store: Any, now: datetime, job: Job, outcome: Any) -> Any:
    return store.apply(w.Ack(now, job.id, job.attempt, outcome))


def start(store: Any, now: datetime, worker: str = "w", queue: str = QUEUE, **kw: Any) -> Job:
    """Enqueue and claim one job: the running row."""
    return claim_job(store, now, insert(store, now, worker, queue, **kw))


def finish(store: Any, now: datetime, job_id: int, outcome: Any, expected: str) -> Job:
    """Claim job_id and ack it with outcome; it must end in `expected`."""
    running = claim_job(store, now, job_id)
    result = ack(store, now, running, outcome)
    expect(result, w.Acked(job_id, expected), f"setup: acking job {job_id} with {outcome!r}")
    return read(store, job_id)


def succeed(store: Any, now: datetime, job_id: int, value: Any = None) -> Job:
    return finish(store, now, job_id, w.Succeed(value), "succeeded")


def fail(store: Any, now: datetime, job_id: int, error: str = "boom") -> Job:
    """Claim + ack Fail(retry_at=None): failed whatever attempts remain."""
    return finish(store, now, job_id, w.Fail(error), "failed")


def cancel(store: Any, now: datetime, job_id: int) -> Job:
    expect(store.apply(ops.Cancel(now, job_id)), ops.Cancelled(job_id), f"setup: cancelling job {job_id}")
    return read(store, job_id)


def park(
    store: Any,
    now: datetime,
    job: Job,
    scope: str,
    name: str,
    deadline: datetime | None = None,
    expected: str = "awaiting",
) -> Job:
    result = store.apply(w.ParkAwait(now, job.id, job.attempt, scope, name, deadline))
    expect(result, w.Parked(job.id, expected), f"setup: parking job {job.id} on ({scope}, {name})")
    return read(store, job.id)


def spawn(store: Any, now: datetime, parent_id: int, name: str, *children: ops.JobSpec) -> tuple[int, ...]:
    result = store.apply(w.Spawn(now, parent_id, name, children))
    check(isinstance(result, w.Spawned), f"setup: Spawn returned {result!r}, not Spawned")
    return result.child_ids
