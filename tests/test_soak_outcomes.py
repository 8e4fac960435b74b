"""Issue 51: coverage rows count the risky event itself, and the outcome obligations are judged.

Pure and fast (no database): tests/test_soak_checker.py's baseline run, changed in one place.
- I9's "signals racing the park" counts deliveries that committed inside an awaiter's claim→park
  window (soak/judges/coverage.py signal_races), not the deliveries the driver's plan called races;
- P16 needs a reclaim that fell on a last attempt (soak/judges/coverage.py last_attempt_reclaims).
"""

from __future__ import annotations

from dataclasses import replace

from soak.judges.coverage import last_attempt_reclaims
from tests.test_certifier_checks import coverage_count, duty
from tests.test_soak_checker import E0, baseline, err, job, step
from tests.test_soak_duties import lease_sample

# --- I9: a race is a delivery inside the claim→park window -------------------------------------------------


def _without_race_evidence(r):
    r.history = [e for e in r.history if e["type"] not in ("lease_sample", "signal_intent")]
    return r


def test_i9_a_race_plan_delivery_no_sample_saw_racing_a_running_attempt_is_no_race():
    """The driver's `race` delivery committed before the awaiter was claimed (no sample saw it running):
    the risky case did not happen, so I9 is unknown — it used to count the plan and pass."""
    result = _without_race_evidence(baseline()).check()
    assert coverage_count(result, "I9", "signal_race") == 0
    i9 = result.invariants["I9"]
    assert i9.verdict == "unknown" and "signals racing the park" in i9.why_unknown, i9.to_json()
    assert baseline().check().invariants["I9"].verdict == "valid"
    assert coverage_count(baseline().check(), "I9", "signal_race") == 1


def test_i9_a_delivery_while_the_attempt_ran_counts_whatever_the_plan_called_it():
    r = _without_race_evidence(baseline())
    for e in r.history:
        if e["type"] == "signal" and e["when"] == "race":
            e["when"] = "after"  # the plan's name plays no part
    r.history += [
        lease_sample(2.8, [[4, 1, "w2-1", E0 + 12.7, "awaiter"]]),
        {"t": E0 + 2.9, "type": "signal_intent", "job_id": 4},
        lease_sample(3.2, [[4, 1, "w2-1", E0 + 12.7, "awaiter"]]),
    ]
    assert coverage_count(r.check(), "I9", "signal_race") == 1


def test_i9_an_attempt_seen_running_before_but_not_after_an_unwoken_delivery_is_no_race():
    """Without a sample after the commit seeing the same attempt, nothing shows the signal committed
    before the park; and a sample of another attempt after it is not the same window."""
    r = _without_race_evidence(baseline())
    r.history += [
        lease_sample(2.8, [[4, 1, "w2-1", E0 + 12.7, "awaiter"]]),
        {"t": E0 + 2.9, "type": "signal_intent", "job_id": 4},
        lease_sample(3.2, [[4, 2, "w2-1", E0 + 13.1, "awaiter"]]),
    ]
    assert coverage_count(r.check(), "I9", "signal_race") == 0


def test_i9_a_park_committed_just_before_the_signal_that_woke_it_is_a_race():
    """The sample 0.3 s before the delivery saw the attempt running; the delivery woke the job: its park
    committed within the sampling resolution before the signal's commit."""
    r = _without_race_evidence(baseline())
    r.history += [
        lease_sample(3.6, [[4, 1, "w2-1", E0 + 12.7, "awaiter"]]),
        {"t": E0 + 3.9, "type": "signal_intent", "job_id": 4},
    ]
    assert coverage_count(r.check(), "I9", "signal_race") == 1  # the `after` delivery at +4 woke job 4
    r.history[-2] = lease_sample(3.3, [[4, 1, "w2-1", E0 + 12.7, "awaiter"]])  # 0.6 s before: too far
    assert coverage_count(r.check(), "I9", "signal_race") == 0


