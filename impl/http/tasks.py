"""Tasks and runs as the HTTP API shows them, derived from belay_jobs rows (pure; no I/O).

A task's HTTP-only options (retry strategy, the requested max_attempts, start/execution deadlines,
its workflow run) are journaled once, at creation, as the reserved step `$http:task` in the same
transaction as the job insert: steps are immutable (§8.2, invariant 3) and go wherever the job goes
(retention deletes them together). `$http:cancel` journals why the server cancelled a task
(start_timeout, execution_timeout, workflow_run_canceled), and `$http:wait:<step>` memoizes a
wait-for-event's deadline so a retried task waits against the first deadline, as `$sleep:` does.
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


def claimed_task(job: Any, config: TaskConfig) -> dict[str, Any]:
    """The spec's ClaimedTask for a job just claimed. max_attempts is the job's effective budget (the
    column): the requested value plus one for every schedule and wait so far, which spend no attempt —
    so `attempt == max_attempts` always means "this is the last run"."""
    out = {
        "run_id": run_id(job.id, job.attempt),
        "task_id": task_id(job.id),
        "attempt": job.attempt,
        "task_name": job.worker,
        "params": job.input,
        "headers": headers_of(job.meta),
        "max_attempts": job.max_attempts,
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
    """Every run of one job, in attempt order, as (position, RunSummary).

    Runs 1..attempt were claimed. A past run failed when the job's errors hold an entry for its
    attempt; otherwise it ended by schedule or wait-for-event and stays `sleeping` in the history.
    A job waiting to be claimed also has its next run: `pending` when claimable now, else `sleeping`.
    A cancelled job's cancelled run reports `failed` with the recorded reason.
    """
    job_id, state, attempt = row["id"], row["state"], row["attempt"]
    errors = {e.get("attempt"): e for e in (row["errors"] or []) if isinstance(e, dict)}
    cancel = decode(bytes(row["cancel_step"])) if row.get("cancel_step") is not None else None
    created: dict[int, datetime] = {1: row["inserted_at"]}
    for k in range(2, attempt + 2):
        previous = errors.get(k - 1)
        at = _dt(previous["at"]) if previous and previous.get("at") else None
        created[k] = at or created[k - 1]

    def summary(k: int, status: str, error: str | None = None, done: datetime | None = None) -> tuple:
        item: dict[str, Any] = {
            "id": run_id(job_id, k),
            "task_id": task_id(job_id),
            "attempt": k,
            "status": status,
            "created_at": iso(created[k]),
        }
        if error is not None:
            item["error"] = error
        if done is not None:
            item["completed_at"] = iso(done)
        return RunRef(job_id, k), item

    out = []
    for k in range(1, attempt):
        e = errors.get(k)
        out.append(summary(k, "failed", error_text(e), _dt(e.get("at"))) if e else summary(k, "sleeping"))
    if state == "cancelled":
        reason = cancel.get("reason") if isinstance(cancel, dict) else None
        text = f"cancelled: {reason}" if reason else "cancelled"
        at_run = cancel.get("attempt") if isinstance(cancel, dict) else None
        if at_run is None:
            at_run = attempt if attempt >= 1 and attempt not in errors else attempt + 1
        at_run = min(max(at_run, 1), attempt + 1)
        if attempt >= 1 and at_run != attempt:
            e = errors.get(attempt)
            out.append(
                summary(attempt, "failed", error_text(e), _dt(e.get("at"))) if e else summary(attempt, "sleeping")
            )
        out.append(summary(max(at_run, 1), "failed", text, row["finished_at"]))
        return out
    if attempt >= 1:
        e = errors.get(attempt)
        if state == "running":
            out.append(summary(attempt, "claimed"))
        elif state == "succeeded":
            out.append(summary(attempt, "completed", None, row["finished_at"]))
        elif state == "failed":
            out.append(summary(attempt, "failed", error_text(e) if e else "failed", row["finished_at"]))
        else:
            out.append(
                summary(attempt, "failed", error_text(e), _dt(e.get("at"))) if e else summary(attempt, "sleeping")
            )
    if state in ("ready", "awaiting", "held", "paused"):
        pending = claimable(state, row["ready_at"], now)
        out.append(summary(attempt + 1, "pending" if pending else "sleeping"))
    return out
