"""Certifier rules a mutation hunt found untested (issue 54; docs/mutants.md "Mutation hunts"): soak/judges/ end-of-run judges.

Each test is the evidence against one weakened rule that the suite let pass — a hand-built snapshot,
ledger and fault log (tests/test_soak_checker.py's baseline run, changed in one place) that the rule must
fail, a run whose scenario did not happen that it must not call valid, or an honest run it must not call
invalid. Pure and fast: no database.
"""

from __future__ import annotations

from dataclasses import replace

from model.envelope import encode
from model.rows import Step
from soak.judges.checker import Observation
from tests.test_certifier_checks import coverage_count, duty
from tests.test_soak_checker import E0, assert_only, at, baseline, err, job, step
from tests.test_soak_duties import CHOICE, cancel_requested, drain, lease_sample, priority_sample, steps_job

# --- soak/judges/verdicts.py `_matches`: an expected outcome names its error too -----------------------------


def test_p9_a_costed_job_failed_with_another_error_than_budget_exceeded_is_flagged():
    """The ledger expects `failed:budget_exceeded`; a job that failed with another error did not end as
    its kind prescribes, although its state is the expected one."""
    r = baseline()
    r.jobs[3] = replace(r.jobs[3], errors=[err(1, "lease_expired", 1.9), err(2, "Boom", 2)])
    p9 = duty(r.check(), "P9")
    assert p9.verdict == "invalid", p9.to_json()
    assert "P9 job 3 (costed" in p9.counterexamples[0] and "prescribes failed:budget_exceeded" in p9.counterexamples[0]


# --- soak/judges/checker.py: a capture gap exercises nothing (claim order, P5) --------------------------------


def test_p5_claims_with_a_choice_from_a_history_with_capture_gaps_exercise_nothing():
    """A gap may hide the claims that took passed-over rows: the history's count of claims that had a choice
    within their priority does not count then (P5 is UNKNOWN, docs/certification.md), its findings would."""
    r = baseline()
    r.history += [
        priority_sample(101, [[51, 0, "running", 1], [50, 5, "ready", 0]]),
        priority_sample(101.5, [[51, 0, "running", 1], [50, 5, "ready", 0]]),
    ]
    assert duty(r.check(CHOICE), "P5").verdict == "valid"
    gapped = r.check({**CHOICE, "capture_gaps": 1})
    assert coverage_count(gapped, "P5", "claim_choice") == 0
    assert duty(gapped, "P5").verdict == "unknown", duty(gapped, "P5").to_json()


# --- soak/judges/coverage.py: a scenario counted only when it happened ------------------------------------------


def test_i4_a_crash_at_crossing_job_that_failed_on_its_first_attempt_is_no_crash_at_crossing():
    """The worker did not kill itself after the crossing step (attempt 1 failed the job itself): no next
    attempt's pre-flight ran, so the scenario I4 needs did not happen."""
    r = baseline()
    r.jobs[3] = replace(r.jobs[3], attempt=1, errors=[err(1, "budget_exceeded", 2)])
    result = r.check()
    assert coverage_count(result, "I4", "crash_at_crossing") == 0
    assert result.invariants["I4"].verdict == "unknown", result.invariants["I4"].to_json()


def test_i9_a_lost_wakeup_whose_parent_never_succeeded_is_no_rescue():
    """The harness finished parent 16's external children without `$children`; the parent then ended
    cancelled, not woken by a reconciler: no rescue happened (the reconciler is unproven)."""
    r = baseline()
    r.add(
        job(16, "parent", input={"children": 1, "queue": "soak-external"}, state="cancelled", finished_at=at(9)),
        "parent",
        "cancelled",
    )
    r.history = [e for e in r.history if e["type"] != "lost_wakeup"]
    r.history.append({"t": E0 + 8, "type": "lost_wakeup", "parent": 16, "children": []})
    result = r.check()
    assert coverage_count(result, "I9", "lost_wakeups") == 0
    assert result.invariants["I9"].verdict == "unknown", result.invariants["I9"].to_json()


# --- soak/judges/invariants_jobs.py -----------------------------------------------------------------------------


def test_i1_a_job_left_running_with_its_lease_long_expired_after_a_completed_drain_is_stuck():
    """Only a live lease (lease_until after the snapshot) makes a running job pending; one whose lease ran
    out long before is a job nobody reclaimed: a violation after a drain that completed, not unknown."""
    r = baseline()
    r.jobs[1] = replace(
        r.jobs[1], state="running", result=None, finished_at=None, leased_by="w2-1", lease_until=at(100)
    )
    result = r.check()
    i1 = result.invariants["I1"]
    assert i1.verdict == "invalid", i1.to_json()
    assert any("is running" in c and "after the drain" in c for c in i1.counterexamples), i1.counterexamples