# --- P16: the risky case is a reclaim on the last attempt ----------------------------------------------------


def test_p16_is_unknown_when_no_reclaim_fell_on_a_last_attempt():
    result = baseline().check()
    assert coverage_count(result, "P16", "other_reclaims") >= 1
    assert coverage_count(result, "P16", "last_attempt_reclaims") == 0
    p16 = duty(result, "P16")
    assert p16.verdict == "unknown" and "reclaims that fell on a last attempt" in p16.why_unknown


def test_p16_a_reclaim_on_the_last_attempt_that_failed_the_job_is_valid():
    r = baseline()
    r.add(
        job(16, "slow", input={"seconds": 12}, max_attempts=1, state="failed", errors=[err(1, "lease_expired", 21)]),
        "slow",
        "succeeded|failed:lease_expired",
    )
    result = r.check()
    assert coverage_count(result, "P16", "last_attempt_reclaims") == 1
    assert last_attempt_reclaims(_state(r)) == 1
    assert duty(result, "P16").verdict == "valid", duty(result, "P16").to_json()


def test_p16_a_reclaim_on_the_last_attempt_that_retried_is_invalid():
    r = baseline()
    r.add(
        job(
            16,
            "slow",
            input={"seconds": 12},
            max_attempts=1,
            attempt=2,
            errors=[err(1, "lease_expired", 21)],
            result={"token": "t", "node": "w2-1", "attempt": 2},
        ),
        "slow",
        "succeeded|failed:lease_expired",
    )
    result = r.check()
    assert coverage_count(result, "P16", "last_attempt_reclaims") == 1
    p16 = duty(result, "P16")
    assert p16.verdict == "invalid" and "ran attempt 2 of max_attempts 1" in p16.counterexamples[0]


def test_a_reclaim_before_the_last_attempt_of_a_job_a_park_raised_is_not_counted_as_the_last():
    r = baseline()
    r.jobs[4] = replace(r.jobs[4], errors=[err(1, "lease_expired", 2)])  # attempt 1 of max 11
    assert last_attempt_reclaims(_state(r)) == 0


def _state(r):
    from model.state import from_rows

    return from_rows(r.jobs.values(), r.steps, r.events, r.signals)


# --- P19: the crossing attempt's own ack fails the job (contract §8.2) -------------------------------------


def _costed(r, **kw):
    """Job 16, `costed` with budget 100 and costs 60, 60, 10: its step c2 (attempt 1) crosses the budget."""
    from tests.test_soak_checker import step

    base = dict(
        input={"costs": [60, 60, 10], "crash_at_crossing": False},
        state="failed",
        budget_usd_micros=100,
        spent_usd_micros=120,
        errors=[err(1, "budget_exceeded", 2)],
    )
    base.update(kw)
    r.add(job(16, "costed", **base), "costed", "failed:budget_exceeded", crossing="c2")
    r.steps += [
        step(16, 1, "c1", {"token": "p", "attempt": 1}, usd=60),
        step(16, 2, "c2", {"token": "q", "attempt": 1}, usd=60),
    ]
    return r


def test_p19_a_crossing_attempt_that_failed_the_job_is_valid():
    result = _costed(baseline()).check()
    assert coverage_count(result, "P19", "crossings_acked") == 1
    assert duty(result, "P19").verdict == "valid", duty(result, "P19").to_json()


def test_p19_a_crossing_acked_as_a_retry_is_invalid_naming_the_job_and_attempt():
    """budget_crossing_retried: the crossing attempt acked budget_exceeded with a retry time; the next
    attempt's pre-flight failed the job — the final row I4 judges looks right."""
    result = _costed(baseline(), attempt=2, errors=[err(1, "budget_exceeded", 2), err(2, "budget_exceeded", 3)]).check()
    assert result.invariants["I4"].verdict == "valid"  # the final state alone passes
    p19 = duty(result, "P19")
    assert p19.verdict == "invalid", p19.to_json()
    assert "P19 job 16 (costed) attempt 1 journaled step 'c2'" in p19.counterexamples[0]
    assert "acked 'budget_exceeded' as a retry; attempt 2 ran next" in p19.counterexamples[0]


