"""The end-of-run check's memory against the run's length (issue 54, target 5): what it holds per job.

I1 walks every expected job id (the ledger's, spawned children, cron jobs). With a long run's ledger in a
disk table it held them in a set, copied it into another and sorted it — ~100 bytes a job at the check's
peak (bench.check_memory). It now streams them in key order; these tests hold it to the same ids, in the
same order, and to a peak that does not grow with the ledger.
"""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from model.rows import Job
from model.state import State
from soak.judges.inputs import LedgerRows, SoakLedger, StepsByJob, Timeline
from soak.judges.invariants_jobs import _expected_ids, _i1
from soak.judges.verdicts import InvariantResult
from soak.record.spill import DiskTable

T0 = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


class _Ids(Mapping[int, Any]):
    """Ids 1..n, each mapped to the same value, iterated in key order like a DiskTable (`ordered`), held
    in no container: what the check allocates while walking it is all the test measures."""

    ordered = True

    def __init__(self, n: int, value: Any) -> None:
        self.n, self.value = n, value

    def __getitem__(self, key: int) -> Any:
        if isinstance(key, int) and 1 <= key <= self.n:
            return self.value
        raise KeyError(key)

    def __iter__(self) -> Iterator[int]:
        return iter(range(1, self.n + 1))

    def __len__(self) -> int:
        return self.n


def _done_job() -> Job:
    empty = {f: None for f in Job.__dataclass_fields__}
    return Job(
        **{
            **empty,
            "id": 1,
            "queue": "soak",
            "worker": "echo",
            "input": {},
            "meta": {},
            "state": "succeeded",
            "priority": 1,
            "attempt": 1,
            "max_attempts": 10,
            "inserted_at": T0,
            "finished_at": T0,
            "errors": [],
            "spent_usd_micros": 0,
            "spent_tokens": 0,
            "cancel_requested": False,
            "wf_deps": (),
            "wf_ignore": (),
        }
    )


def test_the_expected_ids_stream_is_the_sorted_union_for_a_disk_table_and_a_dict() -> None:
    rng = random.Random(54)
    for _ in range(30):
        ledger_ids = sorted(rng.sample(range(1, 400), rng.randrange(0, 60)))
        extra = set(rng.sample(range(1, 450), rng.randrange(0, 20)))
        want = sorted(set(ledger_ids) | extra)
        table = DiskTable.build(((i, i) for i in ledger_ids), cache=1)
        try:
            assert list(_expected_ids(table, extra)) == want
        finally:
            table.close()
        shuffled = dict.fromkeys(rng.sample(ledger_ids, len(ledger_ids)))  # a short run's by-id dict
        assert list(_expected_ids(shuffled, extra)) == want


def _i1_peak(n: int) -> tuple[int, int]:
    """(bytes allocated at I1's peak beyond what it was given, checks) for a ledger of n succeeded jobs."""
    done = _done_job()
    jobs = _Ids(n, done)
    ledger_rows = _Ids(n, None)
    state = State(jobs=jobs, steps={}, events={})
    ledger = SoakLedger(LedgerRows(ledger_rows))
    history = [{"t": T0.timestamp(), "type": "run_start"}, {"t": T0.timestamp() + 1, "type": "drain_end"}]
    timeline = Timeline(history)
    r = InvariantResult("I1")
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        _i1(r, state, ledger, ledger_rows, StepsByJob({}), timeline, True, T0.timestamp() + 2, 10.0, history)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    r.finish()
    assert r.violations == 0 and r.verdict == "valid", r.to_json()
    return peak, r.checks


def test_i1_holds_no_set_of_every_ledger_id() -> None:
    """10× the ledger, the same peak (within 256 KiB): a set of 200,000 ids and its sorted copy are ~15 MiB."""
    small, small_checks = _i1_peak(20_000)
    large, large_checks = _i1_peak(200_000)
    assert (small_checks, large_checks) == (20_000, 200_000)
    assert large - small < 256 * 1024, (small, large)


