"""The certifier's rules where the mutant catalogue's certifier tier found them untested (issue 32).

`python -m properties.mutants --tier certifier` weakens one rule of soak/judges/checker.py, soak/judges/duties/,
soak/judges/coverage.py or soak/judges/verdicts.py at a time; each test here is the evidence that the weakened rule
would have passed — a hand-built snapshot, ledger and fault log (tests/test_soak_checker.py's baseline
run, broken in one place) that the rule must fail, or a run whose scenario did not happen that it must
not call valid. Pure and fast: no database.
"""

from __future__ import annotations

from dataclasses import replace

from model.envelope import encode
from soak.judges.checker import UniqueAttempt
from soak.judges.verdicts import InvariantResult
from tests.test_soak_checker import E0, at, baseline, err, job


def duty(result, name):
    return result.duties[name]


def coverage_count(result, row: str, key: str) -> int:
    entry = next(x for x in result.coverage if x["row"] == row)
    return {s["key"]: s["count"] for s in entry["scenarios"]}[key]


# --- soak/judges/verdicts.py: how a rule's findings become its verdict ------------------------------------------


def test_a_rule_that_held_but_was_never_exercised_is_unknown_not_valid():
    r = InvariantResult("X", checks=12)
    r.finish()
    assert r.verdict == "unknown" and r.why_unknown == "not exercised in this run"
    r = InvariantResult("X", checks=12, exercised=True)
    r.finish()
    assert r.verdict == "valid"


def test_a_rule_with_violations_is_invalid_whether_or_not_its_scenario_was_exercised():
    r = InvariantResult("X")
    r.add(["job 1 broke it"])
    r.finish()
    assert r.verdict == "invalid" and r.counterexamples == ["job 1 broke it"]


# --- I7: admissions counted per key from the ledger, in both modes that admit a key once ------------------


def test_i7_an_always_key_admitted_again_after_retention_deleted_its_first_holder_is_flagged():
    """The model's predicate sees one row (the first holder is gone): only the ledger's admissions show
    that the key was admitted twice."""
    r = baseline()
    r.unique += [UniqueAttempt(2, "alw-1", "always", "inserted", 16, at(1))]
    r.add(job(17, unique_key="alw-1", unique_mode="always"), "echo")
    r.unique += [UniqueAttempt(3, "alw-1", "always", "inserted", 17, at(2))]
    i7 = r.check().invariants["I7"]
    assert i7.verdict == "invalid", i7.to_json()
    assert any("always-mode key 'alw-1' was admitted 2 times: [16, 17]" in c for c in i7.counterexamples)


def test_i7_a_window_key_admitted_twice_in_one_window_is_flagged_even_when_the_rows_hide_the_mode():
    """A store that admitted the second insert of a window key as if its mode were `incomplete` (the first
    holder had finished) wrote the second row with that mode: the rows alone are a finished window holder
    and a live incomplete one — only the ledger says both were window-mode admissions of one window."""
    r = baseline()
    r.add(job(16, unique_key="win-1@5", unique_mode="window"), "echo")
    r.unique += [UniqueAttempt(2, "win-1", "window", "inserted", 16, at(1))]
    r.add(job(17, unique_key="win-1@5", unique_mode="incomplete"), "echo")
    r.unique += [UniqueAttempt(3, "win-1", "window", "inserted", 17, at(3))]
    i7 = r.check().invariants["I7"]
    assert i7.verdict == "invalid", i7.to_json()
    assert any("window-mode key 'win-1@5' was admitted 2 times: [16, 17]" in c for c in i7.counterexamples)


def test_i7_window_keys_admitted_once_per_window_are_valid():
    r = baseline()
    r.add(job(16, unique_key="win-1@5", unique_mode="window"), "echo")
    r.unique += [UniqueAttempt(2, "win-1", "window", "inserted", 16, at(1))]
    r.add(job(17, unique_key="win-1@6", unique_mode="window"), "echo")
    r.unique += [UniqueAttempt(3, "win-1", "window", "inserted", 17, at(3))]
    assert r.check().invariants["I7"].verdict == "valid"


# --- coverage: a scenario is what could have exposed the violation, counted no more generously ----------


