"""The OpenAPI document the server serves: the spec (a verbatim copy in impl/http/openapi.yaml, checked
against docs/spec by tests/test_http_openapi.py) plus an overlay that documents what this server
really does where the spec is silent. Nothing in the overlay changes a spec schema's meaning for
valid requests; it adds:

- the status codes the server answers besides the spec's: 400 (Error, VALIDATION_ERROR) on every
  operation with input, 404 where a named queue/task/workflow run may not exist, 409 where a run is
  fenced (schedule, wait-for-event, checkpoints) or a workflow run is finished, and 401 on mutating
  operations when a bearer token is configured (with the bearer security scheme);
- the cursor's form (24 hex digits, as next_cursor gives it);
- the store's bounds: names (queue, task_name, event_name, step_name) are 1..63 characters (always
  within the store's 255 UTF-8 bytes); max_attempts
  is at most 1,000,000 (a snooze or wait adds one to the integer column); durations in seconds are
  at most 2^31-1;
- `oldest_pending_run_age_seconds` as OpenAPI 3.1 spells a nullable number (`nullable` is 3.0);
- `servers: /api/v1` relative to wherever the document is served, and response links for clients
  and stateful testers (queue → tasks → runs → checkpoints, workflow run → update);
- extensions the reference client uses, each marked `x-belay-extension: true`: `GET /tasks`
  (listTasks: queue / status filters, a limit, a cursor; the Error schema on every failure).
"""

from __future__ import annotations

import copy
from functools import cache
from importlib import resources
from typing import Any

import yaml

from impl.http.ids import CURSOR_PATTERN

MUTATING = ("post", "put", "patch", "delete")
_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
_NAME = {"minLength": 1, "maxLength": 63}
_SECONDS = {"maximum": 2147483647}

# operationId → (extra status codes, each answered with the Error schema)
_EXTRA_STATUSES = {
    "createQueue": ("400",),
    "createTask": ("400", "404", "409"),
    "claimTasks": ("400", "404"),
    "listRuns": ("400",),
    "completeRun": ("400",),
    "failRun": ("400",),
    "scheduleRun": ("400", "409"),
    "waitForEvent": ("400", "409"),
    "setCheckpoint": ("400", "409"),
    "emitEvent": ("400",),
    "createWorkflowRun": ("400",),
    "updateWorkflowRun": ("400", "409"),
}
_DESCRIPTIONS = {
    "400": "Validation error",
    "401": "Missing or wrong bearer token",
    "404": "Resource not found",
    "409": "Conflict with current state (a stale or foreign run, a finished resource)",
}

_LINKS = {
    ("createQueue", "201"): {
        "GetQueueStats": ("getQueueStats", {"queue_name": "$response.body#/name"}),
        "CreateTask": ("createTask", {"queue_name": "$response.body#/name"}),
        "ClaimTasks": ("claimTasks", {"queue_name": "$response.body#/name"}),
        "DeleteQueue": ("deleteQueue", {"queue_name": "$response.body#/name"}),
        "ListQueueTasks": ("listTasks", {"queue_name": "$response.body#/name"}),
    },
    ("createTask", "201"): {
        "ListTaskRuns": ("listRuns", {"task_id": "$response.body#/task_id"}),
        "GetCheckpoint": ("getCheckpoint", {"task_id": "$response.body#/task_id"}),
        "CompleteRun": ("completeRun", {"run_id": "$response.body#/run_id"}),
        "FailRun": ("failRun", {"run_id": "$response.body#/run_id"}),
        "SetCheckpoint": ("setCheckpoint", {"task_id": "$response.body#/task_id"}),
    },
    ("claimTasks", "200"): {
        "CompleteClaimedRun": ("completeRun", {"run_id": "$response.body#/tasks/0/run_id"}),
        "FailClaimedRun": ("failRun", {"run_id": "$response.body#/tasks/0/run_id"}),
        "ScheduleClaimedRun": ("scheduleRun", {"run_id": "$response.body#/tasks/0/run_id"}),
    },
    ("createWorkflowRun", "201"): {
        "UpdateWorkflowRun": ("updateWorkflowRun", {"workflow_run_id": "$response.body#/workflow_run_id"}),
    },
}


_TASK_STATUSES = ["pending", "completed", "failed", "canceled"]  # the reference clients' TaskStatus
_TASK_STATES = ["pending", "running", "sleeping", "completed", "failed", "canceled"]

