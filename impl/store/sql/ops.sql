-- Belay named queries for day-2 tooling (spec/belay-operations.txt "Day-2 tooling"): the operator
-- CLI, the MCP server, replay dry-runs and the Prometheus queue-depth gauge. Read-only, every one but
-- ops_delete_queue and ops_delete_cron (the vocabulary has no delete of a runtime queue or cron row):
-- the other mutations those tools offer go through the store's own operations (impl/store/client_store.py).
-- Conventions as in queries.sql: named parameters, identifiers in braces, `now` always a parameter.

-- ops_stats --
-- Belay.stats: job counts per queue and state.
SELECT queue, state, count(*) AS n FROM {jobs} GROUP BY queue, state ORDER BY queue, state

-- ops_jobs_page --
-- Belay.list_jobs: newest first, keyset-paginated on id (`after` = the last id of the previous page);
-- every filter is optional (NULL = any).
SELECT {job_columns} FROM {jobs}
WHERE (%(after)s::bigint IS NULL OR id < %(after)s::bigint)
  AND (%(states)s::text[] IS NULL OR state = ANY(%(states)s::text[]))
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR worker = %(kind)s::text)
  AND (%(workflow_id)s::text IS NULL OR workflow_id = %(workflow_id)s::text)
  AND (%(parent_id)s::bigint IS NULL OR parent_id = %(parent_id)s::bigint)
  AND (%(error)s::text IS NULL OR (errors <> '[]'::jsonb AND EXISTS (
          SELECT 1 FROM jsonb_array_elements(errors) e
          WHERE (e ->> 'error') ILIKE %(error)s::text OR (e ->> 'detail') ILIKE %(error)s::text)))
ORDER BY id DESC
LIMIT %(limit)s

-- ops_children --
-- §8.4: a parent's children in id order.
SELECT {job_columns} FROM {jobs} WHERE parent_id = %(parent_id)s ORDER BY id

-- ops_events_after --
-- `belay events --follow`: a job's events after a sequence number.
SELECT job_id, seq, payload, inserted_at FROM {events} WHERE job_id = %(job_id)s AND seq > %(after)s ORDER BY seq

-- ops_queue_rows --
-- belay_queues rows (one, or every one when name is NULL).
SELECT name, opts, updated_at FROM {queues} WHERE (%(name)s::text IS NULL OR name = %(name)s::text) ORDER BY name

-- ops_prune_preview --
-- §8.7 dry-run: what prune_jobs would delete at these cut-offs, per state, without its batch limit,
-- with the journal rows and events that go with them. The predicate is prune_jobs' (worker.sql);
-- tests/test_cli_ops.py checks both agree on the same database.
WITH candidates AS (
    SELECT id, state FROM {jobs} AS j
    WHERE ((state = 'succeeded' AND finished_at < %(succeeded_before)s)
           OR (state = 'failed' AND finished_at < %(failed_before)s)
           OR (state = 'cancelled' AND finished_at < %(cancelled_before)s))
      AND (workflow_id IS NULL OR NOT EXISTS (
               SELECT 1 FROM {jobs} AS o WHERE o.workflow_id = j.workflow_id
               AND o.state NOT IN ('succeeded', 'failed', 'cancelled')))
)
SELECT c.state, count(*) AS jobs,
       sum((SELECT count(*) FROM {steps} s WHERE s.job_id = c.id))::bigint AS steps,
       sum((SELECT count(*) FROM {events} e WHERE e.job_id = c.id))::bigint AS events
FROM candidates c GROUP BY c.state ORDER BY c.state

-- ops_prune_preview_other --
-- §8.7 dry-run: signals past their TTL and rate windows older than a day.
SELECT (SELECT count(*) FROM {signals} WHERE %(signals_before)s::timestamptz IS NOT NULL
                                         AND inserted_at < %(signals_before)s::timestamptz) AS signals,
       (SELECT count(*) FROM {rate} WHERE window_start < %(rate_before)s) AS rate

-- ops_queue_has_jobs --
-- Does any job name this queue? (`queue pause NAME` refuses a queue with neither a row nor jobs.)
SELECT EXISTS (SELECT 1 FROM {jobs} WHERE queue = %(name)s) AS found

-- ops_delete_queue --
-- `belay queue delete`: remove a belay_queues row (nodes fall back to their static options).
DELETE FROM {queues} WHERE name = %(name)s RETURNING name, opts

-- ops_cron_rows --
-- belay_crons rows (one, or every one when name is NULL).
SELECT name, expression, worker, input, opts, paused, updated_at FROM {crons}
WHERE (%(name)s::text IS NULL OR name = %(name)s::text) ORDER BY name

-- ops_cron_last_fired --
-- The newest job a cron inserted (the (cron_name, cron_slot) unique index answers it).
SELECT id, state, cron_slot FROM {jobs} WHERE cron_name = %(name)s ORDER BY cron_slot DESC LIMIT 1

-- ops_delete_cron --
-- `belay cron delete`: remove a belay_crons row (a static cron of the same name fires again).
DELETE FROM {crons} WHERE name = %(name)s RETURNING name
