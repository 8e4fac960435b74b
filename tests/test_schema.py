"""Migrations 1–3, the jobs table's autovacuum parameters, the normative index names and predicates, and the §1 compatibility rules."""

from __future__ import annotations

import ast
import re
import threading
from pathlib import Path

import psycopg
import pytest

from impl.store.migrate import IncompatibleSchema, check_compat, migrate
from impl.store.queries import SchemaSQL
from model.ops import InvalidInput

ROOT = Path(__file__).resolve().parents[1]

TABLES = {
    "belay_jobs",
    "belay_steps",
    "belay_events",
    "belay_signals",
    "belay_rate",
    "belay_queues",
    "belay_crons",
    "belay_meta",
}

# §3, with docs/decisions.md's decisions for the indexes whose columns the contract leaves open.
INDEXES = {
    "belay_jobs_claim_idx": ("(queue, priority, ready_at, id)", "(state = 'ready'::text)", False),
    "belay_jobs_await_due_idx": ("(queue, priority, ready_at, id)", "(state = 'awaiting'::text)", False),
    "belay_jobs_await_wake_idx": ("(await_scope, await_name)", "(state = 'awaiting'::text)", False),
    "belay_jobs_lease_idx": ("(lease_until)", "(state = 'running'::text)", False),
    "belay_jobs_workflow_idx": ("(workflow_id)", "(workflow_id IS NOT NULL)", False),
    "belay_jobs_parent_idx": ("(parent_id)", "(parent_id IS NOT NULL)", False),
    "belay_jobs_prune_idx": (
        "(state, finished_at)",
        "(state = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text]))",
        False,
    ),
    "belay_jobs_cron_slot_idx": ("(cron_name, cron_slot)", "(cron_name IS NOT NULL)", True),
    "belay_jobs_unique_incomplete_idx": (
        "(unique_key)",
        "((unique_mode = 'incomplete'::text) AND (state = ANY (ARRAY['ready'::text, 'running'::text, "
        "'awaiting'::text, 'held'::text, 'paused'::text])))",
        True,
    ),
    "belay_jobs_unique_window_idx": (
        "(unique_key)",
        "(unique_mode = ANY (ARRAY['window'::text, 'always'::text]))",
        True,
    ),
}


def test_migrations_create_the_eight_tables(conn):
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    assert {r[0] for r in rows} >= TABLES


@pytest.mark.parametrize("name", sorted(INDEXES))
def test_every_normative_index_exists_with_its_name_and_predicate(conn, name):
    row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (name,)).fetchone()
    assert row is not None, f"index {name} is missing"
    columns, predicate, unique = INDEXES[name]
    indexdef = row[0]
    assert indexdef.startswith(f"CREATE {'UNIQUE ' if unique else ''}INDEX {name} ON public.belay_jobs")
    assert f"USING btree {columns} WHERE {predicate}" in indexdef, indexdef


def test_meta_ends_at_version_3_contract_major_1(conn):
    assert conn.execute("SELECT version, contract_major FROM belay_meta").fetchall() == [(3, 1)]


AUTOVACUUM = [
    "autovacuum_vacuum_scale_factor=0",
    "autovacuum_vacuum_threshold=5000",
    "autovacuum_vacuum_cost_delay=0",
    "vacuum_index_cleanup=on",
]


def _reloptions(c: psycopg.Connection, schema: str = "public") -> list[str] | None:
    return c.execute(
        "SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)", (f"{schema}.belay_jobs",)
    ).fetchone()[0]


def _shape(c: psycopg.Connection) -> tuple[list, list]:
    """Every column (name, type, default, nullability) and every index definition of the belay_ tables."""
    columns = c.execute(
        "SELECT table_name, column_name, data_type, column_default, is_nullable FROM information_schema.columns "
        "WHERE table_name LIKE 'belay\\_%' ORDER BY 1, 2"
    ).fetchall()
    indexes = c.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE 'belay\\_%' ORDER BY 1"
    ).fetchall()
    return columns, indexes


def test_migrate_sets_only_autovacuum_storage_parameters_on_belay_jobs_and_no_revision(blank_db_url):
    """Issue 54: a revision-3 database gets belay_jobs' autovacuum storage parameters from `migrate`, its
    tables, columns and indexes exactly as before (contract §1: additive only; §3: names normative) and its
    revision still 3 (storage parameters are not a schema revision; the numbers belong to the contract)."""
    q = SchemaSQL()
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        with c.transaction():  # what an SDK of revision 3 applied
            for index in range(3):
                c.execute(q.migration(index))
        assert c.execute("SELECT version FROM belay_meta").fetchone() == (3,)
        assert _reloptions(c) is None
        before = _shape(c)
        assert migrate(c) == []
        assert sorted(_reloptions(c) or []) == sorted(AUTOVACUUM)
        assert _shape(c) == before
        assert c.execute("SELECT version, contract_major FROM belay_meta").fetchone() == (3, 1)
        # an operator's own setting afterwards is never overwritten by a later migrate
        c.execute(
            "ALTER TABLE belay_jobs RESET (autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay, vacuum_index_cleanup)"
        )
        c.execute("ALTER TABLE belay_jobs SET (autovacuum_vacuum_scale_factor = 0.2)")
        assert migrate(c) == []
        assert _reloptions(c) == ["autovacuum_vacuum_scale_factor=0.2"]


