"""The HTTP API's tasks and runs (a mixin of impl/http/service.py's `HttpService`): create a task, claim
runs, list runs and tasks, and a run's writes — complete, fail, schedule, wait for an event — each
§7-fenced on (id, running, attempt).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from psycopg.rows import dict_row

from impl.http import errors as e
from impl.http import fastpath as fast
from impl.http import sql as http_sql
from impl.http.base import (
    EVENT_SCOPE,
    MAX_CLAIM,
    MAX_PAGE,
    TASK_STATUSES,
    WORKFLOW_RUN_SCOPE,
    WORKFLOW_TERMINAL,
    ServiceBase,
    _jsonable,
    admission_opts,
)
from impl.http.errors import iso
from impl.http.ids import (
    RunRef,
    decode_cursor,
    encode_cursor,
    parse_run,
    parse_task,
    run_id,
    task_id,
)
from impl.http.tasks import (
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
from impl.store.pgrows import channel_name, result_payload
from model import ops
from model import worker_ops as w
from model.envelope import EnvelopeError, decode, encode_step_value


class RunOps(ServiceBase):
    """Tasks, claims and runs."""

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
