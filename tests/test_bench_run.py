"""bench.run's throughput figures run end to end on a tiny workload (the figures belong to bench runs)."""

from __future__ import annotations

import psycopg

from bench import run
from impl.migrate import migrate


def test_the_runtime_drains_in_a_process_of_its_own_and_the_clock_starts_at_its_first_claim(db_url):
    with psycopg.connect(db_url, autocommit=True) as c:
        migrate(c)
    rate = run.runtime_process(db_url, "tiny", 200, limit=10, kind="noop")
    assert rate > 0
    with psycopg.connect(db_url, autocommit=True) as c:
        done, first, last = c.execute(
            "SELECT count(*) FILTER (WHERE state = 'succeeded'), min(started_at), max(finished_at) "
            "FROM belay_jobs WHERE queue = 'tiny'"
        ).fetchone()
    assert done == 200
    # from the first claim to the probe's sight of the last ack: never shorter than the drain itself
    assert 200 / rate >= (last - first).total_seconds()
