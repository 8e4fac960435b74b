"""The soak tables (PROTOCOL.md §4) and reading them back for the checker.

The driver writes `soak_ledger` / `soak_unique` rows in the same transaction as the jobs they describe
(transactional enqueue), so the ledger and belay_jobs can never disagree, whatever crashes when.
"""

from __future__ import annotations

import psycopg

from soak.checker import LedgerEntry, Observation, SoakLedger, UniqueAttempt

DDL = """
CREATE TABLE IF NOT EXISTS soak_ledger (
    job_id      bigint PRIMARY KEY,
    kind        text NOT NULL,
    expected    text NOT NULL,
    inserted_at timestamptz NOT NULL,
    detail      jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE TABLE IF NOT EXISTS soak_unique (
    id      bigserial PRIMARY KEY,
    grp     int NOT NULL,
    key     text NOT NULL,
    mode    text NOT NULL,
    outcome text NOT NULL,
    job_id  bigint,
    at      timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS soak_observations (
    id       bigserial PRIMARY KEY,
    job_id   bigint NOT NULL,
    attempt  int NOT NULL,
    node     text,
    phase    text NOT NULL,
    observed jsonb NOT NULL,
    at       timestamptz NOT NULL
);
"""


def install(conn: psycopg.Connection) -> None:
    conn.execute(DDL)


def read(conn: psycopg.Connection) -> SoakLedger:
    """The whole ledger, in one REPEATABLE READ transaction."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        entries = tuple(
            LedgerEntry(*r)
            for r in conn.execute("SELECT job_id, kind, expected, inserted_at, detail FROM soak_ledger ORDER BY job_id")
        )
        observations = tuple(
            Observation(*r)
            for r in conn.execute(
                "SELECT job_id, attempt, node, phase, observed, at FROM soak_observations ORDER BY id"
            )
        )
        unique = tuple(
            UniqueAttempt(*r)
            for r in conn.execute("SELECT grp, key, mode, outcome, job_id, at FROM soak_unique ORDER BY id")
        )
    return SoakLedger(entries, observations, unique)