def test_a_custom_schemas_jobs_table_gets_the_storage_parameters(blank_db_url):
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, "tenant_b")
        assert sorted(_reloptions(c, "tenant_b") or []) == sorted(AUTOVACUUM)
        assert c.execute("SELECT to_regclass('public.belay_jobs')").fetchone()[0] is None


def test_applying_migrations_twice_is_a_no_op(conn):
    before = conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename LIKE 'belay_%'").fetchone()
    assert migrate(conn) == []
    after = conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename LIKE 'belay_%'").fetchone()
    assert before == after
    assert conn.execute("SELECT count(*) FROM belay_meta").fetchone()[0] == 1


def test_a_fresh_database_migrates_1_2_3_in_order(blank_db_url):
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        assert migrate(c) == [1, 2, 3]
        assert migrate(c) == []


def test_concurrent_migrators_one_migrates_the_other_waits_then_no_ops(blank_db_url):
    barrier = threading.Barrier(4)
    results: list[list[int]] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            with psycopg.connect(blank_db_url, autocommit=True) as c:
                barrier.wait()
                results.append(migrate(c))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sorted(results) == [[], [], [], [1, 2, 3]]


def test_a_database_at_an_older_revision_is_migrated_forward_additively(blank_db_url):
    q = SchemaSQL()
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        c.execute(q.migration(0))
        c.execute(
            "INSERT INTO belay_jobs (queue, worker, state, inserted_at) VALUES ('q', 'w', 'ready', '2026-01-01Z')"
        )
        assert c.execute("SELECT version FROM belay_meta").fetchone()[0] == 1
        with pytest.raises(IncompatibleSchema, match="run `belay migrate`"):
            check_compat(c)
        assert migrate(c) == [2, 3]
        row = c.execute("SELECT queue, spent_usd_micros, unique_key FROM belay_jobs").fetchone()
        assert row == ("q", 0, None)


def test_compat_refuses_a_higher_contract_major_with_what_to_do(conn):
    conn.execute("UPDATE belay_meta SET contract_major = 2")
    with pytest.raises(IncompatibleSchema, match=r"major 2.*upgrade the belay-toolkit package"):
        check_compat(conn)


def test_compat_refuses_a_migration_older_than_required(conn):
    conn.execute("UPDATE belay_meta SET version = 2")
    with pytest.raises(IncompatibleSchema, match=r"migration 2.*needs at least 3.*belay migrate"):
        check_compat(conn)


def test_compat_accepts_a_newer_migration_within_major_1(conn):
    conn.execute("UPDATE belay_meta SET version = 7")
    assert check_compat(conn).version == 7
    assert migrate(conn) == []  # never downgrades or re-applies
    assert conn.execute("SELECT version FROM belay_meta").fetchone()[0] == 7


def test_compat_refuses_a_database_without_the_schema(blank_db_url):
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        with pytest.raises(IncompatibleSchema, match="no Belay schema"):
            check_compat(c)


def test_unknown_columns_from_a_newer_migration_are_tolerated(db_url, now):
    from impl.client import Client

    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("ALTER TABLE belay_jobs ADD COLUMN zz_future jsonb NOT NULL DEFAULT '{\"x\": 1}'")
        c.execute("ALTER TABLE belay_steps ADD COLUMN zz_note text")
        c.execute("ALTER TABLE belay_signals ADD COLUMN zz_note text")
        c.execute("UPDATE belay_meta SET version = 4")
    with Client(db_url, clock=lambda: now) as client:
        inserted = client.enqueue("q", "w", {"a": 1})
        job = client.job(inserted.id)
        assert job.input == {"a": 1} and job.state == "ready"
        client.signal("s", "n", {"p": 1})
        assert [s.payload for s in client.signals("s")] == [{"p": 1}]


def test_a_custom_schema_is_migrated_and_used(blank_db_url, now):
    from impl.client import Client

    with psycopg.connect(blank_db_url, autocommit=True) as c:
        assert migrate(c, "tenant_a") == [1, 2, 3]
    with Client(blank_db_url, schema="tenant_a", clock=lambda: now) as client:
        job_id = client.enqueue("q", "w").id
        assert client.job(job_id).queue == "q"
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM tenant_a.belay_jobs").fetchone()[0] == 1
        assert c.execute("SELECT to_regclass('public.belay_jobs')").fetchone()[0] is None


@pytest.mark.parametrize(
    "bad", ["", "1abc", "a-b", 'x"; DROP TABLE belay_jobs; --', "a b", "x" * 64, "naïve", "a;b", "a'b"]
)
def test_an_invalid_schema_name_is_refused_before_touching_the_database(bad):
    with pytest.raises(InvalidInput, match=r"schema name .* is invalid"):
        SchemaSQL(bad)


