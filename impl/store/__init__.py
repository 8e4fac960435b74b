"""The store layer (docs/architecture.md "Layout of impl/"): both stores over PostgreSQL and what they stand on.

`PgStore` (client operations, `client_store.py`, with the worker operations of `worker_store.py` mixed
in) applies the shared vocabulary; `tx.py` is one open transaction, `queries.py` the named blocks of
`sql/*.sql`, `pgrows.py` the row mapping and the wake-up channel, `migrate.py` the schema, `snapshot.py`
reads every table back, `deadline.py` bounds each store call, `failpoints.py` holds a test's hooks
between statements. `from impl.store import PgStore` is the public path.
"""

from impl.store.client_store import BUSY, PgStore, channel_name

__all__ = ["BUSY", "PgStore", "channel_name"]
