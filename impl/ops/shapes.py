"""What the operator's surfaces show: jobs, steps, events and attempts as plain JSON-able dicts (what `--json`
prints, MCP tools return and the dashboard renders), a name as one table row, and `Refused` — an
operation that changed nothing — with the message a refused retry gets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from model import ops
from model.envelope import Opaque, decode
from model.rows import Event, Job, Step


class Refused(Exception):
    """The operation was refused (not found, wrong state, invalid input); nothing was changed — but for
    `doomed`: a retry of a workflow member whose dependency failed or was cancelled re-holds it and
    the workflow settles it straight back (the message says which dependency). `kind` is a short
    machine word: not_found, not_retryable, not_cancellable, retry_blocked, deps_gone, doomed, invalid."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def retry_refusal(
    job_id: int,
    result: Any,
    read_job: Callable[[int], Job | None],
    read_workflow: Callable[[str], Iterable[Job]],
) -> Refused | None:
    """The one place that decides whether a retry's result is a refusal (the CLI's `belay retry`, the
    MCP server's retry_job and the dashboard's retry share it): None when the job was retried and is
    now claimable or held; otherwise the Refused to report. A workflow member whose dependency failed
    or was cancelled is re-held by the retry and settled straight back (contract §8.6: retry "→ held
    for dep-bearing workflow members ... re-dooms it if a dep is still failed"): that is `doomed`, and
    the message names the dependency to retry first."""
    if isinstance(result, ops.Retried) and result.state in ("failed", "cancelled"):
        return Refused("doomed", _doomed_message(job_id, result.state, read_job, read_workflow))
    if isinstance(result, ops.Retried):
        return None
    if isinstance(result, ops.NotFound):
        return Refused("not_found", f"job {job_id} does not exist")
    if isinstance(result, ops.NotRetryable):
        return Refused(
            "not_retryable",
            f"job {job_id} is {result.state}: only failed or cancelled jobs can be retried; nothing was changed",
        )
    if isinstance(result, ops.RetryBlocked):
        return Refused(
            "retry_blocked",
            f"job {job_id}: retrying would make a second live holder of its unique "
            f"key (held by job {result.holder_id}); nothing was changed",
        )
    if isinstance(result, ops.DepsGone):
        return Refused(
            "deps_gone",
            f"job {job_id}: its workflow deps {list(result.missing)} were pruned, so it "
            "could never settle; nothing was changed",
        )
    raise AssertionError(result)  # pragma: no cover


def _doomed_message(
    job_id: int, state: str, read_job: Callable[[int], Job | None], read_workflow: Callable[[str], Iterable[Job]]
) -> str:
    job = read_job(job_id)
    members = {j.wf_name: j for j in read_workflow(job.workflow_id)} if job and job.workflow_id else {}
    blocking = [
        f"{name!r} (job {members[name].id}) is {members[name].state}"
        for name in (job.wf_deps if job else None) or ()
        if name in members and members[name].state in ("failed", "cancelled")
    ]
    why = "; ".join(blocking) or "a dependency cannot succeed"
    return (
        f"job {job_id} was not retried: it is {state} again at once because its workflow dependency {why} "
        "— retry that dependency first (its dependents are held again when it is retried)"
    )


def shown_name(name: str) -> str:
    """A name (queue, kind, workflow, …) as an operator should read it: as it is when every character is
    printable, else as a JSON string (quoted, escaped) — so a queue named "a\\nb" never shows as two rows
    of a CLI table or as "a b" on the dashboard (HTML folds the newline), where a queue "a b" shows too."""
    return name if name.isprintable() else json.dumps(name)


def plain(value: Any) -> Any:
    """A decoded envelope / jsonb value made JSON-able (bytes and opaque ETF terms as text)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, Opaque):
        return {"$opaque": repr(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def job_json(job: Job, *, full: bool = False) -> dict[str, Any]:
    out = {
        "id": job.id,
        "queue": job.queue,
        "kind": job.worker,
        "state": job.state,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "priority": job.priority,
        "inserted_at": plain(job.inserted_at),
        "ready_at": plain(job.ready_at),
        "started_at": plain(job.started_at),
        "finished_at": plain(job.finished_at),
        "workflow_id": job.workflow_id,
        "wf_name": job.wf_name,
        "parent_id": job.parent_id,
        "cancel_requested": job.cancel_requested,
    }
    if full:
        out.update(
            {
                "input": plain(job.input),
                "meta": plain(job.meta),
                "errors": plain(job.errors),
                "result": plain(decode(job.result)) if job.result is not None else None,
                "lease_until": plain(job.lease_until),
                "leased_by": job.leased_by,
                "unique_key": job.unique_key,
                "unique_mode": job.unique_mode,
                "cron_name": job.cron_name,
                "cron_slot": plain(job.cron_slot),
                "wf_deps": list(job.wf_deps) if job.wf_deps else None,
                "wf_ignore": list(job.wf_ignore) if job.wf_ignore else None,
                "await_scope": job.await_scope,
                "await_name": job.await_name,
                "budget_usd_micros": job.budget_usd_micros,
                "budget_tokens": job.budget_tokens,
                "spent_usd_micros": job.spent_usd_micros,
                "spent_tokens": job.spent_tokens,
            }
        )
    return out


def step_json(step: Step) -> dict[str, Any]:
    return {
        "seq": step.seq,
        "name": step.name,
        "value": plain(decode(step.value)),
        "usd_micros": step.usd_micros,
        "tokens": step.tokens,
        "inserted_at": plain(step.inserted_at),
    }


def event_json(event: Event) -> dict[str, Any]:
    return {"seq": event.seq, "payload": plain(event.payload), "inserted_at": plain(event.inserted_at)}


def attempts_json(job: Job) -> list[dict[str, Any]]:
    """One entry per attempt the job has had (§7: each claim is an attempt), with its recorded errors.
    An attempt without an error entry either is the current/final one or ended by parking,
    sleeping or snoozing (those outcomes record nothing on the row)."""
    errors: dict[int, list[dict]] = {}
    for entry in job.errors or []:
        errors.setdefault(int(entry.get("attempt", 0)), []).append(plain(entry))
    out = []
    for n in range(1, job.attempt + 1):
        if errors.get(n):
            ended = "error"
        elif n == job.attempt:
            ended = job.state
        else:
            ended = "parked, slept or snoozed"
        out.append({"attempt": n, "ended": ended, "errors": errors.get(n, [])})
    return out
