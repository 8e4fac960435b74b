"""Issue 51: the judges of order and time over the committed history (soak/judges/timing/), on
hand-built transactions and fault logs. Pure and fast (no database). Each judge is seen failing on its
planted pattern and passing on the honest one next to it."""

from __future__ import annotations

from dataclasses import replace

from soak.judges.timing import CLAIM_HOLD_MIN, NOW_BASE, ClaimOrder, Freshness, NodeFaults, load_faults
from tests.test_soak_checker import E0, at, job


def faults(*events: dict) -> NodeFaults:
    base = [
        {"t": E0 - 1, "type": "worker_start", "node": "w1-1", "slot": 1},
        {"t": E0 - 1, "type": "worker_start", "node": "w2-1", "slot": 2},
    ]
    return load_faults([*base, *events, {"t": E0 + 500, "type": "snapshot"}])


# --- now freshness ---------------------------------------------------------------------------------------


def test_a_write_stamped_long_before_its_commit_with_no_fault_of_its_node_is_stale():
    f = Freshness(faults())
    f.judge("w1-1", at(10), at(10 + NOW_BASE + 3), "ack of job 7 attempt 1", "0/1")
    f.judge("w1-1", at(20), at(20 + NOW_BASE + 3), "step 's1' of job 8", "0/2")
    lines = f.lines()
    assert f.count == 2 and "w1-1 2" in lines[0] and "ack of job 7 attempt 1 on node w1-1" in lines[1], lines


def test_the_nodes_own_sigstop_excuses_the_lag_up_to_its_duration_only():
    stop = [
        {"t": E0 + 11, "type": "worker_stop", "node": "w1-1"},
        {"t": E0 + 19, "type": "worker_cont", "node": "w1-1"},
    ]
    f = Freshness(faults(*stop))
    f.judge("w1-1", at(10), at(20), "ack of job 7 attempt 1", "0/1")  # 10 s lag, 8 s of it stopped
    assert f.count == 0
    f.judge("w1-1", at(10), at(10 + 8 + NOW_BASE + 1), "ack of job 8 attempt 1", "0/2")  # beyond stop + base
    assert f.count == 1


def test_another_nodes_fault_excuses_nothing():
    stop = [
        {"t": E0 + 11, "type": "worker_stop", "node": "w2-1"},
        {"t": E0 + 19, "type": "worker_cont", "node": "w2-1"},
    ]
    f = Freshness(faults(*stop))
    f.judge("w1-1", at(10), at(20), "ack of job 7 attempt 1", "0/1")
    f.judge("w1-1", at(30), at(40), "ack of job 9 attempt 1", "0/2")
    assert f.count == 2 and f.lines()


def test_a_database_crash_restart_and_a_partition_of_its_route_excuse_the_node():
    events = [
        {"t": E0 + 11, "type": "db_crash"},
        {"t": E0 + 18, "type": "db_restarted"},
        {"t": E0 + 31, "type": "net_partition", "slot": 1, "node": "w1-1"},
        {"t": E0 + 38, "type": "net_heal", "slot": 1, "node": "w1-1", "fault": "partition"},
    ]
    f = Freshness(faults(*events))
    f.judge("w1-1", at(10), at(21), "ack of job 7 attempt 1", "0/1")
    f.judge("w1-1", at(30), at(41), "ack of job 8 attempt 1", "0/2")
    assert f.count == 0
    f.judge("w2-1", at(30), at(41), "ack of job 9 attempt 1", "0/3")  # w1-1's partition is not w2-1's
    assert f.count == 1


def test_the_declared_clock_offset_is_not_lag_and_a_starved_harness_excuses_every_node():
    skewed = {"t": E0 - 1, "type": "worker_start", "node": "w3-1", "slot": 3, "clock_skew": 4.0}
    samples = [{"t": E0 + s / 2, "type": "lease_sample", "at": E0 + s / 2, "rows": []} for s in range(0, 40)]
    samples += [{"t": E0 + 30, "type": "lease_sample", "at": E0 + 30, "rows": []}]  # 10.5 s without a sample
    f = Freshness(faults(skewed, *samples))
    f.judge("w3-1", at(14), at(10 + NOW_BASE - 0.5), "ack of job 7 attempt 1", "0/1")  # now ahead by its 4 s
    f.judge("w1-1", at(20), at(20 + NOW_BASE + 4), "ack of job 8 attempt 1", "0/2")  # the machine stalled
    assert f.count == 0
    f.judge("w1-1", at(40), at(40 + NOW_BASE + 4), "ack of job 9 attempt 1", "0/3")
    assert f.count == 1


