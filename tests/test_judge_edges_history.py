"""Cases of the history judges no other test pinned (a mutation hunt over soak/judges/timing/,
soak/judges/refine/, soak/judges/replay/, soak/record/ and the verdict the run prints). Each test is a
boundary or an excuse of a judge, seen deciding both ways on hand-built evidence; pure and fast."""

from __future__ import annotations

from dataclasses import replace

from soak.judges.timing import CLAIM_HOLD_MIN, NOW_BASE, PROVEN_MIN, ClaimOrder, Freshness, order_key
from tests.test_soak_checker import E0, at, job
from tests.test_timing_judges import claimed, faults, ready, run_newest_first

# --- now freshness ---------------------------------------------------------------------------------------


def test_a_node_whose_clock_runs_ahead_has_its_offset_taken_off_its_now_not_added():
    """w3-1 declares its clock 4 s ahead: its `now` reads 4 s late on the true clock. Two writes whose true
    `now` is NOW_BASE + 3 s before their commit are stale; the offset must not hide them (added instead of
    taken off, it shifts the true `now` 8 s later and the lag vanishes)."""
    skewed = {"t": E0 - 1, "type": "worker_start", "node": "w3-1", "slot": 3, "clock_skew": 4.0}
    f = Freshness(faults(skewed))
    lag = NOW_BASE + 3
    f.judge("w3-1", at(10 + 4), at(10 + lag), "ack of job 7 attempt 1", "0/1")
    f.judge("w3-1", at(30 + 4), at(30 + lag), "ack of job 8 attempt 1", "0/2")
    assert f.count == 2 and f.lines() and "w3-1 2" in f.lines()[0], f.lines()
    assert f.stale[0].lag == lag


def test_a_cut_of_every_node_excuses_each_nodes_lag_by_its_duration():
    """A `cut_start` without a node cuts every node's connection (soak/faults): each node's write held by it
    is excused for the cut's overlap, like the node's own cut — else an honest worker is INVALID."""
    cut = [{"t": E0 + 11, "type": "cut_start", "node": None}, {"t": E0 + 19, "type": "cut_end", "node": None}]
    f = Freshness(faults(*cut))
    f.judge("w1-1", at(10), at(20), "ack of job 7 attempt 1", "0/1")  # 10 s lag, 8 s of it cut
    f.judge("w2-1", at(10), at(20), "ack of job 8 attempt 1", "0/2")
    assert f.count == 0, [s.line() for s in f.stale]
    assert f.faults.excuse("w2-1", E0 + 10, E0 + 20) == (8.0, ["cut"])
    f.judge("w1-1", at(10), at(10 + 8 + NOW_BASE + 1), "ack of job 9 attempt 1", "0/3")  # beyond cut + base
    assert f.count == 1


# --- claim order ---------------------------------------------------------------------------------------


def test_a_row_committed_a_second_and_a_half_before_the_claims_now_is_passed_over():
    """SNAP_SLACK (1 s) is the only allowance for a commit not yet visible to the claim's snapshot: a row
    committed 1.5 s before the claim's `now` was in it, and passing it over is an inversion."""
    order = ClaimOrder(faults())
    old = ready(1, 1)
    order.observe({1: (None, old)}, at(18.5), "0/1")  # committed 1.5 s before the claim's now
    later = ready(2, 2)
    order.observe({2: (None, later)}, at(2), "0/2")
    order.observe({2: (later, claimed(later, "w1-1", 20))}, at(20.05), "0/c", [("w1-1", "soak", at(20), False)])
    assert order.inversions == 1 and order.judged_claims[0][5] == 1 and 1 in order.pending


def test_a_row_claimed_after_the_passing_claim_committed_was_not_held_by_a_concurrent_transaction():
    """Rows 1–9 passed over by w1-1's claim (which took row 10) are each claimed 1–2 s after it committed:
    none of those claims was in flight beside it (each began after its commit, beyond BEGAN_SLACK), so
    none could hold a row it passed over — it passed over more free rows than anything could hold."""
    order = ClaimOrder(faults())
    rows = {i: ready(i, i) for i in range(1, 11)}
    for i, j in rows.items():
        order.observe({i: (None, j)}, at(i), f"0/{i}")
    order.observe({10: (rows[10], claimed(rows[10], "w1-1", 20))}, at(20.05), "0/a", [("w1-1", "soak", at(20), False)])
    for i in range(1, 10):
        t = 21 + 0.1 * i
        order.observe(
            {i: (rows[i], claimed(rows[i], "w2-1", t))}, at(t + 0.05), f"0/b{i}", [("w2-1", "soak", at(t), False)]
        )
    order.finish(at(40))
    assert order.judged_claims[0][5] == 9 and order.judged_claims[0][6] == 0, order.judged_claims[0]
    assert order.over_capacity == [0], order.judged_claims


