"""`belay smoke` never writes into the database it is pointed at (issue 29, item 2): with
BELAY_DATABASE_URL set it runs its scenario in a throwaway schema of that database and drops it, so
no job, workflow or signal (`orders/paid` would wake a real job awaiting it) lands in the real one,
and a second run passes like the first."""

from __future__ import annotations

import psycopg
from click.testing import CliRunner

from impl.ops.cli import main
from impl.store.snapshot import snapshot


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as c:
        return {r[0] for r in c.execute("SELECT nspname FROM pg_namespace")}


def test_belay_smoke_leaves_the_given_database_exactly_as_it_was_and_passes_twice(db_url):
    with psycopg.connect(db_url, autocommit=True) as c:
        before = snapshot(c)
    schemas = _schemas(db_url)
    for run in (1, 2):
        result = CliRunner().invoke(main, ["smoke"], env={"BELAY_DATABASE_URL": db_url})
        assert result.exit_code == 0, (run, result.output)
        assert "smoke passed" in result.output, result.output
        assert "throwaway schema" in result.output, result.output
    with psycopg.connect(db_url, autocommit=True) as c:
        assert snapshot(c) == before, "belay smoke wrote into the real database"
    assert _schemas(db_url) == schemas, "the throwaway schema was left behind"


def test_belay_smoke_on_an_unmigrated_database_does_not_migrate_it(blank_db_url):
    result = CliRunner().invoke(main, ["smoke"], env={"BELAY_DATABASE_URL": blank_db_url})
    assert result.exit_code == 0, result.output
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        tables = c.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'belay_%'").fetchone()[0]
    assert tables == 0, "belay smoke created Belay tables in the given database"