def test_harness_writes_and_unknown_writers_are_not_judged():
    f = Freshness(faults())
    f.judge(None, at(0), at(60), "enqueue", "0/1")
    f.judge("soak-harness", at(0), at(60), "ack", "0/2")
    assert f.count == 0 and f.judged == 0


# --- claim order ---------------------------------------------------------------------------------------


def ready(i: int, t: float, **kw):
    return job(i, state="ready", ready_at=at(t), inserted_at=at(t), started_at=None, finished_at=None, **kw)


def claimed(j, node: str, t: float):
    return replace(j, state="running", attempt=j.attempt + 1, leased_by=node, lease_until=at(t + 10), started_at=at(t))


def run_newest_first(order: ClaimOrder, n: int = 8, write_old_at: float | None = None) -> None:
    """Rows 1..n enqueued at +1..+n; claims every 1.5 s from +20 take the newest row left."""
    rows = {i: ready(i, i) for i in range(1, n + 1)}
    for i, j in rows.items():
        order.observe({i: (None, j)}, at(i), f"0/{i}")
    t = 20.0
    for i in range(n, 0, -1):
        if write_old_at is not None and t >= write_old_at and 1 in rows:  # another transaction takes row 1
            order.observe({1: (rows[1], claimed(rows[1], "w2-1", t - 0.1))}, at(t - 0.05), "0/w")
            del rows[1]
        if i not in rows:
            continue
        b = rows.pop(i)
        order.observe({i: (b, claimed(b, "w1-1", t))}, at(t + 0.05), f"0/c{i}", [("w1-1", "soak", at(t), False)])
        t += 1.5
    order.finish(at(t + 10))


def test_claims_that_keep_passing_over_older_claimable_rows_are_proven_inversions():
    order = ClaimOrder(faults())
    run_newest_first(order)
    lines = order.lines()
    assert order.repeat_rows >= 2 and lines and "P5 claim order" in lines[0], (order.repeat_rows, lines)
    assert any(line.startswith("P5 job ") and "passed over by the claim of w1-1" in line for line in lines), lines
    assert any(line.startswith("P5 the claim of w1-1") for line in lines), lines


def test_claims_in_order_pass_nothing_over():
    order = ClaimOrder(faults())
    rows = {i: ready(i, i) for i in range(1, 6)}
    for i, j in rows.items():
        order.observe({i: (None, j)}, at(i), f"0/{i}")
    for k, i in enumerate(range(1, 6)):
        t = 20 + 1.5 * k
        order.observe(
            {i: (rows[i], claimed(rows[i], "w1-1", t))}, at(t + 0.05), "0/c", [("w1-1", "soak", at(t), False)]
        )
    order.finish(at(40))
    assert order.inversions == 0 and order.lines() == []


def test_a_row_taken_by_a_concurrent_transaction_soon_after_is_an_honest_skip():
    order = ClaimOrder(faults())
    rows = {i: ready(i, i) for i in range(1, 4)}
    for i, j in rows.items():
        order.observe({i: (None, j)}, at(i), f"0/{i}")
    # w1-1 passes over row 1 (locked by w2-1's concurrent claim, which commits just after)
    order.observe({2: (rows[2], claimed(rows[2], "w1-1", 20))}, at(20.05), "0/a", [("w1-1", "soak", at(20), False)])
    order.observe({1: (rows[1], claimed(rows[1], "w2-1", 19.9))}, at(20.1), "0/b", [("w2-1", "soak", at(19.9), False)])
    order.finish(at(40))
    assert order.inversions == 1 and order.proven_rows == 0 and order.lines() == []


def test_rows_not_yet_due_by_the_claims_clock_or_committed_after_its_now_are_not_passed_over():
    order = ClaimOrder(faults())
    late = ready(1, 30)  # due at +30, after the claims below
    fresh = ready(2, 1)
    order.observe({1: (None, late)}, at(1), "0/1")
    order.observe({3: (None, ready(3, 2))}, at(2), "0/3")
    order.observe({2: (None, fresh)}, at(20.5), "0/2")  # committed 0.5 s before the claim's now
    order.observe(
        {3: (ready(3, 2), claimed(ready(3, 2), "w1-1", 21))}, at(21.1), "0/c", [("w1-1", "soak", at(21), False)]
    )
    assert order.inversions == 0