def test_p4_a_sigterm_that_found_no_job_running_is_not_a_drain():
    """SIGTERM of an idle worker drains nothing that could break: P4 stays unknown (issue 32's survivor)."""
    r = baseline()
    r.history += [
        {"t": E0 + 10, "type": "worker_drain_term", "node": "w2-1", "running": []},
        {"t": E0 + 10.5, "type": "worker_drained", "node": "w2-1", "code": 0, "seconds": 0.5},
    ]
    result = r.check()
    assert coverage_count(result, "P4", "drains") == 0
    p4 = duty(result, "P4")
    assert p4.verdict == "unknown" and "SIGTERM of a worker with jobs running" in p4.why_unknown
    r.history[-2]["running"] = [[1, 1, "echo"]]
    assert duty(r.check(), "P4").verdict == "valid"


def test_reclaims_count_lease_expiries_only():
    """A run whose jobs only failed by their own errors reclaimed nothing: I1 and P16 stay unknown."""
    r = baseline()
    r.jobs[3] = replace(r.jobs[3], errors=[err(1, "Planned", 1.9), err(2, "budget_exceeded", 2)])
    r.jobs[11] = replace(r.jobs[11], errors=[err(1, "Planned", 20)])
    result = r.check()
    assert coverage_count(result, "I1", "reclaims") == 0
    assert result.invariants["I1"].verdict == "unknown" and "leases reclaimed" in result.invariants["I1"].why_unknown
    assert duty(result, "P16").verdict == "unknown"


def test_a_workers_own_exit_is_not_a_kill():
    r = baseline()
    r.history = [e for e in r.history if e["type"] != "worker_kill"]
    r.history.append({"t": E0 + 30, "type": "worker_exit", "node": "w3-1", "code": 0})
    r.observations.append(r.observations[0].__class__(1, 1, "w3-1", "exit", {"reason": "flaky exit"}, at(29)))
    result = r.check()
    assert coverage_count(result, "I1", "kills") == 0
    assert result.invariants["I1"].verdict == "unknown" and "kill -9" in result.invariants["I1"].why_unknown


def test_a_short_lease_is_not_a_long_lease():
    """An attempt sampled for less than a ttl needed no renewal: P2 and P14 have nothing to stand on."""
    from tests.test_soak_duties import lease_sample

    r = baseline()
    r.history += [
        lease_sample(3, [[1, 1, "w2-1", E0 + 13, "echo"]]),
        lease_sample(6, [[1, 1, "w2-1", E0 + 13, "echo"]]),
    ]
    result = r.check()
    assert coverage_count(result, "P2", "long_leases") == 0
    assert duty(result, "P2").verdict == "unknown" and duty(result, "P14").verdict == "unknown"
    r.history.append(lease_sample(14, [[1, 1, "w2-1", E0 + 23, "echo"]]))  # held 11 s > ttl 10 s
    assert coverage_count(r.check(), "P2", "long_leases") == 1


def test_a_cancel_of_a_running_awaiter_is_not_a_cancel_awaiting_its_signal():
    r = baseline()
    r.history.append(
        {
            "t": E0 + 1,
            "type": "cancel",
            "job_id": 4,
            "result": "CancelRequested",
            "kind": "awaiter",
            "state_before": "running",
        }
    )
    assert coverage_count(r.check(), "P9", "cancel_awaiting_signal") == 0


# --- the duties at their exact thresholds -----------------------------------------------------------------


def test_p16_a_single_attempt_past_max_attempts_is_flagged():
    r = baseline()
    r.jobs[11] = replace(r.jobs[11], max_attempts=1, attempt=2)  # one reclaim too many, not a gross overrun
    p16 = duty(r.check(), "P16")
    assert p16.verdict == "invalid" and "ran attempt 2 of max_attempts 1" in p16.counterexamples[0]


def test_p13_two_steps_journaled_after_a_pending_cancel_are_flagged():
    from tests.test_soak_duties import cancel_requested, steps_job

    r = baseline()
    steps_job(r, times=[10.0, 10.45, 10.9], state="succeeded")  # s1 before, s2 in flight, s3 past the boundary
    r.history.append(cancel_requested(10.2, 20))
    p13 = duty(r.check(), "P13")
    assert p13.verdict == "invalid" and "2 steps (s2, s3) were journaled after it" in p13.counterexamples[0]


