-- Migration 2: signals and awaits, rate windows, runtime queue/cron rows, workflows and children.

CREATE TABLE IF NOT EXISTS {signals} (
    scope       text        NOT NULL,  -- job:<id>, wf:<workflow_id>, or any user scope
    name        text        NOT NULL,
    payload     jsonb,
    inserted_at timestamptz NOT NULL,
    PRIMARY KEY (scope, name)
);

CREATE TABLE IF NOT EXISTS {rate} (
    bucket       text        NOT NULL,  -- queue:<q> or resource:<name>
    window_start timestamptz NOT NULL,
    count        bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, window_start)
);

CREATE TABLE IF NOT EXISTS {queues} (
    name       text PRIMARY KEY,
    opts       jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
    updated_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS {crons} (
    name       text PRIMARY KEY,
    expression text        NOT NULL,
    worker     text        NOT NULL,
    input      jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
    opts       jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL
);

ALTER TABLE {jobs}
    ADD COLUMN IF NOT EXISTS workflow_id text,
    ADD COLUMN IF NOT EXISTS wf_name     text,    -- member name; deps refer to names
    ADD COLUMN IF NOT EXISTS wf_deps     text[],
    ADD COLUMN IF NOT EXISTS wf_ignore   text[],  -- subset of failed, cancelled
    ADD COLUMN IF NOT EXISTS parent_id   bigint,
    ADD COLUMN IF NOT EXISTS await_scope text,
    ADD COLUMN IF NOT EXISTS await_name  text;

CREATE INDEX IF NOT EXISTS belay_jobs_await_due_idx ON {jobs} (queue, priority, ready_at, id) WHERE state = 'awaiting';
CREATE INDEX IF NOT EXISTS belay_jobs_await_wake_idx ON {jobs} (await_scope, await_name) WHERE state = 'awaiting';
CREATE INDEX IF NOT EXISTS belay_jobs_workflow_idx ON {jobs} (workflow_id) WHERE workflow_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS belay_jobs_parent_idx ON {jobs} (parent_id) WHERE parent_id IS NOT NULL;

UPDATE {meta} SET version = 2 WHERE version < 2;
