"""`pytest properties/`: the model and PostgreSQL driven step by step with the same operations.

Profiles (registered in properties/stateful.py): `ci` (the default under CI=true) is derandomized — the
same examples every run — with 200 examples of up to 50 steps; `dev` explores randomly. Select one with
BELAY_HYPOTHESIS_PROFILE. The run is shared with properties/test_statement_coverage.py (one run per
process, `properties.statements.run_machine`), which gates the statements it executed.
"""

from __future__ import annotations

import pytest

from properties import stateful, statements
from properties.stateful import PROFILE

# One machine run per process serves both modules (statements.run_machine): under pytest-xdist they must
# share a worker, or the ~30 s run happens twice (`-n 3 --dist loadgroup`, docs/testing.md "Verifying").
pytestmark = pytest.mark.xdist_group("stateful-run")


def test_model_and_postgres_agree_step_by_step(db_url, capsys):
    run = statements.run_machine(db_url, PROFILE, stateful)
    with capsys.disabled():
        print(
            f"\nstateful [{PROFILE}]: {run.examples} examples, {run.steps} compared operations in {run.seconds:.1f}s "
            f"({run.examples / run.seconds:.1f} examples/s, {run.steps / run.seconds:.0f} steps/s)"
        )
    if run.error is not None:
        raise run.error


def test_the_split_spawn_agrees_step_by_step(db_url):
    """SplitSpawnMachine (issue 51): BelayMachine's rules plus `SpawnChildren`, model against PostgreSQL."""
    import psycopg
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    from impl.store import PgStore
    from impl.store.pgrows import configure_connection

    with psycopg.connect(db_url, autocommit=True) as conn, PgStore(db_url, pool_size=2) as store:
        configure_connection(conn)
        stateful.TARGET.update(store=store, conn=conn)
        try:
            profile = settings.get_profile(PROFILE)
            run_state_machine_as_test(stateful.SplitSpawnMachine, settings=settings(profile, max_examples=60))
        finally:
            stateful.TARGET.clear()
