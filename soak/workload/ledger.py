"""The soak tables (PROTOCOL.md §4) and reading them back for the checker.

The driver writes `soak_ledger` / `soak_unique` rows in the same transaction as the jobs they describe
(transactional enqueue), so the ledger and belay_jobs can never disagree, whatever crashes when.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import psycopg

from soak.judges.checker import LedgerEntry, LedgerRows, Observation, SoakLedger, UniqueAttempt

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


def read(
    conn: psycopg.Connection,
    big: Callable[[Iterator[tuple[int, LedgerEntry]]], Mapping[int, LedgerEntry]] | None = None,
    big_over: int = 10_000,
) -> SoakLedger:
    """The whole ledger, in one REPEATABLE READ transaction. With `big` (soak/record/spill.py
    `disk_table`), a ledger of `big_over` entries or more is streamed through a server-side cursor into it
    (`LedgerRows`), not held in a tuple: a long run's ledger is one entry per job (issue 27)."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        counted = conn.execute("SELECT count(*) FROM soak_ledger").fetchone()
        n = counted[0] if counted else 0
        entries: tuple[LedgerEntry, ...] | LedgerRows
        with conn.cursor(name="soak_ledger_entries") as cur:
            cur.itersize = 2000
            cur.execute("SELECT job_id, kind, expected, inserted_at, detail FROM soak_ledger ORDER BY job_id")
            rows = (LedgerEntry(*r) for r in cur)
            if big is not None and n >= big_over:
                entries = LedgerRows(big((e.job_id, e) for e in rows))
            else:
                entries = tuple(rows)
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
