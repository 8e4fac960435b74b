"""Issue 54's mutation hunt over the judges of order and time (soak/judges/timing/) and the worker duties
(soak/judges/duties/): each test closes a bug planted there that the existing tests let pass (the catalogue:
properties/mutants/timing_hunt.py). Pure and fast: hand-built fault logs and committed claims, or the
baseline run of tests/test_soak_checker.py broken in one place; no database."""

from __future__ import annotations

from dataclasses import replace

from model.envelope import encode
from model.rows import Step
from soak.judges.checker import Observation
from soak.judges.timing import CLAIM_HOLD_MIN, NOW_BASE, ClaimOrder, Freshness, order_key
from tests.test_soak_checker import E0, at, baseline, err, job
from tests.test_soak_duties import CHOICE, cancel_requested, drain, duty, lease_sample, priority_sample, steps_job
from tests.test_timing_judges import claimed, faults

# --- the fault log, per node (soak/judges/timing/nodes.py) --------------------------------------------------


def test_a_heal_ends_the_fault_it_names_and_no_other():
    """timing/__init__.py: a write's lag "may exceed NOW_BASE only by the time faults *of that node* held it
    … Each fault excuses at most its own overlap with [now, commit]". A partition healed at +12 (and a
    latency healed at +12 on another slot) excuses nothing of writes stamped at +30: the heal closes the
    window of the fault it names, not the other kind's, and leaves no window open until the end."""
    f = Freshness(
        faults(
            {"t": E0 + 10, "type": "net_partition", "slot": 1, "node": "w1-1"},
            {"t": E0 + 12, "type": "net_heal", "slot": 1, "node": "w1-1", "fault": "partition"},
            {"t": E0 + 10, "type": "net_latency", "slot": 2, "node": "w2-1"},
            {"t": E0 + 12, "type": "net_heal", "slot": 2, "node": "w2-1", "fault": "latency"},
        )
    )
    f.judge("w1-1", at(30), at(30 + NOW_BASE + 5), "ack of job 7 attempt 1", "0/1")
    f.judge("w2-1", at(30), at(30 + NOW_BASE + 5), "ack of job 8 attempt 1", "0/2")
    assert f.count == 2 and f.lines(), vars(f)


def test_the_end_of_a_cut_of_one_node_ends_that_nodes_cut_not_the_latest_one():
    """A cut of w1-1 (+10 … +12) and one of w2-1 from +11 on: w1-1's cut_end closes w1-1's window, so its
    writes stamped at +30 are judged (stale), while w2-1's cut, still open, excuses its own lag."""
    f = Freshness(
        faults(
            {"t": E0 + 10, "type": "cut_start", "node": "w1-1"},
            {"t": E0 + 11, "type": "cut_start", "node": "w2-1"},
            {"t": E0 + 12, "type": "cut_end", "node": "w1-1"},
        )
    )
    f.judge("w2-1", at(20), at(20 + NOW_BASE + 5), "ack of job 9 attempt 1", "0/0")
    assert f.count == 0, vars(f)
    f.judge("w1-1", at(30), at(30 + NOW_BASE + 5), "ack of job 7 attempt 1", "0/1")
    f.judge("w1-1", at(40), at(40 + NOW_BASE + 5), "ack of job 8 attempt 1", "0/2")
    assert f.count == 2 and f.lines(), vars(f)


def _samples(*spans: tuple[float, float]) -> list[dict]:
    """Lease samples every 0.5 s over each [a, b] (seconds after E0)."""
    out = []
    for a, b in spans:
        k = 0
        while a + k / 2 <= b:
            t = E0 + a + k / 2
            out.append({"t": t, "type": "lease_sample", "at": t, "rows": []})
            k += 1
    return out


def test_a_failover_and_a_stall_of_the_nodes_route_excuse_its_lag():
    """timing/__init__.py: a write's lag is excused by "its SIGSTOP, a partition, stall, cut or injected
    latency of its route, a PostgreSQL crash-restart or failover (every node's connection)"."""
    f = Freshness(
        faults(
            {"t": E0 + 11, "type": "failover_begin"},
            {"t": E0 + 18, "type": "standby_ready"},
            {"t": E0 + 31, "type": "net_stall", "slot": 1, "node": "w1-1"},
            {"t": E0 + 38, "type": "net_heal", "slot": 1, "node": "w1-1", "fault": "stall"},
        )
    )
    f.judge("w2-1", at(10), at(21), "ack of job 7 attempt 1", "0/1")
    f.judge("w2-1", at(10.5), at(21.5), "ack of job 8 attempt 1", "0/2")
    f.judge("w1-1", at(30), at(41), "ack of job 9 attempt 1", "0/3")
    f.judge("w1-1", at(30.5), at(41.5), "ack of job 10 attempt 1", "0/4")
    assert f.count == 0 and f.lines() == [], vars(f)


def test_a_machine_stall_excuses_from_the_first_sample_that_was_due():
    """nodes.py: "a gap of more than STALL_GAP between two samples means the harness was starved … every
    process on the machine — every node — may have been held alike": the stall runs from the first sample
    that did not come (the last one + SAMPLE_EVERY) to the next one. Samples to +20, then +30: a write
    stamped at +20.5 that committed 9.5 s (the stall) + NOW_BASE later is excused."""
    f = Freshness(faults(*_samples((0, 20), (30, 40))))
    lag = 9.5 + NOW_BASE - 0.05
    f.judge("w1-1", at(20.5), at(20.5 + lag), "ack of job 7 attempt 1", "0/1")
    f.judge("w2-1", at(20.5), at(20.5 + lag), "ack of job 8 attempt 1", "0/2")
    assert f.count == 0 and f.lines() == [], vars(f)


# --- now freshness (soak/judges/timing/freshness.py) -------------------------------------------------------