def test_a_freeze_that_began_well_before_a_row_was_written_excuses_no_pass_over_of_it():
    """A transaction frozen by a fault holds only rows it locked before it froze: a SIGSTOP of w2-1 that
    began before rows 1–8 were written (and lasts past every claim) excuses none of the rows the newest-
    first claims pass over — the judge decides as with no fault at all."""
    plain = ClaimOrder(faults())
    run_newest_first(plain)
    stop = [{"t": E0 - 5, "type": "worker_stop", "node": "w2-1"}, {"t": E0 + 60, "type": "worker_cont", "node": "w2-1"}]
    frozen = ClaimOrder(faults(*stop))
    run_newest_first(frozen)
    assert frozen.excused_fault == 0 and frozen.proven_rows == plain.proven_rows >= 2, vars(frozen)
    assert frozen.lines()


def _awaiting(i: int, t: float):
    """A due awaiting row (claimable; the untraced count does not judge awaiting rows: the reconciler locks
    them too)."""
    return job(i, state="awaiting", ready_at=at(t), inserted_at=at(t), started_at=None, finished_at=None)


def test_exactly_proven_min_rows_passed_over_again_long_after_make_p5_invalid():
    """Five due awaiting rows; claims 1.5 s apart each take the newest: rows 1 and 2 are passed over again
    more than HOLD after the first claim — exactly PROVEN_MIN rows, and nothing else of the judge fires
    (two claims over capacity, fewer than OVER_MIN; awaiting rows are not counted as untraced)."""
    order = ClaimOrder(faults())
    rows = {i: _awaiting(i, i) for i in range(1, 6)}
    for i, j in rows.items():
        order.observe({i: (None, j)}, at(i), f"0/{i}")
    t = 20.0
    for i in range(5, 0, -1):
        b = rows.pop(i)
        order.observe({i: (b, claimed(b, "w1-1", t))}, at(t + 0.05), f"0/c{i}", [("w1-1", "soak", at(t), False)])
        t += 1.5
    order.finish(at(t + 10))
    assert order.repeat_rows == PROVEN_MIN and len(order.over_capacity) < 3 and order.aborts_needed == 0, vars(order)
    assert order.invalid and order.lines(), vars(order)


def test_three_lone_rows_only_an_untraced_transaction_could_hold_need_three_of_them():
    """Three rounds 10 s apart: a claim takes row b and passes over the older row a, which a claim begun
    2 s later takes (no transaction in flight beside the first could hold a). One untraced transaction
    holds LOCKS_PER_TAKE rows for HOLD at most, but the rounds are HOLD apart: each needs its own, three
    in all (rounded up per window, not down to none)."""
    order = ClaimOrder(faults())
    for k in range(3):
        t = 20.0 + 10 * k
        a, b = ready(10 * k + 1, t - 5), ready(10 * k + 2, t - 4)
        order.observe({a.id: (None, a)}, at(t - 5), f"0/a{k}")
        order.observe({b.id: (None, b)}, at(t - 4), f"0/b{k}")
        order.observe({b.id: (b, claimed(b, "w1-1", t))}, at(t + 0.05), f"0/c{k}", [("w1-1", "soak", at(t), False)])
        order.observe(
            {a.id: (a, claimed(a, "w1-1", t + 2))}, at(t + 2.05), f"0/d{k}", [("w1-1", "soak", at(t + 2), False)]
        )
    order.finish(at(60))
    assert order.repeat_rows == 0 and order.over_capacity == [], vars(order)
    assert order.untraced_rows == 3 and order.aborts_needed == 3, vars(order)
    assert order.invalid and any("untraced transaction" in line for line in order.lines())


def test_a_claim_slowed_by_another_nodes_freeze_does_not_lengthen_hold():
    """HOLD is the run's longest FAULT-FREE claim: a claim of w1-1 that took 8 s while w2-1 was stopped (a
    frozen transaction of w2-1 may have held the rows it waited for) is no measure of an honest claim's
    life, and a HOLD stretched by it would excuse rows passed over again within 8 s."""
    stop = [
        {"t": E0 + 5, "type": "worker_stop", "node": "w2-1"},
        {"t": E0 + 15, "type": "worker_cont", "node": "w2-1"},
    ]
    order = ClaimOrder(faults(*stop))
    slow = ready(100, 1)
    order.observe({100: (None, slow)}, at(1), "0/s")
    order.observe({100: (slow, claimed(slow, "w1-1", 6))}, at(14), "0/slow", [("w1-1", "soak", at(6), False)])
    assert list(order.claim_lags) == [] and order.hold == CLAIM_HOLD_MIN


