-- Migration 3: uniqueness, cron slots, budgets and retention.

ALTER TABLE {jobs}
    ADD COLUMN IF NOT EXISTS unique_key        text,
    ADD COLUMN IF NOT EXISTS unique_mode       text CHECK (unique_mode IN ('incomplete','window','always')),
    ADD COLUMN IF NOT EXISTS cron_name         text,
    ADD COLUMN IF NOT EXISTS cron_slot         timestamptz,
    ADD COLUMN IF NOT EXISTS budget_usd_micros bigint,  -- null = no cap
    ADD COLUMN IF NOT EXISTS budget_tokens     bigint,
    ADD COLUMN IF NOT EXISTS spent_usd_micros  bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS spent_tokens      bigint NOT NULL DEFAULT 0;

-- §5.2 / §8.5: the targetless ON CONFLICT DO NOTHING absorbs all three.
CREATE UNIQUE INDEX IF NOT EXISTS belay_jobs_cron_slot_idx ON {jobs} (cron_name, cron_slot) WHERE cron_name IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS belay_jobs_unique_incomplete_idx ON {jobs} (unique_key)
    WHERE unique_mode = 'incomplete' AND state IN ('ready','running','awaiting','held','paused');
CREATE UNIQUE INDEX IF NOT EXISTS belay_jobs_unique_window_idx ON {jobs} (unique_key) WHERE unique_mode IN ('window','always');

-- §6 (an additive index variant): the claim order is ready_at ASC NULLS FIRST, which the normative
-- belay_jobs_claim_idx (NULLS LAST by default) cannot return without a sort of the whole backlog.
CREATE INDEX IF NOT EXISTS belay_jobs_claim_order_idx ON {jobs} (queue, priority, ready_at NULLS FIRST, id)
    WHERE state = 'ready';

-- §8.7: retention scans terminal jobs by their finish time.
CREATE INDEX IF NOT EXISTS belay_jobs_prune_idx ON {jobs} (state, finished_at) WHERE state IN ('succeeded','failed','cancelled');

UPDATE {meta} SET version = 3 WHERE version < 3;
