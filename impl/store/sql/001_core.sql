-- Migration 1: the job table, the step journal, the event stream and the meta row.
-- Placeholders in braces are filled by impl/store/migrate.py with psycopg.sql identifiers
-- ({jobs} is "<schema>".belay_jobs, ...); literal braces are doubled.
-- Every statement is idempotent; the migrator also gates on belay_meta.version.

CREATE TABLE IF NOT EXISTS {meta} (
    version        integer NOT NULL,  -- migration revision (3 after this release)
    contract_major integer NOT NULL   -- wire-contract major (1)
);

CREATE TABLE IF NOT EXISTS {jobs} (
    id               bigserial PRIMARY KEY,
    queue            text        NOT NULL,
    worker           text        NOT NULL,  -- the kind: a registry name each SDK maps to code
    input            jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
    meta             jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
    state            text        NOT NULL
        CHECK (state IN ('ready','running','awaiting','held','paused','succeeded','failed','cancelled')),
    priority         integer     NOT NULL DEFAULT 0,
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 20,
    ready_at         timestamptz,
    inserted_at      timestamptz NOT NULL,  -- no default: the SDK supplies now (clock rule)
    started_at       timestamptz,
    finished_at      timestamptz,
    lease_until      timestamptz,
    leased_by        text,
    errors           jsonb       NOT NULL DEFAULT '[]'::jsonb,  -- [{{attempt, at, error, detail}}]
    result           bytea,                                   -- §2 envelope
    cancel_requested boolean     NOT NULL DEFAULT false
);

-- §3: the claim path and the lease sweeper.
CREATE INDEX IF NOT EXISTS belay_jobs_claim_idx ON {jobs} (queue, priority, ready_at, id) WHERE state = 'ready';
CREATE INDEX IF NOT EXISTS belay_jobs_lease_idx ON {jobs} (lease_until) WHERE state = 'running';

CREATE TABLE IF NOT EXISTS {steps} (
    job_id      bigint      NOT NULL,
    seq         integer     NOT NULL,  -- per-job insertion order
    name        text        NOT NULL,
    value       bytea       NOT NULL CHECK (octet_length(value) <= 1048576),  -- §2: 1 MiB cap
    usd_micros  bigint      NOT NULL DEFAULT 0,
    tokens      bigint      NOT NULL DEFAULT 0,
    inserted_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, name)
);

CREATE TABLE IF NOT EXISTS {events} (
    job_id      bigint      NOT NULL,
    seq         integer     NOT NULL,
    payload     jsonb       NOT NULL,
    inserted_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, seq)
);

INSERT INTO {meta} (version, contract_major)
SELECT 1, 1 WHERE NOT EXISTS (SELECT 1 FROM {meta});
