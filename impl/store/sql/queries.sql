-- Belay named queries (client level). Each block: `-- name --`, a one-line purpose, the body.
-- Parameters are named (%(now)s); identifiers in braces ({jobs}, {signals}, ...) are filled with
-- psycopg.sql.Identifier for the configured schema; {job_columns} is the explicit column list
-- (never SELECT *: contract §1). No query reads the database clock: `now` is always a parameter.
--
-- Lock order (contract §7, extended): workflow advisory lock → job row locks → signal-scope lock.

-- meta --
-- Read the migration revision and the wire-contract major (§1).
SELECT version, contract_major FROM {meta}

-- next_job_ids --
-- Reserve one id per row from the bigserial sequence, exactly as a VALUES row's default would.
SELECT nextval({jobs_seq}::regclass) AS id FROM generate_series(1, %(n)s)

-- (§5.1's set-based insert over arrays is built per batch by impl/store/client_store.py `_compact_insert`: a column with
-- one value across the batch is one parameter, the others arrays unnested in the rows' order; the same
-- columns, defaults and targetless ON CONFLICT DO NOTHING as insert_staged_jobs below.)

-- stage_jobs_table --
-- A session-local staging table for large batches (rows vanish at commit). input and meta travel as JSON
-- text and are cast once by the insert (the client renders each value once; jsonb parses it once). pg_temp is spelled out so
-- no table of the caller's search_path can stand in for it.
CREATE TEMP TABLE IF NOT EXISTS belay_stage_jobs_t (
  batch bigint, ord int, id bigint, queue text, worker text, input text, meta text, state text, priority int,
  max_attempts int, ready_at timestamptz, unique_key text, unique_mode text, cron_name text, cron_slot timestamptz,
  workflow_id text, wf_name text, wf_deps text[], wf_ignore text[], parent_id bigint, budget_usd_micros bigint,
  budget_tokens bigint) ON COMMIT DELETE ROWS

-- stage_jobs_copy --
-- COPY a batch into the staging table (binary: no text rendering of values on either side).
COPY pg_temp.belay_stage_jobs_t (batch, ord, id, queue, worker, input, meta, state, priority, max_attempts, ready_at,
  unique_key, unique_mode, cron_name, cron_slot, workflow_id, wf_name, wf_deps, wf_ignore, parent_id,
  budget_usd_micros, budget_tokens) FROM STDIN (FORMAT BINARY)

-- insert_staged_jobs --
-- §5.1 for a staged batch: the same insert as insert_jobs, reading one batch of the staging table.
INSERT INTO {jobs} (id, queue, worker, input, meta, state, priority, attempt, max_attempts,
                    ready_at, inserted_at, errors, cancel_requested, unique_key, unique_mode,
                    cron_name, cron_slot, workflow_id, wf_name, wf_deps, wf_ignore, parent_id,
                    budget_usd_micros, budget_tokens, spent_usd_micros, spent_tokens)
SELECT s.id, s.queue, s.worker, s.input::jsonb, s.meta::jsonb, s.state, s.priority, 0, s.max_attempts,
       s.ready_at, %(now)s, '[]'::jsonb, false, s.unique_key, s.unique_mode,
       s.cron_name, s.cron_slot, s.workflow_id, s.wf_name, s.wf_deps, s.wf_ignore,
       s.parent_id, s.budget_usd_micros, s.budget_tokens, 0, 0
FROM pg_temp.belay_stage_jobs_t s
WHERE s.batch = %(batch)s
ORDER BY s.ord
ON CONFLICT DO NOTHING
RETURNING id

-- unique_holder --
-- §5.2: the holder a skipped unique-key row is reported against: the newest row in the index its mode
-- conflicts with (incomplete: live incomplete-mode rows; window/always: rows of either of those modes).
-- Two branches, each spelling one partial unique index's predicate, so each is an index probe.
SELECT id FROM (
  (SELECT id FROM {jobs}
   WHERE %(mode)s = 'incomplete' AND unique_key = %(key)s
     AND unique_mode = 'incomplete' AND state IN ('ready','running','awaiting','held','paused')
   ORDER BY id DESC LIMIT 1)
  UNION ALL
  (SELECT id FROM {jobs}
   WHERE %(mode)s <> 'incomplete' AND unique_key = %(key)s AND unique_mode IN ('window','always')
   ORDER BY id DESC LIMIT 1)
) h LIMIT 1

