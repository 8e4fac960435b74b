"""The HTTP service's own statements over the Belay tables (the ones impl/store/sql/http.sql does not have),
composed per schema like the named queries (`psycopg.sql.Identifier` table names, `now` always a
parameter). Kept here because the run semantics they implement are the API's, not the contract's.

    expired_http      the HTTP sweep's §6 reclaim selection, restricted to HTTP tasks: the contract's
                      expired_leases (running AND lease_until <= now, FOR UPDATE SKIP LOCKED) of the
                      jobs created through the API (their `$http:task` step) or leased by this server's
                      node (a job another client enqueued, handed out as a run). The outcomes are the
                      contract's own (impl/store/sql/worker.sql reclaim_many): an HTTP task's row keeps
                      max_attempts out of its claims' reach (impl/http/tasks.py ROW_MAX_ATTEMPTS), so
                      the reclaim — this one or any other node's — re-queues it, spending no attempt.
                      A job of another client the server never leased is never touched (issue 53).
    tasks_page        listTasks: tasks in id order after a position, filtered by queue, task name
                      and status, with what the summary shows (errors: the failed runs so far)
"""

from __future__ import annotations

from functools import cache
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row

_TEXT = {
    "expired_http": """
SELECT j.id, j.attempt, j.max_attempts FROM {jobs} AS j
WHERE j.state = 'running' AND j.lease_until <= %(now)s
  AND (j.leased_by = %(node)s
       OR EXISTS (SELECT 1 FROM {steps} AS s WHERE s.job_id = j.id AND s.name = '$http:task'))
ORDER BY j.id
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED
""",
    "tasks_page": """
SELECT * FROM (
    SELECT j.id, j.queue, j.worker, j.state, j.attempt, j.max_attempts, j.errors, j.input, j.meta,
           j.inserted_at, j.finished_at, j.workflow_id, s.value AS config,
           CASE WHEN j.state = 'running' THEN 'running'
                WHEN j.state = 'succeeded' THEN 'completed'
                WHEN j.state = 'failed' THEN 'failed'
                WHEN j.state = 'cancelled' THEN 'canceled'
                WHEN j.state IN ('held', 'paused') THEN 'pending'
                WHEN j.state = 'ready' AND (j.ready_at IS NULL OR j.ready_at <= %(now)s) THEN 'pending'
                WHEN j.state = 'awaiting' AND j.ready_at <= %(now)s THEN 'pending'
                ELSE 'sleeping' END AS status
    FROM {jobs} AS j LEFT JOIN {steps} AS s ON s.job_id = j.id AND s.name = '$http:task'
    WHERE j.id > %(after)s
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(task_name)s::text IS NULL OR j.worker = %(task_name)s::text)
) AS t
WHERE (%(state)s::text IS NULL OR t.status = %(state)s::text)
  AND (%(status)s::text IS NULL
       OR CASE WHEN t.status IN ('running', 'sleeping') THEN 'pending' ELSE t.status END = %(status)s::text)
ORDER BY t.id
LIMIT %(limit)s
""",
}

NAMES = tuple(_TEXT)


@cache
def _composed(name: str, schema: str) -> sql.Composed:
    return sql.SQL(_TEXT[name]).format(
        jobs=sql.Identifier(schema, "belay_jobs"), steps=sql.Identifier(schema, "belay_steps")
    )


def query(name: str, schema: str) -> sql.Composed:
    """Statement `name` composed for `schema`."""
    return _composed(name, schema)


def run(store: Any, name: str, params: dict) -> list[dict]:
    """Statement `name` in autocommit on the store's pool: its rows as dicts."""
    with store.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query(name, store.schema), params)
        return cur.fetchall() if cur.description is not None else []