def test_i2_an_applied_ack_is_no_stale_ack():
    """Workers record every `slow` ack (PROTOCOL §3.8): an ack observation that says the ack applied is not
    the stale ack I2's coverage needs."""
    r = baseline()
    r.observations = [
        r.observations[2],  # attempt 2's own pre_ack: the row was its own
        Observation(11, 2, "w2-1", "ack", {"state": "succeeded"}, at(34.2)),
    ]
    result = r.check()
    assert coverage_count(result, "I2", "stale_acks") == 0
    assert result.invariants["I2"].verdict == "unknown", result.invariants["I2"].to_json()


def test_i2_a_success_by_an_attempt_that_had_already_ended_by_lease_expiry_is_flagged():
    """Attempt 2 lost its lease (its entry is on the row) and the row was not claimed again; attempt 2's
    zombie ack then succeeded the job with its own (matching) attempt number: an unfenced stale ack."""
    r = baseline()
    r.jobs[1] = replace(
        r.jobs[1],
        attempt=2,
        errors=[err(1, "lease_expired", 1.0), err(2, "lease_expired", 1.5)],
        result=encode({"echo": 1, "attempt": 2}),
    )
    assert_only(r.check(), "I2", contains="which had already ended")


def test_i3_a_result_listing_fewer_step_values_than_its_input_declares_is_flagged():
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], result=encode({"tokens": ["a"], "attempt": 2}))
    assert_only(r.check(), "I3", contains="result lists 1 step values, its input declares 2")


def test_i3_a_job_whose_steps_were_all_journaled_by_its_final_attempt_replayed_nothing():
    """No journaled step was read back by a later attempt: steps job 2 ran once, slow job 11's final
    attempt journaled its own `begin` — I3's replay scenario did not happen."""
    r = baseline()
    r.jobs[2] = replace(
        r.jobs[2],
        input={"n": 2, "raise_after": None},
        attempt=1,
        errors=[],
        result=encode({"tokens": ["a", "b"], "attempt": 1}),
    )
    r.steps = [
        replace(s, value=encode({"token": "t", "attempt": 2})) if (s.job_id, s.name) == (11, "begin") else s
        for s in r.steps
    ]
    result = r.check()
    assert coverage_count(result, "I3", "replays") == 0
    assert result.invariants["I3"].verdict == "unknown", result.invariants["I3"].to_json()


# --- soak/judges/invariants_links.py ----------------------------------------------------------------------------


def test_i6_the_first_slot_after_the_cron_was_registered_missed_is_flagged():
    """Registered at +1, the cron's first slot is +60 (12:01), due while workers ran: missing, a violation."""
    r = baseline()
    del r.jobs[12]
    assert_only(r.check(), "I6", contains="no job holds it")


def test_i7_a_unique_group_of_a_single_insert_is_no_concurrent_group():
    r = baseline()
    r.unique = r.unique[:1]
    result = r.check()
    assert coverage_count(result, "I7", "unique_groups") == 0
    assert result.invariants["I7"].verdict == "unknown", result.invariants["I7"].to_json()


def test_i8_a_spawn_of_fewer_children_than_the_parent_asked_for_is_flagged():
    """Parent 5 asked for 2 children (`children: 2`); its spawn journaled, made and reported only one."""
    r = baseline()
    del r.jobs[7]
    r.steps = [replace(s, value=encode([6])) if s.name == "$spawn:kids" else s for s in r.steps]
    r.jobs[5] = replace(r.jobs[5], result=encode({"children": [6], "attempt": 2}))
    assert_only(r.check(), "I8", contains="the parent asked for 2 children")


def test_i8_a_parent_that_succeeded_while_a_child_was_not_terminal_is_flagged():
    """Child 7 is still ready (due later, so I1 leaves it pending): its parent must not have succeeded."""
    r = baseline()
    r.jobs[7] = replace(r.jobs[7], state="ready", ready_at=at(10_000), result=None, finished_at=None)
    i8 = r.check().invariants["I8"]
    assert i8.verdict == "invalid", i8.to_json()
    assert any("finished before its children [7]" in c for c in i8.counterexamples), i8.counterexamples


# --- soak/judges/durability.py ----------------------------------------------------------------------------------


def test_d1_is_unknown_when_no_commit_was_watched():
    r = baseline()
    r.history += [
        {"t": E0 + 10, "type": "failover_begin", "mode": "async"},
        {"t": E0 + 12, "type": "failover_watch", "jobs": []},
        {"t": E0 + 13, "type": "failover_end"},
        {"t": E0 + 15, "type": "standby_ready"},
    ]
    d1 = r.check().invariants["D1"]
    assert d1.checks == 0 and d1.verdict == "unknown", d1.to_json()