-- cron_holder --
-- §8.5: the job that already owns a cron slot.
SELECT id FROM {jobs} WHERE cron_name = %(cron_name)s AND cron_slot = %(cron_slot)s

-- duplicate_holders --
-- §5.2/§8.5 for a whole batch at once: per skipped row (by its position), the cron slot's owner and
-- the unique key's holder, with the same predicates as cron_holder and unique_holder. Each holder lookup
-- spells one partial unique index's predicate exactly, so it is an index probe (a CASE inside one
-- WHERE hid the predicates from the planner: every skipped row was a scan of the table).
SELECT d.pos,
       (SELECT j.id FROM {jobs} j
        WHERE d.cron_name IS NOT NULL AND j.cron_name = d.cron_name AND j.cron_slot = d.cron_slot) AS cron_id,
       CASE WHEN d.unique_key IS NULL THEN NULL
            WHEN d.unique_mode = 'incomplete' THEN
              (SELECT j.id FROM {jobs} j
               WHERE j.unique_key = d.unique_key
                 AND j.unique_mode = 'incomplete' AND j.state IN ('ready','running','awaiting','held','paused')
               ORDER BY j.id DESC LIMIT 1)
            ELSE
              (SELECT j.id FROM {jobs} j
               WHERE j.unique_key = d.unique_key AND j.unique_mode IN ('window','always')
               ORDER BY j.id DESC LIMIT 1)
       END AS unique_id
FROM unnest(%(pos)s::int[], %(unique_key)s::text[], %(unique_mode)s::text[], %(cron_name)s::text[],
            %(cron_slot)s::timestamptz[]) AS d(pos, unique_key, unique_mode, cron_name, cron_slot)

-- notify --
-- §9.2: one pg_notify per payload (delivered only on commit).
SELECT pg_notify(%(channel)s, p) FROM unnest(%(payloads)s::text[]) AS p

-- lock_workflow --
-- §7/§8.3: serialize settlement of one workflow.
SELECT pg_advisory_xact_lock(hashtext('belay_wf:' || %(workflow_id)s))

-- lock_scope --
-- §7/§8.1: serialize signal delivery with await parks on one scope.
SELECT pg_advisory_xact_lock(hashtext('belay_sig:' || %(scope)s))

-- workflow_names --
-- Member names already stored for a workflow (deps may name them).
SELECT wf_name FROM {jobs} WHERE workflow_id = %(workflow_id)s

-- workflow_members --
-- §8.3: what settlement reads, under the workflow lock.
SELECT id, wf_name, state, wf_deps, wf_ignore, parent_id FROM {jobs}
WHERE workflow_id = %(workflow_id)s ORDER BY id

-- release_held --
-- §8.3 apply: releases → ready, guarded on held.
UPDATE {jobs} SET state = 'ready' WHERE id = ANY(%(ids)s) AND state = 'held' RETURNING id, queue

-- doom_held --
-- §8.3 apply: dooms → cancelled + finished_at, guarded on held.
UPDATE {jobs} SET state = 'cancelled', finished_at = %(now)s WHERE id = ANY(%(ids)s) AND state = 'held'
RETURNING id, parent_id

-- upsert_signal --
-- §8.1: upsert-latest.
INSERT INTO {signals} (scope, name, payload, inserted_at) VALUES (%(scope)s, %(name)s, %(payload)s, %(now)s)
ON CONFLICT (scope, name) DO UPDATE SET payload = EXCLUDED.payload, inserted_at = EXCLUDED.inserted_at

-- wake_awaiters --
-- §8.1: every job parked on (scope, name) becomes ready now.
UPDATE {jobs} SET state = 'ready', ready_at = %(now)s, await_scope = NULL, await_name = NULL
WHERE state = 'awaiting' AND await_scope = %(scope)s AND await_name = %(name)s
RETURNING id, queue

-- clear_signal --
-- Delete one signal row.
DELETE FROM {signals} WHERE scope = %(scope)s AND name = %(name)s RETURNING scope

-- job_header --
-- The immutable facts needed before locking (which workflow lock to take first).
SELECT id, workflow_id FROM {jobs} WHERE id = %(id)s

-- lock_job_skip_locked --
-- Lock one job row after the workflow lock, never waiting for it (no row: it is busy, or gone).
SELECT id, state, workflow_id, wf_deps, parent_id, unique_key, unique_mode FROM {jobs}
WHERE id = %(id)s FOR UPDATE SKIP LOCKED

