"""A pure model of the Durable Execution API (docs/spec/durable-execution-api.openapi.yaml, with the
choices docs/http-api.md states where the spec is silent): queues, tasks, runs, claims, versioned
checkpoints, events, waits and workflow runs. No I/O, no clock: every operation takes `now`.

It answers each request as (status, body) in the API's terms, so properties/test_http_model.py can
send the same request to the real service and compare. Ids: the service assigns task ids (the model
adopts the id from the createTask answer, `adopt_task`); run ids follow from the model's own state —
`run_<task>_<claim>`, the claim that holds the run, or for a run waiting in the queue the claim that
will take it next.

Who reclaims an expired claim does not change what it costs: `sweep` is this server's reclaim or
another node's (a `belay worker` on the same database) — no attempt spent either way; only when the
run is claimable again differs (the other node's §6 backoff).

Deliberately small: one priority, no admission options, no start/execution timeouts (their example
tests are in tests/test_http_api.py). Which of several claimable tasks a claim takes is the service's
order, not the spec's: `claimable` gives the candidates and `apply_claim` records what was taken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

Answer = tuple[int, Any]
TERMINAL = ("completed", "failed", "canceled")
WORKFLOW_TERMINAL = ("completed", "failed", "canceled")


def iso(at: datetime) -> str:
    text = at.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def retry_delay(strategy: dict | None, failure: int) -> timedelta:
    """RetryStrategy: fixed → base; exponential → base · factor^(failure-1) (factor 2 by default);
    both capped at max_seconds."""
    if strategy is None:
        return timedelta(0)
    seconds = float(strategy["base_seconds"])
    if strategy["kind"] == "exponential":
        seconds *= float(strategy.get("factor", 2)) ** (failure - 1)
    if "max_seconds" in strategy:
        seconds = min(seconds, float(strategy["max_seconds"]))
    return timedelta(seconds=seconds)


@dataclass
class Task:
    id: int
    queue: str
    name: str
    params: Any
    max_attempts: int
    strategy: dict | None
    created: datetime
    workflow_run: str | None = None
    state: str = "waiting"  # waiting (in the queue) | running | completed | failed | canceled
    ready_at: datetime | None = None  # waiting: claimable from then on (None: at once)
    wait: tuple[str, datetime] | None = None  # waiting for (event, deadline)
    claims: int = 0
    lease_until: datetime | None = None
    failures: list[tuple[int, str, datetime]] = field(default_factory=list)  # (claim, error, at)
    finished: datetime | None = None
    cancel_claim: int | None = None
    checkpoints: dict[str, list[tuple[Any, datetime]]] = field(default_factory=dict)  # step → versions
    wait_memo: dict[str, tuple[str, datetime]] = field(default_factory=dict)  # step → (event, deadline)

    def tid(self) -> str:
        return f"task_{self.id}"

    def run(self, claim: int) -> str:
        return f"run_{self.id}_{claim}"

    def claimable(self, now: datetime) -> bool:
        if self.state != "waiting":
            return False
        if self.wait is not None:
            return self.wait[1] <= now
        return self.ready_at is None or self.ready_at <= now

    def live(self, claim: int) -> bool:
        return self.state == "running" and self.claims == claim


@dataclass
class WorkflowRun:
    id: str
    name: str
    status: str = "pending"
    started: str | None = None
    completed: str | None = None


@dataclass
class ApiModel:
    queues: dict[str, datetime] = field(default_factory=dict)
    tasks: dict[int, Task] = field(default_factory=dict)
    events: dict[str, Any] = field(default_factory=dict)
    workflows: dict[str, WorkflowRun] = field(default_factory=dict)

    # --- queues -----------------------------------------------------------------------------------

    def create_queue(self, now: datetime, name: str) -> Answer:
        if name in self.queues:
            return 409, "QUEUE_EXISTS"
        self.queues[name] = now
        return 201, {"name": name}

    def pinned(self, queue: str) -> bool:
        """A queue with an unfinished task, or a finished one of a workflow still running a task."""
        unfinished = {t.workflow_run for t in self.tasks.values() if t.state not in TERMINAL and t.workflow_run}
        return any(
            t.queue == queue and (t.state not in TERMINAL or t.workflow_run in unfinished) for t in self.tasks.values()
        )

    def delete_queue(self, now: datetime, name: str) -> Answer:
        if name not in self.queues:
            return 404, "QUEUE_NOT_FOUND"
        if self.pinned(name):
            return 409, "QUEUE_NOT_EMPTY"
        del self.queues[name]
        for task_id in [t.id for t in self.tasks.values() if t.queue == name]:
            del self.tasks[task_id]  # finished tasks go with their queue
        return 204, None

    def stats(self, now: datetime, queue: str) -> dict:
        tasks = [t for t in self.tasks.values() if t.queue == queue]
        return {
            "queue_name": queue,
            "pending_runs": sum(t.claimable(now) for t in tasks),
            "claimed_runs": sum(t.state == "running" for t in tasks),
            "completed_runs": sum(t.state == "completed" for t in tasks),
        }

    # --- tasks and claims -------------------------------------------------------------------------

    def create_task_check(self, queue: str, workflow_run: str | None) -> Answer | None:
        """The refusal createTask answers, or None when it creates the task."""
        if queue not in self.queues:
            return 404, "QUEUE_NOT_FOUND"
        if workflow_run is not None:
            record = self.workflows.get(workflow_run)
            if record is None:
                return 404, "WORKFLOW_RUN_NOT_FOUND"
            if record.status in WORKFLOW_TERMINAL:
                return 409, "WORKFLOW_RUN_FINISHED"
        return None

    def adopt_task(self, now: datetime, task_id: int, queue: str, body: dict) -> Answer:
        """createTask for the id the service assigned."""
        task = Task(
            task_id,
            queue,
            body["task_name"],
            body.get("params"),
            body.get("max_attempts", 1),
            body.get("retry_strategy"),
            now,
            body.get("workflow_run_id"),
        )
        self.tasks[task_id] = task
        out = {"task_id": task.tid(), "run_id": task.run(1)}
        if task.workflow_run is not None:
            out["workflow_run_id"] = task.workflow_run
        return 201, out

    def claimable(self, now: datetime, queue: str) -> set[int]:
        return {t.id for t in self.tasks.values() if t.queue == queue and t.claimable(now)}

    def apply_claim(self, now: datetime, task_id: int, claim_timeout: int) -> dict:
        """One task taken by a claim: its ClaimedTask."""
        t = self.tasks[task_id]
        t.state, t.claims, t.wait, t.ready_at = "running", t.claims + 1, None, None
        t.lease_until = now + timedelta(seconds=claim_timeout)
        out = {
            "run_id": t.run(t.claims),
            "task_id": t.tid(),
            "attempt": len(t.failures) + 1,
            "task_name": t.name,
            "params": t.params,
            "headers": {},
            "max_attempts": t.max_attempts,
        }
        if t.strategy is not None:
            out["retry_strategy"] = t.strategy
        return out

    # --- runs -------------------------------------------------------------------------------------

    def _run(self, run: str) -> tuple[Task, int] | Answer:
        """The task and claim a run id names, or the 404/409 answer for it."""
        try:
            _, job, claim = run.split("_")
            task = self.tasks.get(int(job))
        except ValueError:
            return 404, "RUN_NOT_FOUND"
        if task is None or int(claim) > task.claims + 1:
            return 404, "RUN_NOT_FOUND"
        return task, int(claim)

    def _live(self, run: str) -> tuple[Task, int] | Answer:
        found = self._run(run)
        if isinstance(found[0], int):
            return found
        task, claim = found
        if task.live(claim):
            return task, claim
        if claim == task.claims + 1:
            return 409, "RUN_NOT_CLAIMED"
        return 409, "STALE_RUN"

    def complete(self, now: datetime, run: str) -> Answer:
        found = self._live(run)
        if isinstance(found[0], int):
            return found
        task, _ = found
        task.state, task.finished, task.lease_until = "completed", now, None
        return 200, {"run_id": run, "status": "completed"}

    def fail(self, now: datetime, run: str, error: str) -> Answer:
        found = self._live(run)
        if isinstance(found[0], int):
            return found
        task, claim = found
        task.failures.append((claim, error, now))
        task.lease_until = None
        out: dict[str, Any] = {"run_id": run, "status": "failed", "attempt": len(task.failures)}
        if len(task.failures) < task.max_attempts:
            at = now + retry_delay(task.strategy, len(task.failures))
            task.state, task.ready_at = "waiting", at
            out["next_run_id"] = task.run(claim + 1)
            out["next_attempt_at"] = iso(at)
        else:
            task.state, task.finished = "failed", now
        return 200, out

    def schedule(self, now: datetime, run: str, run_at: datetime) -> Answer:
        found = self._live(run)
        if isinstance(found[0], int):
            return found
        task, claim = found
        task.state, task.ready_at, task.lease_until = "waiting", run_at, None
        return 200, {"run_id": task.run(claim + 1), "scheduled_at": iso(run_at)}

    def wait_for_event(self, now: datetime, run: str, event: str, timeout: int, step: str) -> Answer:
        found = self._live(run)
        if isinstance(found[0], int):
            return found
        task, claim = found
        versions = task.checkpoints.get(step)
        if versions:
            return 200, {"status": "resolved", "payload": versions[-1][0]}
        if event in self.events:
            task.checkpoints.setdefault(step, []).append((self.events[event], now))
            return 200, {"status": "resolved", "payload": self.events[event]}
        memo = task.wait_memo.get(step)
        if memo is not None and memo[0] != event:
            return 409, "WAIT_MISMATCH"
        if memo is None:
            memo = task.wait_memo[step] = (event, now + timedelta(seconds=timeout))
        if now >= memo[1]:
            return 408, {"status": "timeout"}
        task.state, task.wait, task.lease_until = "waiting", memo, None
        return 202, {"status": "sleeping", "next_run_id": task.run(claim + 1)}

    def emit(self, now: datetime, event: str, payload: Any) -> Answer:
        self.events[event] = payload
        for task in self.tasks.values():
            if task.state == "waiting" and task.wait is not None and task.wait[0] == event:
                task.wait, task.ready_at = None, now  # woken in place: the same run, claimable
        return 201, {"event_name": event, "created_at": iso(now)}

    def sweep(self, now: datetime, backoff: Callable[[int], timedelta] | None = None) -> set[int]:
        """Expired claims: the run goes back to the queue and spends no attempt, whoever reclaims it —
        this server's sweeper (claimable at once) or another node following the contract's §6 reclaim
        on the same database, e.g. a `belay worker` (claimable after that node's backoff for the claim:
        `backoff(claims)`; until then the run is `sleeping`). docs/http-api.md, "One database"."""
        expired = {t.id for t in self.tasks.values() if t.state == "running" and t.lease_until <= now}  # type: ignore[operator]
        for task_id in expired:
            t = self.tasks[task_id]
            t.state, t.ready_at, t.lease_until = "waiting", now, None
            if backoff is not None:
                t.ready_at = now + backoff(t.claims)
        return expired

    # --- checkpoints ------------------------------------------------------------------------------

    def set_checkpoint(self, now: datetime, task_id: int, step: str, state: Any, owner: str) -> Answer:
        task = self.tasks.get(task_id)
        if task is None:
            return 404, "TASK_NOT_FOUND"
        found = self._run(owner)
        if isinstance(found[0], int) or found[0].id != task_id:
            return 409, "NOT_OWNER"
        live = self._live(owner)
        if isinstance(live[0], int):
            return live
        task.checkpoints.setdefault(step, []).append((state, now))
        return 200, {"task_id": task.tid(), "step_name": step, "updated_at": iso(now)}

    def get_checkpoint(self, task_id: int, step: str) -> Answer:
        task = self.tasks.get(task_id)
        if task is None:
            return 404, "TASK_NOT_FOUND"
        versions = task.checkpoints.get(step)
        if not versions:
            return 404, "CHECKPOINT_NOT_FOUND"
        state, at = versions[-1]
        return 200, {"task_id": task.tid(), "step_name": step, "state": state, "updated_at": iso(at)}

    # --- workflow runs ----------------------------------------------------------------------------

    def adopt_workflow(self, workflow_run: str, name: str) -> Answer:
        self.workflows[workflow_run] = WorkflowRun(workflow_run, name)
        return 201, {"workflow_run_id": workflow_run, "workflow_name": name, "status": "pending"}

    def update_workflow(self, now: datetime, workflow_run: str, status: str | None) -> Answer:
        record = self.workflows.get(workflow_run)
        if record is None:
            return 404, "WORKFLOW_RUN_NOT_FOUND"
        tasks = [t for t in self.tasks.values() if t.workflow_run == workflow_run]
        live = [t for t in tasks if t.state not in TERMINAL]
        if status is not None and record.status in WORKFLOW_TERMINAL and status != record.status:
            return 409, "WORKFLOW_RUN_FINISHED"
        if status in ("completed", "failed") and live:
            return 409, "TASKS_STILL_RUNNING"
        if status is not None:
            record.status = status
        if status == "canceled":
            for t in live:
                t.cancel_claim = t.claims if t.state == "running" else t.claims + 1
                t.state, t.finished, t.wait, t.lease_until = "canceled", now, None, None
        shown = record.status
        if shown not in WORKFLOW_TERMINAL and shown != "running":
            shown = "running" if any(t.claims > 0 or t.state in TERMINAL for t in tasks) else "pending"
        return 200, {"workflow_run_id": workflow_run, "status": shown, "updated_at": iso(now)}

    # --- what the listings show ---------------------------------------------------------------------

    def runs(self, now: datetime, task_id: int) -> list[dict]:
        """GET /runs?task_id: every run of the task in attempt order (id, attempt, status, error,
        wait_timed_out)."""
        t = self.tasks[task_id]
        out = [
            {"id": t.run(claim), "attempt": n, "status": "failed", "error": error}
            for n, (claim, error, _) in enumerate(t.failures, start=1)
        ]
        n = len(t.failures) + 1
        if t.state == "failed":
            return out
        if t.state == "canceled":
            out.append({"id": t.run(max(t.cancel_claim or 1, 1)), "attempt": n, "status": "failed"})
            out[-1]["error"] = "cancelled: workflow_run_canceled"
        elif t.state == "running":
            out.append({"id": t.run(t.claims), "attempt": n, "status": "claimed"})
        elif t.state == "completed":
            out.append({"id": t.run(t.claims), "attempt": n, "status": "completed"})
        else:
            item = {"id": t.run(t.claims + 1), "attempt": n, "status": "pending" if t.claimable(now) else "sleeping"}
            if t.wait is not None and t.claimable(now):
                item["wait_timed_out"] = True
            out.append(item)
        return out

    def task_status(self, now: datetime, t: Task) -> str:
        if t.state == "waiting":
            return "pending" if t.claimable(now) else "sleeping"
        return t.state

    def task_summary(self, now: datetime, t: Task) -> dict:
        failures = len(t.failures)
        return {
            "id": t.tid(),
            "queue_name": t.queue,
            "task_name": t.name,
            "status": t.state if t.state in ("completed", "failed", "canceled") else "pending",  # clients' TaskStatus
            "state": self.task_status(now, t),
            "attempt": failures if t.state == "failed" else failures + 1,
            "max_attempts": t.max_attempts,
            "params": t.params,
            "created_at": iso(t.created),
            "completed_at": iso(t.finished) if t.finished is not None else None,
        }