def test_a_row_with_no_ready_at_comes_first_in_claim_order():
    """§6: `ready_at ASC NULLS FIRST`. A claim taking the NULL row before a dated one of its priority passes
    nothing over; one taking the dated row passes the NULL row over."""
    assert order_key(0, None, 9) < order_key(0, at(1), 1) < order_key(1, None, 1)
    dated, undated = ready(1, 1), ready(2, 2)
    undated = replace(undated, ready_at=None)
    honest = ClaimOrder(faults())
    honest.observe({1: (None, dated)}, at(1), "0/1")
    honest.observe({2: (None, undated)}, at(2), "0/2")
    honest.observe({2: (undated, claimed(undated, "w1-1", 20))}, at(20.05), "0/c", [("w1-1", "soak", at(20), False)])
    assert honest.inversions == 0
    broken = ClaimOrder(faults())
    broken.observe({1: (None, dated)}, at(1), "0/1")
    broken.observe({2: (None, undated)}, at(2), "0/2")
    broken.observe({1: (dated, claimed(dated, "w1-1", 20))}, at(20.05), "0/c", [("w1-1", "soak", at(20), False)])
    assert broken.inversions == 1 and 2 in broken.pending


# --- soak/record/spill.py: the samples on disk -------------------------------------------------------------


def test_a_time_series_window_holds_both_its_ends_as_the_in_memory_filter_does():
    """The checks read lease samples either from the history list (`t0 <= at <= t1`,
    soak/judges/invariants_jobs.py) or from a TimeSeries on disk; both must see the same samples — also
    one exactly at the window's start or end."""
    from soak.record.spill import TimeSeries

    s = TimeSeries()
    try:
        events = [(E0 + k / 2, {"at": E0 + k / 2, "rows": [k]}) for k in range(20)]
        for t, e in events:
            s.append(t, e)
        for t0, t1 in ((E0 + 1.0, E0 + 3.0), (E0, E0), (E0 + 9.5, E0 + 20), (E0 + 0.25, E0 + 0.75)):
            want = [(t, e) for t, e in events if t0 <= t <= t1]
            assert list(s.between(t0, t1)) == want, (t0 - E0, t1 - E0)
        assert s.first_at_or_after(E0 + 2.0) == (E0 + 2.0, {"at": E0 + 2.0, "rows": [4]})
    finally:
        s.close()


# --- soak/run.py: the verdict the console prints -----------------------------------------------------------


def test_the_console_states_the_runs_final_verdict_not_the_checks_alone(tmp_path, capsys):
    """A run the checks passed and the committed history failed exits 1: the console's table heading and
    its verdict line say INVALID, as every report file does (issue 51)."""
    from soak.run import print_verdict
    from tests.test_soak_report_verdict import _invalid_history, _run

    run_dir, results, code = _run(tmp_path, "valid", _invalid_history())
    assert (results["verdict"], code) == ("invalid", 1)
    from tests.test_soak_checker import baseline

    result = replace(baseline().check(), verdict="valid")
    capsys.readouterr()
    print_verdict(result, results, run_dir, (results["verdict"], code))
    out = capsys.readouterr().out
    assert "Belay soak: INVALID" in out and "verdict invalid → exit 1" in out, out[-400:]
    assert "Belay soak: VALID" not in out and "verdict valid" not in out


# --- soak/report/interrupted.py: an interrupted run -------------------------------------------------------


def test_an_interrupted_run_reports_unknown_with_exit_2(tmp_path):
    """An interrupted run checked nothing: results.json and summary.md say UNKNOWN, exit 2 (soak/run.py's
    main: 0 valid, 1 invalid, 2 unknown) — never an exit code that reads as valid."""
    import json

    from soak.report import interrupted

    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    history = [{"t": E0, "type": "phase", "phase": "faults"}]
    results = interrupted.write(run_dir, history, {"run_id": "r1"}, "SIGTERM")
    data = json.loads((run_dir / "results.json").read_text())
    assert results["exit_code"] == data["exit_code"] == interrupted.EXIT_UNKNOWN == 2, data
    assert data["verdict"] == "unknown" and data["phase_reached"] == "faults"
    assert "**UNKNOWN** (interrupted, exit 2)" in (run_dir / "summary.md").read_text()


# --- soak/judges/replay/: what the capture knows it missed ----------------------------------------------


