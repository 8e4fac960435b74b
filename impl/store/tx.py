"""One open store transaction (`Tx`): the base both stores build on.

`impl/store/client_store.py` (client operations, contract §5, §8.1, §8.3, §8.6, §10) and `impl/store/worker_store.py`
(worker operations, §6–§9) both run their named queries through a `Tx`; it lives here, below both, so
neither store module imports the other for it. Pokes (§9.2) collected during the transaction are sent
inside it, at most one per queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from impl.store.pgrows import channel_name, poke_payload
from impl.store.queries import SchemaSQL


@dataclass
class Tx:
    """One open transaction: its cursor, its `now`, the pokes to send before it ends, and the jobs it made
    terminal (their result notifications are sent after the commit: impl/store/results.py)."""

    cur: psycopg.Cursor[dict[str, Any]]
    q: SchemaSQL
    now: datetime | None
    pokes: set[str] = field(default_factory=set)
    results: list[int] = field(default_factory=list)  # jobs made terminal: §9.2 result notifications

    def one(self, name: str, params: dict[str, Any] | None = None, **extra: sql.Composable) -> dict[str, Any] | None:
        return self.cur.execute(self.q.q(name, **extra) if extra else self.q.qb(name), params).fetchone()

    def all(
        self, name: str, params: dict[str, Any] | list[Any] | None = None, **extra: sql.Composable
    ) -> list[dict[str, Any]]:
        return self.cur.execute(self.q.q(name, **extra) if extra else self.q.qb(name), params).fetchall()

    def column(self, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        """The first column of every row, read as tuples: no dict per row on the bulk paths."""
        return self.column_sql(self.q.qb(name), params)

    def column_sql(self, query: bytes, params: dict[str, Any] | None) -> list[Any]:
        """`column` for a statement built at run time (impl.store's compact insert)."""
        with self.cur.connection.cursor(row_factory=tuple_row) as cur:
            return [r[0] for r in cur.execute(query, params).fetchall()]

    def flush_pokes(self) -> None:
        """§9.2: at most one poke per queue for this batch, sent in this transaction."""
        if self.pokes:
            channel = channel_name(self.cur.connection.info.dbname, self.q.schema)
            self.all("notify", {"channel": channel, "payloads": [poke_payload(q) for q in sorted(self.pokes)]})
            self.pokes.clear()

    def flush_results(self) -> None:
        """§9.2 result notifications inside this transaction (a caller's, whose commit the store never sees)."""
        if self.results:
            channel = channel_name(self.cur.connection.info.dbname, self.q.schema)
            self.cur.execute(self.q.q("notify_results"), {"channel": channel, "ids": self.results})
            self.results.clear()
