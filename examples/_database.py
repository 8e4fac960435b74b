"""Where the examples run: $BELAY_DATABASE_URL, else an embedded PostgreSQL (README, "Where PostgreSQL
comes from"). Either way in a throwaway schema, migrated first and dropped afterwards, so an example never
writes into a real database's tables."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from impl.migrate import migrate
from impl.provision import provision, redact


@contextmanager
def database(name: str) -> Iterator[tuple[str, str]]:
    """Yield (url, schema): a migrated throwaway schema `belay_ex_<random>` on a provisioned PostgreSQL,
    dropped afterwards. `name` is the example's, for the first line printed."""
    db = provision()
    # Short: the notify channel is belay_<database>_<schema>, at most 63 bytes (docs/decisions.md).
    schema = f"belay_ex_{uuid.uuid4().hex[:6]}"
    try:
        print(f"{name}: PostgreSQL {db.kind} ({redact(db.url)}), throwaway schema {schema}")
        with psycopg.connect(db.url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            migrate(conn, schema)
        yield db.url, schema
    finally:
        try:
            with psycopg.connect(db.url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        finally:
            db.close()
