"""Concurrency inside one job (issue 32 item 3): several transactions on the same rows at once.

The stateful comparison (test_stateful.py) runs one transaction at a time, so a statement that is only
wrong when two transactions meet — an event emit that checks its job without locking the row (two emits
then compute the same seq), a claim on a global-limit queue without the queue lock (two claimers each
see room), a park that reads the signal before taking the scope lock (the lost wake-up) — passes it.

Each race here starts from one state (the `setup` operations, applied to a fresh database through
impl/), then runs its `racing` operations at once, each in its own thread on its own connection,
released together by a barrier — several rounds each. The outcome (every operation's result and every
table) must be one the model allows: the outcome of some serial order of the racing operations
(linearizability against model/ as the specification; the contract's transactions are serializable in
effect through their row and advisory locks). A transaction that fails because of the race (a unique
violation, a deadlock that is not retried) is an outcome no serial order has.

Seen failing on planted bugs (soak.broken.base.patched_queries swapped in as STORE): `lock_job_row`
without FOR UPDATE — the emit race, round 1, two UniqueViolations on belay_events_pkey; `lock_queue`
as a plain SELECT — the global-limit race, round 1, four rows leased under global_limit 2.

Two migrators on a blank database are raced too: both must succeed and leave one schema.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from itertools import permutations
from typing import Any

import psycopg
import pytest

from impl.store import PgStore
from impl.store.migrate import migrate
from impl.store.snapshot import snapshot
from model import ops
from model import worker_ops as w
from model.ops import JobSpec
from model.queues import QueueOpts
from model.store import ModelStore
from properties.stateful import RESET_SQL, T0, TABLES, _outcome

ROUNDS = 12  # rounds per race: the threads start together; some rounds interleave, others do not
TTL = timedelta(seconds=30)
STORE: type[PgStore] = PgStore  # swapped by a planted-bug check (soak.broken.base.patched_queries)


def at(seconds: float) -> Any:
    return T0 + timedelta(seconds=seconds)


@dataclass(frozen=True)
class Race:
    name: str
    setup: tuple[Any, ...]
    racing: tuple[Any, ...]


def _short(v: Any, n: int = 400) -> str:
    text = repr(v)
    return text if len(text) <= n else text[:n] + " …"


def _tables(state: Any) -> tuple[Any, ...]:
    return tuple(getattr(state, t) for t in TABLES)


def allowed(race: Race) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """(results in racing order, tables) of every serial order of the racing operations, by the model."""
    base = ModelStore()
    for op in race.setup:
        base.apply(op)
    outcomes = []
    for order in permutations(range(len(race.racing))):
        m = ModelStore(base.state)
        results: list[Any] = [None] * len(race.racing)
        for i in order:
            results[i] = _outcome(lambda i=i, m=m: m.apply(race.racing[i]))
        outcomes.append((tuple(results), _tables(m.state)))
    return outcomes


def run_race(url: str, conn: psycopg.Connection, race: Race, rounds: int = ROUNDS) -> None:
    expected = allowed(race)
    stores = [STORE(url, pool_size=1) for _ in race.racing]
    try:
        for n in range(rounds):
            conn.execute(RESET_SQL)
            with STORE(url, pool_size=1) as s:
                for op in race.setup:
                    s.apply(op)
            barrier = threading.Barrier(len(race.racing))
            results: list[Any] = [None] * len(race.racing)

            def go(i: int, barrier: threading.Barrier = barrier, results: list[Any] = results) -> None:
                barrier.wait()
                results[i] = _outcome(lambda: stores[i].apply(race.racing[i]))

            threads = [threading.Thread(target=go, args=(i,)) for i in range(len(race.racing))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            got = (tuple(results), _tables(snapshot(conn)))
            if got not in expected:
                raise AssertionError(
                    f"race {race.name!r}, round {n + 1}: an outcome no serial order of the model allows\n"
                    f" results: {_short(got[0])}\n"
                    + "".join(f" a serial order gives: {_short(r)}\n" for r, _ in expected)
                    + _first_table_diff(got[1], expected)
                )
    finally:
        for s in stores:
            s.close()


def _first_table_diff(got: Sequence[Any], expected: Sequence[tuple[Any, Sequence[Any]]]) -> str:
    if any(tables == got for _, tables in expected):
        return " (the tables match a serial order; the results do not)\n"
    lines = []
    for name, mine, theirs in zip(TABLES, expected[0][1], got, strict=True):
        if mine != theirs:
            lines.append(
                f" table {name} (vs the first serial order):\n  model: {_short(mine)}\n  pg:    {_short(theirs)}\n"
            )
    return "".join(lines[:2])


@pytest.fixture
def conn(db_url: str):
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


def _claimed_one(queue: str = "q", opts: QueueOpts = QueueOpts()) -> tuple[Any, ...]:
    return (ops.Enqueue(at(0), (JobSpec(queue, "k", {}, max_attempts=3),)), w.Claim(at(1), queue, "n1", 1, TTL, opts))


def test_concurrent_emits_of_one_job_get_distinct_sequence_numbers(db_url, conn):
    race = Race("emits", _claimed_one(), tuple(w.EmitEvent(at(2 + i), 1, {"i": i}) for i in range(3)))
    run_race(db_url, conn, race)


def test_concurrent_step_writes_of_one_job_get_distinct_sequence_numbers(db_url, conn):
    race = Race("steps", _claimed_one(), tuple(w.RecordStep(at(2 + i), 1, f"s{i}", i, 1, 0) for i in range(3)))
    run_race(db_url, conn, race)


def test_a_step_write_racing_a_cancel(db_url, conn):
    race = Race("step vs cancel", _claimed_one(), (w.RecordStep(at(2), 1, "s1", "v", 0, 0), ops.Cancel(at(2), 1)))
    run_race(db_url, conn, race)


def test_a_renewal_racing_an_ack(db_url, conn):
    race = Race(
        "renew vs ack",
        _claimed_one(),
        (w.Renew(at(2), "n1", (1,), at(2) + TTL), w.Ack(at(2), 1, 1, w.Succeed({"ok": 1}))),
    )
    run_race(db_url, conn, race)


def test_a_reclaim_racing_the_holders_late_ack(db_url, conn):
    setup = (
        ops.Enqueue(at(0), (JobSpec("q", "k", {}, max_attempts=3),)),
        w.Claim(at(1), "q", "n1", 1, timedelta(seconds=1)),
    )
    race = Race("reclaim vs ack", setup, (w.Reclaim(at(5)), w.Ack(at(5), 1, 1, w.Succeed(None))))
    run_race(db_url, conn, race)


def test_a_signal_racing_the_park_that_awaits_it(db_url, conn):
    """The lost wake-up: whichever commits first, the job must not stay parked with its signal present."""
    race = Race(
        "signal vs park",
        _claimed_one(),
        (ops.DeliverSignal(at(2), "sc", "go", {"p": 1}), w.ParkAwait(at(2), 1, 1, "sc", "go")),
    )
    run_race(db_url, conn, race)


def test_two_claimers_on_a_global_limit_queue(db_url, conn):
    """§6: claims of a global_limit queue serialize on the queue lock; together they admit no more than
    the limit."""
    opts = QueueOpts.parse({"global_limit": 2})
    setup = (
        ops.PutQueue(at(0), "g", {"global_limit": 2}),
        ops.Enqueue(at(0), tuple(JobSpec("g", "k", {"i": i}) for i in range(4))),
    )
    race = Race(
        "claims on a global limit",
        setup,
        (w.Claim(at(1), "g", "n1", 2, TTL, opts), w.Claim(at(1), "g", "n2", 2, TTL, opts)),
    )
    run_race(db_url, conn, race)


def test_two_claimers_on_a_rate_limited_queue(db_url, conn):
    opts = QueueOpts.parse({"rate": {"allowed": 3, "period": 60}})
    setup = (
        ops.PutQueue(at(0), "r", {"rate": {"allowed": 3, "period": 60}}),
        ops.Enqueue(at(0), tuple(JobSpec("r", "k", {"i": i}) for i in range(5))),
    )
    race = Race(
        "claims on a rate", setup, (w.Claim(at(1), "r", "n1", 2, TTL, opts), w.Claim(at(1), "r", "n2", 2, TTL, opts))
    )
    run_race(db_url, conn, race)


def test_two_migrators_on_a_blank_database(blank_db_url):
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def go() -> None:
        try:
            with psycopg.connect(blank_db_url, autocommit=True) as c:
                barrier.wait()
                migrate(c)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        tables = c.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'belay_jobs'").fetchone()[0]
        assert tables == 1
        with PgStore(blank_db_url) as s:
            s.apply(ops.CheckCompat())  # the schema the two left is the one the SDK expects