def test_a_skewed_nodes_own_fault_is_measured_on_the_true_clock():
    """timing/__init__.py: lag = commit − (`now` − the node's declared BELAY_CLOCK_OFFSET), and a fault
    excuses its overlap with [now, commit] — the true instants, not the node's clock. w3-1 runs 4 s ahead
    and was stopped +11 … +19; a write stamped +14 by its clock (true +10) committed at +21: an 11 s lag of
    which 8 s stopped, within NOW_BASE beyond the stop."""
    skewed = {"t": E0 - 1, "type": "worker_start", "node": "w3-1", "slot": 3, "clock_skew": 4.0}
    stop = [
        {"t": E0 + 11, "type": "worker_stop", "node": "w3-1"},
        {"t": E0 + 19, "type": "worker_cont", "node": "w3-1"},
    ]
    f = Freshness(faults(skewed, *stop))
    f.judge("w3-1", at(14), at(21), "ack of job 7 attempt 1", "0/1")
    f.judge("w3-1", at(14.5), at(21.5), "ack of job 8 attempt 1", "0/2")
    assert f.count == 0 and f.lines() == [], vars(f)


# --- claim order (soak/judges/timing/claim_order.py) -------------------------------------------------------


def _row(i: int, due: float, *, priority: int = 0, state: str = "ready"):
    return job(
        i, state=state, priority=priority, ready_at=at(due), inserted_at=at(due), started_at=None, finished_at=None
    )


def _claim(order: ClaimOrder, j, node: str, now: float, commit: float, lsn: str, *, others=None):
    order.observe(
        {j.id: (j, claimed(j, node, now)), **(others or {})}, at(commit), lsn, [(node, "soak", at(now), False)]
    )


def _lone_rounds(p_due: float, p_claimed_by: float = 3.0) -> ClaimOrder:
    """Three rounds 10 s apart: row p (priority 0, due at the round's t + p_due) and q (priority 1, due
    long before); a claim read its `now` at t, committed at t + 2 and took q; a claim begun at
    t + p_claimed_by took p. Nothing else ran."""
    order = ClaimOrder(faults())
    for k in range(3):
        t = 20.0 + 10 * k
        p, q = _row(10 * k + 1, t + p_due), _row(10 * k + 2, t - 4, priority=1)
        order.observe({p.id: (None, p)}, at(t - 5), f"0/p{k}")
        order.observe({q.id: (None, q)}, at(t - 4), f"0/q{k}")
        _claim(order, q, "w1-1", t, t + 2, f"0/c{k}")
        _claim(order, p, "w1-1", t + p_claimed_by, t + p_claimed_by + 0.05, f"0/d{k}")
    order.finish(at(60))
    return order


def test_a_row_due_at_the_claims_now_is_claimable_one_due_after_it_is_not():
    """§6 (soak/PROTOCOL.md P5): a passed-over row is one "claimable by the claim's own `now`" — due when
    ready_at ≤ now. Rows due exactly at the claim's `now`, passed over for a row of a later priority and
    taken later by a claim no transaction could have been concurrent with, are three untraced rows: P5 is
    invalid. Rows due only after the claim's `now` (though before its commit) were not claimable: valid."""
    exactly = _lone_rounds(0.0)
    assert exactly.untraced_rows == 3 and exactly.invalid and exactly.lines(), vars(exactly)
    later = _lone_rounds(1.0)
    assert later.inversions == 0 and not later.invalid and later.lines() == [], vars(later)


def test_a_row_the_claims_own_transaction_writes_is_neither_passed_over_nor_a_choice():
    """claim_order.py: a row "written by this very transaction" was held by it. A claim that took q and in
    the same transaction wrote the earlier row p (leaving it ready) passed nothing over and had no choice
    (coverage row P5 counts claims that left a claimable row of their priority untaken)."""
    order = ClaimOrder(faults())
    p, q = _row(1, 1), _row(2, 2)
    order.observe({1: (None, p)}, at(1), "0/1")
    order.observe({2: (None, q)}, at(2), "0/2")
    _claim(order, q, "w1-1", 20, 20.05, "0/c", others={1: (p, replace(p, meta={"touched": True}))})
    order.finish(at(30))
    assert order.judged == 1 and order.inversions == 0 and order.choices == 0, vars(order)


def _frozen_then_passed_again(*events: dict) -> ClaimOrder:
    """Rows 1 and 2 (due +4, +5) passed over by a claim at +20 (taking row 3) and again by one at +30
    (taking row 4); never written. The fault log is given."""
    order = ClaimOrder(faults(*events))
    rows = [_row(1, 4), _row(2, 5), _row(3, 6), _row(4, 7)]
    for r in rows:
        order.observe({r.id: (None, r)}, at(r.ready_at.timestamp() - E0), f"0/{r.id}")
    _claim(order, rows[2], "w1-1", 20, 20.05, "0/c1")
    _claim(order, rows[3], "w1-1", 30, 30.05, "0/c2")
    order.finish(at(40))
    return order


def test_a_fault_that_thawed_just_before_the_claims_now_excuses_what_it_held():
    """timing/__init__.py: "the faults around C excuse its first LOCKS_PER_TAKE × (largest claim) ×
    (faults) passed-over rows"; a frozen transaction ends "within CLAIM_HOLD_MIN after its `now`" of
    thawing — so a fault is around C when it lasted until CLAIM_HOLD_MIN before C's `now`. w2-1, stopped
    +16 … +19 (after the rows were written), may have held both rows at the claim of +20: they are excused
    there, and passed over only once (at +30) — no proof."""
    order = _frozen_then_passed_again(
        {"t": E0 + 16, "type": "worker_stop", "node": "w2-1"}, {"t": E0 + 19, "type": "worker_cont", "node": "w2-1"}
    )
    assert order.excused_fault == 2 and order.repeat_rows == 0 and not order.invalid, vars(order)


