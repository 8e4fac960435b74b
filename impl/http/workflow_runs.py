"""The HTTP API's checkpoints, events and workflow runs (a mixin of impl/http/service.py's `HttpService`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from impl.http import checkpoints as cp
from impl.http import errors as e
from impl.http.base import EVENT_SCOPE, WORKFLOW_RUN_SCOPE, WORKFLOW_STATUSES, WORKFLOW_TERMINAL, ServiceBase, _jsonable
from impl.http.errors import iso
from impl.http.ids import (
    event_id,
    is_workflow_run_id,
    new_workflow_run_id,
    parse_run,
    parse_task,
)
from impl.http.tasks import (
    RESERVED_STEP_PREFIXES,
)
from model import ops
from model.envelope import EnvelopeError, decode, encode_step_value
from model.rows import TERMINAL


class WorkflowOps(ServiceBase):
    """Checkpoints, events and workflow runs."""

    # --- checkpoints --------------------------------------------------------------------------------

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
