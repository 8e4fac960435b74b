"""Helpers for broken variants: a store whose named queries (impl/store/sql/*.sql) are edited."""

from __future__ import annotations

from psycopg import sql

from impl.store import PgStore
from impl.store.queries import raw_queries


def patched_queries(**edits: tuple[str, str]) -> type[PgStore]:
    """A PgStore subclass in which query `name` has `old` replaced by `new` (each edit must apply)."""

    class Patched(PgStore):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            for name, (old, new) in edits.items():
                text = raw_queries()[name]
                if old not in text:
                    raise RuntimeError(f"query {name} no longer contains {old!r}: update this broken variant")
                self.q._cache[name] = sql.SQL(text.replace(old, new)).format(**self.q.names)

    return Patched