def test_a_machine_stall_after_a_rows_write_can_hold_it_frozen():
    """nodes.py froze_holding: "Could a transaction frozen by a fault hold a row written at `written`" — a
    machine-wide stall (the harness's samples late) freezes every process alike. w2-1 stopped from +1 (before
    the rows were written: it cannot hold them) to +30; the machine stalled +18.5 … +24, after they were
    written and around the claim of +20: the rows are excused there, so the claim of +30 passed them over
    for the first time — no proof."""
    order = _frozen_then_passed_again(
        {"t": E0 + 1, "type": "worker_stop", "node": "w2-1"},
        {"t": E0 + 30, "type": "worker_cont", "node": "w2-1"},
        *_samples((0, 18), (24, 40)),
    )
    assert order.excused_fault == 2 and order.repeat_rows == 0 and not order.invalid, vars(order)


def test_a_row_passed_over_again_is_measured_from_the_later_claims_now_not_its_commit():
    """timing/__init__.py (a): "a row passed over again by a claim *begun* more than HOLD after the first one
    committed". Two rows passed over at +20 (commit +20.05) and by a claim begun at +21 that took 2 s to
    commit: begun 0.95 s after — within HOLD, no proof."""
    order = ClaimOrder(faults())
    rows = [_row(1, 4), _row(2, 5), _row(3, 6), _row(4, 7)]
    for r in rows:
        order.observe({r.id: (None, r)}, at(r.ready_at.timestamp() - E0), f"0/{r.id}")
    _claim(order, rows[2], "w1-1", 20, 20.05, "0/c1")
    _claim(order, rows[3], "w2-1", 21, 23.0, "0/c2")
    order.finish(at(40))
    assert order.hold == CLAIM_HOLD_MIN and order.repeat_rows == 0 and not order.invalid, vars(order)


def _over_capacity_rounds(*, passed: int, beside: bool, max_take_2: bool, before: float = 0.0) -> ClaimOrder:
    """Three rounds 20 s apart: a claim of w1-1 (`now` t, commit t + 0.5) takes a row later in order than
    `passed` due awaiting rows, which a non-claim transaction (a cancel) writes 10 s later. With `beside`, a
    claim of w2-1 taking one row earlier in order runs beside it (begun after it, committed before it).
    With `max_take_2`, one claim before the rounds took two rows at once. With `before`, that claim of w2-1
    read its `now` and committed `before` seconds before the round's claim instead."""
    order = ClaimOrder(faults())
    n = 1000
    if max_take_2:
        a, b = _row(n, 1), _row(n + 1, 1)
        order.observe({a.id: (None, a), b.id: (None, b)}, at(1), "0/m")
        order.observe(
            {a.id: (a, claimed(a, "w2-1", 5)), b.id: (b, claimed(b, "w2-1", 5))},
            at(5.05),
            "0/mc",
            [("w2-1", "soak", at(5), False)],
        )
    for k in range(3):
        t = 20.0 + 20 * k
        rows = [_row(100 * k + i, 10 + 20 * k + i / 100, state="awaiting") for i in range(1, passed + 1)]
        taken = _row(100 * k + 99, 19 + 20 * k)
        early = _row(100 * k + 98, 9 + 20 * k)
        for r in [*rows, taken, *([early] if beside else [])]:
            order.observe({r.id: (None, r)}, at(19.5 + 20 * k - 10), f"0/i{r.id}")
        if beside:
            _claim(order, early, "w2-1", t + 0.01 - before, t + 0.4 - before, f"0/y{k}")
        _claim(order, taken, "w1-1", t, t + 0.5, f"0/x{k}")
        for r in rows:  # cancelled 10 s later by the driver (a write with no claim)
            order.observe({r.id: (r, replace(r, state="cancelled"))}, at(t + 10), f"0/z{r.id}")
    order.finish(at(100))
    return order


def test_exactly_over_min_claims_over_capacity_make_p5_invalid_and_a_later_unclaimed_write_holds_nothing():
    """timing/__init__.py (b): "a claim whose passed-over rows, less those a transaction concurrent with it
    wrote, outnumber what the other claims of the queue in flight beside it could hold … plus one untraced
    claim"; "INVALID … with claims of (b) numbering at least OVER_MIN". Three claims each passing over three
    due rows (one untraced claim holds two) that the driver cancelled 10 s later — a write long after the
    claim, by no concurrent transaction — are exactly OVER_MIN claims over capacity: invalid."""
    order = _over_capacity_rounds(passed=3, beside=False, max_take_2=False)
    assert len(order.over_capacity) == 3 and order.repeat_rows == 0 and order.aborts_needed == 0, vars(order)
    assert order.invalid and any("could hold no more than the rest" in line for line in order.lines())


def test_the_claims_in_flight_beside_hold_two_rows_per_row_they_took_not_per_the_largest_claim():
    """claim_order.py _capacity: "Rows the other claims of the queue in flight … could hold: LOCKS_PER_TAKE
    per row each took". With a claim of two rows earlier in the run (one untraced claim then holds four)
    and a one-row claim beside each over-capacity claim (it holds two), seven passed-over rows are more
    than 4 + 2: three claims over capacity, invalid."""
    order = _over_capacity_rounds(passed=7, beside=True, max_take_2=True)
    assert order.max_take == 2 and len(order.over_capacity) == 3, vars(order)
    assert order.invalid and order.lines()


def test_a_claim_that_committed_long_before_is_not_in_flight_beside_one():
    """timing/__init__.py (b): what "the other claims of the queue in flight beside it could hold" —
    claim_order.py _capacity: "its `now` before t, its commit after t_now less SNAP_SLACK". A claim that
    committed 10 s before the over-capacity claim began held nothing of it: three claims over capacity."""
    order = _over_capacity_rounds(passed=3, beside=True, max_take_2=False, before=10.0)
    assert len(order.over_capacity) == 3 and order.invalid, vars(order)


