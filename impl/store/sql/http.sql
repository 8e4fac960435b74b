-- Belay named queries for the HTTP API (impl/http/): queues as belay_queues rows, task options and
-- cancel reasons as reserved `$http:` steps, stats, the runs listing, the fenced checkpoint write,
-- timeouts and the per-queue cleanup policy. Conventions as in queries.sql: named parameters,
-- identifiers in braces, `now` always a parameter (no query reads the database clock). The running fence
-- is spelled `state || '' = 'running'`, as in worker.sql (see its header): found by id, never by a scan of
-- belay_jobs_lease_idx, which holds the running rows of the workers that share the database too.
--
-- Lock order (contract §7, extended): queue row → workflow advisory lock → job row locks →
-- signal-scope advisory lock. A task insert holds its queue row FOR KEY SHARE, a queue delete holds
-- it FOR UPDATE, so no task can slip into a queue between the delete's check and its delete.

-- http_queue_insert --
-- createQueue: insert-only (an existing name is a conflict, never an update).
INSERT INTO {queues} (name, opts, updated_at) VALUES (%(name)s, %(opts)s, %(now)s)
ON CONFLICT (name) DO NOTHING
RETURNING name, opts, updated_at

-- http_queue_list --
-- listQueues: every queue row in name order.
SELECT name, opts, updated_at FROM {queues} ORDER BY name

-- http_queue_get --
-- One queue row.
SELECT name, opts, updated_at FROM {queues} WHERE name = %(name)s

-- http_queue_share --
-- createTask: the queue must exist, and must keep existing until this insert commits.
SELECT name FROM {queues} WHERE name = %(name)s FOR KEY SHARE

-- http_queue_lock --
-- deleteQueue: lock the queue row against concurrent task inserts.
SELECT name FROM {queues} WHERE name = %(name)s FOR UPDATE

-- http_queue_pinned --
-- deleteQueue guard: tasks that keep a queue alive: non-terminal ones, and terminal members of a
-- workflow still settling (retention keeps those too: a held dependent must find its deps).
SELECT count(*) AS n FROM {jobs} AS j
WHERE j.queue = %(name)s
  AND (j.state NOT IN ('succeeded', 'failed', 'cancelled')
       OR (j.workflow_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM {jobs} AS o WHERE o.workflow_id = j.workflow_id
               AND o.state NOT IN ('succeeded', 'failed', 'cancelled'))))

-- http_queue_purge --
-- deleteQueue: the queue's terminal tasks go with it (their steps and events are deleted by id).
DELETE FROM {jobs} WHERE queue = %(name)s AND state IN ('succeeded', 'failed', 'cancelled') RETURNING id

-- http_queue_delete --
-- deleteQueue: the row itself.
DELETE FROM {queues} WHERE name = %(name)s

-- http_queue_stats --
-- getQueueStats: pending = claimable now (§6 predicate C), claimed = running, completed = succeeded.
SELECT
    count(*) FILTER (WHERE (state = 'ready' AND (ready_at IS NULL OR ready_at <= %(now)s))
                        OR (state = 'awaiting' AND ready_at <= %(now)s)) AS pending,
    count(*) FILTER (WHERE state = 'running') AS claimed,
    count(*) FILTER (WHERE state = 'succeeded') AS completed,
    min(COALESCE(ready_at, inserted_at)) FILTER (
        WHERE (state = 'ready' AND (ready_at IS NULL OR ready_at <= %(now)s))
           OR (state = 'awaiting' AND ready_at <= %(now)s)) AS oldest_pending
FROM {jobs} WHERE queue = %(name)s

-- http_task_configs --
-- The `$http:task` options of some jobs.
SELECT job_id, value FROM {steps} WHERE job_id = ANY(%(ids)s) AND name = '$http:task'

