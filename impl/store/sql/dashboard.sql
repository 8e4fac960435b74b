-- Belay dashboard reads (belay-operations.txt, "The dashboard"). Same block format as queries.sql:
-- `-- name --`, a one-line purpose, the body; identifiers in braces; named parameters. Read-only:
-- every mutation the dashboard offers goes through PgStore.apply with the Client SDK's operations.
-- No block reads the database clock: `now` / `since` are parameters from the web server's clock.
-- Blocks named dash_where_* are WHERE fragments the job list joins with AND (composed in Python
-- with psycopg.sql, so only these fixed texts ever reach the server).

-- dash_pair_counts --
-- Tile counts, bounded: a loose index scan enumerates the (queue, state) pairs present, then counts
-- each pair up to a cap (an index-only range scan of belay_jobs_dash_queue_state_idx): %(cap)s for
-- the live states, %(terminal_cap)s for the terminal ones (history whose size is set by retention; the
-- tile's live signal for them is "finished in the last minute"). The work is O(pairs × cap), not
-- O(table): a million succeeded jobs cost `terminal_cap` index entries.
WITH RECURSIVE pairs AS (
    (SELECT j.queue, j.state FROM {jobs} j ORDER BY j.queue, j.state LIMIT 1)
    UNION ALL
    SELECT nxt.queue, nxt.state
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT j.queue, j.state FROM {jobs} j
        WHERE (j.queue, j.state) > (p.queue, p.state)
        ORDER BY j.queue, j.state LIMIT 1
    ) nxt
)
SELECT p.queue, p.state, c.n
FROM pairs p
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM {jobs} j WHERE j.queue = p.queue AND j.state = p.state
        ORDER BY j.id  -- the index's own order: keeps the planner off "seq scan until LIMIT rows"
        LIMIT CASE WHEN p.state IN ('succeeded', 'failed', 'cancelled') THEN %(terminal_cap)s ELSE %(cap)s END
    ) capped
) c
ORDER BY p.queue, p.state

-- dash_pair_counts_scan --
-- Tile counts without the dashboard index variant: exact, but a full scan of belay_jobs.
SELECT queue, state, count(*) AS n FROM {jobs} GROUP BY queue, state ORDER BY queue, state

-- dash_queue_rows --
-- Runtime queue options (global_limit, rate, partition, paused) from belay_queues.
SELECT name, opts, updated_at FROM {queues} ORDER BY name

-- dash_finished_since --
-- Jobs per queue that reached a terminal state at or after %(since)s: one range of
-- belay_jobs_prune_idx (state, finished_at) per terminal state (with `state IN (...)` the planner
-- would walk the whole index, since its leading column is then only the partial predicate).
SELECT queue, count(*) AS n FROM (
    SELECT queue FROM {jobs} WHERE state = 'succeeded' AND finished_at >= %(since)s
    UNION ALL
    SELECT queue FROM {jobs} WHERE state = 'failed' AND finished_at >= %(since)s
    UNION ALL
    SELECT queue FROM {jobs} WHERE state = 'cancelled' AND finished_at >= %(since)s
) finished
GROUP BY queue

-- dash_oldest_ready --
-- Per queue, the earliest ready_at among ready jobs that are due (ready_at <= now): the longest wait.
-- A loose scan of belay_jobs_claim_order_idx (queue, priority, ready_at NULLS FIRST, id) over the
-- (queue, priority) pairs present, then one index probe per pair: O(pairs), however deep the backlog.
WITH RECURSIVE qp AS (
    (SELECT j.queue, j.priority FROM {jobs} j WHERE j.state = 'ready' ORDER BY j.queue, j.priority LIMIT 1)
    UNION ALL
    SELECT nxt.queue, nxt.priority
    FROM qp p
    CROSS JOIN LATERAL (
        SELECT j.queue, j.priority FROM {jobs} j
        WHERE j.state = 'ready' AND (j.queue, j.priority) > (p.queue, p.priority)
        ORDER BY j.queue, j.priority LIMIT 1
    ) nxt
)
SELECT qp.queue, min(head.ready_at) AS oldest
FROM qp
CROSS JOIN LATERAL (
    SELECT j.ready_at FROM {jobs} j
    WHERE j.state = 'ready' AND j.queue = qp.queue AND j.priority = qp.priority AND j.ready_at <= %(now)s
    ORDER BY j.ready_at NULLS FIRST LIMIT 1
) head
GROUP BY qp.queue