def test_p7_a_sleeper_resumed_once_without_a_journaled_sleep_is_flagged():
    r = baseline()
    r.add(
        job(
            40,
            "sleeper",
            input={"seconds": 2},
            state="ready",
            attempt=2,
            result=None,
            finished_at=None,
            ready_at=at(10_000),
        ),
        "sleeper",
    )
    p7 = duty(r.check(), "P7")
    assert p7.verdict == "invalid" and "resumed 1 time(s)" in p7.counterexamples[0]


def test_p4_a_drain_within_the_grace_that_left_a_running_job_to_lease_expiry_is_flagged():
    """The node exited 0 after 12 s (inside the 10–15 s grace) but never finished the job it was running at
    its SIGTERM: its lease expired after the signal."""
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], errors=[err(1, "lease_expired", 30)])
    r.history += [
        {"t": E0 + 10, "type": "worker_drain_term", "node": "w2-1", "running": [[2, 1, "steps"]]},
        {"t": E0 + 22, "type": "worker_drained", "node": "w2-1", "code": 0, "seconds": 12.0},
    ]
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid" and "without finishing it" in p4.counterexamples[0], p4.to_json()


def test_p14_two_slow_renewals_on_a_node_are_flagged():
    from tests.test_soak_duties import renewals

    r = baseline()
    r.history += renewals("w2-1", 6.5, 2)  # two intervals of 6.5 s: above ttl/3 + 0.5 s, under a missed renewal
    p14 = duty(r.check(), "P14")
    assert p14.verdict == "invalid" and "2 renewal interval(s) above ttl/3" in p14.counterexamples[0], p14.to_json()
    r = baseline()
    r.history += renewals("w2-1", 6.5, 1)  # one such interval alone is a stalled machine, not a cadence
    assert duty(r.check(), "P14").violations == 0


def test_i3_a_step_journaled_a_moment_after_the_ack_is_flagged():
    r = baseline()
    r.steps[1] = replace(r.steps[1], inserted_at=at(5.2))  # job 2 finished at +5
    i3 = r.check().invariants["I3"]
    assert i3.verdict == "invalid" and any("after the job finished" in c for c in i3.counterexamples)


def test_p8_a_result_whose_attempt_is_not_a_number_is_flagged():
    r = baseline()
    r.jobs[1] = replace(r.jobs[1], result=encode({"echo": 1, "attempt": "1"}))
    assert duty(r.check(), "P8").verdict == "invalid"


def test_i4_a_budget_failure_after_a_step_journaled_with_a_wrong_cost_is_flagged():
    """The journal alone is consistent (c1 journaled at 120 crosses the budget of 100, the job failed
    right after it): only the ledger knows that c1 costs 60 and the crossing step is c2 — a worker that
    charged c1 twice failed the job a step early. The model's predicate cannot see it; the checker's
    crossing rule must."""
    from tests.test_soak_checker import step

    r = baseline()
    r.steps = [s for s in r.steps if s.job_id != 3]
    r.steps.append(step(3, 1, "c1", {"token": "x", "attempt": 1}, usd=120))
    r.jobs[3] = replace(r.jobs[3], spent_usd_micros=120)
    i4 = r.check().invariants["I4"]
    assert i4.verdict == "invalid", i4.to_json()
    assert any("after step 'c1'; its costs cross the budget on step 'c2'" in c for c in i4.counterexamples)


def test_i8_a_parent_whose_children_are_not_the_ones_it_declared_is_named_with_both_lists():
    """As many children as declared, but not the declared ones (child 7 re-parented away, job 16 adopted):
    the model's predicate names the children's keys; the checker must also name the parent and both lists
    (a count comparison would find nothing)."""
    r = baseline()
    r.jobs[7] = replace(r.jobs[7], parent_id=None)
    r.add(job(16, parent_id=5, finished_at=at(8)))
    i8 = r.check().invariants["I8"]
    assert i8.verdict == "invalid"
    assert any("job 5: has children [6, 16] but its spawn declared [6, 7]" in c for c in i8.counterexamples), (
        i8.to_json()
    )


def test_i9_an_awaiter_cancelled_by_nobody_after_its_signal_was_delivered_is_flagged():
    """Not awaiting any more (the model's lost-wake-up predicate has nothing to see), not failed: cancelled
    although neither the driver nor its plan cancelled it — it never ran to completion."""
    r = baseline()
    r.jobs[4] = replace(r.jobs[4], state="cancelled", result=None)
    i9 = r.check().invariants["I9"]
    assert i9.verdict == "invalid"
    assert any("job 4: is cancelled although its signal 'go' was delivered" in c for c in i9.counterexamples)


