"""SQL as package data: named blocks from impl/store/sql/queries.sql and the numbered migrations.

Blocks look like procrastinate's: `-- name --`, a one-line purpose comment, then the body. Table
names are placeholders filled with `psycopg.sql.Identifier(schema, "belay_<table>")`, so a custom
schema name can never inject SQL (it is also validated against ^[A-Za-z_][A-Za-z0-9_]*$).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from importlib import resources

from psycopg import sql

from model.ops import validate_schema_name
from model.rows import JOB_COLUMNS

TABLES = ("jobs", "steps", "events", "signals", "rate", "queues", "crons", "meta")
MIGRATIONS = ("001_core.sql", "002_signals.sql", "003_uniqueness.sql")
TUNING = "autovacuum.sql"  # applied by impl/store/migrate.py after the migrations: not a revision
_BLOCK = re.compile(r"^-- ([a-z_]+) --\n", re.MULTILINE)


def _read(name: str) -> str:
    return resources.files("impl.store").joinpath("sql", name).read_text(encoding="utf-8")


QUERY_FILES = ("queries.sql", "worker.sql", "http.sql", "ops.sql")


@cache
def raw_queries() -> dict[str, str]:
    """{name: body} of every block in the query files (comment lines stripped); names are unique."""
    out: dict[str, str] = {}
    for filename in QUERY_FILES:
        parts = _BLOCK.split(_read(filename))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in out:
                raise RuntimeError(f"query {name!r} is defined twice (in {filename})")
            lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("--")]
            out[name] = "\n".join(lines).strip()
    return out


# A claim of at most this many rows has its LIMIT written into the statement (SchemaSQL.qb_take).
INLINE_TAKE_MAX = 32


class SchemaSQL:
    """The queries and migrations of one schema, composed once and cached."""

    def __init__(self, schema: str = "public") -> None:
        self.schema = validate_schema_name(schema)
        self.names = {t: sql.Identifier(schema, f"belay_{t}") for t in TABLES}
        self.names["schema"] = sql.Identifier(schema)
        self.names["jobs_seq"] = sql.Literal(f'"{schema}".belay_jobs_id_seq')
        self.names["jobs_seq_table"] = sql.Identifier(schema, "belay_jobs_id_seq")
        self.names["job_columns"] = sql.SQL(", ").join(sql.Identifier(c) for c in JOB_COLUMNS)
        self._cache: dict[str, sql.Composed] = {}
        self._bytes: dict[str, bytes] = {}
        self._taken: dict[tuple[str, int], bytes] = {}

    def q(self, name: str, **extra: sql.Composable) -> sql.Composed:
        """A named query, composed for this schema. `extra` fills block-specific placeholders."""
        if extra:
            return sql.SQL(raw_queries()[name]).format(**self.names, **extra)
        if name not in self._cache:
            self._cache[name] = sql.SQL(raw_queries()[name]).format(**self.names)
        return self._cache[name]

    def qb(self, name: str) -> bytes:
        """The named query rendered to bytes once. psycopg renders a `Composed` query again on every
        execute (about 10 % of a batched drain's Python time); bytes go straight to its parse cache."""
        found = self._bytes.get(name)
        if found is None:
            query = _DERIVED[name](self) if name in _DERIVED else self.q(name)
            found = self._bytes[name] = query.as_bytes(None) if query is not None else b""
        return found

    def qb_take(self, name: str, take: int) -> bytes:
        """qb(name) with its `%(take)s` written in as the number (take ≤ INLINE_TAKE_MAX; above, qb(name)).

        Why: with LIMIT a parameter, PostgreSQL's generic plan assumes a LIMIT of 10 % of the queue, costs
        it far above the custom plans, and so re-plans the claim on every call — 0.4 to 0.6 ms of planning
        for a statement that runs in 0.3 ms (ack_claim_solo, 10 acks and 10 claims: 1.45 ms a call, 0.85 ms
        with the number written in, measured in issue 33). With the number in the text, psycopg prepares
        one statement per take and PostgreSQL settles on its generic plan after five calls. The texts are
        at most INLINE_TAKE_MAX per query and connection, within psycopg's prepared_max (100)."""
        base = self.qb(name)  # every call through qb: properties/statements.py counts the statements run
        if take > INLINE_TAKE_MAX or take < 0:
            return base
        found = self._taken.get((name, take))
        if found is None:
            found = self._taken[(name, take)] = base.replace(b"%(take)s", b"%d" % take)
        return found

    def migration(self, index: int) -> sql.Composed:
        """Migration number index+1, composed for this schema."""
        return sql.SQL(_read(MIGRATIONS[index])).format(**self.names)

    def tuning(self) -> sql.Composed:
        """The jobs table's autovacuum storage parameters (sql/autovacuum.sql), composed for this schema."""
        return sql.SQL(_read(TUNING)).format(**self.names)


def _ack_claim_solo(q: SchemaSQL) -> sql.Composed | None:
    """ack_claim_solo with claim_plain's own text as its claim (this store's claim_plain, as composed — a
    patched one included): its two candidate scans gated on the acks' `blocked`, `now` renamed claim_now, and
    its UPDATE as the `claimed` CTE. None (the caller keeps the transaction path) if claim_plain no longer
    has that shape: WITH …, then one final UPDATE … RETURNING."""
    claim = q.q("claim_plain").as_string(None)
    head, sep, update = claim.rpartition("\nUPDATE ")
    where = "WHERE queue = %(queue)s"
    if not claim.startswith("WITH ") or not sep or "RETURNING" not in update or head.count(where) != 2:
        return None
    # The gate is a one-time filter on both candidate scans; their LIMIT stays the `take` parameter, so
    # the planner still knows the claim takes a handful of rows (a LIMIT computed by a subquery made it
    # plan the final UPDATE as a hash join over a sequential scan of the whole table).
    ctes = head[len("WITH ") :].replace(where, "WHERE NOT (SELECT b FROM blocked) AND queue = %(queue)s")
    parts = {"claim_ctes": ctes, "claim_update": "UPDATE " + update}
    return q.q("ack_claim_solo", **{k: sql.SQL(v.replace("%(now)s", "%(claim_now)s")) for k, v in parts.items()})


_DERIVED: dict[str, Callable[[SchemaSQL], sql.Composed | None]] = {"ack_claim_solo": _ack_claim_solo}