def test_a_claim_had_a_choice_only_with_a_row_of_its_priority_it_could_see():
    """coverage row P5: "claims that left a claimable row *of their priority* untaken" — claim_order.py
    _had_choice: a row of the priority of the claim's last taken row, claimable by its `now` and committed
    SNAP_SLACK before it. A row of the next priority, or one of its priority committed 0.5 s before the
    claim's `now`, is no choice."""
    order = ClaimOrder(faults())
    a, b, c = _row(1, 1), _row(2, 2, priority=1), _row(3, 3)
    order.observe({1: (None, a)}, at(1), "0/1")
    order.observe({2: (None, b)}, at(2), "0/2")
    _claim(order, a, "w1-1", 20, 20.05, "0/c1")  # row 2 is of priority 1: no choice
    order.observe({3: (None, c)}, at(29.5), "0/3")
    d = _row(4, 0)
    order.observe({4: (None, d)}, at(10), "0/4")
    _claim(order, d, "w1-1", 30, 30.05, "0/c2")  # row 3 (priority 0) committed at +29.5: not yet visible
    assert order.judged == 2 and order.choices == 0, vars(order)


def test_untraced_rows_are_grouped_in_windows_of_hold_in_time_order():
    """timing/__init__.py: "`aborts_needed` is the fewest such transactions that explain them all (rows grouped
    in windows of HOLD)". Three lone rows passed over at +20, +30 and +40 (each round at a lower priority
    value, so a later claim does not pass the earlier rows again) — the first two never written, the last
    one taken later by a claim begun after — need three untraced transactions, whatever order the rows
    were settled in: invalid."""
    order = ClaimOrder(faults())
    for k in range(3):
        t = 20.0 + 10 * k
        a, b = _row(10 * k + 1, t - 5, priority=4 - 2 * k), _row(10 * k + 2, t - 4, priority=5 - 2 * k)
        order.observe({a.id: (None, a)}, at(t - 5), f"0/a{k}")
        order.observe({b.id: (None, b)}, at(t - 4), f"0/b{k}")
        _claim(order, b, "w1-1", t, t + 0.05, f"0/c{k}")
        if k == 2:
            _claim(order, a, "w1-1", t + 2, t + 2.05, f"0/d{k}")
    order.finish(at(60))
    assert order.repeat_rows == 0 and order.untraced_rows == 3 and order.aborts_needed == 3, vars(order)
    assert order.invalid


def test_rows_of_one_priority_and_ready_at_are_claimed_by_id_ascending():
    """Contract §6: candidates in order `priority ASC, ready_at ASC NULLS FIRST, id ASC`."""
    assert order_key(0, at(5), 1) < order_key(0, at(5), 2) < order_key(0, at(6), 1) < order_key(1, at(1), 1)


def test_a_claim_committed_exactly_at_its_lease_until_committed_with_its_lease_expired():
    """§6: a lease is expired once `lease_until <= now` (the reclaim's own test, impl/store/sql/worker.sql);
    claim_order.py records "claims that committed with their lease already expired (duty P17 counts from
    the commit)". A claim whose lease ends exactly at its commit is one."""
    order = ClaimOrder(faults())
    r = _row(1, 1)
    order.observe({1: (None, r)}, at(1), "0/1")
    taken = replace(claimed(r, "w1-1", 20), lease_until=at(25))
    order.observe({1: (r, taken)}, at(25), "0/c", [("w1-1", "soak", at(20), False)])
    assert order.claimed_expired == [(1, taken.attempt, round(E0 + 25, 3))], order.claimed_expired


def test_hold_is_the_longest_claim_on_the_true_clock():
    """timing/__init__.py: "HOLD is the longest an honest transaction of the run lives (the longest fault-free
    claim …)", its `now` read on the node's clock less its declared offset. w3-1 runs 4 s ahead: a claim it
    stamped +24 (true +20) and committed at +23.5 lived 3.5 s."""
    skewed = {"t": E0 - 1, "type": "worker_start", "node": "w3-1", "slot": 3, "clock_skew": 4.0}
    order = ClaimOrder(faults(skewed))
    r = _row(1, 1)
    order.observe({1: (None, r)}, at(1), "0/1")
    _claim(order, r, "w3-1", 24, 23.5, "0/c")
    assert abs(order.hold - 3.5) < 1e-6, order.claim_lags


# --- P5 across priorities, P6, P7, P8, P10 (soak/judges/duties/outcomes.py) -----------------------------------


def test_p5_a_retried_priority_0_job_left_ready_is_no_fresh_batch_job_passed_over():
    """soak/PROTOCOL.md P5: "batches of 1-step `steps` jobs at priorities 0 and 5, due at one instant … a
    priority-0 job still ready 0.2 s after a priority-5 one ran is a finding". A priority-0 row already run
    once (attempt 1, back to ready after an error: due at its backoff, not at the batch's instant) is not
    such a job, nor a choice between due jobs of two priorities (coverage row P5)."""
    r = baseline()
    r.history += [
        priority_sample(101, [[50, 5, "running", 1], [51, 0, "ready", 1]]),
        priority_sample(101.5, [[50, 5, "running", 1], [51, 0, "ready", 1]]),
    ]
    result = r.check(CHOICE)
    p5 = duty(result, "P5")
    assert p5.violations == 0 and p5.checks >= 1, p5.to_json()
    row = next(x for x in result.coverage if x["row"] == "P5")
    assert next(s for s in row["scenarios"] if s["key"] == "priority_contention")["count"] == 0, row


def test_p5_a_priority_0_job_waiting_while_another_priority_0_job_runs_is_no_priority_inversion():
    """Contract §6 (soak/PROTOCOL.md P5): claims take "priority ASC" — a priority-0 job waiting while
    another priority-0 job runs (a fleet busy with the batch) took nothing out of priority order."""
    r = baseline()
    r.history += [
        priority_sample(101, [[50, 0, "running", 1], [51, 0, "ready", 0]]),
        priority_sample(101.5, [[50, 0, "running", 1], [51, 0, "ready", 0]]),
    ]
    p5 = duty(r.check(CHOICE), "P5")
    assert p5.violations == 0 and p5.verdict == "valid", p5.to_json()


