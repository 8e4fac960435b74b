-- Dashboard index variants (additive, optional; contract §1 allows new index variants). Not a
-- migration: belay_meta.version is untouched, and every SDK keeps working with or without them.
-- Created by `belay dashboard --create-indexes` (impl/ops/dashboard/queries.py: ensure_indexes), one
-- statement at a time with CREATE INDEX CONCURRENTLY, so a live queue is never blocked for writes.
-- Without them the dashboard still works: tiles fall back to an exact full-scan count and filtered
-- job lists to a walk of the primary key.
-- Cost: each is one more index entry to write when a job is inserted or changes state.

-- belay_jobs_dash_queue_state_idx --
-- Tiles: the loose scan over (queue, state) pairs and each pair's capped count; the job list
-- filtered by queue and state together.
CREATE INDEX CONCURRENTLY IF NOT EXISTS belay_jobs_dash_queue_state_idx ON {jobs} (queue, state, id)

-- belay_jobs_dash_state_idx --
-- The job list filtered by state, newest first (keyset on id), however rare the state.
CREATE INDEX CONCURRENTLY IF NOT EXISTS belay_jobs_dash_state_idx ON {jobs} (state, id)

-- belay_jobs_dash_errors_idx --
-- The job list searched by error text scans only jobs that have errors.
CREATE INDEX CONCURRENTLY IF NOT EXISTS belay_jobs_dash_errors_idx ON {jobs} (id) WHERE errors <> '[]'::jsonb