def test_p1_a_node_that_wrote_observations_but_no_exit_one_has_not_asked_to_exit():
    """Only an `exit` observation makes a self-exit deliberate: w2-1 wrote pre_ack observations, then
    exited by itself."""
    r = baseline()
    r.history.append({"t": E0 + 41, "type": "worker_exit", "node": "w2-1", "code": 1})
    p1 = duty(r.check(), "P1")
    assert p1.verdict == "invalid" and "node w2-1 exited by itself" in p1.counterexamples[0], p1.to_json()


def test_p11_claims_after_sigterm_found_in_the_committed_history_make_the_duty_invalid():
    """The trace validation's P11 findings (soak/judges/refine/ `claims_after_term`) are the duty's
    counterexamples: a drain the lease samples never saw is still judged from the committed claims."""
    from model.state import from_rows
    from soak.judges.checker import SoakLedger, check

    r = baseline()
    r.history += [
        {"t": E0 + 10, "type": "worker_drain_term", "node": "w2-1", "running": [[1, 1, "echo"]]},
        {"t": E0 + 11, "type": "worker_drained", "node": "w2-1", "code": 0, "seconds": 1.0},
    ]
    state = from_rows(r.jobs.values(), r.steps, r.events, r.signals)
    ledger = SoakLedger(tuple(r.ledger), tuple(r.observations), tuple(r.unique))
    line = "P11 node w2-1 committed claims (up to 1 row(s)) after its own SIGTERM: the first 2.0 s after the signal"
    judged = check(state, ledger, r.history, committed={"drains_judged": 1, "claims_after_term": [line]})
    p11 = duty(judged, "P11")
    assert p11.verdict == "invalid" and p11.counterexamples == [line], p11.to_json()
    assert coverage_count(judged, "P11", "drains_sampled") == 1
    clean = duty(check(state, ledger, r.history, committed={"drains_judged": 1, "claims_after_term": []}), "P11")
    assert clean.verdict == "valid", clean.to_json()


# --- D1 (soak/judges/durability.py): committed work survives a failover --------------------------------------


def _watch(rows):
    return {"t": E0 + 50, "type": "failover_watch", "jobs": rows}


def test_d1_an_ack_committed_before_a_failover_and_gone_after_it_is_lost_work():
    """The watch saw job 1 succeeded on the old primary; the promoted standby holds it ready again."""
    r = baseline()
    seen = r.jobs[1]
    r.history += [{"t": E0 + 49, "type": "failover_begin", "mode": "async"}]
    r.history += [_watch([[1, "echo", "succeeded", 1, seen.inserted_at.isoformat(), seen.finished_at.isoformat()]])]
    assert r.check().invariants["D1"].verdict == "valid"
    r.jobs[1] = replace(seen, state="ready", result=None, finished_at=None)
    d1 = r.check().invariants["D1"]
    assert d1.verdict == "invalid" and "the ack was lost and the job ran again" in d1.counterexamples[0], d1.to_json()


def test_d1_an_id_reused_by_another_enqueue_after_a_failover_is_a_lost_enqueue():
    """The standby never got job 1's insert; a later enqueue took the same id: the row exists, but it is
    not the job the watch saw committed (its inserted_at differs)."""
    r = baseline()
    seen = r.jobs[1]
    r.history += [{"t": E0 + 49, "type": "failover_begin", "mode": "async"}]
    r.history += [_watch([[1, "echo", "running", 1, seen.inserted_at.isoformat(), None]])]
    r.jobs[1] = replace(seen, inserted_at=at(60))
    d1 = r.check().invariants["D1"]
    assert d1.verdict == "invalid" and "the enqueue was lost" in d1.counterexamples[0], d1.to_json()


def test_p18_a_queue_that_never_reached_its_global_limit_leaves_the_duty_unknown():
    """One live lease on a queue whose global_limit is 2: the limit never bound, so no claim could have
    over-admitted — not the scenario that makes P18 valid."""
    from tests.test_soak_duties import ADMISSION, _sample

    r = baseline()
    r.history += [{"t": E0, "type": "admission_queues", "queues": ADMISSION}, _sample(5, {"soak-global": 1})]
    result = r.check()
    assert coverage_count(result, "P18", "admission_at_limit") == 0
    p18 = duty(result, "P18")
    assert p18.violations == 0 and p18.verdict == "unknown", p18.to_json()
    r.history.append(_sample(6, {"soak-global": 2}))
    assert coverage_count(r.check(), "P18", "admission_at_limit") == 1