# --- soak/judges/duties/running.py ------------------------------------------------------------------------------


def test_p1_an_exit_with_status_75_but_no_exit_observation_is_flagged():
    """PROTOCOL §1: the observation, not the status, makes an exit deliberate."""
    r = baseline()
    r.history += [
        {"t": E0 - 1, "type": "worker_start", "node": "w4-1"},
        {"t": E0 + 41, "type": "worker_exit", "node": "w4-1", "code": 75},
    ]
    p1 = duty(r.check(), "P1")
    assert p1.verdict == "invalid" and "node w4-1 exited by itself (status 75)" in p1.counterexamples[0]


def test_p4_a_short_grace_is_flagged_although_the_jobs_lease_outlived_the_sigterm():
    """w2-1 exits 0.5 s after its SIGTERM; job 2's lease (sampled until +15) was still live at the signal
    and then expired: the short grace left it to lease expiry."""
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], errors=[err(1, "lease_expired", 30)])
    r.history += [lease_sample(8 + i / 2, [[2, 1, "w2-1", E0 + 15, "steps"]]) for i in range(5)]
    r.history += drain(10, running=[[2, 1, "steps"]], seconds=0.5)
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid", p4.to_json()
    assert (
        "P4 job 2 (steps) attempt 1 was running on w2-1, which exited 0.5s after its SIGTERM" in p4.counterexamples[0]
    )


def _flaky(r, errors, attempt=3):
    r.add(
        job(
            16,
            "flaky",
            input={"mode": "raise", "until_attempt": 1},
            attempt=attempt,
            errors=errors,
            result={"tokens": ["p", "m"], "attempt": attempt},
            finished_at=at(40),
        ),
        "flaky",
    )
    r.steps += [
        step(16, 1, "pre", {"token": "p", "attempt": 1}),
        step(16, 2, "mid", {"token": "m", "attempt": attempt}),
    ]
    return r


def test_p4_a_flaky_job_handed_back_on_the_attempt_after_its_planned_raises_is_flagged():
    """`flaky` raises while attempt ≤ until_attempt (1): attempt 2's error is no planned failure — a retry
    the worker made up at its SIGTERM."""
    r = _flaky(baseline(), [err(1, "Planned", 1), err(2, "WorkerShutdown", 10.2)])
    r.history += drain(10, running=[[16, 2, "flaky"]])
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid", p4.to_json()
    assert "P4 job 16 (flaky) attempt 2" in p4.counterexamples[0]


def test_p4_a_later_attempts_lease_expiry_is_not_the_drains():
    """Attempt 1 of flaky job 16 raised as planned during w2-1's clean drain; attempt 2, on another node,
    lost its lease later. Only the attempt the node ran is the drain's business: P4 holds."""
    r = _flaky(baseline(), [err(1, "Planned", 10.5), err(2, "lease_expired", 30)])
    r.history += drain(10, running=[[16, 1, "flaky"]])
    p4 = duty(r.check(), "P4")
    assert p4.violations == 0 and p4.verdict == "valid", p4.to_json()


def test_p19_a_spend_that_reaches_the_budget_without_exceeding_it_is_no_crossing():
    """§8.2: a spend that *exceeds* the budget fails the job; 60 + 40 = 100 µ$ of a 100 µ$ budget does not."""
    r = baseline()
    r.add(
        job(
            16,
            "costed",
            input={"costs": [60, 40], "crash_at_crossing": False},
            budget_usd_micros=100,
            spent_usd_micros=100,
            result={"tokens": ["p", "q"], "attempt": 1},
        ),
        "costed",
    )
    r.steps += [
        step(16, 1, "c1", {"token": "p", "attempt": 1}, usd=60),
        step(16, 2, "c2", {"token": "q", "attempt": 1}, usd=40),
    ]
    result = r.check()
    assert result.invariants["I4"].verdict == "valid", result.invariants["I4"].to_json()
    p19 = duty(result, "P19")
    assert p19.violations == 0, p19.counterexamples


# --- soak/judges/duties/outcomes.py -----------------------------------------------------------------------------