def test_a_freeze_excuses_only_the_rows_a_frozen_claim_could_hold_and_only_while_it_lasts():
    plain = ClaimOrder(faults())
    run_newest_first(plain)
    stop = [
        {"t": E0 + 19, "type": "worker_stop", "node": "w2-1"},
        {"t": E0 + 60, "type": "worker_cont", "node": "w2-1"},
    ]
    frozen = ClaimOrder(faults(*stop))
    run_newest_first(frozen)
    # each claim under the freeze: its first LOCKS_PER_TAKE × (largest claim) passed-over rows excused
    assert frozen.excused_fault > 0 and 0 < frozen.proven_rows < plain.proven_rows
    assert frozen.lines()  # the rows beyond what a frozen claim could hold are still out of order
    brief = [
        {"t": E0 + 19, "type": "worker_stop", "node": "w2-1"},
        {"t": E0 + 21, "type": "worker_cont", "node": "w2-1"},
    ]
    order = ClaimOrder(faults(*brief))
    run_newest_first(order)
    assert 0 < order.excused_fault < frozen.excused_fault and order.proven_rows >= 2  # claims after it: judged


def test_a_claim_passing_over_more_rows_than_the_claims_beside_it_could_hold_is_out_of_order():
    def run(n_passed: int) -> ClaimOrder:
        order = ClaimOrder(faults())
        rows = {i: ready(i, i) for i in range(1, n_passed + 3)}
        for i, j in rows.items():
            order.observe({i: (None, j)}, at(i), f"0/{i}")
        newest = n_passed + 2
        # w2-1's claim (1 row: it may lock 2) is in flight beside w1-1's, which takes the newest row
        order.observe(
            {newest: (rows[newest], claimed(rows[newest], "w1-1", 20))},
            at(20.05),
            "0/a",
            [("w1-1", "soak", at(20), False)],
        )
        order.observe(
            {1: (rows[1], claimed(rows[1], "w2-1", 19.99))}, at(20.06), "0/b", [("w2-1", "soak", at(19.99), False)]
        )
        order.finish(at(21))
        return order

    honest = run(3)  # rows 1–4 passed over: w2-1 held ≤ 2, one untraced claim ≤ 2
    assert honest.over_capacity == [], honest.judged_claims
    broken = run(8)  # rows 1–9 passed over: more than both could hold
    assert broken.over_capacity == [0] and broken.judged_claims[0][5] == 9, broken.judged_claims


def test_admission_queues_are_not_judged():
    order = _two_claims_passing_over("w1-1", admission=True)
    assert order.judged == 0 and order.skipped_admission == 2 and order.lines() == []


def _two_claims_passing_over(node: str, admission: bool = False) -> ClaimOrder:
    """Rows 1..4 of one queue ready; two claims by `node` 5 s apart each take a row later in §6 order and
    pass rows 1 and 2 over — the lost-wakeup scenario's shape when `node` is the harness, which takes a
    parent's external children by `parent_id` (seed 62's Node soak: P5 INVALID on two harness claims)."""
    order = ClaimOrder(faults())
    rows = {i: ready(i, i) for i in range(1, 5)}
    for i, j in rows.items():
        order.observe({i: (None, j)}, at(i), f"0/{i}")
    for k, i in enumerate((4, 3)):
        t = 20 + 5 * k
        order.observe(
            {i: (rows[i], claimed(rows[i], node, t))}, at(t + 0.05), "0/c", [(node, "soak", at(t), admission)]
        )
    order.finish(at(60))
    return order


def test_the_harnesss_own_claims_are_not_judged_and_the_same_claims_by_a_node_are():
    harness = _two_claims_passing_over("soak-harness")
    assert harness.judged == 0 and harness.skipped_harness == 2 and harness.lines() == []
    node = _two_claims_passing_over("w1-1")
    assert node.judged == 2 and node.repeat_rows == 2 and node.lines(), node.lines()


def test_a_claim_committed_with_its_lease_already_expired_is_recorded_for_p17():
    order = ClaimOrder(faults())
    j = ready(1, 1)
    order.observe({1: (None, j)}, at(1), "0/1")
    c = replace(claimed(j, "w1-1", 10), lease_until=at(20))
    order.observe({1: (j, c)}, at(36.7), "0/c", [("w1-1", "soak", at(10), False)])
    assert order.claimed_expired == [(1, 2, round(E0 + 36.7, 3))]