def test_p19_a_crossing_attempt_that_snoozed_is_invalid():
    p19 = duty(_costed(baseline(), attempt=2, errors=[err(2, "budget_exceeded", 3)]).check(), "P19")
    assert p19.verdict == "invalid" and "(a snooze or release)" in p19.counterexamples[0]


def test_p19_a_crossing_attempt_that_succeeded_or_failed_otherwise_is_invalid():
    r = _costed(baseline(), state="succeeded", errors=[], result={"tokens": ["p", "q"], "attempt": 1})
    p19 = duty(r.check(), "P19")
    assert p19.verdict == "invalid" and "ended the job succeeded" in p19.counterexamples[0]
    p19 = duty(_costed(baseline(), errors=[err(1, "Planned", 2)]).check(), "P19")
    assert p19.verdict == "invalid" and "ended the job failed with error 'Planned'" in p19.counterexamples[0]


def test_p19_a_crossing_attempt_that_never_acked_is_excused_and_not_counted():
    """crash_at_crossing (baseline job 3): attempt 1 died after the step, its lease expired; attempt 2's
    pre-flight failed the job — I4's rule, not this one."""
    r = _costed(baseline(), attempt=2, errors=[err(1, "lease_expired", 2), err(2, "budget_exceeded", 3)])
    result = r.check()
    assert coverage_count(result, "P19", "crossings_acked") == 0
    p19 = duty(result, "P19")
    assert p19.verdict == "unknown" and "budget crossings whose attempt went on to ack" in p19.why_unknown


# --- P4: running jobs finish within the grace, not handed back ------------------------------------------


def _drained(r, running, seconds=1.0):
    from tests.test_soak_duties import drain

    r.history += drain(10, running=running, seconds=seconds)
    return r


def test_p4_a_job_handed_back_at_sigterm_by_a_snooze_or_release_is_invalid_naming_the_job():
    r = baseline()
    r.jobs[1] = job(1, attempt=2, max_attempts=11)  # a snooze (max_attempts + 1); attempt 2 finished it
    p4 = duty(_drained(r, [[1, 1, "echo"]]).check(), "P4")
    assert p4.verdict == "invalid", p4.to_json()
    assert "P4 job 1 (echo) attempt 1 was running on w2-1 when it got SIGTERM" in p4.counterexamples[0]
    assert "no error entry (a snooze or a release)" in p4.counterexamples[0]


def test_p4_a_job_handed_back_at_sigterm_as_a_retry_is_invalid():
    r = baseline()
    r.jobs[1] = job(1, attempt=2, errors=[err(1, "WorkerShutdown", 10.2)])
    p4 = duty(_drained(r, [[1, 1, "echo"]]).check(), "P4")
    assert p4.verdict == "invalid" and "an error entry 'WorkerShutdown' (a retry)" in p4.counterexamples[0]


def test_p4_a_slow_job_left_to_lease_expiry_past_the_grace_is_not_handed_back():
    r = baseline()  # job 11 (slow): attempt 1 ended by lease expiry, attempt 2 finished it
    assert duty(_drained(r, [[11, 1, "slow"]], seconds=10.5).check(), "P4").verdict == "valid"