def test_p5_a_batch_with_no_job_left_ready_is_no_claim_choosing_between_priorities():
    """coverage row P5, "claims choosing between due jobs of two priorities": a batch sampled with every
    job running (none left ready) shows no claim that had to choose."""
    r = baseline()
    r.history += [
        priority_sample(101, [[50, 5, "running", 1], [51, 0, "running", 1]]),
        priority_sample(101.5, [[50, 5, "running", 1], [51, 0, "running", 1]]),
    ]
    row = next(x for x in r.check().coverage if x["row"] == "P5")
    contention = next(s for s in row["scenarios"] if s["key"] == "priority_contention")
    assert contention["count"] == 0, row


def _with_cron(r, opts, **row_kw):
    from model.rows import CronRow
    from model.state import from_rows
    from soak.judges.checker import SoakLedger, check

    state = from_rows(r.jobs.values(), r.steps, r.events, r.signals)
    fields = {"input": {}, **row_kw}
    cron = CronRow("soak_cron", "* * * * *", "echo", fields["input"], opts, False, at(0))
    state = replace(state, crons={"soak_cron": cron})
    return check(state, SoakLedger(tuple(r.ledger), tuple(r.observations), tuple(r.unique)), r.history)


def test_p6_a_cron_job_with_another_input_than_its_row_says_is_flagged():
    """soak/PROTOCOL.md P6: "insert cron slots as the `belay_crons` row says (queue from `opts`, kind,
    input)"."""
    r = baseline()
    assert duty(_with_cron(r, {"queue": "soak"}), "P6").violations == 0
    r.jobs[12] = replace(r.jobs[12], input={"n": 1})
    p6 = duty(_with_cron(r, {"queue": "soak"}), "P6")
    assert p6.verdict == "invalid" and "input {'n': 1}" in p6.counterexamples[0], p6.to_json()


def test_p7_a_sleeper_that_succeeded_without_journaling_its_sleep_is_flagged():
    """soak/PROTOCOL.md P7: "journal a durable sleep's wake time (`$sleep:<name>`)" — a sleeper that
    succeeded on its first attempt (it slept in process) without the `$sleep:nap` step broke it too."""
    r = baseline()
    r.add(job(40, "sleeper", input={"seconds": 2}), "sleeper")
    p7 = duty(r.check(), "P7")
    assert p7.verdict == "invalid" and "job 40 succeeded without" in p7.counterexamples[0], p7.to_json()


def test_p8_a_spawned_childs_result_without_its_attempt_is_flagged():
    """soak/PROTOCOL.md P8: "put `"attempt"` in every successful result" — a child a parent spawned too (it
    is in no ledger entry)."""
    r = baseline()
    r.jobs[6] = replace(r.jobs[6], result=encode({"echo": 6}))
    p8 = duty(r.check(), "P8")
    assert p8.verdict == "invalid" and "P8 job 6" in p8.counterexamples[0], p8.to_json()


def test_p10_a_stranded_parent_long_before_a_database_crash_is_flagged():
    """soak/PROTOCOL.md P10: "consistent samples must never show a parent parked on `$children` with all
    (worker-run) children terminal"; only an outage around the sample itself excuses it."""
    r = baseline()
    r.history += [lease_sample(8.5, [], parked=[5], stranded=[5])]
    r.history += [{"t": E0 + 40, "type": "db_crash"}, {"t": E0 + 41, "type": "db_restarted"}]
    p10 = duty(r.check(), "P10")
    assert p10.verdict == "invalid" and "parent 5" in p10.counterexamples[0], p10.to_json()


# --- P3, P4, P19, P2 (soak/judges/duties/running.py) -------------------------------------------------------


def test_p3_another_jobs_signal_excuses_no_cancel():
    """soak/PROTOCOL.md P3: "honour a cancel requested while a job runs at its next boundary, a park … included"
    — only the job's own signal, there before the request, lets it finish first."""
    r = baseline()
    r.history += [
        {"t": E0 + 0.5, "type": "signal", "job_id": 99, "when": "after", "woken": [99]},
        {
            "t": E0 + 1,
            "type": "cancel",
            "job_id": 4,
            "result": "CancelRequested",
            "plan": "cancel_at_park",
            "kind": "awaiter",
            "state_before": "running",
        },
    ]
    p3 = duty(r.check(), "P3")
    assert p3.verdict == "invalid" and "job 4" in p3.counterexamples[0], p3.to_json()


def test_p3_a_cancel_that_found_the_job_already_finished_requested_nothing():
    """soak/PROTOCOL.md P3: "honour a cancel *requested* while a job runs" — a cancel_at_park the store
    answered NotCancellable (the job had already ended, here failed by lost leases) requested nothing the
    worker could honour."""
    r = baseline()
    r.add(
        job(41, "awaiter", input={"signal": "go"}, state="failed", result=None, errors=[err(1, "lease_expired", 20)]),
        "awaiter",
    )
    r.history += [
        {
            "t": E0 + 40,
            "type": "cancel",
            "job_id": 41,
            "result": "NotCancellable",
            "plan": "cancel_at_park",
            "kind": "awaiter",
            "state_before": "failed",
        }
    ]
    p3 = duty(r.check(), "P3")
    assert p3.violations == 0, p3.to_json()


def test_p4_an_exit_observation_long_before_the_sigterm_excuses_no_failed_drain():
    """soak/PROTOCOL.md P4: "exit 0 within 15 s"; a kind asking the draining worker to die excuses its exit
    status only when it asked during the drain."""
    r = baseline()
    r.history += drain(40, running=[[1, 1, "echo"]], seconds=1.0, code=75)
    r.observations.append(Observation(16, 1, "w2-1", "exit", {"reason": "flaky exit"}, at(5)))
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid" and "status 75" in p4.counterexamples[0], p4.to_json()