def test_a_63_byte_schema_name_is_accepted():
    assert SchemaSQL("s" * 63).schema == "s" * 63


_CLOCK_CALLS = re.compile(
    r"\b(now\s*\(|current_timestamp|current_time\b|current_date|clock_timestamp|statement_timestamp|"
    r"transaction_timestamp|localtimestamp|localtime\b|timeofday)",
    re.IGNORECASE,
)


_SQL_WORDS = re.compile(r"\b(SELECT|UPDATE|INSERT|DELETE|CREATE|ALTER|WITH)\b")


def _sql_texts():
    """Every .sql file, plus every string literal in Python under impl/ that looks like SQL."""
    for path in sorted((ROOT / "impl" / "store" / "sql").glob("*.sql")):
        yield path, path.read_text()
    for path in sorted(ROOT.glob("impl/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL_WORDS.search(node.value):
                yield path, node.value


def test_no_sql_in_the_project_reads_the_database_clock():
    """The clock rule (§2): every operation takes now as a bind parameter."""
    offenders = []
    for path, text in _sql_texts():
        for lineno, line in enumerate(text.splitlines(), 1):
            code = line.split("--", 1)[0]  # SQL comments may mention now; code may not
            if _CLOCK_CALLS.search(code):
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert offenders == []


def test_the_clock_scan_would_catch_a_now_call():
    assert _CLOCK_CALLS.search("UPDATE belay_jobs SET ready_at = now()")
    assert _CLOCK_CALLS.search("SELECT CURRENT_TIMESTAMP")
    assert not _CLOCK_CALLS.search("SET ready_at = %(now)s")


def test_the_claim_order_has_an_index_variant_with_nulls_first(conn):
    """§1 allows new index variants; this one serves §6's ORDER BY ready_at ASC NULLS FIRST, which
    belay_jobs_claim_idx (NULLS LAST by default) can only answer by sorting the whole backlog."""
    row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'belay_jobs_claim_order_idx'").fetchone()
    assert row is not None
    assert "(queue, priority, ready_at NULLS FIRST, id) WHERE (state = 'ready'::text)" in row[0]


def test_a_claim_over_a_deep_backlog_walks_the_index_instead_of_sorting(conn, now):
    from impl.store.queries import SchemaSQL

    conn.execute(
        "INSERT INTO belay_jobs (queue, worker, state, ready_at, inserted_at) "
        "SELECT 'q', 'w', 'ready', %s, %s FROM generate_series(1, 20000)",
        (now, now),
    )
    conn.execute("ANALYZE belay_jobs")
    query = SchemaSQL().q("claim_plain")
    plan = "\n".join(
        r[0]
        for r in conn.execute(
            psycopg.sql.SQL("EXPLAIN ") + query,  # EXPLAIN without ANALYZE: nothing is claimed
            {"queue": "q", "now": now, "take": 10, "node": "n", "lease_until": now},
        ).fetchall()
    )
    assert "belay_jobs_claim_order_idx" in plan, plan
    assert "Seq Scan on belay_jobs" not in plan, plan


@pytest.mark.parametrize("mode", ["incomplete", "window"])
def test_reporting_the_holders_of_skipped_unique_keys_probes_the_partial_unique_indexes(conn, now, mode):
    """§5.2 duplicate reporting: each skipped row's holder is found through the unique index its mode
    conflicts with. A CASE around both predicates hid them from the planner, so every skipped row of a
    bulk enqueue scanned the table (bench.enqueue: 854 duplicate rows/s on a table of ~40,000 rows)."""
    from impl.store.queries import SchemaSQL

    conn.execute(
        "INSERT INTO belay_jobs (queue, worker, state, ready_at, inserted_at, unique_key, unique_mode) "
        "SELECT 'q', 'w', 'ready', %s, %s, 'k' || g, %s FROM generate_series(1, 5000) g",
        (now, now, mode),
    )
    conn.execute("ANALYZE belay_jobs")
    conn.execute("SET enable_seqscan = off")  # a plan that still scans the table had no index it could use
    q = SchemaSQL()
    plans = {
        "duplicate_holders": (
            q.q("duplicate_holders"),
            {
                "pos": [0, 1],
                "unique_key": ["k1", "k2"],
                "unique_mode": [mode, mode],
                "cron_name": [None, None],
                "cron_slot": [None, None],
            },
        ),
        "unique_holder": (q.q("unique_holder"), {"key": "k1", "mode": mode}),
    }
    for name, (query, params) in plans.items():
        plan = "\n".join(r[0] for r in conn.execute(psycopg.sql.SQL("EXPLAIN ") + query, params).fetchall())
        assert "Seq Scan on belay_jobs" not in plan, (name, plan)
        assert ("belay_jobs_unique_incomplete_idx" if mode == "incomplete" else "belay_jobs_unique_window_idx") in plan