def test_hold_is_the_runs_longest_fault_free_claim_at_least_the_floor():
    order = ClaimOrder(faults())
    assert order.hold == CLAIM_HOLD_MIN
    order.claim_lags.append(CLAIM_HOLD_MIN + 1)
    assert order.hold == CLAIM_HOLD_MIN + 1


# --- the wiring: findings reach their verdicts ------------------------------------------------------------


def test_claim_order_findings_of_the_committed_history_make_p5_invalid():
    from soak.judges.checker import SoakLedger, check
    from tests.test_soak_checker import baseline, from_rows

    r = baseline()
    state = from_rows(r.jobs.values(), r.steps, r.events, r.signals)
    ledger = SoakLedger(tuple(r.ledger), tuple(r.observations), tuple(r.unique))
    line = "P5 claim order: 3 row(s) passed over by claims that took rows later in §6 order"
    committed = {"claim_order": [line], "timing": {"claims_order_judged": 40}}
    p5 = check(state, ledger, r.history, committed).duties["P5"]
    assert p5.verdict == "invalid" and p5.counterexamples[0] == line


def test_stale_writes_make_the_trace_validation_invalid(monkeypatch):
    from soak.judges import refine, timing

    line = "now freshness: 2 write(s) stamped more than 5 s before their commit"
    monkeypatch.setattr(timing.Freshness, "lines", lambda self: [line])
    result = refine.validate([], [{"t": E0, "type": "run_start", "lease_ttl": 10}])
    assert result.verdict == "invalid" and result.why == line and result.stale_now == [line]


def _rounds(honest: bool) -> ClaimOrder:
    """Three rounds, 20 s apart: rows a < p < n become claimable; w1-1 claims n (passing over p) while
    w2-1's claim is in flight — taking a (earlier than p: it may have locked p and left it, honest) or,
    out of order, a row newer than p; p is taken by a claim begun after both committed."""
    order = ClaimOrder(faults())
    for k in range(3):
        base, t = 10 * k + 1, 20.0 * (k + 1)
        a, p, n, n2 = (ready(base + i, t - 5 + i * 0.1) for i in range(4))
        for j in (a, p, n, n2):
            order.observe({j.id: (None, j)}, at(t - 5), f"0/{j.id}")
        other = a if honest else n2
        order.observe({n.id: (n, claimed(n, "w1-1", t))}, at(t + 0.05), f"0/c{k}", [("w1-1", "soak", at(t), False)])
        order.observe(
            {other.id: (other, claimed(other, "w2-1", t))}, at(t + 0.06), f"0/d{k}", [("w2-1", "soak", at(t), False)]
        )
        rest = [x for x in (a, p, n2) if x.id != other.id]
        for i, x in enumerate(rest):
            order.observe(
                {x.id: (x, claimed(x, "w1-1", t + 1 + i))},
                at(t + 1.05 + i),
                "0/e",
                [("w1-1", "soak", at(t + 1 + i), False)],
            )
    order.finish(at(100))
    return order


def test_rows_only_an_untraced_transaction_could_have_held_are_counted_and_repeated_they_are_out_of_order():
    broken = _rounds(honest=False)
    assert broken.repeat_rows == 0 and broken.untraced_rows >= 3 and broken.aborts_needed >= 3, vars(broken)
    lines = broken.lines()
    assert lines and any("with no transaction of the history able to hold it" in line for line in lines), lines
    honest = _rounds(honest=True)  # w2-1 took a row earlier than p: it may have locked p and left it
    assert honest.untraced_rows == 0 and honest.lines() == [], vars(honest)


def test_claims_that_had_a_choice_within_their_priority_are_counted_those_that_took_the_only_row_are_not():
    """Coverage row P5 counts the risky case itself (issue 51): a claim that left a claimable row of its
    priority untaken — passed over (earlier in §6 order) or left for later."""
    order = ClaimOrder(faults())
    rows = {i: ready(i, i) for i in range(1, 4)}
    for i, j in rows.items():
        order.observe({i: (None, j)}, at(i), f"0/{i}")
    # in order, with rows 2 and 3 still claimable: a choice
    order.observe({1: (rows[1], claimed(rows[1], "w1-1", 20))}, at(20.05), "0/a", [("w1-1", "soak", at(20), False)])
    assert order.choices == 1
    # both remaining rows at once: no choice left
    order.observe(
        {2: (rows[2], claimed(rows[2], "w1-1", 22)), 3: (rows[3], claimed(rows[3], "w1-1", 22))},
        at(22.05),
        "0/b",
        [("w1-1", "soak", at(22), False)],
    )
    assert order.choices == 1
    # a row of another priority left untaken is no choice within the priority
    low = ready(4, 23, priority=9)
    high = ready(5, 23)
    order.observe({4: (None, low), 5: (None, high)}, at(23), "0/4")
    order.observe({5: (high, claimed(high, "w1-1", 30))}, at(30.05), "0/c", [("w1-1", "soak", at(30), False)])
    assert order.choices == 1
    # newest first: the claim passes an older row over — a choice (and an inversion)
    order2 = ClaimOrder(faults())
    run_newest_first(order2, n=3)
    assert order2.choices == 2  # the last claim took the only row left