def test_p4_a_planned_failure_during_the_drain_is_the_jobs_own_work_and_a_park_is_not_judged():
    r = baseline()  # job 2 (steps): attempt 1 raised Planned after s2; job 4 (awaiter) parked on attempt 1
    assert duty(_drained(r, [[2, 1, "steps"], [4, 1, "awaiter"]]).check(), "P4").verdict == "valid"
    # soak/PROTOCOL.md §3.2 names no error for the planned raise: the Ruby worker writes `raised` (a default
    # soak of it, seed 51, was INVALID on P4 while the judge matched the reference's spelling `Planned`)
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], errors=[err(1, "raised", 10.1)])
    assert duty(_drained(r, [[2, 1, "steps"]]).check(), "P4").verdict == "valid"
    # handed back before its planned point: attempt 1 journaled s1 only (s2 carries attempt 2)
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], errors=[err(1, "Shutdown", 10.1)])
    r.steps = [x for x in r.steps if (x.job_id, x.name) != (2, "s2")] + [step(2, 2, "s2", {"token": "b", "attempt": 2})]
    p4 = duty(_drained(r, [[2, 1, "steps"]]).check(), "P4")
    assert p4.verdict == "invalid" and "an error entry 'Shutdown' (a retry)" in p4.counterexamples[0], p4.to_json()
    # a `steps` job with no planned raise, handed back as a retry
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], input={"n": 2, "raise_after": None}, errors=[err(1, "Planned", 10.1)])
    assert duty(_drained(r, [[2, 1, "steps"]]).check(), "P4").verdict == "invalid"


# --- P20: the evidence a kind promises exists ---------------------------------------------------------------


def test_p20_every_slow_attempt_that_ran_has_its_start_event():
    result = baseline().check()
    assert coverage_count(result, "P20", "slow_attempts") == 2  # job 11: attempts 1 (begin, pre_ack) and 2 (pre_ack)
    assert duty(result, "P20").verdict == "valid", duty(result, "P20").to_json()


def test_p20_a_slow_attempt_without_its_start_event_is_invalid_naming_the_attempt():
    """no_start_event: the final rows are right; only the evidence the judges read is missing."""
    r = baseline()
    r.events = [e for e in r.events if not (e.job_id == 11 and e.payload.get("attempt") == 2)]
    p20 = duty(r.check(), "P20")
    assert p20.verdict == "invalid", p20.to_json()
    assert p20.counterexamples[0].startswith("P20 job 11 (slow) attempt 2 wrote a pre_ack observation")
    r.events = [e for e in r.events if e.job_id != 11]
    p20 = duty(r.check(), "P20")
    assert any("attempt 1 journaled step 'begin'" in c for c in p20.counterexamples), p20.to_json()


def test_p20_is_unknown_when_no_slow_attempt_ran():
    r = baseline()
    r.observations = [o for o in r.observations if o.job_id != 11]
    r.steps = [s for s in r.steps if s.job_id != 11]
    p20 = duty(r.check(), "P20")
    assert p20.verdict == "unknown" and "`slow` attempts that ran" in p20.why_unknown, p20.to_json()


def test_p4_an_attempt_failed_by_a_database_crash_during_the_drain_is_not_a_hand_back():
    """A 1,200 s soak of the reference worker: two PostgreSQL crash-restarts 1.9 s and 9.7 s into a node's
    drain failed a running `slow` job's attempt (OperationalError) and attempt 2 ran it — the crash's retry
    (§7: a failed attempt is retried), not a job handed back. Without a crash in the drain the same row is a
    made-up retry; a snooze or a release (no error entry) is a hand-back crash or not."""
    r = baseline()
    r.jobs[1] = job(1, attempt=2, errors=[err(1, "OperationalError", 10.5)])
    p4 = duty(_drained(r, [[1, 1, "echo"]]).check(), "P4")
    assert p4.verdict == "invalid" and "an error entry 'OperationalError' (a retry)" in p4.counterexamples[0]
    r.history += [{"t": E0 + 10.3, "type": "db_crash"}, {"t": E0 + 10.6, "type": "db_restarted"}]
    assert duty(r.check(), "P4").verdict == "valid"
    r = baseline()
    r.jobs[1] = job(1, attempt=2, max_attempts=11)  # a snooze: no error entry
    _drained(r, [[1, 1, "echo"]]).history += [
        {"t": E0 + 10.3, "type": "db_crash"},
        {"t": E0 + 10.6, "type": "db_restarted"},
    ]
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid" and "no error entry (a snooze or a release)" in p4.counterexamples[0]
