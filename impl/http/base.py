"""The HTTP service's base (impl/http/service.py composes it): the constants of the API's mapping, a queue's
cleanup and admission options, and `ServiceBase` — the store, the helpers every operation uses (a named
query's one row, a queue, a run and its fence, a task's deadline) and `cancel_task`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from impl.http import checkpoints as cp
from impl.http import errors as e
from impl.http.errors import ApiError, iso
from impl.http.ids import (
    RunRef,
    parse_run,
    task_id,
)
from impl.http.tasks import (
    CANCEL_STEP,
    RESERVED_STEP_PREFIXES,
    TaskConfig,
)
from impl.store import PgStore
from model import ops
from model import worker_ops as w
from model.queues import QueueOpts

log = logging.getLogger("belay.http")

EVENT_SCOPE = "http:events"
WORKFLOW_RUN_SCOPE = "http:workflow-runs"
DEFAULT_TTL = 259200  # the spec's CleanupPolicy defaults (3 days)
MAX_CLAIM = 1000  # one claim hands out at most this many runs ("up to limit")
MAX_PAGE = 1000
DEFAULT_PAGE = 50
RUN_STATUSES = ("pending", "claimed", "completed", "failed", "sleeping")
# listTasks (an extension): `status` in the reference clients' TaskStatus (pending until the task finishes),
# `state` the finer one (pending = claimable now, running = claimed, sleeping = not claimable before a time)
TASK_STATUSES = ("pending", "completed", "failed", "canceled")
TASK_STATES = ("pending", "running", "sleeping", "completed", "failed", "canceled")
WORKFLOW_STATUSES = ("pending", "running", "completed", "failed", "canceled")
WORKFLOW_TERMINAL = ("completed", "failed", "canceled")


def cleanup_policy(opts: Any) -> dict[str, int]:
    """A queue's CleanupPolicy with the spec's defaults filled in."""
    given = opts.get("cleanup") if isinstance(opts, dict) else None
    given = given if isinstance(given, dict) else {}
    return {
        "task_ttl_seconds": given.get("task_ttl_seconds", DEFAULT_TTL),
        "event_ttl_seconds": given.get("event_ttl_seconds", DEFAULT_TTL),
    }


def admission_opts(opts: Any) -> QueueOpts:
    """The §6 admission options a queue row carries besides `cleanup` (other Belay tools may set them)."""
    rest = {k: v for k, v in opts.items() if k != "cleanup"} if isinstance(opts, dict) else {}
    try:
        return QueueOpts.parse(rest)
    except ops.InvalidInput as exc:
        log.warning("queue options %r ignored: %s", rest, exc)
        return QueueOpts()


def _jsonable(value: Any) -> Any:
    """A decoded step value as JSON (a foreign SDK's ETF value may hold atoms, bytes, opaque terms)."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=repr))


@dataclass
class SweepReport:
    requeued: list[int] = field(default_factory=list)  # HTTP tasks whose claim expired: back in the queue
    failed: list[int] = field(default_factory=list)  # expired, no attempt left (a job another client made)
    timed_out: list[int] = field(default_factory=list)
    pruned_tasks: list[int] = field(default_factory=list)
    pruned_events: int = 0


class ServiceBase:
    """What every group of operations stands on: the store, the node name, the helpers."""

    def __init__(
        self, store: PgStore, *, node: str = "http", on_ready: Callable[[str | None], None] | None = None
    ) -> None:
        self.store = store
        self.node = node  # leased_by of every HTTP claim: renewals and fences work across server processes
        self.on_ready = on_ready or (lambda queue: None)
        self._notify_channel: str | None = None

    # --- helpers ------------------------------------------------------------------------------------

    def _one(self, name: str, params: dict) -> dict | None:
        rows = self.store.statement(name, params)
        return rows[0] if rows else None

    @staticmethod
    def _no_such_queue(name: str) -> ApiError:
        return e.not_found(f"queue {name!r} does not exist", "QUEUE_NOT_FOUND")

    def _queue(self, name: str) -> dict:
        if "\x00" in name:  # no queue can be named so (PostgreSQL text holds no NUL): found by the fuzz pass
            raise self._no_such_queue(name)
        row = self._one("http_queue_get", {"name": name})
        if row is None:
            raise e.not_found(f"queue {name!r} does not exist", "QUEUE_NOT_FOUND")
        return row

    def _run(self, text: str) -> tuple[RunRef, dict]:
        """The run a path names and its job's fence columns; 404 when no such run can exist."""
        ref = parse_run(text)
        row = self._one("http_run_context", {"id": ref.job_id}) if ref else None
        if ref is None or row is None or ref.attempt > row["attempt"] + 1:
            raise e.not_found(f"run {text!r} not found", "RUN_NOT_FOUND")
        return ref, row

    @staticmethod
    def _require_live(ref: RunRef, row: dict) -> None:
        """The §7 fence, answered before writing: only the running attempt may act."""
        if row["state"] == "running" and row["attempt"] == ref.attempt:
            return
        if ref.attempt == row["attempt"] + 1:
            raise e.conflict(f"run {ref} is pending: claim it before acting on it", "RUN_NOT_CLAIMED")
        raise e.conflict(
            f"run {ref} is no longer the live run of task {task_id(ref.job_id)} (the task is "
            f"{row['state']}, at attempt {row['attempt']}): nothing was changed",
            "STALE_RUN",
        )

    def _enforce_deadline(self, now: datetime, ref: RunRef, row: dict) -> TaskConfig:
        """A live run of a task past its execution_timeout is cancelled now, whatever the sweeper's
        cadence: the task may not complete, fail or checkpoint past its deadline."""
        config = TaskConfig.from_step(row["config"], row["max_attempts"])
        reason = config.expired(now, claimed_before=True)
        if reason is not None:
            self.cancel_task(now, ref.job_id, reason, state="running", attempt=ref.attempt)
            raise e.conflict(
                f"task {task_id(ref.job_id)} passed its {reason.replace('_', ' ')} and was cancelled", reason.upper()
            )
        return config

    def _stale(self, ref: RunRef) -> ApiError:
        return e.conflict(f"run {ref} lost its claim while this request ran: nothing was changed", "STALE_RUN")

    # --- checkpoints (written by set_checkpoint and by a run's wait for an event) -----------------

    @staticmethod
    def _step_name(name: str) -> str:
        e.check_name(name, "step_name")
        if name.startswith(RESERVED_STEP_PREFIXES):
            raise e.bad(f"step_name {name!r} uses a reserved prefix ({', '.join(RESERVED_STEP_PREFIXES)})")
        return name

    @staticmethod
    def _latest_checkpoint(tx: Any, job_id: int, name: str) -> dict | None:
        """The latest version of checkpoint `name` (value, inserted_at, version) or None."""
        row = tx.one("http_checkpoint", {"job_id": job_id, "name": name, "prefix": cp.version_prefix(name)})
        if row is None:
            return None
        return {**row, "version": cp.version_of(name, row["name"])}

    def _write_checkpoint(
        self, tx: Any, now: datetime, job_id: int, name: str, value: bytes, latest: dict | bool | None = False
    ) -> None:
        """Journal the next version of checkpoint `name`. The caller holds the job row lock (the §7
        fence), so versions are written one at a time; `latest` saves a re-read when already known."""
        if latest is False:
            latest = self._latest_checkpoint(tx, job_id, name)
        version = (latest["version"] if latest else 0) + 1
        if (
            tx.one(
                "insert_step",
                {
                    "job_id": job_id,
                    "name": cp.step_name(name, version),
                    "value": value,
                    "usd": 0,
                    "tokens": 0,
                    "now": now,
                },
            )
            is None
        ):
            raise e.conflict(
                f"checkpoint {name!r} version {version} was written concurrently: nothing was changed",
                "CHECKPOINT_CONFLICT",
            )

    def cancel_task(self, now: datetime, job_id: int, reason: str, *, state: str, attempt: int) -> bool:
        """Cancel a task with a recorded reason: journal `$http:cancel` first (the first reason wins),
        then the fenced self-cancel of its running attempt (the server acts as that run), or the
        operator cancel of a task waiting to run. True when the task is now cancelled. A lost race
        changes nothing; the sweeper finds the task again while it is still past its deadline."""
        cancelled_run = attempt if state == "running" else attempt + 1
        self.store.apply(
            w.RecordStep(now, job_id, CANCEL_STEP, {"reason": reason, "at": iso(now), "attempt": cancelled_run})
        )
        if state == "running":
            return isinstance(self.store.apply(w.Ack(now, job_id, attempt, w.CancelSelf())), w.Acked)
        return isinstance(self.store.apply(ops.Cancel(now, job_id)), ops.Cancelled)