def test_p5_is_unknown_when_no_claim_had_a_choice_within_its_priority():
    from soak.judges.checker import SoakLedger, check
    from tests.test_soak_checker import baseline, from_rows

    r = baseline()
    state = from_rows(r.jobs.values(), r.steps, r.events, r.signals)
    ledger = SoakLedger(tuple(r.ledger), tuple(r.observations), tuple(r.unique))
    none = check(state, ledger, r.history, {"timing": {"claims_order_judged": 40, "claims_with_choice": 0}})
    some = check(state, ledger, r.history, {"timing": {"claims_order_judged": 40, "claims_with_choice": 7}})
    cover = {row["row"]: row for row in some.coverage}["P5"]
    assert {s["key"]: s["count"] for s in cover["scenarios"]}["claim_choice"] == 7
    assert none.duties["P5"].verdict == "unknown" and "claim_choice" not in (none.duties["P5"].why_unknown or "")
    assert "had a choice within its priority" in (none.duties["P5"].why_unknown or "")


def test_the_indexed_fault_window_queries_answer_as_the_scans_of_every_window():
    """soak/judges/timing/nodes.py finds the windows near a query through sorted starts and ends (issue 54
    target 5: a long run's claims each scanned every window of the run). On random fault logs — short and
    long windows, windows left open to the end, cuts of one node and of all — excuse and any_freeze answer
    as the plain scans over every window do, and the bisect count any_freeze uses equals freezes' scan."""
    import random

    def excuse_scan(f: NodeFaults, node: str, t0: float, t1: float) -> tuple[float, list[str]]:
        spans = sorted((max(a, t0), min(b, t1), what) for a, b, what in f.windows(node) if a <= t1 and b >= t0)
        total, reach, names = 0.0, t0, []
        for a, b, what in spans:
            if b > reach:
                total += b - max(a, reach)
                reach = b
            names.append(what)
        return total, sorted(set(names))

    def any_scan(f: NodeFaults, t0: float, t1: float) -> bool:
        ws = [w for v in (*f.stopped.values(), *f.isolated.values(), *f.slowed.values()) for w in v]
        ws += [[a, b] for _n, a, b in f.cuts]
        return any(a <= t1 and min(b, f.end) >= t0 for a, b in ws)

    rng = random.Random(54)
    nodes = ["w1-1", "w2-1", "w3-1"]
    for _ in range(30):
        events: list[dict] = [{"t": E0 - 1, "type": "worker_start", "node": n, "slot": i} for i, n in enumerate(nodes)]
        t = E0
        for _ in range(rng.randint(0, 60)):
            t += rng.choice([0.2, 1.0, 5.0, 30.0, 90.0])
            node, slot = rng.choice(nodes), rng.randrange(3)
            kind = rng.choice(["stop", "cont", "part", "heal", "lat", "crash", "up", "cut", "uncut", "sample"])
            events.append(
                {
                    "stop": {"t": t, "type": "worker_stop", "node": node},
                    "cont": {"t": t, "type": "worker_cont", "node": node},
                    "part": {"t": t, "type": "net_partition", "slot": slot},
                    "heal": {"t": t, "type": "net_heal", "slot": slot, "fault": rng.choice(["partition", "latency"])},
                    "lat": {"t": t, "type": "net_latency", "slot": slot},
                    "crash": {"t": t, "type": "db_crash"},
                    "up": {"t": t, "type": "db_restarted"},
                    "cut": {"t": t, "type": "cut_start", "node": rng.choice([node, None])},
                    "uncut": {"t": t, "type": "cut_end", "node": node},
                    "sample": {"t": t, "type": "lease_sample", "at": t},
                }[kind]
            )
        f = load_faults([*events, {"t": t + 5, "type": "snapshot"}])
        edges = [x for _n, a, b, _w in ((n, *w) for n in nodes for w in f.windows(n)) for x in (a, b)] or [E0]
        for _ in range(200):
            t0 = rng.uniform(E0 - 10, t + 10) if rng.random() < 0.5 else rng.choice(edges)  # edges: ties
            t1 = t0 + rng.choice([-1.0, 0.0, 0.5, 3.0, 40.0, 200.0]) if rng.random() < 0.7 else rng.choice(edges)
            node = rng.choice([*nodes, "w9-9"])
            assert f.excuse(node, t0, t1) == excuse_scan(f, node, t0, t1)
            counted = f._freeze_count(t0, t1)
            assert counted is None or counted == f.freezes(t0, t1)
            assert (f.any_freeze(t0, t1) is not None) == any_scan(f, t0, t1)