def test_p4_a_stop_long_before_the_sigterm_excuses_no_job_left_to_lease_expiry():
    """soak/PROTOCOL.md P4: "jobs it ran must not end by lease expiry; a node that exits before 10 s leaving a
    job to lease expiry had too short a grace". w1-1's SIGSTOP ended at +25, long (more than a ttl) before
    its SIGTERM at +100: its lease could not have lapsed while it was frozen."""
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], errors=[err(1, "lease_expired", 110)])
    r.history += drain(100, node="w1-1", running=[[2, 1, "steps"]], seconds=0.5)
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid" and "job 2 (steps) attempt 1" in p4.counterexamples[0], p4.to_json()


def test_p4_a_steps_job_that_journaled_past_its_planned_raise_then_failed_was_handed_back():
    """soak/PROTOCOL.md P4: "with an error on an attempt its kind does not fail by itself (§3: judged by when
    it failed — for `steps`, s<raise_after> journaled by that attempt)" — a `steps` job with raise_after 1
    whose attempt 1 journaled s1 and s2 did not raise right after s1: its error is a made-up retry."""
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], input={"n": 2, "raise_after": 1})
    r.history += drain(1.7, running=[[2, 1, "steps"]], seconds=1.0)
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid" and "job 2 (steps) attempt 1" in p4.counterexamples[0], p4.to_json()


def test_p4_a_member_that_does_not_fail_by_itself_and_failed_an_attempt_at_sigterm_was_handed_back():
    """soak/PROTOCOL.md §3.6 `member`: "if fail, fail" — a member without `fail` has no planned failure, so
    an error on the attempt running at the SIGTERM followed by another attempt is a hand-back (P4)."""
    r = baseline()
    r.jobs[10] = replace(r.jobs[10], attempt=2, errors=[err(1, "Oops", 3)], result=encode({"echo": 10, "attempt": 2}))
    r.history += drain(2.5, running=[[10, 1, "member"]], seconds=1.0)
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid" and "job 10 (member) attempt 1" in p4.counterexamples[0], p4.to_json()


def _costed(r, jid: int, budget: dict, steps: list[tuple[int, str, int, int, int]], **kw):
    r.add(job(jid, "costed", input={"costs": [1]}, **budget, **kw), "costed", "failed:budget_exceeded")
    r.steps += [
        Step(jid, seq, name, encode({"token": name, "attempt": a}), usd, tok, at(1.5))
        for seq, name, usd, tok, a in steps
    ]


def test_p19_a_token_budget_crossed_and_the_job_succeeded_is_flagged():
    """Contract §8.2 (soak/PROTOCOL.md P19): "fail the job `budget_exceeded` in the ack of the attempt whose
    step's returned spend crossed a budget" — a token budget as much as a dollar one."""
    r = baseline()
    _costed(r, 30, {"budget_tokens": 100}, [(1, "c1", 0, 60, 1), (2, "c2", 0, 60, 1)])
    p19 = duty(r.check(), "P19")
    assert p19.verdict == "invalid" and "P19 job 30" in p19.counterexamples[0], p19.to_json()


def test_p19_the_crossing_step_is_the_first_in_journal_order_not_by_name():
    """running.py _crossing: "the first (in seq order) after which a cumulative spend exceeds" the budget.
    Attempt 1 journaled `b` (60 of 100) and retried; attempt 2 journaled `a` (120): `a` crossed, and
    attempt 2 failed the job budget_exceeded — the duty held."""
    r = baseline()
    _costed(
        r,
        30,
        {"budget_usd_micros": 100},
        [(1, "b", 60, 0, 1), (2, "a", 60, 0, 2)],
        state="failed",
        attempt=2,
        result=None,
        errors=[err(1, "Boom", 1), err(2, "budget_exceeded", 2)],
    )
    p19 = duty(r.check(), "P19")
    assert p19.violations == 0 and p19.checks == 2, p19.to_json()


def test_p2_a_free_stretch_before_any_fault_allows_no_retry_backoff():
    """soak/PROTOCOL.md P2: a lease lost although its node was free "for a stretch longer than ttl/3 + 0.5 s
    + 2.5 s (one call) + 2.0 s after a fault (a retry backoff)" — the backoff only after a fault. w2-1 held
    the lease from +10 (never renewed, until +20) and ran free +10 … +17 (7 s > 6.33 s) before a crash."""
    r = baseline()
    r.jobs[1] = replace(
        r.jobs[1], attempt=2, errors=[err(1, "lease_expired", 21)], result=encode({"echo": 1, "attempt": 2})
    )
    r.history += [lease_sample(3.5 + i / 2, []) for i in range(13)]
    r.history += [lease_sample(10 + i / 2, [[1, 1, "w2-1", E0 + 20, "echo"]]) for i in range(14)]
    r.history += [{"t": E0 + 17, "type": "db_crash"}, {"t": E0 + 22, "type": "db_restarted"}]
    p2 = duty(r.check(), "P2")
    assert p2.verdict == "invalid" and "job 1: attempt 1 on node w2-1" in p2.counterexamples[0], p2.to_json()


def test_p2_a_lease_lost_after_its_node_died_is_not_a_renewal_failure():
    """soak/PROTOCOL.md P2: no attempt loses its lease "while its node is alive" — w3-1, killed at +30, claimed
    at +26 (lease until +36): only its 4 s alive count, not a renewal it could not make."""
    r = baseline()
    r.jobs[1] = replace(
        r.jobs[1], attempt=2, errors=[err(1, "lease_expired", 37)], result=encode({"echo": 1, "attempt": 2})
    )
    r.history += [lease_sample(3.5 + i / 2, []) for i in range(45)]
    r.history += [lease_sample(26 + i / 2, [[1, 1, "w3-1", E0 + 36, "echo"]]) for i in range(8)]
    p2 = duty(r.check(), "P2")
    assert p2.violations == 0 and p2.checks >= 1, p2.to_json()


# --- P11, P12, P13, P15, P17, P18 (soak/judges/duties/timing.py) ---------------------------------------------