# --- issue 51: the capture-gap interaction of the duties trace validation feeds; I4's duplicate execution ---


def _committed_check(r, committed):
    from model.state import from_rows
    from soak.judges.checker import SoakLedger, check

    state = from_rows(r.jobs.values(), r.steps, r.events, r.signals)
    ledger = SoakLedger(tuple(r.ledger), tuple(r.observations), tuple(r.unique))
    return check(state, ledger, r.history, committed=committed)


def test_p11_and_p18_are_not_exercised_by_a_committed_history_with_capture_gaps():
    """A gap may hide a claim after the SIGTERM (P11) or past an admission limit (P18): the history's
    judged drains and admitted claims count for nothing then — a drain duty is never certified VALID
    through a capture gap (issue 51's survivor). The history's findings still count."""
    from tests.test_soak_duties import ADMISSION, _sample

    r = baseline()
    r.history += [
        {"t": E0 + 10, "type": "worker_drain_term", "node": "w2-1", "running": [[1, 1, "echo"]]},
        {"t": E0 + 11, "type": "worker_drained", "node": "w2-1", "code": 0, "seconds": 1.0},
        {"t": E0, "type": "admission_queues", "queues": ADMISSION},
        _sample(5, {"soak-global": 2}),
    ]
    committed = {"drains_judged": 1, "claims_after_term": [], "admission_claims": {"soak-global": 3}}
    whole = _committed_check(r, committed)
    assert duty(whole, "P11").verdict == "valid" and duty(whole, "P18").verdict == "valid"
    gapped = _committed_check(r, {**committed, "capture_gaps": 2})
    assert coverage_count(gapped, "P11", "drains_sampled") == 0
    assert coverage_count(gapped, "P18", "admission_claims") == 0
    for name in ("P11", "P18"):
        assert duty(gapped, name).verdict == "unknown", duty(gapped, name).to_json()
    line = "P11 node w2-1 committed claims (up to 1 row(s)) after its own SIGTERM: the first 2.0 s after the signal"
    found = _committed_check(r, {**committed, "capture_gaps": 2, "claims_after_term": [line]})
    assert duty(found, "P11").verdict == "invalid"


def test_refine_counts_no_drain_judged_when_the_capture_had_a_gap():
    """soak/judges/refine/ `finish_duties`: with a capture gap no SIGTERMed node's claims are all known."""
    from soak.judges import refine
    from soak.judges.timing import ClaimOrder, Freshness

    v = object.__new__(refine.Validator)
    v.result = refine.RefinementResult("valid")
    v.ledger = type("L", (), {"terms": {"w2-1": E0 + 10, "w3-1": E0 + 20}})()
    v._late_claims, v._late_first, v._late_excused = {}, {}, 0
    v.order, v.fresh, v._last_at = ClaimOrder(None), Freshness(None), 0.0  # the judges of order and time, empty
    v.finish_duties()
    assert v.result.drains_judged == 2
    v.result = refine.RefinementResult("valid", capture_gaps=1)
    v.finish_duties()
    assert v.result.drains_judged == 0


def test_i4_a_zombie_stop_whose_frozen_attempt_journaled_nap_itself_is_no_duplicate_execution():
    """The journal's `nap` came from the frozen attempt itself (no later attempt executed it before the
    release): the nap ran once — not the duplicate paid step execution I4 needs (issue 51's survivor:
    the scenario was counted from the frozen attempt's own journal)."""
    r = baseline()
    # no pre_ack evidence of two executions: only the zombie stop can count, and nap is attempt 1's own
    r.observations = [o for o in r.observations if not (o.job_id == 11 and o.phase == "pre_ack")]
    r.history += [
        {"t": E0 + 5, "type": "zombie_stop", "node": "w1-1", "held": [[11, 1]]},
        {"t": E0 + 24.9, "type": "zombie_cont", "node": "w1-1", "why": "journaled"},
    ]
    result = r.check()
    assert coverage_count(result, "I4", "zombies_back") == 0
    assert result.invariants["I4"].verdict == "unknown", result.invariants["I4"].to_json()