def test_a_range_the_slot_passed_without_the_capture_makes_the_replay_unknown_not_valid():
    """The capture records `lost_ranges` when the slot moved past its position (soak/record/capture.py):
    transactions of that range were never read, whatever the ones read show — unknown, and said why."""
    from soak.judges.replay import replay

    seen = replay([], None, None, capture_stats={"gap_count": 0})
    assert seen.verdict == "valid", seen.why
    lost = replay([], None, None, capture_stats={"gap_count": 0, "lost_ranges": [["0/16B3748", "0/16B9000"]]})
    assert lost.verdict == "unknown" and "the slot passed 0/16B3748..0/16B9000 without us" in lost.why, lost.why


# --- soak/record/pgoutput.py: a relation announced again with other columns ---------------------------------


def _relation(oid: int, columns: list[tuple[str, int]]) -> bytes:
    import struct

    body = struct.pack(">I", oid) + b"public\0belay_demo\0" + b"f" + struct.pack(">h", len(columns))
    for name, type_oid in columns:
        body += b"\0" + name.encode() + b"\0" + struct.pack(">Ii", type_oid, -1)
    return b"R" + body


def _insert(oid: int, values: list[bytes]) -> bytes:
    import struct

    body = struct.pack(">I", oid) + b"N" + struct.pack(">h", len(values))
    for v in values:
        body += b"t" + struct.pack(">i", len(v)) + v
    return b"I" + body


def test_a_relation_announced_again_with_other_columns_decodes_later_rows_by_the_new_columns():
    """pgoutput sends a Relation message again when a table's columns change (ALTER TABLE while the slot
    is read): rows after it carry the new columns, and must be read by their names and types — not by
    the loaders cached for the old announcement."""
    from soak.record.pgoutput import Decoder

    d = Decoder()
    d.decode(_relation(7, [("id", 20), ("note", 25)]))
    first = d.decode(_insert(7, [b"1", b"hello"]))
    assert first.new == {"id": 1, "note": "hello"}
    d.decode(_relation(7, [("id", 20), ("attempt", 23)]))  # note dropped, attempt int4 added
    second = d.decode(_insert(7, [b"2", b"5"]))
    assert second.new == {"id": 2, "attempt": 5}, second.new


# --- soak/judges/refine/: the §2 clock rule's blanket bound ----------------------------------------------


def test_a_now_older_than_lag_before_its_commit_is_refused_and_one_within_it_accepted():
    """A write whose writer the rows do not name (an enqueue, a sweeper's reclaim, a cron fire) keeps the
    blanket bound: its `now` at most LAG (300 s) before the commit — 400 s is no candidate's."""
    import pytest

    from soak.judges.refine import LAG, Mismatch, Validator
    from soak.judges.refine.world import HarnessLedger

    v = Validator(None, HarnessLedger())
    try:
        lag = LAG.total_seconds()
        v.now_ok(at(0), at(lag - 1), "reclaim of job 7")  # within the bound
        assert v.result.lag_max_s == lag - 1
        with pytest.raises(Mismatch, match="before the commit"):
            v.now_ok(at(0), at(lag + 100), "reclaim of job 8")
    finally:
        v.close()


def _acks_of_succeeded_jobs(lag: float):
    """Jobs 1 and 2 running on w1-1; each acked `succeeded` in its own transaction with a `now`
    (finished_at) `lag` seconds before its commit, no fault of w1-1 in between."""
    from model.state import from_rows
    from soak.judges import refine
    from soak.judges.refine.feed import Decoded

    running = [
        job(i, state="running", started_at=at(5), finished_at=None, leased_by="w1-1", lease_until=at(100))
        for i in (1, 2)
    ]
    txs = []
    for k, j in enumerate(running):
        commit = 30 + 10 * k
        done = replace(
            j,
            state="succeeded",
            finished_at=at(commit - lag),
            lease_until=None,
            leased_by=None,
            result=job(j.id).result,
        )
        txs.append(Decoded(0x1000 + k, at(commit), 500 + k, [("row", "belay_jobs", "update", done, None, False)]))
    ledger = [
        {"t": E0 - 1, "type": "run_start", "lease_ttl": 10},
        {"t": E0 - 1, "type": "worker_start", "node": "w1-1", "slot": 1},
    ]
    return refine.validate(txs, ledger, from_rows(running))