def _late_claim(until: float | None, *extra: dict):
    r = baseline()
    r.history += [*extra, *drain(10, running=[[1, 1, "echo"]], seconds=12.0)]
    r.history += [
        lease_sample(12, [[1, 1, "w2-1", E0 + 19, "echo"]]),
        lease_sample(14, [[16, 1, "w2-1", None if until is None else E0 + until, "echo"]]),
    ]
    return duty(r.check(), "P11")


def test_p11_a_claim_stamped_a_second_after_the_sigterm_is_a_claim_after_it():
    """soak/PROTOCOL.md P11: an attempt "absent from a sample taken ≥ 1.5 s after the SIGTERM and present in a
    later one, whose lease (less ttl and the node's offset) was written after the SIGTERM". The lease of
    job 16 was written 1.0 s after w2-1's SIGTERM."""
    p11 = _late_claim(21.0)
    assert p11.verdict == "invalid" and "16/1" in p11.counterexamples[0], p11.to_json()


def test_p11_an_attempt_first_seen_after_the_sigterm_without_a_lease_is_a_claim_after_it():
    """soak/PROTOCOL.md P11: "no attempt claimed by the node after its own SIGTERM" — an attempt that appears
    running under the node after the settled sample is a claim after it, with no lease to date it earlier."""
    p11 = _late_claim(None)
    assert p11.verdict == "invalid" and "16/1" in p11.counterexamples[0], p11.to_json()


def test_p11_another_nodes_clock_offset_excuses_no_claim():
    """soak/PROTOCOL.md P11: the lease "less ttl and *the node's* offset" — w5-1 running 5 s ahead says
    nothing of w2-1's clock."""
    skewed = {"t": E0 - 1, "type": "worker_start", "node": "w5-1", "clock_skew": 5.0}
    p11 = _late_claim(23.5, skewed)
    assert p11.verdict == "invalid" and "16/1" in p11.counterexamples[0], p11.to_json()


def test_p12_a_cron_slot_off_the_minute_by_half_a_second_is_flagged():
    """Contract §8.5 (duties/timing.py P12): "a slot is a whole UTC minute"."""
    r = baseline()
    r.jobs[14] = replace(r.jobs[14], cron_slot=at(180.5))
    p12 = duty(r.check(), "P12")
    assert p12.verdict == "invalid" and "not a whole UTC minute" in p12.counterexamples[0], p12.to_json()


def test_p12_a_slot_due_just_after_the_pause_by_a_clock_running_ahead_is_not_flagged():
    """soak/PROTOCOL.md P12: "never one due after the row was paused" — judged with the run's clock skew
    allowed (duties/timing.py: `slot > t_paused + max_skew + 1.0`): with a node 5 s ahead, the slot of +180
    fired by its clock before the pause at +178 had reached it."""
    r = baseline()
    r.history = [e for e in r.history if e["type"] != "cron_paused"]
    r.history += [
        {"t": E0 - 1, "type": "worker_start", "node": "w5-1", "clock_skew": 5.0},
        {"t": E0 + 178, "type": "cron_paused", "name": "soak_cron"},
    ]
    p12 = duty(r.check(), "P12")
    assert p12.violations == 0 and p12.checks == 3, p12.to_json()


def test_p13_a_skewed_nodes_steps_are_dated_on_the_true_clock():
    """soak/PROTOCOL.md P13: "the driver's cancel time vs the steps' `inserted_at` (less the node's
    offset)". w5-1 runs 5 s ahead: steps it stamped +15.0 and +15.45 were journaled at +10.0 and +10.45 —
    only the step in flight at the cancel of +10.2 came after it."""
    r = baseline()
    r.history += [{"t": E0 - 1, "type": "worker_start", "node": "w5-1", "clock_skew": 5.0}]
    r.history += [lease_sample(9.5, [[20, 1, "w5-1", E0 + 9.5 + 10 + 5, "steps"]])]
    steps_job(r, times=[15.0, 15.45])
    r.history.append(cancel_requested(10.2, 20))
    p13 = duty(r.check(), "P13")
    assert p13.violations == 0 and p13.checks == 1, p13.to_json()


def _two_attempts_renewed_together(*, b_claimed: float) -> list[dict]:
    """Lease samples every 0.5 s (+50.5 … +80) of two attempts of w2-1, whose renewal statement runs every
    3.3 s (+53.3, +56.6, …; ttl 10): job 1 attempt 1, running from before +50 and gone after +67, renewed by
    each statement; job 16 attempt 1, claimed at +`b_claimed`, left out of every statement before +63.2."""

    def renewed(t: float) -> float:
        return E0 + 50 + 10 + 3.3 * int((t - 50) / 3.3)

    out = []
    for i in range(1, 61):
        t = 50 + i / 2
        rows = [[1, 1, "w2-1", renewed(t), "echo"]] if t < 67.5 else []
        if t >= b_claimed:
            rows.append([16, 1, "w2-1", renewed(t) if t >= 63.2 else E0 + b_claimed + 10, "echo"])
        out.append(lease_sample(t, rows))
    return out


def test_p14_an_attempt_the_renewal_statements_left_out_is_not_hidden_by_another_renewed_at_that_instant():
    """Contract §6: "Renew all local leases in one statement each ttl/3"; soak/PROTOCOL.md P14: "the
    intervals between a node's renewals (consecutive `lease_until` values of an attempt) … one above it by
    another ttl/3, is a finding". Job 16, claimed at +54, kept its claim's lease until the statement of
    +63.2 (9.2 s): two statements left it out. Job 1, renewed by that same statement 3.3 s after its
    previous one and judged first (it left the samples first), does not excuse it — each renewal instant
    counts once, at the worst interval an attempt shows there. Claimed at +62.9 instead, job 16 was renewed
    by the first statement after its claim: valid."""
    r = baseline()
    r.history += _two_attempts_renewed_together(b_claimed=54.0)
    p14 = duty(r.check(), "P14")
    assert p14.verdict == "invalid" and "job 16 attempt 1" in p14.counterexamples[0], p14.to_json()
    r = baseline()
    r.history += _two_attempts_renewed_together(b_claimed=62.9)
    p14 = duty(r.check(), "P14")
    assert p14.violations == 0 and p14.checks >= 6, p14.to_json()


