"""A smoke scenario on a provisioned PostgreSQL: migrate, compatibility check, enqueue (single,
batch, a duplicate, a workflow), signal, cancel and retry, then read everything back and verify it.
It exits non-zero on the first mismatch."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from impl.client import Client
from impl.migrate import migrate
from impl.provision import provision, redact
from model import ops
from model.ops import JobSpec, WorkflowMember


def run(echo: Callable[[str], None] = print) -> int:
    started = time.monotonic()
    db = provision()
    try:
        echo(f"provisioning: {db.kind} — {db.reason} ({time.monotonic() - started:.2f}s)")
        echo(f"database: {redact(db.url)}")
        with psycopg.connect(db.url, autocommit=True) as conn:
            applied = migrate(conn)
        echo(f"migrations applied: {applied or 'none (already current)'}")
        with Client(db.url) as client:
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
