"""Retention keeps pace with the queue (issue 54): the steady hour at ~1,000 jobs/s grew its table 4.3×
because a sweeper pass pruned one batch of w.Prune's limit (500). A pass now repeats the batch while it comes
back full, up to WorkerConfig.prune_batches — each batch its own short transaction (§8.7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from impl.client import Client
from impl.runtime import Worker, WorkerConfig
from impl.worker import Registry
from model.ops import JobSpec

NOW = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)


def _finished_jobs(url: str, n: int) -> None:
    client = Client(url)
    try:
        client.enqueue_many([JobSpec(queue="q", worker="k") for _ in range(n)])
    finally:
        client.close()
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute("UPDATE belay_jobs SET state = 'succeeded', finished_at = %s", (NOW - timedelta(hours=1),))


def _prune(url: str, **config: object) -> int:
    worker = Worker(url, Registry(), WorkerConfig(retention=(("succeeded", 60),), **config))  # type: ignore[arg-type]
    try:
        return worker.prune(NOW)
    finally:
        worker.store.close()


def _left(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as pg:
        row = pg.execute("SELECT count(*) FROM belay_jobs").fetchone()
        assert row is not None
        return int(row[0])


def test_one_sweep_prunes_every_due_job_in_batches(db_url):
    _finished_jobs(db_url, 1_234)
    assert _prune(db_url) == 1_234
    assert _left(db_url) == 0


def test_the_batches_of_one_pass_are_capped(db_url):
    _finished_jobs(db_url, 1_234)
    assert _prune(db_url, prune_batches=2) == 1_000  # two full batches of the limit, then the next pass
    assert _left(db_url) == 234