def test_a_success_ack_stamped_long_before_its_commit_is_a_stale_now():
    """`now` freshness judges every write whose node the rows name — a success ack by its lease holder
    too (its finished_at is its `now`): two acks NOW_BASE + 3 s stale make the trace validation invalid."""
    fresh = _acks_of_succeeded_jobs(1.0)
    assert fresh.verdict == "valid" and fresh.validated == 2, fresh.why
    stale = _acks_of_succeeded_jobs(NOW_BASE + 3)
    assert stale.validated == 2 and stale.timing["now_stale"] == 2, stale.timing
    assert stale.verdict == "invalid" and "now freshness" in stale.why and "w1-1 2" in stale.why, stale.why


def test_claim_order_findings_are_withheld_when_the_capture_has_a_gap(monkeypatch):
    """A capture gap may hide the transaction that held a passed-over row: P5's findings from the committed
    claims are dropped then (the gap makes the history unknown instead), never turned into an INVALID."""
    from soak.judges import refine, timing
    from soak.judges.refine.feed import Decoded

    line = "P5 claim order: 3 row(s) passed over by claims that took rows later in §6 order"
    monkeypatch.setattr(timing.ClaimOrder, "lines", lambda self: [line])
    ledger = [{"t": E0, "type": "run_start", "lease_ttl": 10}]
    whole = refine.validate([], ledger)
    assert whole.claim_order == [line]
    gapped = refine.validate([Decoded(0x10, at(5), 7, [("gap", "TRUNCATE of belay_jobs")])], ledger)
    assert gapped.capture_gaps == 1 and gapped.claim_order == [] and gapped.verdict == "unknown", gapped.why


def test_a_validation_that_does_not_end_in_the_final_snapshot_is_unknown_not_valid():
    """Every transaction explained, but the snapshot holds a row the validated history never wrote (a
    transaction the capture missed): the trace validation's own verdict is unknown, not valid — also
    when no other judge (the replay) is there to say so."""
    from model.state import from_rows
    from soak.judges import refine

    ledger = [{"t": E0, "type": "run_start", "lease_ttl": 10}]
    same = refine.validate([], ledger, from_rows([job(1)]), final_state=from_rows([job(1)]))
    assert same.verdict == "valid" and same.matches_snapshot is True, same.why
    more = refine.validate([], ledger, from_rows([job(1)]), final_state=from_rows([job(1), job(2)]))
    assert more.matches_snapshot is False and more.snapshot_diff == ["jobs 2"], more.snapshot_diff
    assert more.verdict == "unknown" and "1 difference(s) from the final snapshot" in more.why, more.why


def test_an_insert_of_a_row_the_validation_already_holds_is_a_capture_gap_not_a_violation():
    """The capture missed the row's delete (a prune), so an insert of the same id finds it held: a gap —
    the verdict unknown. Not a gap, the enqueue is "explained" over the held row and the history VALID."""
    from model.state import from_rows
    from soak.judges import refine
    from soak.judges.refine.feed import Decoded

    again = job(1, state="ready", started_at=None, finished_at=None, attempt=0, ready_at=at(20), inserted_at=at(20))
    tx = Decoded(0x20, at(20), 9, [("row", "belay_jobs", "insert", again, None, False)])
    r = refine.validate([tx], [{"t": E0, "type": "run_start", "lease_ttl": 10}], from_rows([job(1)]))
    assert r.capture_gaps == 1 and r.unexplained_hard == 0, (r.capture_gaps, r.unexplained_hard, r.why)
    assert r.verdict == "unknown", r.why


def test_a_gap_on_a_jobs_step_taints_the_job_for_the_transactions_after_it():
    """A transaction whose step row disagrees with the one held (a missed change: a gap) taints the step's
    job, like a gap on its job row: a later transaction on that job the model cannot explain counts towards
    unknown, not invalid — the missed change may be what it needed."""
    from model.state import from_rows
    from soak.judges import refine
    from soak.judges.refine.feed import Decoded
    from tests.test_soak_checker import step

    running = job(1, state="running", started_at=at(5), finished_at=None, leased_by="w1-1", lease_until=at(100))
    held = step(1, 1, "s1", "a", t=6)
    again = step(1, 1, "s1", "b", t=7)  # inserted again: the capture missed the row's delete
    later = replace(again, value=step(1, 1, "s1", "c").value)  # steps are immutable: no operation explains it
    txs = [
        Decoded(0x30, at(7), 11, [("row", "belay_steps", "insert", again, None, False)]),
        Decoded(0x31, at(8), 12, [("row", "belay_steps", "update", later, None, False)]),
    ]
    r = refine.validate(txs, [{"t": E0, "type": "run_start", "lease_ttl": 10}], from_rows([running], [held]))
    assert r.capture_gaps >= 1 and r.unexplained >= 1 and r.unexplained_hard == 0, (r.unexplained_hard, r.why)
    assert r.verdict == "unknown", r.why
