"""A smoke scenario on a provisioned PostgreSQL: migrate, compatibility check, enqueue (single,
batch, a duplicate, a workflow), signal, cancel and retry, then read everything back and verify it.
It exits non-zero on the first mismatch.

It never writes into the database it is given: the scenario runs in a throwaway schema
(`belay_smoke_<random>`, migrated there and dropped afterwards, also on failure), so a real
database's jobs, workflows and signals are untouched and no real job awaiting `orders/paid` wakes.
Without BELAY_DATABASE_URL the whole cluster is an embedded throwaway one."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from impl.client import Client
from impl.provision import provision, redact
from impl.store.migrate import migrate
from model import ops
from model.ops import JobSpec, WorkflowMember


@contextmanager
def throwaway_schema(url: str, prefix: str) -> Iterator[tuple[str, list[int]]]:
    """A schema `<prefix>_<random>` on `url`, migrated, yielded as (name, migrations applied) and dropped
    afterwards, also on failure: whatever runs in it never touches the database's real tables.
    Keep `prefix` short: the notify channel belay_<database>_<schema> is at most 63 bytes."""
    schema = f"{prefix}_{uuid.uuid4().hex[:6]}"
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            applied = migrate(conn, schema)
        yield schema, applied
    finally:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def run(echo: Callable[[str], None] = print) -> int:
    started = time.monotonic()
    db = provision()
    try:
        echo(f"provisioning: {db.kind} — {db.reason} ({time.monotonic() - started:.2f}s)")
        echo(f"database: {redact(db.url)}")
        with throwaway_schema(db.url, "belay_smoke") as (schema, applied):
            echo(f"throwaway schema {schema}: the scenario writes only there, and it is dropped afterwards")
            echo(f"migrations applied: {applied or 'none (already current)'}")
            with Client(db.url, schema=schema) as client:
                echo(f"compatible: version {client.compat.version}, contract major {client.compat.contract_major}")
                single = client.enqueue("default", "echo", {"hello": "world"})
                batch = client.enqueue_many(
                    [JobSpec("default", "echo", {"i": i}) for i in range(3)]
                    + [JobSpec("default", "echo", unique_key="nightly-report")] * 2
                )
                wf = client.enqueue_workflow(
                    "wf-smoke",
                    [
                        WorkflowMember("fetch", JobSpec("default", "fetch")),
                        WorkflowMember("summarize", JobSpec("default", "summarize"), deps=("fetch",)),
                    ],
                )
                ids = dict(wf.ids)
                client.cancel(ids["fetch"])
                retried = client.retry(ids["summarize"])
                signalled = client.signal("orders", "paid", {"amount": 3})
                checks = {
                    "single inserted": isinstance(single, ops.Inserted),
                    "batch: 4 inserted, 1 duplicate": [type(o).__name__ for o in batch.outcomes]
                    == ["Inserted"] * 4 + ["Duplicate"],
                    "job reads back": client.job(single.id).input == {"hello": "world"},
                    "workflow: cancel dooms the dependent": [j.state for j in client.workflow("wf-smoke")]
                    == ["cancelled", "cancelled"],
                    "retry of a dependent of a cancelled dep is re-doomed": retried
                    == ops.Retried(ids["summarize"], "cancelled"),
                    "signal persisted": [s.payload for s in client.signals("orders")] == [{"amount": 3}]
                    and signalled == ops.Signalled(()),
                }
        failed = [name for name, ok in checks.items() if not ok]
        for name, ok in checks.items():
            echo(f"  {'ok  ' if ok else 'FAIL'} {name}")
        echo(f"smoke {'passed' if not failed else 'FAILED'} in {time.monotonic() - started:.2f}s")
        return 1 if failed else 0
    finally:
        db.close()
