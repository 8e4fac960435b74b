"""Table upkeep (impl/runtime/upkeep.py, issue 54): a node vacuums belay_jobs once enough row versions are
dead — the claim walks the partial claim index's entries of rows it already claimed until a VACUUM removes
them — and analyzes it when the planner's estimate is far below the live rows, so a claim planned on an
empty table stops sequential-scanning. Measured effect: docs/benchmarks.md ("Table upkeep")."""

from __future__ import annotations

import re
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from impl.client import Client
from impl.runtime import QueueConfig, Worker, WorkerConfig
from impl.runtime.upkeep import TableStats, TableUpkeep, Upkeep, decide, statement
from impl.store.queries import SchemaSQL
from impl.worker import Registry
from model.ops import JobSpec


@pytest.mark.parametrize(
    ("stats", "vacuum_dead_rows", "analyze_rows", "expected"),
    [
        (TableStats(live=0, dead=0, reltuples=-1), 20_000, 1_000, Upkeep(False, False)),
        (TableStats(live=10, dead=19_999, reltuples=10), 20_000, 1_000, Upkeep(False, False)),
        (TableStats(live=10, dead=20_000, reltuples=10), 20_000, 1_000, Upkeep(True, False)),
        (TableStats(live=10, dead=20_000, reltuples=10), 0, 1_000, Upkeep(False, False)),  # rule off
        # never analyzed (reltuples -1) or analyzed empty (0): the estimate is below half the live rows
        (TableStats(live=1_000, dead=0, reltuples=-1), 20_000, 1_000, Upkeep(False, True)),
        (TableStats(live=1_000, dead=0, reltuples=0), 20_000, 1_000, Upkeep(False, True)),
        (TableStats(live=999, dead=0, reltuples=-1), 20_000, 1_000, Upkeep(False, False)),  # too few rows
        (TableStats(live=1_000, dead=0, reltuples=-1), 20_000, 0, Upkeep(False, False)),  # rule off
        (TableStats(live=100_000, dead=0, reltuples=50_000), 20_000, 1_000, Upkeep(False, False)),  # half: fine
        (TableStats(live=100_000, dead=0, reltuples=49_999), 20_000, 1_000, Upkeep(False, True)),
        (TableStats(live=100_000, dead=25_000, reltuples=10), 20_000, 1_000, Upkeep(True, True)),
        # above a million rows the threshold grows with the square root of the table: 4M rows → 2×
        (TableStats(live=4_000_000, dead=39_999, reltuples=4_000_000), 20_000, 1_000, Upkeep(False, False)),
        (TableStats(live=4_000_000, dead=40_000, reltuples=4_000_000), 20_000, 1_000, Upkeep(True, False)),
        (TableStats(live=1_000_000, dead=20_000, reltuples=1_000_000), 20_000, 1_000, Upkeep(True, False)),
    ],
)
def test_the_rule(stats, vacuum_dead_rows, analyze_rows, expected):
    assert decide(stats, vacuum_dead_rows, analyze_rows) == expected


def test_one_statement_per_decision():
    def text(what: Upkeep) -> str | None:
        q = statement("s", what)
        return None if q is None else q.as_string(None)

    assert text(Upkeep(False, False)) is None
    assert text(Upkeep(True, False)) == 'VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON) "s"."belay_jobs"'
    assert text(Upkeep(True, True)) == 'VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, ANALYZE) "s"."belay_jobs"'
    assert text(Upkeep(False, True)) == 'ANALYZE (SKIP_LOCKED) "s"."belay_jobs"'


def test_config_refuses_negative_thresholds():
    with pytest.raises(ValueError):
        WorkerConfig(vacuum_dead_rows=-1)
    with pytest.raises(ValueError):
        WorkerConfig(upkeep_interval=-1)


def _no_autovacuum(url: str) -> None:
    """Only the node's upkeep may vacuum or analyze in these tests."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("ALTER TABLE belay_jobs SET (autovacuum_enabled = false)")


def _enqueue(url: str, n: int) -> None:
    client = Client(url)
    try:
        for start in range(0, n, 1_000):
            client.enqueue_many([JobSpec(queue="q", worker="k") for _ in range(min(1_000, n - start))])
    finally:
        client.close()


def _settled(upkeep: TableUpkeep, ok, timeout: float = 15.0) -> TableStats:
    """Statistics reach pg_stat_user_tables when a backend flushes them (at most once a second)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = upkeep.stats()
        assert stats is not None
        if ok(stats) or time.monotonic() > deadline:
            return stats
        time.sleep(0.2)


