-- Belay named queries (worker level: §6 claims and leases, §7 acks, §8 steps/children/cron, §8.7
-- retention). Conventions as in queries.sql: named parameters, identifiers in braces, `now` always
-- a parameter. Every ack-like write is fenced: WHERE id AND state = 'running' AND attempt = claimed —
-- spelled `state || '' = 'running'` (the same test) so that the planner cannot answer it from
-- belay_jobs_lease_idx (partial, WHERE state = 'running'): under statistics taken while the backlog was
-- ready that index looks empty, and a fenced write by id then scans every running row for its one id
-- (41–63 buffers against 4–7 through the primary key; tests/test_ack_plans.py). The plain spelling is as
-- correct and as fenced; only the plan differs.

-- lock_queue --
-- §6: serialize claimers of a queue with global_limit, rate or partition.
SELECT pg_advisory_xact_lock(hashtext('belay:' || %(queue)s))

-- lock_running --
-- §6 global_limit / partition: lock the queue's running rows whose lease has expired at the claim's `now`
-- before the live ones are counted, so that a renewal reviving one cannot commit between the count and the
-- claim's commit (it commits before the lock, and the count sees it, or waits for the claim's commit). Live
-- leases need no lock: a renewal only extends a lease (renew_leases), so no commit can make a lease counted
-- live at `now` stop being counted or one not counted start being counted, except a revival — and claims,
-- which the queue's advisory lock serializes. (Locking every running row, as before, made each claim write
-- a row lock on up to `global_limit` rows, and the renewals and acks of those rows wait for the claim's
-- commit: tests/test_admission_races.py.)
SELECT id FROM {jobs} WHERE queue = %(queue)s AND state = 'running' AND lease_until <= %(now)s ORDER BY id FOR UPDATE

-- live_running --
-- §6 global_limit: live-leased jobs only.
SELECT count(*) AS n FROM {jobs} WHERE queue = %(queue)s AND state = 'running' AND lease_until > %(now)s

-- rate_counts --
-- §6 rate: the current and previous windows' counters.
SELECT window_start, count FROM {rate} WHERE bucket = %(bucket)s AND window_start = ANY(%(windows)s)

-- rate_debit --
-- §6 rate: debit N × estimate into the current window (upsert-increment).
INSERT INTO {rate} (bucket, window_start, count) VALUES (%(bucket)s, %(window)s, %(n)s)
ON CONFLICT (bucket, window_start) DO UPDATE SET count = {rate}.count + EXCLUDED.count

-- claim_partitioned --
-- §6 partitioned claim (exact, under the queue lock): rank per key, subtract live running per key.
WITH candidates AS (
    SELECT id, priority, ready_at, COALESCE({field}->>%(key)s, '') AS pkey,
           row_number() OVER (PARTITION BY COALESCE({field}->>%(key)s, '')
                              ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC) AS rn
    FROM {jobs}
    WHERE queue = %(queue)s
      AND ((state = 'ready' AND (ready_at IS NULL OR ready_at <= %(now)s))
           OR (state = 'awaiting' AND ready_at <= %(now)s))
), running AS (
    SELECT COALESCE({field}->>%(key)s, '') AS pkey, count(*) AS n FROM {jobs}
    WHERE queue = %(queue)s AND state = 'running' AND lease_until > %(now)s
    GROUP BY 1
)
SELECT c.id FROM candidates c LEFT JOIN running r ON r.pkey = c.pkey
WHERE c.rn <= greatest(%(per_key_limit)s - COALESCE(r.n, 0), 0)
ORDER BY c.priority ASC, c.ready_at ASC NULLS FIRST, c.id ASC
LIMIT %(take)s

-- claim_update --
-- §6 claim update: lease the chosen rows to this node.
UPDATE {jobs} SET state = 'running', attempt = attempt + 1, lease_until = %(lease_until)s, leased_by = %(node)s,
                  started_at = COALESCE(started_at, %(now)s)
WHERE id = ANY(%(ids)s)
RETURNING {job_columns}

