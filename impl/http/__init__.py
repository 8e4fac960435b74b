"""The Durable Execution HTTP API (docs/spec/durable-execution-api.openapi.yaml) over the Belay tables.

    from impl.http import create_app
    app = create_app("postgresql://...", token="s3cret")      # any ASGI server; `belay serve` runs uvicorn

Routes (all under /api/v1) and what each does to the store (impl/http/service.py):

    GET    /queues                               belay_queues rows
    POST   /queues                               insert a belay_queues row (409 when it exists)
    DELETE /queues/{q}                           409 while it has unfinished tasks; else the row and its finished tasks
    GET    /queues/{q}/stats                     counts over belay_jobs (pending = claimable now)
    POST   /queues/{q}/tasks                     Enqueue (EnqueueWorkflow with workflow_run_id) + `$http:task` step, one tx
    POST   /queues/{q}/tasks/claim               Claim (lease ttl = claim_timeout), long poll on pg_notify + floor
                                                 (one statement on the event loop for a queue without §6
                                                 admission options: impl/http/fastpath.py; without a long
                                                 poll answered in front of Starlette: impl/http/hot.py)
    GET    /runs                                 the attempts of jobs, (task, attempt) order, opaque cursor
    POST   /runs/{r}/complete                    Ack(Succeed)            fenced on the run's attempt (for a task
                                                 outside workflows and without a parent, concurrent requests
                                                 are coalesced into one statement: impl/http/fastpath.py;
                                                 answered in front of Starlette: impl/http/hot.py)
    POST   /runs/{r}/fail                        Ack(Fail(retry_at))     retry_at from the task's retry_strategy
    POST   /runs/{r}/schedule                    Ack(Snooze(run_at))
    POST   /runs/{r}/wait-for-event              fence + §7 park rule under the event scope lock (ParkAwait)
    PUT    /tasks/{t}/checkpoints/{s}            fenced: journal the next version $checkpoint:<s>#<n> + lease extension
    GET    /tasks/{t}/checkpoints/{s}            the latest version (impl/http/checkpoints.py)
    GET    /tasks                                extension: tasks by queue_name / task_name / status, a limit, a cursor
    POST   /events                               DeliverSignal in scope `http:events`
    POST   /workflow-runs                        a workflow-run record (signal row in `http:workflow-runs`)
    PATCH  /workflow-runs/{w}                    update it; canceled cancels its unfinished tasks

Runs as the API shows them (docs/http-api.md): an expired claim, a schedule and a wait hand the same run
back to the queue without spending an attempt; run ids name claims, so a stale holder is refused.
The sweeper (every sweep_interval) applies the contract's §6 reclaim to expired claims of HTTP tasks only
(impl/http/sql.py expired_http; an HTTP task's row is written so that any node's reclaim re-queues it
without spending an attempt: impl/http/tasks.py ROW_MAX_ATTEMPTS), cancels tasks past start/execution timeouts and
applies each queue's cleanup policy. `GET /openapi.json` serves the document (impl/http/openapi.py).
"""

from impl.http.app import create_app

__all__ = ["create_app"]
