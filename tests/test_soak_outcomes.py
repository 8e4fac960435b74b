"""Issue 51: coverage rows count the risky event itself, and the outcome obligations are judged.

Pure and fast (no database): tests/test_soak_checker.py's baseline run, changed in one place.
- I9's "signals racing the park" counts deliveries that committed inside an awaiter's claim→park
  window (soak/coverage.py signal_races), not the deliveries the driver's plan called races;
- P16 needs a reclaim that fell on a last attempt (soak/coverage.py last_attempt_reclaims).
"""

from __future__ import annotations

from dataclasses import replace

from soak.coverage import last_attempt_reclaims
from tests.test_certifier_checks import coverage_count, duty
from tests.test_soak_checker import E0, baseline, err, job
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
