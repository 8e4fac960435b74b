"""Tasks and runs as the HTTP API shows them, derived from belay_jobs rows (pure; no I/O).

A task's HTTP-only options (retry strategy, the requested max_attempts, start/execution deadlines,
its workflow run) are journaled once, at creation, as the reserved step `$http:task` in the same
transaction as the job insert: steps are immutable (§8.2, invariant 3) and go wherever the job goes
(retention deletes them together). `$http:cancel` journals why the server cancelled a task
(start_timeout, execution_timeout, workflow_run_canceled), and `$http:wait:<step>` memoizes a
wait-for-event's deadline so a retried task waits against the first deadline, as `$sleep:` does.

An HTTP task's row and its attempts (issue 53). The task's budget — the max_attempts it was created
with — is the `$http:task` step's, and the server counts it in failed runs (`failures_of`: the errors
entries a failRun wrote). The row's `max_attempts` column is ROW_MAX_ATTEMPTS, out of reach of any
number of claims, so the contract's §6 reclaim of an expired claim ("retry (attempt < max) or failed
with error {"error":"lease_expired"}") always takes the retry branch, whoever runs it — this server's
sweeper or a `belay worker` (any SDK) on the same database: the run goes back to the queue and spends
no attempt, as the OpenAPI promises. The reclaim's `lease_expired` entry is not a failed run. The
boundary: another node's reclaim makes the run claimable after that node's §6 backoff (the worker's
default: 1 s doubling per claim, at most an hour), this server's at once; and a task created elsewhere
and claimed here keeps its own column budget (an expiry spends one of its attempts, as the contract says).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from impl.http.errors import INT32_MAX, iso
from impl.http.ids import RunRef, run_id, task_id
from model.envelope import decode

TASK_STEP = "$http:task"
CANCEL_STEP = "$http:cancel"
WAIT_PREFIX = "$http:wait:"
RESERVED_STEP_PREFIXES = ("$http:", "$sleep:", "$spawn:")
MAX_DELAY_S = float(INT32_MAX)  # a retry is never scheduled further out than ~68 years
# belay_jobs.max_attempts of an HTTP task's row: its claims never reach it (the budget is the step's)
ROW_MAX_ATTEMPTS = 1_000_000_000
LEASE_EXPIRED = "lease_expired"  # the §6 reclaim's errors entry: a claim that expired, not a failed run


@dataclass(frozen=True)
class RetryStrategy:
    """The spec's RetryStrategy: fixed or exponential (factor, max_seconds)."""

    kind: str  # "fixed" | "exponential"
    base_seconds: float
    factor: float | None = None
    max_seconds: float | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "base_seconds": self.base_seconds}
        if self.factor is not None:
            out["factor"] = self.factor
        if self.max_seconds is not None:
            out["max_seconds"] = self.max_seconds
        return out

    @classmethod
    def from_json(cls, data: Any) -> RetryStrategy | None:
        if not isinstance(data, dict):
            return None
        return cls(data["kind"], data["base_seconds"], data.get("factor"), data.get("max_seconds"))

    def delay(self, failure: int) -> timedelta:
        """The wait before the retry that follows the `failure`-th failed run (1-based):
        fixed → base; exponential → base · factor^(failure−1) (factor defaults to 2); both capped
        at max_seconds when given."""
        seconds = float(self.base_seconds)
        if self.kind == "exponential":
            factor = 2.0 if self.factor is None else float(self.factor)
            try:
                seconds = seconds * math.pow(factor, failure - 1) if seconds else 0.0
            except OverflowError:
                seconds = math.inf
        if self.max_seconds is not None:
            seconds = min(seconds, float(self.max_seconds))
        return timedelta(microseconds=round(min(seconds, MAX_DELAY_S) * 1_000_000))


@dataclass(frozen=True)
class TaskConfig:
    """The `$http:task` step: what the job columns do not hold."""

    max_attempts: int
    retry_strategy: RetryStrategy | None = None
    start_deadline: datetime | None = None  # inserted_at + start_timeout (None: no limit)
    execution_deadline: datetime | None = None  # inserted_at + execution_timeout
    workflow_run_id: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "v": 1,
            "max_attempts": self.max_attempts,
            "retry_strategy": self.retry_strategy.as_json() if self.retry_strategy else None,
            "start_deadline": iso(self.start_deadline),
            "execution_deadline": iso(self.execution_deadline),
            "workflow_run_id": self.workflow_run_id,
        }

    @classmethod
    def from_step(cls, value: bytes | None, column_max_attempts: int) -> TaskConfig:
        """The journaled config, or defaults for a job a non-HTTP client enqueued."""
        data = decode(bytes(value)) if value is not None else None
        if not isinstance(data, dict):
            return cls(max_attempts=column_max_attempts)
        return cls(
            max_attempts=data.get("max_attempts", column_max_attempts),
            retry_strategy=RetryStrategy.from_json(data.get("retry_strategy")),
            start_deadline=_dt(data.get("start_deadline")),
            execution_deadline=_dt(data.get("execution_deadline")),
            workflow_run_id=data.get("workflow_run_id"),
        )

    def expired(self, now: datetime, *, claimed_before: bool) -> str | None:
        """Which timeout the task has passed at `now` (a deadline is passed once reached)."""
        if self.execution_deadline is not None and now >= self.execution_deadline:
            return "execution_timeout"
        if not claimed_before and self.start_deadline is not None and now >= self.start_deadline:
            return "start_timeout"
        return None


