"""soak/record/spill.py: the history checks hold the rows in use in memory and the rest on disk (issue 27,
item 3), and nothing they decide depends on where a row was.

- SpillDict behaves as a dict (and as a defaultdict) under any sequence of operations and spills.
- A captured history with every operation shape — terminal rows touched again later by an operator
  retry and a prune — gets the same replay and trace validation results with one row per map in memory
  as with every row in memory, while the spill counters show rows did go to disk and came back.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from impl.client import Client
from impl.store import PgStore
from model import worker_ops as w
from soak.judges.refine import validate
from soak.judges.replay import load_state, replay
from soak.record.capture import read_transactions
from soak.record.spill import HOT, SpillDict
from tests.logical import logical_cluster, logical_url  # noqa: F401  (fixtures: cluster, url)
from tests.test_refine import TTL, Captured, now

KEYS = st.one_of(st.integers(0, 12), st.tuples(st.integers(0, 4), st.sampled_from(["a", "b"])))
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers()),
        st.tuples(st.just("get"), KEYS, st.none()),
        st.tuples(st.just("del"), KEYS, st.none()),
        st.tuples(st.just("pop"), KEYS, st.none()),
        st.tuples(st.just("append"), KEYS, st.integers()),  # defaultdict(list) use: d[k].append(v)
        st.tuples(st.just("spill"), st.none(), st.none()),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, hot=st.integers(1, 4))
def test_a_spill_dict_is_a_dict_whatever_it_keeps_in_memory(ops, hot):
    d = SpillDict(hot=hot)
    lists = SpillDict(hot=hot, default_factory=list)
    ref: dict = {}
    ref_lists: dict = {}
    try:
        for op, k, v in ops:
            if op == "set":
                d[k] = v
                ref[k] = v
            elif op == "get":
                assert d.get(k) == ref.get(k)
                assert (k in d) == (k in ref)
            elif op == "del":
                if k in ref:
                    del d[k]
                    del ref[k]
                else:
                    assert k not in d
            elif op == "pop":
                assert d.pop(k, None) == ref.pop(k, None)
            elif op == "append":
                lists[k].append(v)
                ref_lists.setdefault(k, []).append(v)
            else:
                d.spill()
                lists.spill()
            assert len(d) == len(ref)
        assert dict(d.items()) == ref and sorted(map(repr, d)) == sorted(map(repr, ref))
        assert dict(lists.items()) == ref_lists
    finally:
        d.close()
        lists.close()


@settings(max_examples=100, deadline=None)
@given(
    items=st.dictionaries(KEYS, st.integers(), max_size=30),
    asked=st.lists(KEYS, max_size=20),
    hot=st.integers(1, 4),
)
def test_looking_many_keys_up_at_once_answers_as_one_at_a_time_and_moves_nothing(items, asked, hot):
    """peek_many (SpillDict) and get_many (DiskTable): the batched lookups of the trace validation's final
    comparison answer what `k in d` / `d[k]` would, and a peek leaves the hot part and the disk alone."""
    from soak.record.spill import BATCH, DiskTable

    d = SpillDict(items.items(), hot=hot)
    d.spill()
    table = DiskTable.build(sorted(items.items(), key=lambda kv: repr(kv[0])), cache=hot)
    try:
        want = {k: items[k] for k in asked if k in items}
        before = (list(d._hot), d.stats())
        assert d.peek_many(asked) == want
        assert d.peek_many(asked, values=False) == dict.fromkeys(want)
        assert (list(d._hot), d.stats()) == before  # nothing faulted in, no recency moved
        assert table.get_many(asked) == want
        many = list(range(BATCH * 2 + 7))  # past one IN (...) batch
        big = SpillDict(((i, -i) for i in many), hot=3)
        big.spill()
        assert big.peek_many([*many, -1]) == {i: -i for i in many}
        big.close()
    finally:
        d.close()
        table.close()


def test_a_spill_dict_moves_what_it_does_not_use_to_disk_and_reads_it_back_unchanged():
    d = SpillDict(hot=10)
    for i in range(1000):
        d[i] = {"i": i, "pad": "x" * 50}
        d.spill()
    s = d.stats()
    assert s["hot"] <= 10 and s["cold"] == 1000 - s["hot"] and s["spilled"] >= 990
    assert d[3] == {"i": 3, "pad": "x" * 50} and d.stats()["faulted"] == 1
    assert sum(1 for _ in d.values()) == 1000 and len(d) == 1000
    d.close()


def _shapes(db: str) -> None:
    """Rows that finish early and are touched again late: an operator retry of a failed job and a prune of
    finished ones, after many other jobs came and went."""
    with PgStore(db) as store, Client(db) as client:
        early = client.enqueue("q", "k", {}, max_attempts=1).id
        store.apply(w.Claim(now(), "q", "n1", 1, TTL))
        store.apply(w.Ack(now(), early, 1, w.Fail("boom", None, None)))
        ids = [client.enqueue("q", "k", {"i": i}).id for i in range(40)]
        store.apply(w.Claim(now(), "q", "n1", 40, TTL))
        store.apply(w.RecordStep(now(), ids[0], "s1", {"v": 1}, 1, 1))
        store.apply(w.EmitEvent(now(), ids[0], {"p": 1}))
        for i in ids[:20]:
            store.apply(w.Ack(now(), i, 1, w.Succeed(i)))
        store.apply(w.AckMany(now(), tuple(w.Ack(now(), i, 1, w.Succeed(i)) for i in ids[20:])))
        client.retry(early)  # a terminal row long out of use, revived
        store.apply(w.Claim(now(), "q", "n2", 1, TTL))
        store.apply(w.Ack(now(), early, 2, w.Succeed("again")))
        time.sleep(0.01)
        store.apply(w.Prune(now(), {"succeeded": 0, "failed": 0, "cancelled": 0}, None, limit=10))
        store.apply(w.Renew(now(), "n2", (early,), now() + timedelta(seconds=5)))  # nothing to renew: a no-op


def test_the_history_checks_decide_the_same_with_one_row_in_memory_as_with_all(url, tmp_path):
    with Captured(url, tmp_path, "spill"):
        _shapes(url)
    initial = load_state(tmp_path / "history-initial.pickle")
    final = load_state(tmp_path / "history-final.pickle")

    def both(hot: int):
        rules = replay(read_transactions(tmp_path / "history.bin"), initial, final, {}, hot=hot)
        refined = validate(read_transactions(tmp_path / "history.bin"), None, initial, final_state=final, hot=hot)
        return rules, refined

    (r_all, v_all), (r_one, v_one) = both(HOT), both(1)
    assert r_all.verdict == v_all.verdict == "valid", (r_all.line(), v_all.line())
    assert v_all.by_kind["prune"] == 1 and v_all.by_kind["retry"] == 1, dict(v_all.by_kind)

    def same(x: dict) -> str:
        return json.dumps({k: v for k, v in x.items() if k not in ("seconds", "cpu_seconds", "spill")}, default=str)

    assert same(r_one.to_json()) == same(r_all.to_json())
    assert same(v_one.to_json()) == same(v_all.to_json())
    assert r_all.spill["jobs"]["cold"] == 0
    assert r_one.spill["jobs"]["cold"] > 30 and r_one.spill["jobs"]["faulted"] > 0, r_one.spill


# --- the end-of-run snapshot on disk (DiskTable) -----------------------------------------------------


def test_a_disk_table_is_the_mapping_it_was_built_from_in_key_order():
    from soak.record.spill import DiskTable

    rows = {i: {"v": i} for i in (5, 1, 9, 3)}
    steps = {(1, "b"): 2, (1, "a"): 1, (0, "z"): 0}
    t = DiskTable.build(sorted(rows.items()), cache=1)
    s = DiskTable.build(steps.items(), cache=1)
    try:
        assert dict(t.items()) == rows and list(t) == [1, 3, 5, 9] and len(t) == 4
        assert [v["v"] for v in t.values()] == [1, 3, 5, 9]
        assert t[9] == {"v": 9} and t.get(2) is None and 2 not in t and 3 in t
        assert list(s) == [(0, "z"), (1, "b"), (1, "a")]  # by job, then as given (the snapshot's seq order)
        import pickle

        assert pickle.loads(pickle.dumps(t)) == rows
    finally:
        t.close()
        s.close()


def test_a_saved_state_reads_back_equal_with_its_big_tables_on_disk(tmp_path):
    from model.rows import Step
    from model.state import from_rows, in_key_order
    from soak.judges.replay import save_state
    from soak.record.spill import DiskTable, disk_table
    from tests.test_soak_checker import at, job

    jobs = [job(i) for i in range(1, 5001)]
    steps = [Step(i, 1, "s", b"1", 0, 0, at(1)) for i in range(1, 3001)]
    state = from_rows(jobs, steps, (), next_id=6000)
    save_state(state, tmp_path / "s.pickle")
    small = load_state(tmp_path / "s.pickle")
    big = load_state(tmp_path / "s.pickle", big=disk_table, big_over=4000)
    assert isinstance(big.jobs, DiskTable) and not isinstance(big.steps, DiskTable)  # 3,000 steps < 4,000
    for s in (small, big):
        assert dict(s.jobs.items()) == dict(state.jobs) and dict(s.steps) == dict(state.steps)
        assert s.next_id == 6000 and list(in_key_order(s.jobs)) == jobs


def test_a_streamed_snapshot_equals_the_plain_one(url, tmp_path):
    import psycopg

    from impl.store.snapshot import snapshot, snapshot_streamed
    from soak.record.spill import DiskTable, disk_table

    _shapes(url)
    with PgStore(url) as store, Client(url) as client:  # a running job with steps and events (not pruned)
        live = client.enqueue("q9", "k", {}).id
        store.apply(w.Claim(now(), "q9", "n1", 1, TTL))
        for name in ("a", "b"):
            store.apply(w.RecordStep(now(), live, name, {"v": name}, 0, 0))
            store.apply(w.EmitEvent(now(), live, {"p": name}))
    with psycopg.connect(url, autocommit=True) as c:
        plain = snapshot(c)
        streamed = snapshot_streamed(c, big=disk_table, big_over=1)
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert all(isinstance(getattr(streamed, a), DiskTable) for a in ("jobs", "steps", "events"))
    for attr in ("jobs", "steps", "events", "signals", "rate", "queues", "crons"):
        assert dict(getattr(streamed, attr).items()) == dict(getattr(plain, attr)), attr
        assert list(getattr(streamed, attr)) == list(getattr(plain, attr)), attr  # the same order
    assert (streamed.version, streamed.contract_major, streamed.next_id) == (
        plain.version,
        plain.contract_major,
        plain.next_id,
    )


def test_a_ledger_read_into_a_disk_table_equals_the_tuple(url):
    """soak/workload/ledger.py `read` with `big`: a ledger of big_over entries or more is streamed into the disk
    table (LedgerRows), iterated in job-id order and looked up by id like the tuple and its dict."""
    import psycopg

    from soak.judges.checker import LedgerRows
    from soak.record.spill import DiskTable, disk_table
    from soak.workload import ledger as soak_ledger

    with psycopg.connect(url, autocommit=True) as c:
        soak_ledger.install(c)
        c.execute("TRUNCATE soak_ledger")
        for i in (7, 3, 5, 11):
            c.execute(
                "INSERT INTO soak_ledger VALUES (%s, 'echo', 'succeeded', now(), %s)",
                (i, psycopg.types.json.Jsonb({"n": i})),
            )
        plain = soak_ledger.read(c)
        small = soak_ledger.read(c, big=disk_table, big_over=5)  # 4 entries: under the bar, a tuple
        big = soak_ledger.read(c, big=disk_table, big_over=4)
    assert isinstance(plain.entries, tuple) and isinstance(small.entries, tuple)
    assert isinstance(big.entries, LedgerRows) and isinstance(big.entries.table, DiskTable)
    assert [e.job_id for e in plain.entries] == [3, 5, 7, 11] and list(big.entries) == list(plain.entries)
    assert len(big.entries) == 4 and bool(big.entries) and big.by_id()[5] == plain.by_id()[5]
    assert big.by_id()[5].detail == {"n": 5} and big.by_id().get(4) is None


def test_every_checker_scenario_decides_the_same_with_the_snapshot_on_disk_and_the_samples_streamed(monkeypatch):
    """Each test of tests/test_soak_checker.py and tests/test_soak_duties.py builds a run and checks it;
    here each of those runs is checked twice — its state in dicts and every event in the history list,
    and with jobs, steps and events in DiskTables that keep one row in memory and the lease and priority
    samples handed over as a separate stream (as the soak does) — and the two results must be the same
    to the last counterexample."""
    import inspect
    from dataclasses import replace

    import tests.test_soak_checker as tsc
    import tests.test_soak_duties as tsd
    from model.state import from_rows
    from soak.judges.checker import LedgerRows, SoakLedger, check
    from soak.judges.duties import SAMPLE_TYPES
    from soak.record.spill import DiskTable, on_disk

    compared = []

    def both(self, committed=None):  # the signature of tests/test_soak_checker.py Run.check
        state = from_rows(
            sorted(self.jobs.values(), key=lambda j: j.id),
            sorted(self.steps, key=lambda s: (s.job_id, s.seq)),
            sorted(self.events, key=lambda e: (e.job_id, e.seq)),
            self.signals,
        )
        entries = tuple(sorted(self.ledger, key=lambda e: e.job_id))  # as soak/workload/ledger.py reads it
        ledger = SoakLedger(entries, tuple(self.observations), tuple(self.unique))
        plain = check(state, ledger, self.history, committed)
        rest = [e for e in self.history if e.get("type") not in SAMPLE_TYPES]
        streamed = (e for e in self.history if e.get("type") in SAMPLE_TYPES)
        on_disk_ledger = replace(ledger, entries=LedgerRows(DiskTable.build(((e.job_id, e) for e in entries), cache=1)))
        disk = check(on_disk(state, cache=1), on_disk_ledger, rest, committed, samples=streamed)
        assert json.dumps(disk.to_json(), default=str) == json.dumps(plain.to_json(), default=str)
        compared.append(plain.verdict)
        return plain

    monkeypatch.setattr(tsc.Run, "check", both)
    ran = 0
    for module in (tsc, tsd):
        for name, fn in sorted(vars(module).items()):
            if name.startswith("test_") and callable(fn) and not inspect.signature(fn).parameters:
                fn()
                ran += 1
    assert ran >= 70 and len(compared) >= 70 and "invalid" in compared, (ran, len(compared))


def test_the_final_comparison_names_every_row_the_snapshot_has_more_less_or_otherwise_on_disk_or_not(url, tmp_path):
    """The end of a trace validation (Validator.compare, batched lookups): the snapshot differing from the
    replayed rows — a job and a step it holds that no transaction wrote, a job it lacks, a job it holds
    otherwise — is named, row by row, whether the snapshot's tables are dicts or on disk and whether the
    validation's rows are in memory or spilled."""
    from dataclasses import replace

    from soak.record.spill import on_disk

    with Captured(url, tmp_path, "compare"):
        with PgStore(url) as store, Client(url) as client:
            ids = [client.enqueue("q", "k", {"i": i}).id for i in range(12)]
            store.apply(w.Claim(now(), "q", "n1", 12, TTL))
            for i in ids[:6]:
                store.apply(w.RecordStep(now(), i, "s", 1, 0, 0))
                store.apply(w.Ack(now(), i, 1, w.Succeed(None)))
    initial = load_state(tmp_path / "history-initial.pickle")
    final = load_state(tmp_path / "history-final.pickle")
    extra_job = replace(final.jobs[ids[0]], id=10_000)
    extra_step = replace(final.steps[(ids[0], "s")], job_id=ids[7])
    jobs = {**final.jobs, 10_000: extra_job, ids[1]: replace(final.jobs[ids[1]], priority=7)}
    del jobs[ids[11]]
    odd = replace(final, jobs=jobs, steps={**final.steps, (ids[7], "s"): extra_step})
    expected = sorted([f"jobs {10_000!r}", f"jobs {ids[1]!r}", f"jobs {ids[11]!r}", f"steps {(ids[7], 's')!r}"])
    for snapshot, want in (
        (final, []),
        (odd, expected),
        (on_disk(final, cache=2), []),
        (on_disk(odd, cache=2), expected),
    ):
        for hot in (HOT, 1):
            r = validate(read_transactions(tmp_path / "history.bin"), None, initial, final_state=snapshot, hot=hot)
            assert r.snapshot_diff == want, (hot, r.snapshot_diff)
            assert r.matches_snapshot == (not want)