def test_p6_a_cron_row_without_a_queue_option_means_the_default_queue():
    """A belay_crons row whose opts name no queue inserts its slots in `default` (model/cron.py): the
    baseline's cron jobs in `soak` do not match it."""
    from model.rows import CronRow
    from model.state import from_rows
    from soak.judges.checker import SoakLedger, check

    r = baseline()
    state = from_rows(r.jobs.values(), r.steps, r.events, r.signals)
    state = replace(state, crons={"soak_cron": CronRow("soak_cron", "* * * * *", "echo", {}, {}, False, at(0))})
    result = check(state, SoakLedger(tuple(r.ledger), tuple(r.observations), tuple(r.unique)), r.history)
    p6 = duty(result, "P6")
    assert p6.verdict == "invalid", p6.to_json()
    assert "in queue 'soak'" in p6.counterexamples[0] and "says queue 'default'" in p6.counterexamples[0]


def test_p7_a_sleeper_that_never_parked_is_no_resumed_sleep():
    """Sleeper 40 journaled its wake time but slept in process (attempt 1, no park): no resume happened."""
    r = baseline()
    r.add(job(40, "sleeper", input={"seconds": 2}, result={"tokens": ["p", "q"], "attempt": 1}), "sleeper")
    r.steps += [
        step(40, 1, "pre", {"token": "p", "attempt": 1}),
        Step(40, 2, "$sleep:nap", encode(at(1.0).isoformat()), 0, 0, at(0.5)),
        step(40, 3, "post", {"token": "q", "attempt": 1}),
    ]
    result = r.check()
    assert coverage_count(result, "P7", "sleeps_resumed") == 0
    assert duty(result, "P7").verdict == "unknown", duty(result, "P7").to_json()


def test_p9_a_workflow_whose_held_member_was_cancelled_as_planned_is_still_judged():
    """The driver's cancel of held member b (job 9) won the race (b ended cancelled): the workflow's
    expectations hold, and member c (job 10), expected to succeed, failed — a P9 finding."""
    r = baseline()
    r.ledger = [
        replace(e, detail={"workflow": "wf1", "member": e.job_id, "cancel": e.job_id == 9})
        if e.job_id in (8, 9, 10)
        else e
        for e in r.ledger
    ]
    r.jobs[10] = replace(r.jobs[10], state="failed", errors=[err(1, "Boom", 2)], result=None)
    p9 = duty(r.check(), "P9")
    assert p9.verdict == "invalid", p9.to_json()
    assert any(c.startswith("P9 job 10 (member") for c in p9.counterexamples), p9.counterexamples


# --- soak/judges/duties/timing.py -------------------------------------------------------------------------------


def test_p17_a_sweeper_free_all_along_counts_not_only_a_node_just_back_from_a_stop():
    """Job 1's lease expired at +20 and it was still running at +25.5 … +30. w2-1 and w3-1 ran free all
    along (w1-1 was SIGSTOPped +5 … +25): some node's sweeper was free for > 5 s — a finding."""
    r = baseline()
    r.history += [lease_sample(15 + i / 2, [[1, 1, "w2-1", E0 + 20, "echo"]]) for i in range(31)]  # to +30
    p17 = duty(r.check(), "P17")
    assert p17.verdict == "invalid", p17.to_json()
    assert "no sweeper reclaimed it" in p17.counterexamples[0]


def test_p13_steps_after_the_first_cancel_request_count_when_the_driver_asked_again():
    """The driver re-issues a cancel while the job still runs (driver.py follow_up_once): the duty runs
    from the first request, not from the repeat."""
    r = baseline()
    steps_job(r, times=[10.0, 10.45, 10.9, 11.35], state="succeeded")
    r.history += [cancel_requested(10.2, 20), cancel_requested(11.2, 20)]
    p13 = duty(r.check(), "P13")
    assert p13.verdict == "invalid", p13.to_json()
    assert "3 steps (s2, s3, s4) were journaled after it" in p13.counterexamples[0]


# --- soak/judges/duties/evidence.py -----------------------------------------------------------------------------


def test_p2_a_skewed_node_whose_leases_are_not_ahead_of_the_harness_clock_shows_no_skew():
    """w2-1 was started with BELAY_CLOCK_OFFSET 0.5 s but its leases end ttl after the harness's own clock
    (sampled 50 ms after each write): it ignores the offset, and P2's skew scenario did not happen."""
    r = baseline()
    r.history = [
        {**e, "clock_skew": 0.5} if e == {"t": E0 - 1, "type": "worker_start", "node": "w2-1"} else e for e in r.history
    ]
    r.history += [lease_sample(3 + i / 2, [[1, 1, "w2-1", E0 + 3 + i / 2 + 10 - 0.05, "echo"]]) for i in range(30)]
    result = r.check()
    assert coverage_count(result, "P2", "long_leases") >= 1
    assert coverage_count(result, "P2", "skew_seen") == 0
    assert duty(result, "P2").verdict == "unknown", duty(result, "P2").to_json()