def _dt(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


def headers_of(meta: Any) -> dict[str, str]:
    """meta as the spec's headers (string values); a non-HTTP client's non-strings become JSON text."""
    import json

    if not isinstance(meta, dict):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}


def failures_of(errors: Any) -> int:
    """How many runs of a task failed so far: the entries of its errors a failRun wrote (an expired
    claim's §6 `lease_expired` entry is not one: it spends no attempt)."""
    return len(failed_runs(errors))


def failed_runs(errors: Any) -> list[dict]:
    """The errors entries that record a failed run (not a reclaimed claim)."""
    return [e for e in errors or [] if isinstance(e, dict) and e.get("error") != LEASE_EXPIRED]


def claimed_task(job: Any, config: TaskConfig) -> dict[str, Any]:
    """The spec's ClaimedTask for a job just claimed. `attempt` counts the task's runs as the spec
    does — 1 plus the runs that failed before this one (an expired claim, a schedule or a wait
    spends none) — and `max_attempts` is the one the task was created with, so `attempt ==
    max_attempts` means "this is the last run". The run id names this claim (the §7 fence)."""
    out = {
        "run_id": run_id(job.id, job.attempt),
        "task_id": task_id(job.id),
        "attempt": failures_of(job.errors) + 1,
        "task_name": job.worker,
        "params": job.input,
        "headers": headers_of(job.meta),
        "max_attempts": config.max_attempts,
    }
    if config.retry_strategy is not None:
        out["retry_strategy"] = config.retry_strategy.as_json()
    return out


# --- runs: the attempts of a task ----------------------------------------------------------------


def claimable(state: str, ready_at: datetime | None, now: datetime) -> bool:
    """§6 predicate C (the claim query's): ready and due, or awaiting with its deadline due."""
    if state == "ready":
        return ready_at is None or ready_at <= now
    return state == "awaiting" and ready_at is not None and ready_at <= now


def error_text(entry: dict) -> str:
    return entry.get("detail") or entry.get("error") or "error"


def runs_of(row: dict, now: datetime) -> list[tuple[RunRef, dict[str, Any]]]:
    """Every run of one job, in attempt order, as (position, RunSummary); position is
    (job id, attempt) with the run's attempt as the spec counts it (1 + the failed runs before it).

    A run is one attempt at the task (docs/http-api.md, "Runs"). It is created by createTask (the
    first) or by a failRun that schedules a retry (the next); it ends completed, failed (a reported
    failure, or the task's cancellation) — nothing else makes or ends one. A claim that expires, a
    schedule and a wait-for-event hand the same run back to the queue: while it waits it is
    `sleeping`, once claimable `pending`, claimed again `claimed`. Its id names the claim that holds it
    (the §7 fence: `run_<job>_<claim>`), and one that is not held names the claim that will take it
    next, so the id a stale holder kept never acts again; the id changes exactly when the run leaves
    its holder (expiry, schedule, wait) and is the one scheduleRun and wait-for-event's 202 return.
    A run woken by its wait's deadline rather than its event is marked `wait_timed_out` (its next
    wait-for-event on that step answers 408).
    """
    job_id, state, claims = row["id"], row["state"], row["attempt"]
    raw = [e for e in (row["errors"] or []) if isinstance(e, dict)]
    errors = failed_runs(raw)
    cancel = decode(bytes(row["cancel_step"])) if row.get("cancel_step") is not None else None

    def summary(n: int, claim: int, created: datetime, status: str, **extra: Any) -> tuple[RunRef, dict[str, Any]]:
        item: dict[str, Any] = {
            "id": run_id(job_id, max(claim, 1)),
            "task_id": task_id(job_id),
            "attempt": n,
            "status": status,
            "created_at": iso(created),
        }
        for key, value in extra.items():
            if value is not None:
                item[key] = iso(value) if isinstance(value, datetime) else value
        return RunRef(job_id, n), item

    out = []
    created = row["inserted_at"]
    for n, e in enumerate(errors, start=1):
        at = _dt(e.get("at")) if e.get("at") else None
        recorded_claim = e.get("attempt")
        claim = recorded_claim if isinstance(recorded_claim, int) else n
        out.append(summary(n, claim, created, "failed", error=error_text(e), completed_at=at or row["finished_at"]))
        created = at or created
    n = len(errors) + 1
    if state == "failed":
        if not errors or errors[-1].get("attempt") != claims:  # a failure no failed run records
            reclaimed = raw and raw[-1].get("error") == LEASE_EXPIRED and raw[-1].get("attempt") == claims
            text = LEASE_EXPIRED if reclaimed else "failed"  # a reclaim that found the column budget spent
            out.append(summary(n, claims, created, "failed", error=text, completed_at=row["finished_at"]))
        return out
    if state == "cancelled":
        reason = cancel.get("reason") if isinstance(cancel, dict) else None
        recorded = cancel.get("attempt") if isinstance(cancel, dict) else None
        at_claim = recorded if isinstance(recorded, int) else max(claims, 1)
        text = f"cancelled: {reason}" if reason else "cancelled"
        out.append(summary(n, at_claim, created, "failed", error=text, completed_at=row["finished_at"]))
        return out
    if state == "running":
        out.append(summary(n, claims, created, "claimed"))
    elif state == "succeeded":
        out.append(summary(n, claims, created, "completed", completed_at=row["finished_at"]))
    else:  # ready, awaiting, held, paused: waiting for its next claim
        pending = claimable(state, row["ready_at"], now)
        timed_out = True if state == "awaiting" and pending else None
        out.append(summary(n, claims + 1, created, "pending" if pending else "sleeping", wait_timed_out=timed_out))
    return out
