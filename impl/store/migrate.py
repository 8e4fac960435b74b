"""Migrations 1–3, the jobs table's autovacuum storage parameters, and the §1 compatibility check.

`migrate(conn)` applies, in one transaction under an advisory lock, every migration newer than
belay_meta.version: applying twice is a no-op, and a concurrent second migrator waits on the lock and
then finds nothing to do. A database already at a newer revision (a newer SDK migrated it) is left
alone. `check_compat` implements the startup rule: refuse a higher contract major, refuse a revision
older than the minimum this SDK needs, accept newer revisions within the known major.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from impl.store.queries import MIGRATIONS, SchemaSQL
from model.ops import Compatible, IncompatibleSchema, check_versions

CONTRACT_MAJOR = 1
SCHEMA_VERSION = len(MIGRATIONS)  # 4
MIN_VERSION = 3  # the oldest revision this SDK can run against


def current_version(conn: psycopg.Connection, q: SchemaSQL) -> int:
    exists = conn.execute("SELECT to_regclass(%s)", (f'"{q.schema}".belay_meta',)).fetchone()[0]
    if exists is None:
        return 0
    row = conn.execute(q.q("meta")).fetchone()
    return 0 if row is None else row[0]


def migrate(conn: psycopg.Connection, schema: str = "public") -> list[int]:
    """Apply pending migrations; return the revisions applied (empty when already current)."""
    q = SchemaSQL(schema)
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('belay:migrate:' || %s))", (q.schema,))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(q.schema)))
        version = current_version(conn, q)
        for index in range(version, SCHEMA_VERSION):
            conn.execute(q.migration(index))
            applied.append(index + 1)
        if version <= SCHEMA_VERSION and not _has_autovacuum_options(conn, q):
            conn.execute(q.tuning())
    return applied


def _has_autovacuum_options(conn: psycopg.Connection, q: SchemaSQL) -> bool:
    """Does belay_jobs carry an autovacuum_* storage parameter already (ours, or an operator's own)?"""
    row = conn.execute(
        "SELECT coalesce(bool_or(o LIKE 'autovacuum%%'), false) FROM pg_class, unnest(reloptions) AS o "
        "WHERE pg_class.oid = to_regclass(%s)",
        (f'"{q.schema}".belay_jobs',),
    ).fetchone()
    return bool(row and row[0])


__all__ = ["CONTRACT_MAJOR", "MIN_VERSION", "SCHEMA_VERSION", "IncompatibleSchema", "check_compat", "migrate"]


def check_compat(
    conn: psycopg.Connection,
    schema: str = "public",
    *,
    known_major: int = CONTRACT_MAJOR,
    min_version: int = MIN_VERSION,
) -> Compatible:
    """§1 startup check. Raises IncompatibleSchema with what to do; returns the versions seen."""
    q = SchemaSQL(schema)
    if current_version(conn, q) == 0:
        raise IncompatibleSchema(
            f"no Belay schema in {schema!r}: run `belay migrate` (or impl.store.migrate.migrate(conn)) first"
        )
    version, major = conn.execute(q.q("meta")).fetchone()
    return check_versions(version, major, known_major=known_major, min_version=min_version)
