"""The HTTP API's operations over the Belay tables: every write is a PgStore operation of the shared
vocabulary, or a transaction composed from its named queries (impl/store/sql/*.sql, http.sql).

Mapping (see impl/http/__init__.py for the route table):
  queue        a belay_queues row (its optional `cleanup` policy in opts)
  task         a belay_jobs row: task_name = worker, params = input, headers = meta, max_attempts kept,
               the rest journaled as the `$http:task` step (impl/http/tasks.py)
  run          one attempt: run_<job>_<attempt>; every run write is §7-fenced on (id, running, attempt)
  checkpoint   versioned steps `$checkpoint:<name>#<n>` of the task (impl/http/checkpoints.py): PUT
               journals the next version, GET reads the latest; written only by the task's live run
  event        a signal in the one API-wide scope `http:events`, delivered under the scope lock
  workflow run a record (signal row in scope `http:workflow-runs`); its tasks share workflow_id

Every method takes `now`: the request handler reads the clock once and passes it down (clock rule).
Expected failures raise `ApiError` (the spec's Error schema); bad input never reaches the store.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from impl.http import checkpoints as cp
from impl.http import errors as e
from impl.http import fastpath as fast
from impl.http import sql as http_sql
from impl.http.errors import ApiError, iso
from impl.http.ids import (
    RunRef,
    decode_cursor,
    encode_cursor,
    event_id,
    is_workflow_run_id,
    new_workflow_run_id,
    parse_run,
    parse_task,
    run_id,
    task_id,
)
from impl.http.tasks import (
    CANCEL_STEP,
    RESERVED_STEP_PREFIXES,
    ROW_MAX_ATTEMPTS,
    TASK_STEP,
    WAIT_PREFIX,
    RetryStrategy,
    TaskConfig,
    claimed_task,
    failures_of,
    headers_of,
    runs_of,
)
from impl.store import PgStore
from impl.store.pgrows import channel_name, result_payload
from model import ops
from model import worker_ops as w
from model.envelope import EnvelopeError, decode, encode_step_value
from model.queues import QueueOpts
from model.rows import TERMINAL

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


class HttpService:
    """The operations behind the routes; thread-safe (the store's pool hands out connections)."""

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

    # --- queues -------------------------------------------------------------------------------------

    @staticmethod
    def _queue_json(row: dict) -> dict:
        return {"name": row["name"], "created_at": iso(row["updated_at"]), "cleanup": cleanup_policy(row["opts"])}

    def list_queues(self, now: datetime) -> dict:
        return {"queues": [self._queue_json(r) for r in self.store.statement("http_queue_list", {})]}

    def create_queue(self, now: datetime, body: Any) -> dict:
        body = e.obj(body)
        name = e.string(body, "name", required=True, name=True)
        opts: dict[str, Any] = {}
        if "cleanup" in body:
            cleanup = e.obj(body["cleanup"], "cleanup")
            opts["cleanup"] = {
                "task_ttl_seconds": e.integer(cleanup, "task_ttl_seconds", minimum=0, default=DEFAULT_TTL),
                "event_ttl_seconds": e.integer(cleanup, "event_ttl_seconds", minimum=0, default=DEFAULT_TTL),
            }
        row = self._one("http_queue_insert", {"name": name, "opts": Jsonb(opts), "now": now})
        if row is None:
            raise e.conflict(f"queue {name!r} already exists", "QUEUE_EXISTS")
        self.on_ready(name)
        return self._queue_json(row)

    def delete_queue(self, now: datetime, name: str) -> None:
        if "\x00" in name:
            raise self._no_such_queue(name)
        with self.store.transaction(now) as tx:
            if tx.one("http_queue_lock", {"name": name}) is None:
                raise e.not_found(f"queue {name!r} does not exist", "QUEUE_NOT_FOUND")
            pinned = tx.one("http_queue_pinned", {"name": name})["n"]
            if pinned:
                raise e.conflict(
                    f"queue {name!r} still has {pinned} task(s) that are not finished (or belong "
                    "to a workflow still running): nothing was deleted",
                    "QUEUE_NOT_EMPTY",
                )
            ids = [r["id"] for r in tx.all("http_queue_purge", {"name": name})]
            if ids:
                tx.cur.execute(self.store.q.q("prune_steps"), {"ids": ids})
                tx.cur.execute(self.store.q.q("prune_events"), {"ids": ids})
            tx.cur.execute(self.store.q.q("http_queue_delete"), {"name": name})

    def queue_stats(self, now: datetime, name: str) -> dict:
        self._queue(name)
        row = self._one("http_queue_stats", {"name": name, "now": now})
        oldest = row["oldest_pending"]
        return {
            "queue_name": name,
            "pending_runs": row["pending"],
            "claimed_runs": row["claimed"],
            "completed_runs": row["completed"],
            "oldest_pending_run_age_seconds": None if oldest is None else max((now - oldest).total_seconds(), 0.0),
        }

    # --- tasks and claims ---------------------------------------------------------------------------

    def create_task(self, now: datetime, queue: str, body: Any) -> dict:
        body = e.obj(body)
        task_name = e.string(body, "task_name", required=True, name=True)
        headers = e.string_map(body, "headers") or {}
        strategy = None
        if "retry_strategy" in body:
            rs = e.obj(body["retry_strategy"], "retry_strategy")
            kind = e.string(rs, "kind", required=True)
            if kind not in ("exponential", "fixed"):
                raise e.bad("retry_strategy.kind must be 'exponential' or 'fixed'")
            strategy = RetryStrategy(
                kind,
                e.number(rs, "base_seconds", minimum=0, required=True),
                e.number(rs, "factor", minimum=1),
                e.number(rs, "max_seconds", minimum=0),
            )
        max_attempts = e.integer(body, "max_attempts", minimum=1, maximum=1_000_000, default=1)
        start_timeout = e.integer(body, "start_timeout", minimum=0, default=0)
        execution_timeout = e.integer(body, "execution_timeout", minimum=0, default=0)
        workflow_run = e.string(body, "workflow_run_id")
        try:
            spec = ops.JobSpec(queue, task_name, input=body.get("params"), meta=headers, max_attempts=ROW_MAX_ATTEMPTS)
        except ops.InvalidInput as exc:
            raise e.bad(str(exc)) from None
        config = TaskConfig(
            max_attempts=max_attempts,
            retry_strategy=strategy,
            start_deadline=now + timedelta(seconds=start_timeout) if start_timeout else None,
            execution_deadline=now + timedelta(seconds=execution_timeout) if execution_timeout else None,
            workflow_run_id=workflow_run,
        )
        with self.store.pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            if cur.execute(self.store.q.q("http_queue_share"), {"name": queue}).fetchone() is None:
                raise e.not_found(f"queue {queue!r} does not exist", "QUEUE_NOT_FOUND")
            if workflow_run is not None:
                record = cur.execute(
                    self.store.q.q("http_signal_lock"), {"scope": WORKFLOW_RUN_SCOPE, "name": workflow_run}
                ).fetchone()
                if record is None:
                    raise e.not_found(f"workflow run {workflow_run!r} does not exist", "WORKFLOW_RUN_NOT_FOUND")
                if record["payload"].get("status") in WORKFLOW_TERMINAL:
                    raise e.conflict(
                        f"workflow run {workflow_run!r} is {record['payload']['status']}: it takes no new tasks",
                        "WORKFLOW_RUN_FINISHED",
                    )
                member = ops.WorkflowMember(f"task#{uuid.uuid4().hex}", spec)  # names only need be unique
                done = self.store.apply(ops.EnqueueWorkflow(now, workflow_run, (member,)), conn=conn)
                job_id = done.ids[0][1]
            else:
                job_id = self.store.apply(ops.Enqueue(now, (spec,)), conn=conn).outcomes[0].id
            cur.execute(
                self.store.q.q("insert_step"),
                {
                    "job_id": job_id,
                    "name": TASK_STEP,
                    "value": encode_step_value(config.as_json()),
                    "usd": 0,
                    "tokens": 0,
                    "now": now,
                },
            )
        self.on_ready(queue)
        out = {"task_id": task_id(job_id), "run_id": run_id(job_id, 1)}
        if workflow_run is not None:
            out["workflow_run_id"] = workflow_run
        return out

    def claim(self, now: datetime, queue: str, limit: int, claim_timeout: int) -> list[dict]:
        """One claim round: §6 claim with claim_timeout as the lease ttl. A task claimed past its
        start or execution deadline is cancelled (reason recorded) instead of handed out."""
        opts = admission_opts(self._queue(queue)["opts"])
        if opts.paused:
            return []
        demand, out = min(limit, MAX_CLAIM), []
        for _ in range(8):  # each round only repeats for tasks it had to cancel
            jobs = self.store.apply(w.Claim(now, queue, self.node, demand, timedelta(seconds=claim_timeout), opts)).jobs
            if not jobs:
                break
            configs = {
                r["job_id"]: r["value"]
                for r in self.store.statement("http_task_configs", {"ids": [j.id for j in jobs]})
            }
            fresh, expired = self._screen(now, jobs, configs)
            out += fresh
            for job, reason in expired:
                self.cancel_task(now, job.id, reason, state="running", attempt=job.attempt)
            if not expired or len(jobs) < demand:
                break
            demand = len(expired)
        return out

    async def claim_fast(
        self, now: datetime, queue: str, limit: int, claim_timeout: int, pool: Any, run_sync: fast.RunSync
    ) -> list[dict] | None:
        """`claim` in one round trip on the event loop's pool for a plain queue (no admission options,
        not paused): the same rounds, order and cancellations. None when the queue does not exist or
        is not plain before anything was claimed (the caller takes `claim`)."""
        if "\x00" in queue:
            raise self._no_such_queue(queue)
        demand = min(limit, MAX_CLAIM)
        out: list[dict] = []
        claim_sql = self.store.q.q("http_claim_solo")
        for _ in range(8):
            found = await fast.claim_once(pool, claim_sql, now, queue, self.node, demand, claim_timeout)
            if found is None:
                return out or None
            jobs, configs = found
            if not jobs:
                break
            fresh, expired = self._screen(now, jobs, configs)
            out += fresh
            for job, reason in expired:
                await run_sync(partial(self.cancel_task, now, job.id, reason, state="running", attempt=job.attempt))
            if not expired or len(jobs) < demand:
                break
            demand = len(expired)
        return out

    @staticmethod
    def _screen(now: datetime, jobs: Any, configs: dict) -> tuple[list[dict], list[tuple[Any, str]]]:
        """Claimed jobs as ClaimedTasks, and those past a start or execution deadline with the reason
        (the caller cancels them instead of handing them out)."""
        fresh, expired = [], []
        for job in jobs:
            config = TaskConfig.from_step(configs.get(job.id), job.max_attempts)
            first_claim = job.attempt == 1 and job.started_at == now
            reason = config.expired(now, claimed_before=not first_claim)
            if reason is not None:
                expired.append((job, reason))
            else:
                fresh.append(claimed_task(job, config))
        return fresh, expired

    # --- runs ---------------------------------------------------------------------------------------

    def list_runs(self, now: datetime, task: str | None, status: str | None, cursor: str | None, limit: int) -> dict:
        after = RunRef(0, 0)
        if cursor is not None:
            after = decode_cursor(cursor)
            if after is None:
                raise e.bad("cursor is not one this server handed out (pass next_cursor as given)")
        job_filter = None
        if task is not None:
            job_filter = parse_task(task)
            if job_filter is None:
                return {"runs": []}
        limit = min(limit, MAX_PAGE)
        found: list[tuple[RunRef, dict]] = []
        from_id, batch = after.job_id, max(limit + 1, 100)
        while len(found) <= limit:
            rows = self.store.statement("http_runs_page", {"from_id": from_id, "task": job_filter, "limit": batch})
            for row in rows:
                for ref, item in runs_of(row, now):
                    if ref > after and (status is None or item["status"] == status):
                        found.append((ref, item))
            if len(rows) < batch:
                break
            from_id = rows[-1]["id"] + 1
        out: dict[str, Any] = {"runs": [item for _, item in found[:limit]]}
        if len(found) > limit:
            out["next_cursor"] = encode_cursor(found[limit - 1][0])
        return out

    def list_tasks(
        self,
        now: datetime,
        queue: str | None,
        status: str | None,
        cursor: str | None,
        limit: int,
        task_name: str | None = None,
        state: str | None = None,
    ) -> dict:
        """listTasks (an extension the reference clients call): tasks in id order, optionally of one
        queue (404 when it does not exist), one task name, one status (TASK_STATUSES: the clients'
        TaskStatus) and one state (TASK_STATES), at most `limit` (clamped to MAX_PAGE), with
        next_cursor when more follow."""
        after = 0
        if cursor is not None:
            ref = decode_cursor(cursor)
            if ref is None:
                raise e.bad("cursor is not one this server handed out (pass next_cursor as given)")
            after = ref.job_id
        if queue is not None:
            e.check_name(queue, "queue_name")
            self._queue(queue)
        if task_name is not None:
            e.check_name(task_name, "task_name")
        limit = min(limit, MAX_PAGE)
        rows = http_sql.run(
            self.store,
            "tasks_page",
            {
                "now": now,
                "after": after,
                "queue": queue,
                "task_name": task_name,
                "status": status,
                "state": state,
                "limit": limit + 1,
            },
        )
        out: dict[str, Any] = {"tasks": [self._task_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            out["next_cursor"] = encode_cursor(RunRef(rows[limit - 1]["id"], 0))
        return out

    @staticmethod
    def _task_json(row: dict) -> dict:
        """A TaskSummary: the keys the reference clients read (id, task_name, status, queue_name,
        max_attempts — as created —, created_at, completed_at: null until finished) and more."""
        config = TaskConfig.from_step(row["config"], row["max_attempts"])
        failures = failures_of(row["errors"])
        item: dict[str, Any] = {
            "id": task_id(row["id"]),
            "task_id": task_id(row["id"]),
            "queue_name": row["queue"],
            "task_name": row["worker"],
            "status": row["status"] if row["status"] in TASK_STATUSES else "pending",
            "state": row["status"],
            "attempt": failures if row["state"] == "failed" and failures else failures + 1,
            "max_attempts": config.max_attempts,
            "params": row["input"],
            "headers": headers_of(row["meta"]),
            "created_at": iso(row["inserted_at"]),
            "completed_at": iso(row["finished_at"]) if row["finished_at"] is not None else None,
        }
        workflow_run = config.workflow_run_id or row["workflow_id"]
        if workflow_run is not None:
            item["workflow_run_id"] = workflow_run
        return item

    def completion_params(self, now: datetime, run: str, body: Any) -> dict | None:
        """The parameters of completeRun's one-statement fast path (None: bad input or no such run id,
        which the full path reports)."""
        ref = parse_run(run)
        if ref is None or not isinstance(body, dict):
            return None
        try:
            result = w.Succeed(body.get("result")).encoded
        except ops.InvalidInput:
            return None
        return {
            "id": ref.job_id,
            "attempt": ref.attempt,
            "now": now,
            "result": result,
            "channel": self._channel(),
            "payload": result_payload(ref.job_id),
        }

    def complete(self, now: datetime, run: str, body: Any, *, fast_tried: bool = False) -> dict:
        body = e.obj(body)
        try:
            outcome = w.Succeed(body.get("result"))
        except ops.InvalidInput as exc:
            raise e.bad(str(exc)) from None
        params = None if fast_tried else self.completion_params(now, run, body)
        if params is not None and self.store.statement("http_complete_solo", params):
            return {"run_id": run_id(params["id"], params["attempt"]), "status": "completed"}  # one round trip
        ref, row = self._run(run)
        self._require_live(ref, row)
        self._enforce_deadline(now, ref, row)
        if isinstance(self.store.apply(w.Ack(now, ref.job_id, ref.attempt, outcome)), w.Stale):
            raise self._stale(ref)
        return {"run_id": str(ref), "status": "completed"}

    def _channel(self) -> str | None:
        """The §9.2 channel of result notifications (None when the store sends none), read once."""
        if not self.store.notify:
            return None
        if self._notify_channel is None:
            with self.store.pool.connection() as conn:
                self._notify_channel = channel_name(conn.info.dbname, self.store.schema)
        return self._notify_channel

    def fail(self, now: datetime, run: str, body: Any) -> dict:
        body = e.obj(body)
        message = e.string(body, "error", required=True)
        ref, row = self._run(run)
        self._require_live(ref, row)
        config = self._enforce_deadline(now, ref, row)
        retry_at = None
        failure = failures_of(row["errors"]) + 1  # the n-th failed run of this task
        if row["config"] is None:  # a job another client made: its own column budget (contract §7)
            more = row["attempt"] < row["max_attempts"]
        else:  # an HTTP task: the budget it was created with, in failed runs (impl/http/tasks.py)
            more = failure < config.max_attempts
        if more:
            delay = config.retry_strategy.delay(failure) if config.retry_strategy else timedelta(0)
            retry_at = now + delay
        try:
            outcome = w.Fail("run_failed", message, retry_at)
        except ops.InvalidInput as exc:
            raise e.bad(f"error: {exc}") from None
        acked = self.store.apply(w.Ack(now, ref.job_id, ref.attempt, outcome))
        if isinstance(acked, w.Stale):
            raise self._stale(ref)
        out: dict[str, Any] = {"run_id": str(ref), "status": "failed", "attempt": failures_of(row["errors"]) + 1}
        if acked.state == "ready":
            out["next_run_id"] = run_id(ref.job_id, ref.attempt + 1)
            out["next_attempt_at"] = iso(retry_at)
            self.on_ready(row["queue"])
        return out

    def schedule(self, now: datetime, run: str, body: Any) -> dict:
        body = e.obj(body)
        if "run_at" not in body:
            raise e.bad("run_at is required")
        run_at = e.parse_datetime(body["run_at"], "run_at")
        ref, row = self._run(run)
        self._require_live(ref, row)
        self._enforce_deadline(now, ref, row)
        if row["max_attempts"] >= ops.INT4_MAX:
            raise e.conflict("the task's attempt budget cannot grow any further", "ATTEMPTS_EXHAUSTED")
        if isinstance(self.store.apply(w.Ack(now, ref.job_id, ref.attempt, w.Snooze(run_at))), w.Stale):
            raise self._stale(ref)
        self.on_ready(row["queue"])
        # the run that resumes: this run, handed back to the queue under the id of its next claim
        return {"run_id": run_id(ref.job_id, ref.attempt + 1), "scheduled_at": iso(run_at)}

    def wait_for_event(self, now: datetime, run: str, body: Any) -> tuple[int, dict]:
        """The spec's flow: 200 with the payload when the event exists (or this step already resolved),
        408 when the run resumed past the step's first deadline without it, else park (202). The
        check and the park happen under the event scope's lock that emit also takes (§7 park rule),
        and the signal row persists, so an emit racing the wait can never be lost."""
        body = e.obj(body)
        event_name = e.string(body, "event_name", required=True, name=True)
        timeout = e.integer(body, "timeout_seconds", minimum=1, required=True)
        task_text = e.string(body, "task_id", required=True)
        step = self._step_name(e.string(body, "step_name", required=True))
        ref, row = self._run(run)
        if parse_task(task_text) != ref.job_id:
            raise e.conflict(
                f"task_id {task_text!r} is not the task of run {ref}: nothing was changed", "TASK_MISMATCH"
            )
        self._require_live(ref, row)
        self._enforce_deadline(now, ref, row)
        with self.store.transaction(now) as tx:
            if tx.one("fence", {"id": ref.job_id, "attempt": ref.attempt}) is None:  # row lock, then scope lock
                raise self._stale(ref)
            resolved = self._latest_checkpoint(tx, ref.job_id, step)
            if resolved is not None:
                return 200, {"status": "resolved", "payload": _jsonable(decode(bytes(resolved["value"])))}
            tx.one("lock_scope", {"scope": EVENT_SCOPE})
            event = tx.one("http_signal", {"scope": EVENT_SCOPE, "name": event_name})
            if event is not None:
                try:
                    value = encode_step_value(event["payload"])
                except EnvelopeError:
                    value = None  # over the 1 MiB step cap: answered, not memoized
                if value is not None:  # the step's checkpoint holds the payload: a retry resolves from it
                    self._write_checkpoint(tx, now, ref.job_id, step, value, None)
                return 200, {"status": "resolved", "payload": event["payload"]}
            memo_name = WAIT_PREFIX + step
            memo = tx.one("http_step", {"job_id": ref.job_id, "name": memo_name})
            if memo is not None:
                memo = decode(bytes(memo["value"]))
                if memo["event_name"] != event_name:
                    raise e.conflict(f"step {step!r} already waits for event {memo['event_name']!r}", "WAIT_MISMATCH")
                deadline = datetime.fromisoformat(memo["deadline"])
            else:
                deadline = now + timedelta(seconds=timeout)
                tx.one(
                    "insert_step",
                    {
                        "job_id": ref.job_id,
                        "name": memo_name,
                        "usd": 0,
                        "tokens": 0,
                        "now": now,
                        "value": encode_step_value({"event_name": event_name, "deadline": deadline.isoformat()}),
                    },
                )
            if now >= deadline:
                return 408, {
                    "status": "timeout",
                    "message": f"event {event_name!r} did not arrive before {iso(deadline)}",
                }
            parked = self.store._park(tx, ref.job_id, ref.attempt, EVENT_SCOPE, event_name, deadline)
            if parked is None:
                raise self._stale(ref)  # the park itself spends no attempt (model.store.max_attempts_after_park)
            resumed = run_id(ref.job_id, ref.attempt + 1)
            return 202, {
                "status": "sleeping",
                "message": f"the run sleeps until event {event_name!r} or {iso(deadline)}; it resumes as "
                f"{resumed} when claimed again (stop working on {ref})",
                "next_run_id": resumed,
            }

    # --- checkpoints --------------------------------------------------------------------------------

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

    def set_checkpoint(self, now: datetime, task: str, step: str, body: Any) -> dict:
        """Replace the state of checkpoint `step` (journal its next version) and advance updated_at —
        only as the task's live run (the §7 fence on owner_run's attempt, held through the write);
        extend_claim_by pushes that run's lease out. A stale or foreign run is 409 and writes nothing."""
        body = e.obj(body)
        if "state" not in body:
            raise e.bad("state is required")
        owner = e.string(body, "owner_run", required=True)
        extend = e.integer(body, "extend_claim_by", minimum=1)
        step = self._step_name(step)
        try:
            value = encode_step_value(body["state"])
        except EnvelopeError as exc:
            raise e.bad(f"state: {exc}") from None
        job_id = parse_task(task)
        row = self._one("http_run_context", {"id": job_id}) if job_id else None
        if row is None:
            raise e.not_found(f"task {task!r} not found", "TASK_NOT_FOUND")
        ref = parse_run(owner)
        if ref is None or ref.job_id != job_id:
            raise e.conflict(f"owner_run {owner!r} is not a run of task {task}: nothing was changed", "NOT_OWNER")
        self._require_live(ref, row)
        self._enforce_deadline(now, ref, row)
        with self.store.transaction(now) as tx:
            if tx.one("fence", {"id": job_id, "attempt": ref.attempt}) is None:
                raise self._stale(ref)
            self._write_checkpoint(tx, now, job_id, step, value)
            if extend is not None:
                tx.one(
                    "http_extend_lease",
                    {"id": job_id, "attempt": ref.attempt, "until": now + timedelta(seconds=extend)},
                )
        return {"task_id": task, "step_name": step, "updated_at": iso(now)}

    def get_checkpoint(self, now: datetime, task: str, step: str) -> dict:
        job_id = parse_task(task)
        if job_id is None or self._one("http_run_context", {"id": job_id}) is None:
            raise e.not_found(f"task {task!r} not found", "TASK_NOT_FOUND")
        row = None
        if step and not step.startswith(RESERVED_STEP_PREFIXES) and "\x00" not in step:
            row = self._one("http_checkpoint", {"job_id": job_id, "name": step, "prefix": cp.version_prefix(step)})
        if row is None:
            raise e.not_found(f"task {task} has no checkpoint {step!r}", "CHECKPOINT_NOT_FOUND")
        return {
            "task_id": task,
            "step_name": step,
            "state": _jsonable(decode(bytes(row["value"]))),
            "updated_at": iso(row["inserted_at"]),
        }

    # --- events -------------------------------------------------------------------------------------

    def emit(self, now: datetime, body: Any) -> dict:
        body = e.obj(body)
        name = e.string(body, "event_name", required=True, name=True)
        try:
            op = ops.DeliverSignal(now, EVENT_SCOPE, name, body.get("payload"))
        except ops.InvalidInput as exc:
            raise e.bad(str(exc)) from None
        if self.store.apply(op).woken:
            self.on_ready(None)
        return {"event_id": event_id(name, now), "event_name": name, "created_at": iso(now)}

    # --- workflow runs ------------------------------------------------------------------------------

    def create_workflow_run(self, now: datetime, body: Any) -> dict:
        body = e.obj(body)
        record = {
            "workflow_name": e.string(body, "workflow_name", required=True),
            "workflow_version": e.string(body, "workflow_version"),
            "inputs": body.get("inputs"),
            "created_by": e.string(body, "created_by"),
            "tags": e.string_map(body, "tags") or {},
            "status": "pending",
            "result": None,
            "started_at": None,
            "completed_at": None,
            "created_at": iso(now),
            "updated_at": iso(now),
        }
        workflow_run = new_workflow_run_id()
        try:
            self.store.apply(ops.DeliverSignal(now, WORKFLOW_RUN_SCOPE, workflow_run, record))
        except ops.InvalidInput as exc:
            raise e.bad(str(exc)) from None
        return {
            "workflow_run_id": workflow_run,
            "workflow_name": record["workflow_name"],
            "status": "pending",
            "created_at": record["created_at"],
        }

    def update_workflow_run(self, now: datetime, workflow_run: str, body: Any) -> dict:
        """Set status/result/times. Consistency with the tasks: completed and failed need every task
        finished (409 otherwise); canceled cancels every unfinished task (reason recorded); a finished
        workflow run keeps its status. The status reported is the record's finished status, else
        `running` once set so or once any task has been claimed, else `pending`."""
        body = e.obj(body)
        status = e.string(body, "status")
        if status is not None and status not in WORKFLOW_STATUSES:
            raise e.bad(f"status must be one of {', '.join(WORKFLOW_STATUSES)}")
        times = {k: e.parse_datetime(body[k], k) for k in ("started_at", "completed_at") if k in body}
        if "result" in body:
            try:
                ops.as_json(body["result"], "result")
            except ops.InvalidInput as exc:
                raise e.bad(str(exc)) from None
        if not is_workflow_run_id(workflow_run):
            raise e.not_found(f"workflow run {workflow_run!r} not found", "WORKFLOW_RUN_NOT_FOUND")
        with self.store.transaction(now) as tx:
            found = tx.one("http_signal_lock", {"scope": WORKFLOW_RUN_SCOPE, "name": workflow_run})
            if found is None:
                raise e.not_found(f"workflow run {workflow_run!r} not found", "WORKFLOW_RUN_NOT_FOUND")
            record = dict(found["payload"])
            tasks = tx.all("http_workflow_tasks", {"workflow_id": workflow_run})
            live = [t for t in tasks if t["state"] not in TERMINAL]
            current = record.get("status", "pending")
            if status is not None and current in WORKFLOW_TERMINAL and status != current:
                raise e.conflict(f"workflow run {workflow_run} is already {current}", "WORKFLOW_RUN_FINISHED")
            if status in ("completed", "failed") and live:
                raise e.conflict(
                    f"workflow run {workflow_run} still has {len(live)} unfinished task(s): cancel "
                    "it, or wait for them",
                    "TASKS_STILL_RUNNING",
                )
            if status is not None:
                record["status"] = status
                if status == "running" and record.get("started_at") is None:
                    record["started_at"] = iso(now)
                if status in WORKFLOW_TERMINAL and record.get("completed_at") is None:
                    record["completed_at"] = iso(now)
            if "result" in body:
                record["result"] = body["result"]
            for key, at in times.items():
                record[key] = iso(at)
            record["updated_at"] = iso(now)
            tx.cur.execute(
                self.store.q.q("upsert_signal"),
                {"scope": WORKFLOW_RUN_SCOPE, "name": workflow_run, "payload": Jsonb(record), "now": now},
            )
        if status == "canceled":
            for t in live:
                if not self.cancel_task(now, t["id"], "workflow_run_canceled", state=t["state"], attempt=t["attempt"]):
                    self._cancel_again(now, t["id"], "workflow_run_canceled")
            tasks = self.store.statement("http_workflow_tasks", {"workflow_id": workflow_run})
        return {
            "workflow_run_id": workflow_run,
            "status": self._workflow_status(record, tasks),
            "updated_at": record["updated_at"],
        }

    def _cancel_again(self, now: datetime, job_id: int, reason: str) -> None:
        """A cancel that raced a claim or a run's end: re-read once and cancel what is now there."""
        row = self._one("http_run_context", {"id": job_id})
        if row is not None and row["state"] not in TERMINAL:
            self.cancel_task(now, job_id, reason, state=row["state"], attempt=row["attempt"])

    @staticmethod
    def _workflow_status(record: dict, tasks: list[dict]) -> str:
        status = record.get("status", "pending")
        if status in WORKFLOW_TERMINAL or status == "running":
            return status
        return "running" if any(t["attempt"] > 0 or t["state"] in TERMINAL for t in tasks) else "pending"

    # --- the sweeper --------------------------------------------------------------------------------

    def sweep_once(self, now: datetime, *, batch: int = 500) -> SweepReport:
        """Reclaim expired claims (claimable again at once, or failed when attempts are spent), cancel
        tasks past their start/execution deadlines, and apply every queue's cleanup policy."""
        report = SweepReport()
        while True:  # the contract's §6 reclaim, of HTTP tasks only (impl/http/sql.py expired_http)
            retried, failed = self._reclaim_http(now, batch)
            report.requeued += retried
            report.failed += failed
            if len(retried) + len(failed) < batch:
                break
        if report.requeued or report.failed:
            self.on_ready(None)
        for row in self.store.statement("http_timed_out", {"now": now, "limit": batch}):
            if self.cancel_task(now, row["id"], row["reason"], state=row["state"], attempt=row["attempt"]):
                report.timed_out.append(row["id"])
        policies = [(r["name"], cleanup_policy(r["opts"])) for r in self.store.statement("http_queue_list", {})]
        for queue, policy in policies:
            if policy["task_ttl_seconds"]:
                report.pruned_tasks += self._prune_tasks(now, queue, policy["task_ttl_seconds"], batch)
        ttls = [p["event_ttl_seconds"] for _, p in policies] or [DEFAULT_TTL]
        if 0 not in ttls:  # events are API-wide: kept while any queue's policy still wants them
            with self.store.transaction(now) as tx:
                report.pruned_events = tx.cur.execute(
                    self.store.q.q("http_prune_events"),
                    {"scope": EVENT_SCOPE, "before": now - timedelta(seconds=max(ttls))},
                ).rowcount
        return report

    def _reclaim_http(self, now: datetime, batch: int) -> tuple[list[int], list[int]]:
        """One §6 reclaim pass (contract §6: "Any node reclaims expirees: select running AND
        lease_until <= $now FOR UPDATE SKIP LOCKED, then per row apply outcome retry (attempt < max) or
        failed with error {"error":"lease_expired"} — including full §7 settlement"), over the HTTP
        tasks only: the rows and outcomes are the contract's (reclaim_many, the worker's statement),
        ready at once (no backoff). (requeued, failed) ids."""
        with self.store.transaction(now) as tx:
            expired = tx.cur.execute(
                http_sql.query("expired_http", self.store.schema), {"now": now, "node": self.node, "limit": batch}
            ).fetchall()
            if not expired:
                return [], []
            base = w.error_entry(0, now, "lease_expired", None)
            del base["attempt"]
            rows = tx.all(
                "reclaim_many",
                {"ids": [r["id"] for r in expired], "ready_ats": [now] * len(expired), "base": Jsonb(base), "now": now},
            )
            rows.sort(key=lambda r: r["id"])
            retried = [r for r in rows if r["state"] == "ready"]
            failed = [r for r in rows if r["state"] == "failed"]
            tx.pokes.update(r["queue"] for r in retried)
            self.store._terminal(tx, failed)
        return [r["id"] for r in retried], [r["id"] for r in failed]

    def _prune_tasks(self, now: datetime, queue: str, ttl: int, batch: int) -> list[int]:
        pruned: list[int] = []
        while True:
            with self.store.transaction(now) as tx:
                ids = [
                    r["id"]
                    for r in tx.all(
                        "http_prune_tasks", {"queue": queue, "limit": batch, "before": now - timedelta(seconds=ttl)}
                    )
                ]
                if ids:
                    tx.cur.execute(self.store.q.q("prune_steps"), {"ids": ids})
                    tx.cur.execute(self.store.q.q("prune_events"), {"ids": ids})
            pruned += ids
            if len(ids) < batch:
                return pruned