-- renew_leases --
-- §6: one statement per node; ids not returned are lost. A renewal only ever extends the lease: one
-- that was computed before a stall and lands late (even on the node's next attempt of the job) must
-- not move lease_until backwards (model/store.py _renew; the history relation's lease_forward rule).
UPDATE {jobs} SET lease_until = GREATEST(lease_until, %(lease_until)s)
WHERE id = ANY(%(ids)s) AND state = 'running' AND leased_by = %(node)s
RETURNING id

-- held_leases --
-- §6 claim recovery (runtime): every running job leased to this node on its queues, read after a claim
-- whose commit the node could not confirm; the ones no execution knows are run (docs/sdk-guide.md).
SELECT {job_columns} FROM {jobs} WHERE state = 'running' AND leased_by = %(node)s AND queue = ANY(%(queues)s)

-- expired_leases --
-- §6 reclaim: running jobs whose lease has expired, locked, skipping rows another sweeper holds.
SELECT id, attempt, max_attempts FROM {jobs}
WHERE state = 'running' AND lease_until <= %(now)s
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- reclaim_many --
-- §6 reclaim outcomes, every row expired_leases locked in one statement (one round trip whatever their
-- number: a per-row loop took one per row and, under 0.07 s of network latency, outlived the call
-- deadline on every try while the leases stayed expired). A row with attempts left is retried, ready at
-- its backoff (ready_ats, by id); one on its last attempt is failed. Both get lease_expired appended
-- ({attempt} and the caller's {at, error, detail} in `base`).
UPDATE {jobs} AS j SET
    state = CASE WHEN j.attempt < j.max_attempts THEN 'ready' ELSE 'failed' END,
    ready_at = CASE WHEN j.attempt < j.max_attempts THEN v.ready_at ELSE j.ready_at END,
    finished_at = CASE WHEN j.attempt < j.max_attempts THEN j.finished_at ELSE %(now)s END,
    errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt) || %(base)s::jsonb),
    lease_until = NULL, leased_by = NULL
FROM unnest(%(ids)s::bigint[], %(ready_ats)s::timestamptz[]) AS v(id, ready_at)
WHERE j.id = v.id
RETURNING j.id, j.queue, j.state, j.workflow_id, j.parent_id

-- ack_succeed --
-- §7 succeed: result = envelope(value).
UPDATE {jobs} SET state = 'succeeded', result = %(result)s, finished_at = %(now)s, lease_until = NULL, leased_by = NULL
WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s
RETURNING id, queue, state, workflow_id, parent_id

-- ack_succeed_solo --
-- §7 succeed as one autocommit statement (one transaction, one round trip) for a job with no after-terminal
-- duties — no workflow to settle, no parent to signal. Fenced like ack_succeed; zero rows ⇒ stale, or a
-- workflow member / child: take the full path. Its §9.2 result notification is sent after the commit
-- (notify_results, impl/store/results.py).
UPDATE {jobs} SET state = 'succeeded', result = %(result)s, finished_at = %(now)s, lease_until = NULL,
                  leased_by = NULL
WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s AND workflow_id IS NULL AND parent_id IS NULL
RETURNING id, queue, state

-- notify_results --
-- §9.2: one result notification {"t":"r","id":<job_id>} per id (impl.store.pgrows.result_payload), delivered on
-- commit: after the terminal writes' own commits, many per statement (impl/store/results.py), or inside a
-- caller's transaction.
SELECT pg_notify(%(channel)s, '{{"t":"r","id":' || id || '}}') FROM unnest(%(ids)b::bigint[]) AS id

-- ack_error --
-- §7 error: retry at the SDK's time while attempts remain (and a retry time is given), else failed.
UPDATE {jobs} SET
    state = CASE WHEN %(retry_at)s::timestamptz IS NOT NULL AND attempt < max_attempts THEN 'ready' ELSE 'failed' END,
    ready_at = CASE WHEN %(retry_at)s::timestamptz IS NOT NULL AND attempt < max_attempts
                    THEN %(retry_at)s::timestamptz ELSE ready_at END,
    finished_at = CASE WHEN %(retry_at)s::timestamptz IS NOT NULL AND attempt < max_attempts
                       THEN finished_at ELSE %(now)s END,
    errors = errors || %(entry)s, lease_until = NULL, leased_by = NULL
WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s
RETURNING id, queue, state, workflow_id, parent_id

-- ack_cancel --
-- §7 cooperative cancel honoured at a step boundary.
UPDATE {jobs} SET state = 'cancelled', finished_at = %(now)s, lease_until = NULL, leased_by = NULL
WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s
RETURNING id, queue, state, workflow_id, parent_id

-- ack_snooze --
-- §7 snooze: ready at until; a snooze spends no attempt.
UPDATE {jobs} SET state = 'ready', ready_at = %(until)s, max_attempts = max_attempts + 1,
                  lease_until = NULL, leased_by = NULL
WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s
RETURNING id, queue, state, workflow_id, parent_id

-- fence --
-- §7: the row only while it runs the claimed attempt (locked: steps of a sleep follow in this transaction).
SELECT id FROM {jobs} WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s FOR UPDATE

-- fence_check --
-- §7: is the claimed attempt still the running one? (no lock)
SELECT id FROM {jobs} WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s

-- sleep_until --
-- Durable sleep: ready at the journaled time. A wait spends no attempt (model.store.max_attempts_after_park).
UPDATE {jobs} SET state = 'ready', ready_at = %(until)s, lease_until = NULL, leased_by = NULL,
                  max_attempts = LEAST(max_attempts::bigint + %(park_credit)s, %(attempts_ceiling)s)
WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s
RETURNING id

-- read_step --
-- §8.2 read: a hit skips execution.
SELECT value FROM {steps} WHERE job_id = %(job_id)s AND name = %(name)s

-- job_budget --
-- §8.2 pre-flight: durable spend and budget columns (locked when recording, to serialize seq).
SELECT id, spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens, cancel_requested FROM {jobs}
WHERE id = %(id)s

-- lock_job_budget --
-- §8.2 record: lock the job row so concurrent journal writes get distinct seqs.
SELECT id, spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens FROM {jobs} WHERE id = %(id)s FOR UPDATE

-- insert_step --
-- §8.2: journal a step; seq = per-job insertion order; a second writer of the same name does nothing.
INSERT INTO {steps} (job_id, seq, name, value, usd_micros, tokens, inserted_at)
SELECT %(job_id)s, COALESCE(MAX(seq), 0) + 1, %(name)s, %(value)s, %(usd)s, %(tokens)s, %(now)s
FROM {steps} WHERE job_id = %(job_id)s
ON CONFLICT (job_id, name) DO NOTHING
RETURNING seq

-- add_spend --
-- §8.2: add the step's costs to the job's durable spend.
UPDATE {jobs} SET spent_usd_micros = spent_usd_micros + %(usd)s, spent_tokens = spent_tokens + %(tokens)s
WHERE id = %(job_id)s
RETURNING spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens

-- insert_event --
-- Events: append to the job's stream (the job row is locked by the caller).
INSERT INTO {events} (job_id, seq, payload, inserted_at)
SELECT %(job_id)s, COALESCE(MAX(seq), 0) + 1, %(payload)s, %(now)s FROM {events} WHERE job_id = %(job_id)s
RETURNING seq

-- find_event --
-- Events: a retried emit's own event, appended by a try whose answer was lost (same job, now, payload).
SELECT seq FROM {events}
 WHERE job_id = %(job_id)s AND inserted_at = %(now)s AND payload = %(payload)s
 ORDER BY seq LIMIT 1

-- lock_job_row --
-- Lock one job row (existence check plus serialization of its journal).
SELECT id FROM {jobs} WHERE id = %(id)s FOR UPDATE

-- spawn_holders --
-- §8.4: rebuild the child id list from the unique keys (the newest holder of each key).
SELECT DISTINCT ON (unique_key) unique_key, id FROM {jobs}
WHERE unique_key = ANY(%(keys)s) AND unique_mode IN ('window', 'always')
ORDER BY unique_key, id DESC

-- children_states --
-- §8.4 re-verify: the states of a parent's children.
SELECT id, state FROM {jobs} WHERE parent_id = %(parent_id)s ORDER BY id

-- reconcile_children --
-- §8.4 backstop (R2): awaiting on $children with every child existing and terminal → ready.
UPDATE {jobs} p SET state = 'ready', ready_at = %(now)s, await_scope = NULL, await_name = NULL
WHERE p.state = 'awaiting' AND p.await_name = '$children' AND p.await_scope = 'job:' || p.id
  AND EXISTS (SELECT 1 FROM {jobs} c WHERE c.parent_id = p.id)
  AND NOT EXISTS (SELECT 1 FROM {jobs} c WHERE c.parent_id = p.id
                  AND c.state NOT IN ('succeeded', 'failed', 'cancelled'))
RETURNING p.id, p.queue

-- cron_rows --
-- §8.5: dynamic cron rows (merged over static config by name).
SELECT name, expression, worker, input, opts, paused, updated_at FROM {crons} ORDER BY name

-- prune_jobs --
-- §8.7: terminal jobs past their state's retention, a batch at a time; never a non-terminal job.
-- The batch is chosen once (a locking CTE): as an IN-subquery the planner may rescan it per outer
-- row, and a rescanned LIMIT … SKIP LOCKED can return other rows — a batch larger than its limit.
WITH batch AS MATERIALIZED (
    SELECT id FROM {jobs} AS j
    WHERE ((state = 'succeeded' AND finished_at < %(succeeded_before)s)
           OR (state = 'failed' AND finished_at < %(failed_before)s)
           OR (state = 'cancelled' AND finished_at < %(cancelled_before)s))
      -- never a member of a workflow still settling: its held dependents must find their deps
      AND (workflow_id IS NULL OR NOT EXISTS (
               SELECT 1 FROM {jobs} AS o WHERE o.workflow_id = j.workflow_id
               AND o.state NOT IN ('succeeded', 'failed', 'cancelled')))
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {jobs} WHERE id IN (SELECT id FROM batch)
RETURNING id

-- prune_steps --
-- §8.7: the pruned jobs' journals.
DELETE FROM {steps} WHERE job_id = ANY(%(ids)s)

-- prune_events --
-- §8.7: the pruned jobs' event streams.
DELETE FROM {events} WHERE job_id = ANY(%(ids)s)

-- prune_signals --
-- §8.7: signals past their TTL.
DELETE FROM {signals} WHERE inserted_at < %(before)s

-- prune_rate --
-- §8.7: rate windows older than a day.
DELETE FROM {rate} WHERE window_start < %(before)s

-- snapshot_jobs --
-- Snapshot: every job row (explicit columns), for checkers and the model comparison.
SELECT {job_columns} FROM {jobs} ORDER BY id

-- snapshot_steps --
-- Snapshot: every step row.
SELECT job_id, seq, name, value, usd_micros, tokens, inserted_at FROM {steps} ORDER BY job_id, seq

-- snapshot_events --
-- Snapshot: every event row.
SELECT job_id, seq, payload, inserted_at FROM {events} ORDER BY job_id, seq

-- snapshot_signals --
-- Snapshot: every signal row.
SELECT scope, name, payload, inserted_at FROM {signals} ORDER BY scope, name

-- snapshot_rate --
-- Snapshot: every rate window.
SELECT bucket, window_start, count FROM {rate} ORDER BY bucket, window_start

-- snapshot_queues --
-- Snapshot: runtime queue rows.
SELECT name, opts, updated_at FROM {queues} ORDER BY name

-- snapshot_crons --
-- Snapshot: runtime cron rows.
SELECT name, expression, worker, input, opts, paused, updated_at FROM {crons} ORDER BY name

-- snapshot_seq --
-- Snapshot: the next id the bigserial will hand out.
SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END AS next_id FROM {jobs_seq_table}

-- ack_succeed_many --
-- §7 succeed for many rows in one statement, each fenced on its own attempt (ids and attempts as array
-- literals built by the caller; results and times arrays bound in binary). The grouped acks spell the
-- running fence `j.state || '' = 'running'` (the same test) so that no partial index's predicate matches
-- it: written `j.state = 'running'`, the planner may answer the group from belay_jobs_lease_idx — every
-- running row of every queue and every dead entry since the last VACUUM, fetched and hashed against the
-- ids — and statistics taken while the backlog was ready make that index look empty. The rows are found
-- by id instead (tests/test_ack_plans.py).
UPDATE {jobs} AS j SET state = 'succeeded', result = v.result, finished_at = v.now, lease_until = NULL,
                       leased_by = NULL
FROM unnest(%(ids)s::text::bigint[], %(attempts)s::text::integer[], %(results)b::bytea[],
            %(nows)b::timestamptz[]) AS v(id, attempt, result, now)
WHERE j.id = v.id AND j.state || '' = 'running' AND j.attempt = v.attempt
RETURNING j.id, j.queue, j.state, j.workflow_id, j.parent_id

-- ack_succeed_many_same --
-- ack_succeed_many for acks that share one result and one time (a chunk of jobs returning the same value).
UPDATE {jobs} AS j SET state = 'succeeded', result = %(result)s, finished_at = %(now)s, lease_until = NULL,
                       leased_by = NULL
FROM unnest(%(ids)s::text::bigint[], %(attempts)s::text::integer[]) AS v(id, attempt)
WHERE j.id = v.id AND j.state || '' = 'running' AND j.attempt = v.attempt
RETURNING j.id, j.queue, j.state, j.workflow_id, j.parent_id

-- ack_claim_solo --
-- §7 succeed for many rows, then the §6 plain claim of their queue, as ONE autocommit statement (one round
-- trip, one commit: the runtime's group commit, issue 33) — only when no acked row has after-terminal
-- duties. `blocked` is read from the statement's snapshot, before any write: when an ack's row (running
-- under its attempt) belongs to a workflow or has a parent, nothing is written (no ack; the claim's
-- candidate scans find nothing) and the caller takes the transaction path (acks, after-terminal, then
-- the claim, as the model orders them). Each ack fenced on its own attempt as ack_succeed_many. The
-- claim IS claim_plain (impl.store.queries composes {claim_ctes} and {claim_update} from its text, `now`
-- renamed claim_now and both candidate scans gated on `blocked`), so a change to claim_plain is a change
-- to this claim too; the rows it takes are `ready`/`awaiting`, never the `running` rows acked here. One
-- row per claimed job, or one row with NULL job columns: acked ids, blocked, then {job_columns}. The
-- acked jobs' §9.2 result notifications are sent after the commit (impl/store/results.py).
WITH v AS (
    SELECT * FROM unnest(%(ids)s::text::bigint[], %(attempts)s::text::integer[], %(results)b::bytea[],
                         %(nows)b::timestamptz[]) AS v(id, attempt, result, now)
), blocked AS (
    SELECT EXISTS (
        SELECT 1 FROM {jobs} AS j JOIN v ON j.id = v.id
        WHERE j.state || '' = 'running' AND j.attempt = v.attempt AND (j.workflow_id IS NOT NULL OR j.parent_id IS NOT NULL)
    ) AS b
), acked AS (
    UPDATE {jobs} AS j SET state = 'succeeded', result = v.result, finished_at = v.now, lease_until = NULL,
                           leased_by = NULL
    FROM v
    WHERE j.id = v.id AND j.state || '' = 'running' AND j.attempt = v.attempt AND NOT (SELECT b FROM blocked)
    RETURNING j.id
), {claim_ctes}, claimed AS (
{claim_update}
)
SELECT (SELECT array_agg(id) FROM acked) AS acked_ids, (SELECT b FROM blocked) AS blocked, claimed.*
FROM (SELECT 1) AS one LEFT JOIN claimed ON true

-- claim_plain --
-- §6 plain claim in one statement: predicate C in claim order, SKIP LOCKED, then the claim update.
-- C's two halves are scanned apart, each in index order (claim_order_idx, await_due_idx), so a deep
-- backlog costs an index range, not a sort; the top `take` of their union is the top `take` of C.
-- (Awaiting rows due by ready_at <= now are never NULL, so NULLS FIRST orders them as the index does.)
WITH ready AS (
    SELECT id, priority, ready_at FROM {jobs}
    WHERE queue = %(queue)s AND state = 'ready' AND (ready_at IS NULL OR ready_at <= %(now)s)
    ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC
    LIMIT %(take)s
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT id, priority, ready_at FROM {jobs}
    WHERE queue = %(queue)s AND state = 'awaiting' AND ready_at <= %(now)s
    ORDER BY priority ASC, ready_at ASC, id ASC
    LIMIT %(take)s
    FOR UPDATE SKIP LOCKED
), chosen AS MATERIALIZED (
    SELECT id FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) AS c
    ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC
    LIMIT %(take)s
)
UPDATE {jobs} SET state = 'running', attempt = attempt + 1, lease_until = %(lease_until)s, leased_by = %(node)s,
                  started_at = COALESCE(started_at, %(now)s)
WHERE id = ANY(ARRAY(SELECT id FROM chosen))
RETURNING {job_columns}
