"""Where the examples run: $BELAY_DATABASE_URL, else an embedded PostgreSQL (README, "Where PostgreSQL
comes from"). Either way in a throwaway schema, migrated first and dropped afterwards (as `belay smoke`
does), so an example never writes into a real database's tables."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from impl.ops.smoke import throwaway_schema
from impl.provision import provision, redact


@contextmanager
def database(name: str) -> Iterator[tuple[str, str]]:
    """Yield (url, schema) for the example `name`: a migrated throwaway schema `belay_ex_<random>`."""
    with provision() as db, throwaway_schema(db.url, "belay_ex") as (schema, _):
        print(f"{name}: PostgreSQL {db.kind} ({redact(db.url)}), throwaway schema {schema}")
        yield db.url, schema