-- dash_jobs_page --
-- One page of the job list, newest first, keyset-paginated on id (never OFFSET); {where} is an
-- AND of dash_where_* fragments. (With an error-text filter the page is dash_jobs_error_window.)
SELECT j.id, j.queue, j.worker, j.state, j.attempt, j.max_attempts, j.priority, j.inserted_at,
       j.finished_at, j.workflow_id, j.wf_name, j.parent_id, j.cancel_requested,
       jsonb_array_length(j.errors) AS n_errors, j.errors -> -1 ->> 'error' AS last_error
FROM {jobs} j
WHERE {where}
ORDER BY j.id DESC
LIMIT %(limit)s

-- dash_jobs_error_window --
-- One page of the job list searched by error text, bounded: only the newest %(window)s jobs that have
-- errors below the keyset cursor ({below}: dash_where_before or dash_where_true) are examined — a range
-- of belay_jobs_dash_errors_idx, however rare the text — and {where} (dash_where_error AND the other
-- filters) picks the page's matches among them. Every row carries the window's size (`examined`), its
-- lowest id (`lowest`: where the next window starts, exclusive) and whether jobs with errors remain
-- below it (`more`); a window with no match is one row of NULL job columns. The probe reads one row past
-- the window only to tell "more below" from "searched to the end".
WITH probe AS MATERIALIZED (
    SELECT j.id, j.queue, j.worker, j.state, j.attempt, j.max_attempts, j.priority, j.inserted_at,
           j.finished_at, j.workflow_id, j.wf_name, j.parent_id, j.cancel_requested, j.errors,
           row_number() OVER (ORDER BY j.id DESC) AS n  -- the scan's own order: no sort
    FROM {jobs} j
    WHERE j.errors <> '[]'::jsonb AND {below}
    ORDER BY j.id DESC
    LIMIT %(window)s + 1
)
SELECT b.examined, b.lowest, b.more, m.*
FROM (
    SELECT count(*) FILTER (WHERE n <= %(window)s) AS examined, min(id) FILTER (WHERE n <= %(window)s) AS lowest,
           count(*) > %(window)s AS more
    FROM probe
) b
LEFT JOIN LATERAL (
    SELECT j.id, j.queue, j.worker, j.state, j.attempt, j.max_attempts, j.priority, j.inserted_at,
           j.finished_at, j.workflow_id, j.wf_name, j.parent_id, j.cancel_requested,
           jsonb_array_length(j.errors) AS n_errors, j.errors -> -1 ->> 'error' AS last_error
    FROM probe j
    WHERE j.n <= %(window)s AND {where}
    ORDER BY j.id DESC
    LIMIT %(limit)s
) m ON true
ORDER BY m.id DESC

-- dash_where_true --
-- No filter.
true

-- dash_where_before --
-- Keyset: rows older than the last id of the previous page.
j.id < %(before)s

-- dash_where_queue --
-- Filter: queue.
j.queue = %(queue)s

-- dash_where_state --
-- Filter: state.
j.state = %(state)s

-- dash_where_kind --
-- Filter: kind (the worker column).
j.worker = %(kind)s

-- dash_where_workflow --
-- Filter: workflow id.
j.workflow_id = %(workflow)s

-- dash_where_parent --
-- Filter: parent job id.
j.parent_id = %(parent)s

-- dash_where_error --
-- Filter: text in any error's `error` or `detail` (a LIKE pattern, wildcards escaped by the caller).
-- Used only inside dash_jobs_error_window, which bounds how many jobs it is evaluated on.
j.errors <> '[]'::jsonb AND EXISTS (
    SELECT 1 FROM jsonb_array_elements(j.errors) e
    WHERE e ->> 'error' ILIKE %(error)s OR e ->> 'detail' ILIKE %(error)s)

-- dash_children --
-- The children of a job (§8.4) with their states, oldest first (bounded).
SELECT id, queue, worker, state, attempt, finished_at FROM {jobs}
WHERE parent_id = %(id)s ORDER BY id LIMIT %(limit)s

-- dash_children_count --
-- How many children a job has (the page shows at most a bounded number).
SELECT count(*) AS n FROM {jobs} WHERE parent_id = %(id)s

-- dash_index_names --
-- Which dashboard index variants exist and are valid in this schema.
SELECT c.relname AS name
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND i.indisvalid AND c.relname LIKE 'belay_jobs_dash_%%'