# Extensions: operations the spec does not have but the reference client calls (path → item).
_EXTENSION_PATHS = {
    "/tasks": {
        "get": {
            "operationId": "listTasks",
            "summary": "List tasks (extension)",
            "description": (
                "A Belay extension the reference clients use (not in the spec): tasks in creation order, "
                "optionally of one queue, one task name, one status and one state, at most `limit` (values "
                "above 1000 return 1000), with `next_cursor` when more follow. `status` is the reference "
                "clients' TaskStatus: pending (not finished: queued, claimed or sleeping), completed, failed, "
                "canceled. `state` is finer: pending (claimable now, or held), running (claimed), sleeping "
                "(scheduled, backing off before a retry, or waiting for an event), completed, failed, canceled. "
                "404 when the named queue does not exist."
            ),
            "tags": ["Tasks"],
            "x-belay-extension": True,
            "parameters": [
                {
                    "name": "queue_name",
                    "in": "query",
                    "required": False,
                    "description": "Only tasks of this queue",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 63},
                },
                {
                    "name": "task_name",
                    "in": "query",
                    "required": False,
                    "description": "Only tasks of this task name",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 63},
                },
                {
                    "name": "queue",
                    "in": "query",
                    "required": False,
                    "deprecated": True,
                    "description": "The earlier name of `queue_name` (ignored when `queue_name` is given)",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 63},
                },
                {
                    "name": "status",
                    "in": "query",
                    "required": False,
                    "description": "Only tasks in this status (pending: every task not finished)",
                    "schema": {"type": "string", "enum": _TASK_STATUSES},
                },
                {
                    "name": "state",
                    "in": "query",
                    "required": False,
                    "description": "Only tasks in this state (the finer status: running = claimed now)",
                    "schema": {"type": "string", "enum": _TASK_STATES},
                },
                {
                    "name": "cursor",
                    "in": "query",
                    "required": False,
                    "description": "Pagination cursor from a previous response",
                    "schema": {"type": "string", "pattern": CURSOR_PATTERN},
                },
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": "Maximum number of tasks to return",
                    "schema": {"type": "integer", "minimum": 1, "default": 50},
                },
            ],
            "responses": {
                "200": {
                    "description": "Tasks",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["tasks"],
                                "properties": {
                                    "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/TaskSummary"}},
                                    "next_cursor": {
                                        "type": "string",
                                        "description": "Pass as `cursor` for the next page. "
                                        "Absent when there are no more results.",
                                    },
                                },
                            }
                        }
                    },
                },
                "400": {"description": "Validation error", "content": _ERROR},
                "404": {"description": "Queue not found", "content": _ERROR},
            },
        }
    },
}
_EXTENSION_SCHEMAS = {
    "TaskSummary": {
        "type": "object",
        "required": ["id", "queue_name", "task_name", "status", "state", "max_attempts", "created_at", "completed_at"],
        "x-belay-extension": True,
        "properties": {
            "id": {"type": "string", "description": "The task's id (task_<n>)"},
            "task_id": {"type": "string", "description": "The same id, under the name earlier servers used"},
            "queue_name": {"type": "string"},
            "task_name": {"type": "string"},
            "status": {
                "type": "string",
                "enum": _TASK_STATUSES,
                "description": "The reference clients' TaskStatus: pending until the task finishes",
            },
            "state": {
                "type": "string",
                "enum": _TASK_STATES,
                "description": "pending (claimable now, or held), running (claimed), sleeping (scheduled, "
                "backing off before a retry, or waiting for an event), completed, failed, canceled",
            },
            "attempt": {
                "type": "integer",
                "description": "The attempt of the task's current (or last) run: 1 + the runs that failed before it",
            },
            "max_attempts": {"type": "integer", "description": "As the task was created with"},
            "params": {"description": "Task parameters as provided when created"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "workflow_run_id": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
            "completed_at": {
                "type": ["string", "null"],
                "format": "date-time",
                "description": "When the task finished (completed, failed or canceled); null until then",
            },
        },
    },
}


@cache
def spec_text() -> str:
    """The spec, verbatim."""
    return resources.files("impl.http").joinpath("openapi.yaml").read_text(encoding="utf-8")


def _operations(doc: dict) -> dict[str, dict]:
    return {
        op["operationId"]: op
        for item in doc["paths"].values()
        for method, op in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    }


def _methods(doc: dict) -> dict[str, str]:
    return {
        op["operationId"]: method
        for item in doc["paths"].values()
        for method, op in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    }


def _body_schema(op: dict) -> dict:
    return op["requestBody"]["content"]["application/json"]["schema"]


def served_document(*, bearer: bool) -> dict[str, Any]:
    """The document to serve; `bearer` adds the security scheme and 401s (a token is configured)."""
    doc = copy.deepcopy(yaml.safe_load(spec_text()))
    doc["servers"] = [{"url": "/api/v1"}]
    doc["info"]["description"] += (
        "\n## Served by Belay\n\nThis document is the spec plus what this server adds where the spec is "
        "silent: error statuses (400, 404, 409, 401 with a token) with the Error schema, the store's bounds "
        "(names 1..63 characters, max_attempts ≤ 1,000,000, seconds ≤ 2^31-1) and response links. Ids: "
        "task_<n>, run_<n>_<attempt>, wfr_<hex>. A checkpoint PUT replaces its state (a new version; GET "
        "returns the latest) and only the task's live run may write (409 for a stale or foreign run). A run "
        "leaves its holder — its claim expires, or it is scheduled, or it waits for an event — and goes back "
        "to the queue as the same run (one attempt: none of the three spends one of max_attempts); it is "
        "`sleeping` until due, then `pending`, and the next claim hands it out under a new run_id, the id "
        "of that claim: the old id is refused (409) from then on, so a holder whose claim expired can never "
        "overwrite the new holder's work. scheduleRun and wait-for-event's 202 (`next_run_id`) return that "
        "new id; GET /runs lists every run under its current id. `attempt` counts runs (1 + the failed "
        "ones before it) and `max_attempts` is the one the task was created with. An expired claim is "
        "re-queued by the server's sweeper (every second by default), or by the contract's reclaim of any "
        "other Belay runtime on the same database (then claimable after that runtime's backoff): either "
        "way it spends no attempt. Full semantics: docs/http-api.md in "
        "the Belay repository. Extensions (x-belay-extension): GET /tasks.\n"
    )
    ops = _operations(doc)
    methods = _methods(doc)
    schemas = doc["components"]["schemas"]
    # bounds
    _body_schema(ops["createQueue"])["properties"]["name"].update(_NAME)
    schemas["CreateTaskRequest"]["properties"]["task_name"].update(_NAME)
    schemas["CreateTaskRequest"]["properties"]["max_attempts"]["maximum"] = 1_000_000
    for key in ("start_timeout", "execution_timeout"):
        schemas["CreateTaskRequest"]["properties"][key].update(_SECONDS)
    for key in ("task_ttl_seconds", "event_ttl_seconds"):
        schemas["CleanupPolicy"]["properties"][key].update(_SECONDS)
    _body_schema(ops["claimTasks"])["properties"]["claim_timeout"].update(_SECONDS)
    wait = _body_schema(ops["waitForEvent"])["properties"]
    wait["event_name"].update(_NAME)
    wait["step_name"].update(_NAME)
    wait["timeout_seconds"].update(_SECONDS)
    _body_schema(ops["emitEvent"])["properties"]["event_name"].update(_NAME)
    put = _body_schema(ops["setCheckpoint"])["properties"]
    put["extend_claim_by"].update(_SECONDS)
    doc["components"]["parameters"]["StepName"]["schema"].update(_NAME)
    for param in ops["listRuns"]["parameters"]:
        if param["name"] == "cursor":
            param["schema"]["pattern"] = CURSOR_PATTERN
    age = ops["getQueueStats"]["responses"]["200"]["content"]["application/json"]["schema"]["properties"][
        "oldest_pending_run_age_seconds"
    ]
    age.pop("nullable", None)
    age["type"] = ["number", "null"]
    # what this server does where the spec leaves it open
    ops["deleteQueue"]["description"] += (
        "Served by Belay: 409 while the queue has a task that is not finished (pending, claimed or sleeping) "
        "or a finished task of a workflow that is still running; otherwise the queue is deleted together "
        "with its finished tasks, their runs and checkpoints (a departure from the spec's wording, which "
        "counts finished tasks too: they would otherwise pin the queue until the cleanup policy removes "
        "them).\n"
    )
    ops["claimTasks"]["description"] += (
        "Served by Belay: a run whose claim expired is re-queued without spending an attempt and is "
        "handed out again under a new run_id; the expired holder's complete, fail, schedule, "
        "wait-for-event and checkpoint writes are refused with 409.\n"
    )
    ops["scheduleRun"]["description"] += (
        " The run goes back to the queue (sleeping until run_at, then pending) without spending an attempt; "
        "the run_id returned is the id it resumes under when claimed next (the caller's id is stale from now on)."
    )
    sleeping = ops["waitForEvent"]["responses"]["202"]["content"]["application/json"]["schema"]
    sleeping["properties"]["next_run_id"] = {
        "type": "string",
        "description": "The id the run resumes under when it is claimed again (Belay)",
    }
    schemas["RunSummary"]["properties"]["wait_timed_out"] = {
        "type": "boolean",
        "description": "Present (true) on a run woken by its wait's deadline rather than its event, until "
        "claimed: its next wait-for-event on that step answers 408 (Belay)",
    }
    # statuses
    for op_id, statuses in _EXTRA_STATUSES.items():
        for status in statuses:
            ops[op_id]["responses"].setdefault(status, {"description": _DESCRIPTIONS[status], "content": _ERROR})
    if bearer:
        doc["components"]["securitySchemes"] = {"bearerAuth": {"type": "http", "scheme": "bearer"}}
        for op_id, op in ops.items():
            if methods[op_id] in MUTATING:
                op["security"] = [{"bearerAuth": []}]
                op["responses"].setdefault("401", {"description": _DESCRIPTIONS["401"], "content": _ERROR})
    # extensions
    doc["paths"].update(copy.deepcopy(_EXTENSION_PATHS))
    schemas.update(copy.deepcopy(_EXTENSION_SCHEMAS))
    # links
    for (op_id, status), links in _LINKS.items():
        ops[op_id]["responses"][status]["links"] = {
            name: {"operationId": target, "parameters": params} for name, (target, params) in links.items()
        }
    return doc
