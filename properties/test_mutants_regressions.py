"""Contract behaviours no existing test pinned down, found by the mutant catalogue (properties/mutants):
a planted bug survived the conformance cases and the state machine, so each test here states the
behaviour that bug breaks, as an explicit sequence run against both stores.

- a batched ack (AckMany) of an earlier attempt must not land on the attempt running now (§7 fence):
  the conformance case only used a stale row that was no longer running (mutant
  `batched_ack_without_attempt_fence`);
- the rate formula's round() is PostgreSQL's round(numeric), halves away from zero (§6): no case hit a
  previous-window weight of exactly .5 (mutant `python_rounding_in_rate_admission`);
- signal delivery serializes with a park on the scope lock (§7, §8.1): tests/test_workflows_signals.py
  kills `signal_delivery_without_scope_lock` by racing 30 unforced park/deliver pairs; the forced
  interleaving here fails deterministically on that bug, however the threads happen to be scheduled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from impl.store import PgStore
from model import ops
from model import worker_ops as w
from model.store import ModelStore
from properties.conformance.support import (
    MIN,
    TTL,
    S,
    claim,
    claim_job,
    expect,
    expect_unchanged,
    insert,
    observe,
    read,
    start,
)

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)  # a whole minute: it starts a rate window


@pytest.fixture(name="store", params=["model", "pg"])
def model_and_pg_store(request):
    """The model and PostgreSQL, each test run on both (tests/test_store_edges.py takes it too)."""
    if request.param == "model":
        yield ModelStore()
    else:
        with PgStore(request.getfixturevalue("db_url")) as pg:
            yield pg


def test_a_batched_ack_of_an_earlier_attempt_does_not_land_on_the_attempt_running_now(store):
    """§7: every row of a batched ack is fenced on its own claimed attempt, also while the job runs again."""
    first = start(store, T0)
    expect(store.apply(w.Reclaim(T0 + TTL)), w.Reclaimed((first.id,), ()), "setup: attempt 1's lease expired")
    again = claim_job(store, T0 + TTL + 2 * S, first.id)
    expect((again.state, again.attempt), ("running", 2), "setup: attempt 2 runs")
    before = observe(store, [first.id])
    at = T0 + TTL + 3 * S
    result = store.apply(w.AckMany(at, (w.Ack(at, first.id, 1, w.Succeed("zombie")),)))
    expect(result, w.AckedMany((w.Stale(first.id, 1),)), "the zombie attempt's batched ack is stale")
    expect_unchanged(before, store, "a stale row in a batch leaves the running attempt alone")


@pytest.mark.parametrize(
    "allowed, previous, expected",
    [
        (3, 1, 2),  # used = round(1 × 0.5) = round(0.5) = 1 (Python's round: 0) → 3 - 1 = 2
        (6, 5, 3),  # used = round(5 × 0.5) = round(2.5) = 3 (Python's round: 2) → 6 - 3 = 3
    ],
)
def test_the_previous_windows_weight_rounds_half_away_from_zero_like_postgres(store, allowed, previous, expected):
    """§6: used = count(w) + round(count(w-period) × (1 - (epoch-w)/period)) with PostgreSQL's
    round(numeric), which takes halves away from zero — not to even."""
    opts = {"rate": {"allowed": allowed, "period": 60, "estimate": 1}}
    for _ in range(10):
        insert(store, T0)
    expect(len(claim(store, T0, demand=previous, opts=opts)), previous, "setup: the previous window's debits")
    # 30 s into the next window the previous one weighs exactly 1/2.
    expect(
        len(claim(store, T0 + 90 * S, demand=10, opts=opts)),
        expected,
        f"half of {previous} rounds up to {(previous + 1) // 2}, leaving {expected} of {allowed}",
    )


# --- a forced race: park vs delivery on one scope ------------------------------------------------------


def _waiting(watch: psycopg.Connection, events: tuple[str, ...]) -> int:
    """Backends of this database waiting on a heavyweight lock of one of these kinds."""
    return watch.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND wait_event = ANY(%s)",
        (list(events),),
    ).fetchone()[0]


def _poll(condition: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout}s waiting for {what}")
        time.sleep(0.005)


def _in_thread(results: dict, key: str, fn: Callable[[], Any]) -> threading.Thread:
    def run() -> None:
        try:
            results[key] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            results[key] = exc

    thread = threading.Thread(target=run, name=key, daemon=True)
    thread.start()
    return thread


def test_a_delivery_racing_a_park_past_its_signal_check_waits_for_the_scope_lock_and_wakes_the_job(db_url):
    """§7 park rule + §8.1: a park takes the scope lock, finds no signal, and is then held before its
    UPDATE (the test holds the job row). A delivery to that scope starting now must wait for the scope
    lock and so see the parked row, never deliver into the gap and leave the job awaiting forever."""
    results: dict[str, Any] = {}
    with (
        PgStore(db_url, pool_size=1) as parker,
        PgStore(db_url, pool_size=1) as deliverer,
        psycopg.connect(db_url) as blocker,
        psycopg.connect(db_url, autocommit=True) as watch,
    ):
        job = start(parker, T0)
        scope = f"job:{job.id}"
        blocker.execute("SELECT id FROM belay_jobs WHERE id = %s FOR UPDATE", (job.id,))  # holds the row
        park = _in_thread(
            results, "park", lambda: parker.apply(w.ParkAwait(T0 + S, job.id, job.attempt, scope, "go", T0 + MIN))
        )
        _poll(lambda: _waiting(watch, ("transactionid", "tuple")), "the park to wait on the job row")
        deliver = _in_thread(
            results, "deliver", lambda: deliverer.apply(ops.DeliverSignal(T0 + 2 * S, scope, "go", {"n": 1}))
        )
        # Correct: the delivery queues on the scope lock the park holds. Broken: it finishes at once.
        _poll(
            lambda: not deliver.is_alive() or _waiting(watch, ("advisory",)),
            "the delivery to wait on the scope lock (or to finish without it)",
        )
        blocker.rollback()  # let the park write its row
        park.join(10)
        deliver.join(10)
        assert not park.is_alive() and not deliver.is_alive(), "the park and the delivery both finish"
        for key in ("park", "deliver"):
            if isinstance(results[key], BaseException):
                raise results[key]
        expect(results["park"], w.Parked(job.id, "awaiting"), "no signal when the park checked: parked")
        expect(results["deliver"], ops.Signalled((job.id,)), "the delivery, serialized after the park, wakes it")
        expect(read(parker, job.id).state, "ready", "the job is not left awaiting a signal that exists")