# --- claim order's memory: flat in the run's length (issue 54, target 5) -----------------------------------


def _drain_in_order(order: ClaimOrder, n: int, queue: str = "other", first_id: int = 1000, t0: float = 100.0) -> None:
    """n rows of `queue`, each enqueued then claimed 0.1 s later by w3-1 in §6 order: nothing passed over."""
    for k in range(n):
        i, t = first_id + k, t0 + 0.1 * k
        r = ready(i, t, queue=queue)
        order.observe({i: (None, r)}, at(t), f"1/{k}")
        order.observe(
            {i: (r, claimed(r, "w3-1", t + 0.05))}, at(t + 0.08), f"2/{k}", [("w3-1", queue, at(t + 0.05), False)]
        )


def test_an_honest_run_keeps_no_judged_claim_and_only_the_claims_a_later_claim_can_look_back_to():
    """The end-of-run judgement reads a judged claim only when it passed over a row (its capacity, the rows
    that refer to it), and a claim in `claims` only inside such a claim's window or within the reach of a
    claim still to come (its `now` at most the validation's LAG before its commit): 20,000 claims over
    2,000 s keep none of the first and about LAG's worth of the second — not one record per claim."""
    order = ClaimOrder(faults(), claim_lag_max=300.0)
    _drain_in_order(order, 20_000)
    order.finish(at(2200))
    assert order.judged == 20_000 and order.judged_claims == {} and order.lines() == []
    (lag,) = order.claim_lags  # HOLD needs the longest fault-free claim lag only (each claim: commit − now)
    assert abs(lag - 0.03) < 1e-6 and order.hold == CLAIM_HOLD_MIN
    kept = len(order.claims["other"])
    assert kept < 10_000, kept  # ≤ TRIM_EVERY + the last ~361 s (3,610 claims)
    every = ClaimOrder(faults())  # without the bound: every claim kept, as before
    _drain_in_order(every, 20_000)
    assert len(every.claims["other"]) == 20_000


def test_the_claims_a_kept_judged_claim_needs_survive_the_trim_and_its_judgement_is_unchanged():
    """A claim that passed over rows is judged at the end against the claims in flight beside it (`_capacity`:
    [its now − SNAP_SLACK, its commit + INFLIGHT_MAX]); trimming long after must keep those, or an honest
    claim — whose neighbour held the rows it passed over — turns into one over capacity."""

    def run(claim_lag_max: float | None) -> ClaimOrder:
        order = ClaimOrder(faults(), claim_lag_max=claim_lag_max)
        rows = {i: ready(i, i) for i in range(1, 6)}
        for i, j in rows.items():
            order.observe({i: (None, j)}, at(i), f"0/{i}")
        # w1-1 takes row 5, passing over 1–4; w2-1's claim, committed just after, was in flight beside it
        order.observe({5: (rows[5], claimed(rows[5], "w1-1", 20))}, at(20.05), "0/a", [("w1-1", "soak", at(20), False)])
        order.observe(
            {1: (rows[1], claimed(rows[1], "w2-1", 19.99))}, at(20.3), "0/b", [("w2-1", "soak", at(19.99), False)]
        )
        _drain_in_order(order, 12_000)  # 1,200 s of claims on another queue: trims far past the horizon
        order.finish(at(1400))
        return order

    trimmed, every = run(300.0), run(None)
    assert len(every.claims["soak"]) == 2 and len(trimmed.claims["soak"]) == 2, trimmed.claims["soak"]
    assert trimmed.over_capacity == every.over_capacity == [] and trimmed.judged_claims == every.judged_claims
    assert trimmed.lines() == every.lines() == []
