"""bench.run's throughput figures run end to end on a tiny workload (the figures belong to bench runs)."""

from __future__ import annotations

import psycopg

from bench import run
from impl.store.migrate import migrate


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


def test_fill_empties_only_the_queues_the_bench_filled_and_leaves_autovacuum_alone_on_a_given_database(
    db_url, monkeypatch
):
    """bench.run may be pointed at $BELAY_DATABASE_URL: a fill deletes the rows of the bench's own earlier
    fills (so every drain starts from the same table) and nothing else, and only a server the bench
    started itself gets autovacuum switched off."""
    from impl.client import Client

    monkeypatch.setattr(run, "FILLED", set())
    monkeypatch.setattr(run, "OWN_SERVER", False)
    with Client(db_url) as client:
        theirs = client.enqueue("someone_elses", "k", {"x": 1}).id
    run.fill(db_url, "bench_a", 5)
    run.fill(db_url, "bench_b", 3)
    with psycopg.connect(db_url, autocommit=True) as c:
        counts = dict(c.execute("SELECT queue, count(*) FROM belay_jobs GROUP BY queue").fetchall())
        options = c.execute("SELECT reloptions FROM pg_class WHERE relname = 'belay_jobs'").fetchone()[0]
        assert c.execute("SELECT id FROM belay_jobs WHERE queue = 'someone_elses'").fetchone()[0] == theirs
    assert counts == {"someone_elses": 1, "bench_b": 3}
    assert not options or "autovacuum_enabled=off" not in options
    monkeypatch.setattr(run, "OWN_SERVER", True)
    run.fill(db_url, "bench_c", 2)
    with psycopg.connect(db_url, autocommit=True) as c:
        options = c.execute("SELECT reloptions FROM pg_class WHERE relname = 'belay_jobs'").fetchone()[0]
        counts = dict(c.execute("SELECT queue, count(*) FROM belay_jobs GROUP BY queue").fetchall())
    assert "autovacuum_enabled=off" in options and counts == {"someone_elses": 1, "bench_c": 2}