-- dash_charts --
-- Charts, one statement: the jobs per queue that finished in [since, until), counted by outcome and
-- minute (kind 'finished', `state` the outcome), and the claim latency per queue and minute of the claim
-- (kind 'latency': how many, the median, the 95th percentile, the worst, in ms) of the jobs first claimed
-- in [since, until) on their first attempt — attempt = 1: started_at is the first claim and ready_at
-- still the time the job became due — from due (ready_at, else inserted_at) to claimed (started_at).
-- Minutes are epoch minutes (UTC). The finished jobs are read once, by one range of
-- belay_jobs_prune_idx (state, finished_at) per terminal state (like dash_finished_since); the running
-- ones by belay_jobs_lease_idx (partial on state = 'running'). A job claimed in the window is one of
-- those unless it is parked again (awaiting a signal, snoozed), which the latency chart leaves out.
WITH finished AS MATERIALIZED (
    SELECT queue, state, finished_at, started_at, ready_at, inserted_at, attempt FROM {jobs}
    WHERE state = 'succeeded' AND finished_at >= %(since)s AND finished_at < %(until)s
    UNION ALL
    SELECT queue, state, finished_at, started_at, ready_at, inserted_at, attempt FROM {jobs}
    WHERE state = 'failed' AND finished_at >= %(since)s AND finished_at < %(until)s
    UNION ALL
    SELECT queue, state, finished_at, started_at, ready_at, inserted_at, attempt FROM {jobs}
    WHERE state = 'cancelled' AND finished_at >= %(since)s AND finished_at < %(until)s
), claimed AS (
    SELECT queue, started_at,
           greatest(0, extract(epoch FROM started_at - coalesce(ready_at, inserted_at)) * 1000) AS ms
    FROM (
        SELECT queue, started_at, ready_at, inserted_at, attempt FROM finished
        UNION ALL
        SELECT queue, started_at, ready_at, inserted_at, attempt FROM {jobs}
        WHERE state = 'running' AND lease_until IS NOT NULL
    ) j
    WHERE attempt = 1 AND started_at >= %(since)s AND started_at < %(until)s
)
SELECT 'finished' AS kind, queue, state, floor(extract(epoch FROM finished_at) / 60)::bigint AS minute,
       count(*) AS n, NULL::float8 AS p50, NULL::float8 AS p95, NULL::float8 AS worst
FROM finished
GROUP BY queue, state, minute
UNION ALL
SELECT 'latency', queue, NULL, floor(extract(epoch FROM started_at) / 60)::bigint AS minute, count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.95) WITHIN GROUP (ORDER BY ms), max(ms)
FROM claimed
GROUP BY queue, minute

-- dash_crons --
-- The crons page: every belay_crons row, with the job its last fired slot inserted (one backward
-- probe of belay_jobs_cron_slot_idx (cron_name, cron_slot) per cron).
SELECT c.name, c.expression, c.worker, c.input, c.opts, c.paused, c.updated_at,
       last.id AS last_id, last.state AS last_state, last.cron_slot AS last_slot
FROM {crons} c
LEFT JOIN LATERAL (
    SELECT j.id, j.state, j.cron_slot FROM {jobs} j
    WHERE j.cron_name = c.name ORDER BY j.cron_slot DESC LIMIT 1
) last ON true
ORDER BY c.name

-- dash_cron_names_fired --
-- Cron names that fired jobs (a loose scan of belay_jobs_cron_slot_idx: one probe per name, at most
-- %(limit)s names), with each one's last fired job: the crons declared in a worker's static
-- configuration have no belay_crons row, and show up here.
WITH RECURSIVE names AS (
    (SELECT j.cron_name FROM {jobs} j WHERE j.cron_name IS NOT NULL ORDER BY j.cron_name LIMIT 1)
    UNION ALL
    SELECT nxt.cron_name FROM names n
    CROSS JOIN LATERAL (
        SELECT j.cron_name FROM {jobs} j WHERE j.cron_name > n.cron_name ORDER BY j.cron_name LIMIT 1
    ) nxt
)
SELECT n.cron_name AS name, last.id AS last_id, last.state AS last_state, last.cron_slot AS last_slot,
       last.worker, last.queue
FROM (SELECT cron_name FROM names LIMIT %(limit)s) n
CROSS JOIN LATERAL (
    SELECT j.id, j.state, j.cron_slot, j.worker, j.queue FROM {jobs} j
    WHERE j.cron_name = n.cron_name ORDER BY j.cron_slot DESC LIMIT 1
) last
ORDER BY n.cron_name