-- http_run_context --
-- What a run-scoped request needs: the job's fence columns plus its `$http:task` options.
SELECT j.id, j.queue, j.state, j.attempt, j.max_attempts, j.errors, j.inserted_at, j.started_at,
       j.cancel_requested, j.workflow_id, j.parent_id, s.value AS config
FROM {jobs} AS j LEFT JOIN {steps} AS s ON s.job_id = j.id AND s.name = '$http:task'
WHERE j.id = %(id)s

-- http_step --
-- One step of a job (a checkpoint), with when it was journaled.
SELECT value, inserted_at FROM {steps} WHERE job_id = %(job_id)s AND name = %(name)s

-- http_checkpoint --
-- getCheckpoint / setCheckpoint / wait-for-event: the latest version of checkpoint <name>: among the
-- steps `$checkpoint:<name>#<n>` (impl/http/checkpoints.py) and a plain legacy step <name> (version 0),
-- the one journaled last. Versions are written in order under the job row lock, so the last is the
-- highest version.
SELECT name, value, inserted_at FROM {steps}
WHERE job_id = %(job_id)s
  AND (name = %(name)s
       OR (starts_with(name, %(prefix)s)
           AND substr(name, char_length(%(prefix)s) + 1) ~ '^[1-9][0-9]{{0,17}}$'))
ORDER BY seq DESC
LIMIT 1

-- http_extend_lease --
-- setCheckpoint extend_claim_by: push the fenced run's lease out (never shorten it).
UPDATE {jobs} SET lease_until = GREATEST(lease_until, %(until)s)
WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s
RETURNING lease_until

-- http_signal --
-- One signal row (an event, or a workflow-run record).
SELECT payload, inserted_at FROM {signals} WHERE scope = %(scope)s AND name = %(name)s

-- http_signal_lock --
-- One signal row, locked for a read-modify-write (workflow-run records).
SELECT payload, inserted_at FROM {signals} WHERE scope = %(scope)s AND name = %(name)s FOR UPDATE

-- http_workflow_tasks --
-- The tasks of a workflow run, in id order.
SELECT id, state, attempt FROM {jobs} WHERE workflow_id = %(workflow_id)s ORDER BY id

-- http_runs_page --
-- listRuns: jobs from a position on, in id order, with any recorded cancel reason.
SELECT j.id, j.state, j.attempt, j.errors, j.inserted_at, j.ready_at, j.finished_at, c.value AS cancel_step
FROM {jobs} AS j LEFT JOIN {steps} AS c ON c.job_id = j.id AND c.name = '$http:cancel'
WHERE j.id >= %(from_id)s AND (%(task)s::bigint IS NULL OR j.id = %(task)s::bigint)
ORDER BY j.id
LIMIT %(limit)s

-- http_timed_out --
-- Non-terminal tasks past a deadline of their `$http:task` options: execution, or start while unclaimed.
SELECT j.id, j.state, j.attempt,
       CASE WHEN (cfg.doc->>'execution_deadline')::timestamptz <= %(now)s THEN 'execution_timeout'
            ELSE 'start_timeout' END AS reason
FROM {jobs} AS j
JOIN {steps} AS s ON s.job_id = j.id AND s.name = '$http:task' AND get_byte(s.value, 0) <> 131
CROSS JOIN LATERAL (SELECT convert_from(s.value, 'UTF8')::jsonb AS doc) AS cfg
WHERE j.state IN ('ready', 'running', 'awaiting', 'held', 'paused')
  AND ((cfg.doc->>'execution_deadline')::timestamptz <= %(now)s
       OR (j.started_at IS NULL AND (cfg.doc->>'start_deadline')::timestamptz <= %(now)s))
ORDER BY j.id
LIMIT %(limit)s