class _Fresh(Mapping[Any, Any]):
    """keys → a new value per read (as a disk table unpickles one), in key order (`ordered`)."""

    ordered = True

    def __init__(self, keys: list[Any], make: Any) -> None:
        self._keys, self._make = keys, make

    def __getitem__(self, key: Any) -> Any:
        return self._make(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _i8_peak(children: int) -> int:
    """Bytes allocated at I8's peak (the model's predicate and the soak's rule) for `children` spawned
    children of 10 parents and as many journaled steps, every row read fresh from its table."""
    from dataclasses import replace

    from model.envelope import encode
    from model.invariants import i8_children_as_declared
    from model.rows import Step
    from soak.judges.invariants_links import _i8

    kid = replace(_done_job(), input={"pad": "x" * 200}, unique_mode="always")
    per = children // 10
    ids = list(range(100, 100 + children))

    def child(i: int) -> Job:
        p, k = divmod(i - 100, per)
        return replace(kid, id=i, parent_id=p + 1, unique_key=f"$spawn:{p + 1}:kids:{k}")

    step_keys = [(i, f"s{n}") for i in ids for n in (1,)]

    def step(key: tuple[int, str]) -> Step:
        return Step(key[0], 1, key[1], encode({"v": "y" * 200}), 0, 0, T0)

    state = State(jobs=_Fresh(ids, child), steps=_Fresh(step_keys, step), events={})
    r = InvariantResult("I8")
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        found = i8_children_as_declared(state)
        _i8(r, state, {}, StepsByJob({}))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert found == [] and r.violations == 0, (found[:3], r.to_json())
    return peak


def test_i8_holds_neither_the_childrens_rows_nor_every_step() -> None:
    """Per child (and per step), I8 keeps a few small tuples: under 400 bytes; a child's row and a step
    read back from the table are ~1.5 KiB and ~0.7 KiB here."""
    small, large = _i8_peak(2_000), _i8_peak(20_000)
    per = (large - small) / 18_000
    assert per < 400, (small, large, per)


def test_items_in_key_order_is_sorted_items_for_a_disk_table_whatever_order_each_job_was_written_in() -> None:
    from model.state import items_in_key_order

    rng = random.Random(8)
    rows = {
        (j, name): (j, name)
        for j in rng.sample(range(1, 500), 60)
        for name in rng.sample(["b", "a", "B", "$x", "é"], 3)
    }
    # a disk table is written in its first element's order; within a job, in the order the snapshot gave
    written = sorted(rows.items(), key=lambda kv: (kv[0][0], rng.random()))
    table = DiskTable.build(written, cache=1)
    try:
        assert list(items_in_key_order(table)) == sorted(rows.items())
    finally:
        table.close()
    assert list(items_in_key_order(dict(written))) == sorted(rows.items())


def _i3_peak(steps: int) -> int:
    """Bytes allocated at the peak of the model's I3 predicate on one snapshot of `steps` journaled steps
    read fresh from a key-ordered table."""
    from model.envelope import encode
    from model.invariants import i3_steps_immutable
    from model.rows import Step

    keys = [(i, name) for i in range(1, steps // 2 + 1) for name in ("a", "b")]
    state = State(
        jobs={}, steps=_Fresh(keys, lambda k: Step(k[0], 1 + (k[1] == "b"), k[1], encode({"v": "y" * 200}), 0, 0, T0))
    )
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        found = i3_steps_immutable([state])
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert found == [], found[:3]
    return peak


def test_i3_holds_no_step_rows() -> None:
    """Per step, I3 keeps its (job, seq) and name: under 300 bytes; a step read back is ~0.7 KiB here."""
    small, large = _i3_peak(2_000), _i3_peak(20_000)
    per = (large - small) / 18_000
    assert per < 300, (small, large, per)


def _i4_peak(jobs: int) -> int:
    """Bytes allocated at the peak of the model's I4 predicate over `jobs` succeeded jobs with two journaled
    steps each, jobs and steps read fresh from key-ordered tables."""
    from dataclasses import replace

    from model.envelope import encode
    from model.invariants import i4_budget_fails_on_crossing_step
    from model.rows import Step

    done = _done_job()
    ids = list(range(1, jobs + 1))
    keys = [(i, name) for i in ids for name in ("a", "b")]
    state = State(
        jobs=_Fresh(ids, lambda i: replace(done, id=i)),
        steps=_Fresh(keys, lambda k: Step(k[0], 1 + (k[1] == "b"), k[1], encode({"v": "y" * 200}), 0, 0, T0)),
    )
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        found = i4_budget_fails_on_crossing_step(state)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert found == [], found[:3]
    return peak


def test_i4_holds_no_step_rows_of_a_disk_backed_snapshot() -> None:
    """10× the jobs and steps, about the same peak (< 50 B per job): grouped whole, two steps a job are
    ~1.5 KiB."""
    small, large = _i4_peak(1_000), _i4_peak(10_000)
    per = (large - small) / 9_000
    assert per < 50, (small, large, per)


def test_i4_reads_the_same_steps_from_an_ordered_table_strays_included() -> None:
    """_StepsInOrder gives each job what _steps_by_job gives, a step stored under another job's key too."""
    from model.invariants import _steps_by_job, _StepsInOrder
    from model.rows import Step

    rng = random.Random(4)
    steps = {}
    for j in sorted(rng.sample(range(1, 200), 40)):
        for name in rng.sample(["x", "y", "z", "w"], rng.randrange(1, 4)):
            steps[(j, name)] = Step(j, rng.randrange(1, 5), name, b"", 0, 0, T0)
    stray_key = next(iter(steps))
    steps[stray_key] = replace_step = Step(7, 9, stray_key[1], b"", 0, 0, T0)  # under another job's key
    steps[(7, "x")] = Step(7, 9, "x", b"mine", 0, 0, T0)
    steps[(3, "x")] = Step(7, 9, "x", b"stray", 0, 0, T0)  # a tie with job 7's own: kept in table order
    table = DiskTable.build(sorted(steps.items()), cache=1)
    try:
        want = _steps_by_job(table.values())  # what I4 did with this table
        got = _StepsInOrder(table)
        for j in range(1, 201):
            assert got.get(j, []) == want.get(j, []), j
        assert replace_step in want[7]
    finally:
        table.close()