def _counts(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute(
            "SELECT vacuum_count, analyze_count FROM pg_stat_user_tables WHERE relname = 'belay_jobs'"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


def test_vacuums_once_enough_row_versions_are_dead(db_url):
    _no_autovacuum(db_url)
    _enqueue(db_url, 1_500)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("ANALYZE belay_jobs")  # the analyze rule is not what this test looks at
        c.execute("UPDATE belay_jobs SET state = 'succeeded', finished_at = now()")  # 1,500 dead versions
    upkeep = TableUpkeep(db_url, "public", vacuum_dead_rows=2_000, analyze_rows=1_000)
    try:
        stats = _settled(upkeep, lambda s: s.dead >= 1_500)
        assert stats.dead >= 1_500
        assert upkeep.once() == Upkeep(False, False)  # below the threshold
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("UPDATE belay_jobs SET finished_at = finished_at + interval '1 s'")  # 1,500 more
        _settled(upkeep, lambda s: s.dead >= 3_000)
        assert upkeep.once() == Upkeep(True, False)
        assert _counts(db_url)[0] == 1
        after = _settled(upkeep, lambda s: s.dead < 1_500)
        assert after.dead < 1_500
        assert upkeep.once() == Upkeep(False, False)
        assert (upkeep.vacuums, upkeep.analyzes) == (1, 0)
    finally:
        upkeep.close()


def _claim_plan(c: psycopg.Connection) -> set[str]:
    row = c.execute("EXPLAIN (FORMAT JSON) EXECUTE claim('q', now(), 'node-x', now() + interval '30 s')").fetchone()
    assert row is not None
    found: set[str] = set()

    def walk(node: dict) -> None:
        if "Scan" in node["Node Type"]:
            found.add(node["Node Type"] + (" on " + node["Index Name"] if "Index Name" in node else ""))
        for child in node.get("Plans", ()):
            walk(child)

    walk(row[0][0]["Plan"])
    return found


def test_analyze_ends_the_seq_scan_of_a_claim_planned_on_an_empty_table(db_url):
    """The window docs/benchmarks.md measured: the claim's generic plan, made while belay_jobs was empty and
    never analyzed, sequential-scans the table once it holds a backlog — until an ANALYZE invalidates it."""
    _no_autovacuum(db_url)
    text = SchemaSQL().qb_take("claim_plain", 10).decode().replace("%(take)s", "10")
    for i, name in enumerate(("queue", "now", "node", "lease_until")):
        text = text.replace(f"%({name})s", f"${i + 1}")
    upkeep = TableUpkeep(db_url, "public", vacuum_dead_rows=0, analyze_rows=1_000)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("SET plan_cache_mode = force_generic_plan")
        c.execute(f"PREPARE claim(text, timestamptz, text, timestamptz) AS {text}")
        c.execute("EXECUTE claim('q', now(), 'node-x', now() + interval '30 s')")  # planned on the empty table
        _enqueue(db_url, 20_000)
        assert "Seq Scan" in _claim_plan(c)  # the degraded plan this rule exists for
        try:
            _settled(upkeep, lambda s: s.live >= 20_000)
            assert upkeep.once() == Upkeep(False, True)
            assert upkeep.once() == Upkeep(False, False)  # the estimate now matches the table
        finally:
            upkeep.close()
        assert "Seq Scan" not in _claim_plan(c)
    assert _counts(db_url)[1] == 1


def test_a_running_node_vacuums_as_it_drains(db_url):
    _no_autovacuum(db_url)
    _enqueue(db_url, 3_000)
    reg = Registry()

    @reg.kind("k", queue="q")
    def k(ctx, _input):
        return None

    config = WorkerConfig(
        queues=(QueueConfig("q"),), vacuum_dead_rows=1_000, analyze_rows=0, upkeep_interval=0.2, sweep_interval=3600
    )
    worker = Worker(db_url, reg, config).start()
    try:
        deadline = datetime.now(UTC) + timedelta(seconds=60)
        while datetime.now(UTC) < deadline:
            with psycopg.connect(db_url, autocommit=True) as c:
                row = c.execute("SELECT count(*) FROM belay_jobs WHERE state = 'succeeded'").fetchone()
            if row and row[0] == 3_000 and worker.upkeep.vacuums >= 1:
                break
            time.sleep(0.2)
    finally:
        worker.stop(grace=5)
    assert worker.upkeep.vacuums >= 1  # 3,000 jobs claimed and acked: ≥ 6,000 dead row versions
    assert _counts(db_url)[0] == worker.upkeep.vacuums


READY_SCAN = (
    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM belay_jobs WHERE queue = 'q' AND state = 'ready' "
    "AND (ready_at IS NULL OR ready_at <= now()) ORDER BY priority, ready_at NULLS FIRST, id LIMIT 10"
)


def _ready_scan_buffers(c: psycopg.Connection) -> int:
    c.execute(READY_SCAN)  # the first scan marks the dead entries it meets (LP_DEAD); the second is measured
    row = c.execute(READY_SCAN).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


def test_the_vacuum_cleans_the_claim_index_even_when_few_heap_pages_hold_dead_rows(db_url):
    """A large table, a few thousand jobs claimed: their old versions sit on ~1 % of the heap's pages, under
    the 2 % below which a default VACUUM skips the index passes — and leaves the claim index's entries of the
    claimed rows for every claim to walk. The node's VACUUM does the index passes (INDEX_CLEANUP ON)."""
    _no_autovacuum(db_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(
            "INSERT INTO belay_jobs (queue, worker, state, inserted_at) "
            "SELECT 'q', 'k', 'ready', now() FROM generate_series(1, 300000)"
        )
        c.execute("VACUUM ANALYZE belay_jobs")
        clean = _ready_scan_buffers(c)
        c.execute(
            "UPDATE belay_jobs SET state = 'running' WHERE id IN "
            "(SELECT id FROM belay_jobs ORDER BY priority, ready_at NULLS FIRST, id LIMIT 3000)"
        )
        walked = _ready_scan_buffers(c)
        assert walked >= clean + 10  # ~3,000 / 165 leaf pages of dead entries before the first live one
        upkeep = TableUpkeep(db_url, "public", vacuum_dead_rows=1_000, analyze_rows=0)
        try:
            _settled(upkeep, lambda s: s.dead >= 3_000)
            assert upkeep.once().vacuum
        finally:
            upkeep.close()
        assert _ready_scan_buffers(c) <= clean + 3


def test_a_plain_vacuum_of_a_migrated_table_cleans_the_claim_index_too(db_url):
    """What autovacuum runs is a plain VACUUM: `migrate` sets belay_jobs' vacuum_index_cleanup = on
    (impl/store/sql/autovacuum.sql), so it too does the index passes when few heap pages hold dead rows — for
    a worker of any SDK that leaves upkeep to autovacuum."""
    _no_autovacuum(db_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(
            "INSERT INTO belay_jobs (queue, worker, state, inserted_at) "
            "SELECT 'q', 'k', 'ready', now() FROM generate_series(1, 300000)"
        )
        c.execute("VACUUM ANALYZE belay_jobs")
        clean = _ready_scan_buffers(c)
        c.execute(
            "UPDATE belay_jobs SET state = 'running' WHERE id IN "
            "(SELECT id FROM belay_jobs ORDER BY priority, ready_at NULLS FIRST, id LIMIT 3000)"
        )
        assert _ready_scan_buffers(c) >= clean + 10
        c.execute("VACUUM belay_jobs")
        assert _ready_scan_buffers(c) <= clean + 3


def test_a_role_that_does_not_own_the_table_turns_upkeep_off_once(db_url, caplog):
    """PostgreSQL skips a VACUUM by a role that does not own the table with a WARNING in its log — at every
    pass, for ever. The node says it once and stops."""
    role = f"belay_upkeep_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(f"CREATE ROLE {role} LOGIN")
    try:
        url = re.sub(r"//[^@/]*@", f"//{role}@", db_url)
        upkeep = TableUpkeep(url, "public", vacuum_dead_rows=1, analyze_rows=1)
        try:
            assert upkeep.stats() == TableStats(0, 0, upkeep.stats().reltuples, may_maintain=False)  # type: ignore[union-attr]
            with caplog.at_level("WARNING", logger="belay"):
                assert upkeep.once() == Upkeep(False, False)
                assert not upkeep.enabled
                upkeep.loop(threading.Event(), 0.01)  # returns at once: nothing left to do
            assert sum("does not own belay_jobs" in r.message for r in caplog.records) == 1
        finally:
            upkeep.close()
    finally:
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute(f"DROP ROLE {role}")