-- http_prune_tasks --
-- Cleanup policy: one queue's terminal tasks finished before the TTL, never a member of a workflow
-- still settling (as prune_jobs), a batch at a time.
-- The batch is chosen once (a locking CTE): as an IN-subquery the planner may rescan it per outer
-- row, and a rescanned LIMIT … SKIP LOCKED can return other rows — a batch larger than its limit.
WITH batch AS MATERIALIZED (
    SELECT id FROM {jobs} AS j
    WHERE j.queue = %(queue)s AND j.state IN ('succeeded', 'failed', 'cancelled') AND j.finished_at < %(before)s
      AND (j.workflow_id IS NULL OR NOT EXISTS (
               SELECT 1 FROM {jobs} AS o WHERE o.workflow_id = j.workflow_id
               AND o.state NOT IN ('succeeded', 'failed', 'cancelled')))
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {jobs} WHERE id IN (SELECT id FROM batch)
RETURNING id

-- http_prune_events --
-- Cleanup policy: events (signals of the API's scope) older than the TTL; no other scope.
DELETE FROM {signals} WHERE scope = %(scope)s AND inserted_at < %(before)s

-- http_tasks_page --
-- listTasks (an extension): tasks in id order after a position, optionally of one queue and one
-- status. A task's status: pending = claimable now (§6 predicate C) or held/paused, running, sleeping =
-- ready or awaiting with ready_at still ahead (a schedule, a retry backoff, a wait), completed, failed,
-- canceled.
SELECT * FROM (
    SELECT j.id, j.queue, j.worker, j.state, j.attempt, j.max_attempts, j.input, j.meta, j.inserted_at,
           j.finished_at, j.workflow_id, s.value AS config,
           CASE WHEN j.state = 'running' THEN 'running'
                WHEN j.state = 'succeeded' THEN 'completed'
                WHEN j.state = 'failed' THEN 'failed'
                WHEN j.state = 'cancelled' THEN 'canceled'
                WHEN j.state IN ('held', 'paused') THEN 'pending'
                WHEN j.state = 'ready' AND (j.ready_at IS NULL OR j.ready_at <= %(now)s) THEN 'pending'
                WHEN j.state = 'awaiting' AND j.ready_at <= %(now)s THEN 'pending'
                ELSE 'sleeping' END AS status
    FROM {jobs} AS j LEFT JOIN {steps} AS s ON s.job_id = j.id AND s.name = '$http:task'
    WHERE j.id > %(after)s AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
) AS t
WHERE %(status)s::text IS NULL OR t.status = %(status)s::text
ORDER BY t.id
LIMIT %(limit)s

-- http_complete_solo --
-- completeRun in one round trip: §7 succeed, fenced on the run's attempt, for a task outside any
-- workflow and without a parent — its after-terminal steps (settlement, `$children`) are empty — and
-- not past the execution deadline of its `$http:task` options, in one autocommit statement with its
-- result notification (§9.2; channel NULL: none). Any other task, a run that lost its claim or a task
-- past its deadline matches nothing; the caller then takes the full path (checks, errors, Ack).
WITH done AS (
    UPDATE {jobs} AS j
    SET state = 'succeeded', result = %(result)s, finished_at = %(now)s, lease_until = NULL, leased_by = NULL
    WHERE j.id = %(id)s AND j.state || '' = 'running' AND j.attempt = %(attempt)s
      AND j.workflow_id IS NULL AND j.parent_id IS NULL
      AND NOT EXISTS (
          SELECT 1 FROM {steps} AS s
          WHERE s.job_id = j.id AND s.name = '$http:task'
            AND (get_byte(s.value, 0) = 131
                 OR (convert_from(s.value, 'UTF8')::jsonb->>'execution_deadline')::timestamptz <= %(now)s))
    RETURNING j.id
)
SELECT id, CASE WHEN %(channel)s::text IS NULL THEN NULL
                ELSE pg_notify(%(channel)s::text, %(payload)s::text) END AS notified
FROM done

-- http_complete_batch --
-- http_complete_solo for several runs in one statement (the server coalesces concurrent completeRun
-- requests): each input row (job id, attempt, result, now — the request's own clock) is completed
-- under exactly http_complete_solo's conditions, with its own result notification {"t":"r","id":<id>}
-- (impl.store.pgrows.result_payload's text); a row that completes nothing is not returned and its request
-- takes the full path alone. The columns arrive as array literals in text (fastpath.array_literal:
-- psycopg's per-element list adaptation was a tenth of the server's CPU). Job ids in one batch are
-- distinct; the rows are locked in id order, so two batches never deadlock on each other.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::text::bigint[], %(attempts)s::text::integer[], %(results)s::text::bytea[],
                         %(nows)s::text::timestamptz[]) AS t(id, attempt, result, now)
), locked AS (
    SELECT j.id FROM {jobs} AS j JOIN input AS i ON i.id = j.id
    WHERE j.state || '' = 'running' AND j.attempt = i.attempt AND j.workflow_id IS NULL AND j.parent_id IS NULL
    ORDER BY j.id
    FOR UPDATE OF j
), done AS (
    UPDATE {jobs} AS j
    SET state = 'succeeded', result = i.result, finished_at = i.now, lease_until = NULL, leased_by = NULL
    FROM input AS i
    WHERE j.id = i.id AND j.id IN (SELECT id FROM locked) AND j.state || '' = 'running' AND j.attempt = i.attempt
      AND j.workflow_id IS NULL AND j.parent_id IS NULL
      AND NOT EXISTS (
          SELECT 1 FROM {steps} AS s
          WHERE s.job_id = j.id AND s.name = '$http:task'
            AND (get_byte(s.value, 0) = 131
                 OR (convert_from(s.value, 'UTF8')::jsonb->>'execution_deadline')::timestamptz <= i.now))
    RETURNING j.id
)
SELECT id, CASE WHEN %(channel)s::text IS NULL THEN NULL
                ELSE pg_notify(%(channel)s::text, '{{"t":"r","id":' || id || '}}') END AS notified
FROM done

-- http_claim_solo --
-- claimTasks in one round trip for a queue with no §6 admission options (its opts hold nothing but
-- the HTTP `cleanup` policy): the §6 plain claim (claim_plain's predicate, order and SKIP LOCKED)
-- with each claimed job's `$http:task` options. One row per claimed job; for a plain queue with
-- nothing to claim, one row whose job columns are NULL; for any other queue (paused, admission
-- options, unreadable opts) one row with `plain` false and nothing claimed; for no such queue, no
-- row. The caller takes the full path for the last two.
WITH q AS (
    SELECT CASE WHEN jsonb_typeof(opts) = 'object' THEN (opts - 'cleanup') = '{{}}'::jsonb ELSE false END AS plain
    FROM {queues} WHERE name = %(queue)s
), ready AS (
    SELECT id, priority, ready_at FROM {jobs}
    WHERE queue = %(queue)s AND state = 'ready' AND (ready_at IS NULL OR ready_at <= %(now)s)
      AND (SELECT plain FROM q)
    ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC
    LIMIT %(take)s
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT id, priority, ready_at FROM {jobs}
    WHERE queue = %(queue)s AND state = 'awaiting' AND ready_at <= %(now)s
      AND (SELECT plain FROM q)
    ORDER BY priority ASC, ready_at ASC, id ASC
    LIMIT %(take)s
    FOR UPDATE SKIP LOCKED
), chosen AS MATERIALIZED (
    SELECT id FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) AS c
    ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC
    LIMIT %(take)s
), claimed AS (
    UPDATE {jobs} SET state = 'running', attempt = attempt + 1, lease_until = %(lease_until)s, leased_by = %(node)s,
                      started_at = COALESCE(started_at, %(now)s)
    WHERE id = ANY(ARRAY(SELECT id FROM chosen))
    RETURNING {job_columns}
)
SELECT q.plain, c.*, s.value AS config
FROM q LEFT JOIN claimed AS c ON true
       LEFT JOIN {steps} AS s ON s.job_id = c.id AND s.name = '$http:task'
