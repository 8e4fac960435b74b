"""`pytest properties/`: the model and PostgreSQL driven step by step with the same operations.

Profiles: `ci` (the default under CI=true) is derandomized — the same examples every run — with 200
examples of up to 50 steps; `dev` explores randomly. Select one with BELAY_HYPOTHESIS_PROFILE.
"""

from __future__ import annotations

import os
import time

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from impl.store import PgStore
from properties import stateful

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)
settings.register_profile(
    "dev",
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)
PROFILE = os.environ.get("BELAY_HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def target(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn, PgStore(db_url, pool_size=2) as store:
        stateful.TARGET.update(store=store, conn=conn)
        yield
        stateful.TARGET.clear()


def test_model_and_postgres_agree_step_by_step(target, capsys):
    machine_steps = []

    class Machine(stateful.BelayMachine):
        def teardown(self) -> None:
            machine_steps.append(self.steps)

    started = time.perf_counter()
    run_state_machine_as_test(Machine, settings=settings.get_profile(PROFILE))
    elapsed = time.perf_counter() - started
    total = sum(machine_steps)
    with capsys.disabled():
        print(
            f"\nstateful [{PROFILE}]: {len(machine_steps)} examples, {total} compared operations in {elapsed:.1f}s "
            f"({len(machine_steps) / elapsed:.1f} examples/s, {total / elapsed:.0f} steps/s)"
        )