-- request_cancel --
-- §8.6: a running job is cancelled cooperatively at its next step boundary.
UPDATE {jobs} SET cancel_requested = true WHERE id = %(id)s AND state = 'running' RETURNING id

-- cancel_parked --
-- §8.6: parked or held → cancelled (terminal).
UPDATE {jobs} SET state = 'cancelled', finished_at = %(now)s, lease_until = NULL, leased_by = NULL,
                  await_scope = NULL, await_name = NULL
WHERE id = %(id)s AND state IN ('ready', 'awaiting', 'held', 'paused')
RETURNING id, queue, parent_id, workflow_id

-- retry_job --
-- §8.6: failed|cancelled → ready (or held for dep-bearing members); clears cancel_requested.
UPDATE {jobs} SET state = %(state)s, ready_at = %(now)s, cancel_requested = false,
                  max_attempts = GREATEST(max_attempts, attempt + 1),
                  lease_until = NULL, leased_by = NULL, finished_at = NULL
WHERE id = %(id)s AND state IN ('failed', 'cancelled')
RETURNING id, queue, state

-- job_state --
-- One job's state.
SELECT state FROM {jobs} WHERE id = %(id)s

-- read_job --
-- One job row, explicit columns.
SELECT {job_columns} FROM {jobs} WHERE id = %(id)s

-- read_workflow --
-- All jobs of a workflow in id order.
SELECT {job_columns} FROM {jobs} WHERE workflow_id = %(workflow_id)s ORDER BY id

-- read_steps --
-- A job's journal in insertion order.
SELECT job_id, seq, name, value, usd_micros, tokens, inserted_at FROM {steps}
WHERE job_id = %(job_id)s ORDER BY seq

-- read_events --
-- A job's event stream in order.
SELECT job_id, seq, payload, inserted_at FROM {events} WHERE job_id = %(job_id)s ORDER BY seq

-- read_signals --
-- §8.1 read: scope = ANY($scopes).
SELECT scope, name, payload, inserted_at FROM {signals} WHERE scope = ANY(%(scopes)s) ORDER BY scope, name

-- put_queue --
-- Runtime queue CRUD.
INSERT INTO {queues} (name, opts, updated_at) VALUES (%(name)s, %(opts)s, %(now)s)
ON CONFLICT (name) DO UPDATE SET opts = EXCLUDED.opts, updated_at = EXCLUDED.updated_at

-- put_cron --
-- Runtime cron CRUD (merges over static config by name).
INSERT INTO {crons} (name, expression, worker, input, opts, paused, updated_at)
VALUES (%(name)s, %(expression)s, %(worker)s, %(input)s, %(opts)s, %(paused)s, %(now)s)
ON CONFLICT (name) DO UPDATE SET expression = EXCLUDED.expression, worker = EXCLUDED.worker,
    input = EXCLUDED.input, opts = EXCLUDED.opts, paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at

-- signal_exists --
-- §7 park rule: is the awaited signal already delivered?
SELECT 1 AS found FROM {signals} WHERE scope = %(scope)s AND name = %(name)s

-- park_awaiting --
-- §7 await outcome, fenced on the claimed attempt: park on (scope, name) until the deadline. A wait
-- spends no attempt (model.store.max_attempts_after_park: + park_credit, saturating at the ceiling).
UPDATE {jobs} SET state = 'awaiting', await_scope = %(scope)s, await_name = %(name)s, ready_at = %(deadline)s,
                  lease_until = NULL, leased_by = NULL,
                  max_attempts = LEAST(max_attempts::bigint + %(park_credit)s, %(attempts_ceiling)s)
WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s
RETURNING id, queue

-- park_ready --
-- §7 await outcome when the signal row exists: ready at once, await fields NULL. Still a wait: it
-- spends no attempt (the same max_attempts_after_park as park_awaiting).
UPDATE {jobs} SET state = 'ready', ready_at = %(now)s, await_scope = NULL, await_name = NULL,
                  lease_until = NULL, leased_by = NULL,
                  max_attempts = LEAST(max_attempts::bigint + %(park_credit)s, %(attempts_ceiling)s)
WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s
RETURNING id, queue

-- missing_deps --
-- §8.6 retry guard: dep names of a member that no job of its workflow carries any more (pruned).
SELECT d AS name FROM unnest(%(deps)s::text[]) AS d
WHERE NOT EXISTS (SELECT 1 FROM {jobs} WHERE workflow_id = %(workflow_id)s AND wf_name = d)