def test_p14_a_skewed_nodes_renewals_meet_its_faults_on_the_true_clock():
    """soak/PROTOCOL.md P14: each interval is allowed "the overlap of that node's own faults" — the renewals'
    instants are its lease_until less the ttl and its declared offset. w5-1 runs 5 s ahead; its renewal 5 s
    late (true +10 … +18.5) came across its own SIGSTOP of +9.5 … +14.5: excused."""
    from tests.test_soak_duties import renewals

    r = baseline()
    samples = renewals("w5-1", 3.3, 5, stall=5.0)
    for e in samples:
        e["rows"] = [[j, a, n, u + 5.0, k] for j, a, n, u, k in e["rows"]]
    r.history += [{"t": E0 - 1, "type": "worker_start", "node": "w5-1", "clock_skew": 5.0}, *samples]
    r.history += [
        {"t": E0 + 9.5, "type": "worker_stop", "node": "w5-1"},
        {"t": E0 + 14.5, "type": "worker_cont", "node": "w5-1"},
    ]
    p14 = duty(r.check(), "P14")
    assert p14.violations == 0 and p14.checks >= 4, p14.to_json()


def test_p15_the_enqueued_max_attempts_is_the_one_most_jobs_kept():
    """duties/timing.py P15: "The enqueued value is the one this run's non-parking ledger jobs kept (the
    driver gives all the same)" — one job whose max_attempts an operator retry raised does not change it."""
    r = baseline()
    r.add(job(30, max_attempts=12, attempt=2, result={"echo": 30, "attempt": 2}), "echo")
    p15 = duty(r.check(), "P15")
    assert p15.violations == 0 and p15.verdict == "valid", p15.to_json()


def test_p17_sampler_lateness_counts_only_inside_the_free_stretch():
    """soak/PROTOCOL.md P17: the tolerance is 5 s "plus the harness's own sampling lateness in that
    stretch". The database was down +19 … +25; a 6 s gap between samples (+22 … +28) lay only 3 s inside
    the free stretch from +25: 2.5 s of lateness. At +33 (8 s free > 7.5 s) the expired lease is a finding."""
    r = baseline()
    rows = [[1, 1, "w2-1", E0 + 20, "echo"]]
    r.history += [lease_sample(15 + i / 2, rows) for i in range(15)]  # +15 … +22
    r.history += [lease_sample(28 + i / 2, rows) for i in range(11)]  # +28 … +33
    r.history += [{"t": E0 + 19, "type": "db_crash"}, {"t": E0 + 25, "type": "db_restarted"}]
    p17 = duty(r.check(), "P17")
    assert p17.verdict == "invalid" and "no sweeper reclaimed it" in p17.counterexamples[0], p17.to_json()


def test_p17_counts_from_the_claims_commit_recorded_by_the_trace_validation():
    """soak/PROTOCOL.md P17: overdue "from the later of its `lease_until` and the moment it became running
    (its claim's commit in the committed history, else its first lease sample)". w4-1's claim committed at
    +66.6 with its lease already expired; the samples first saw it at +68 and still at +73: 6.4 s running,
    more than 5 s + 0.9 s of sampler lateness, while w2-1 ran free."""
    from soak.judges.checker import SoakLedger, check
    from tests.test_soak_checker import from_rows

    r = baseline()
    r.history += [
        {"t": E0 - 1, "type": "worker_start", "node": "w4-1"},
        {"t": E0 + 40, "type": "worker_stop", "node": "w4-1"},
        {"t": E0 + 66.5, "type": "worker_cont", "node": "w4-1"},
        *(lease_sample(40 + i / 2, []) for i in range(53)),
        *(lease_sample(68 + i / 2, [[1, 2, "w4-1", E0 + 49.9, "echo"]]) for i in range(11)),
    ]
    state = from_rows(r.jobs.values(), r.steps, r.events, r.signals)
    ledger = SoakLedger(tuple(r.ledger), tuple(r.observations), tuple(r.unique))
    p17 = duty(check(state, ledger, r.history, {"claimed_expired": [[1, 2, E0 + 66.6]]}), "P17")
    assert p17.verdict == "invalid" and "no sweeper reclaimed it" in p17.counterexamples[0], p17.to_json()


def test_p17_no_node_alive_means_no_sweeper_to_blame():
    """soak/PROTOCOL.md P17: a finding "when some node ran free of its own faults (alive, not stopped, …)".
    After every worker ended (+260), a lease left expired is nobody's to reclaim."""
    r = baseline()
    r.history += [lease_sample(265 + i / 2, [[1, 1, "w2-1", E0 + 266, "echo"]]) for i in range(40)]
    p17 = duty(r.check(), "P17")
    assert p17.violations == 0, p17.to_json()


def test_p17_latency_on_every_live_nodes_route_excuses_the_sweep():
    """soak/PROTOCOL.md P17: "some node ran free of its own faults (alive, not stopped, not cut off or
    slowed, the database up)" — injected latency on every live node's route slows every sweeper."""
    r = baseline()
    for e in r.history:
        if e.get("type") == "worker_start":
            e["slot"] = {"w1-1": 1, "w2-1": 2, "w3-1": 3}[e["node"]]
    r.history += [
        {"t": E0 + 18, "type": "net_latency", "slot": s, "node": n, "seconds": 30, "latency": 0.2}
        for s, n in ((1, "w1-1"), (2, "w2-1"), (3, "w3-1"))
    ]
    r.history += [lease_sample(15 + i / 2, [[1, 1, "w2-1", E0 + 20, "echo"]]) for i in range(35)]
    p17 = duty(r.check(), "P17")
    assert p17.violations == 0, p17.to_json()
