"""Certifier rules a second mutation hunt over the end-of-run judges found untested (issue 54, hunt K;
docs/mutants.md "Mutation hunts"): soak/judges/checker.py, invariants_jobs.py, invariants_links.py,
durability.py, coverage.py and verdicts.py.

Each test is the evidence against one weakened rule that the suite let pass — tests/test_soak_checker.py's
baseline run changed in one place: a run the rule must fail, a run whose scenario did not happen that it
must not call valid, or an honest run it must not call invalid. Pure and fast: no database.
"""

from __future__ import annotations

from dataclasses import replace

from model.envelope import encode
from model.rows import Event
from soak.judges.verdicts import _digest
from tests.test_certifier_checks import coverage_count, duty
from tests.test_soak_checker import E0, at, baseline, err, job

# --- soak/judges/checker.py: what the check reads from the run ------------------------------------------------


def _ttl(r, seconds: float) -> None:
    r.history = [{**e, "lease_ttl": seconds} if e["type"] == "run_start" else e for e in r.history]


def _unstop_w1(r) -> None:
    """The SIGSTOP hits another node, later: w1-1 ran the whole time it held job 11's first lease."""
    r.history = [
        {**e, "node": "w2-1", "t": e["t"] + 45} if e["type"] in ("worker_stop", "worker_cont") else e for e in r.history
    ]


def test_i1_the_renewal_rule_uses_the_runs_own_lease_ttl():
    """invariants_jobs.py: a lease lost while its node ran is blamed "only when the node held the attempt for at
    least half a ttl (a renewal was due)" — the ttl the run configured (`run_start` `lease_ttl`), not a default:
    with a 4 s ttl, an attempt that lost its lease 4 s after it started, its node alive throughout, was never
    renewed (PROTOCOL.md P2: renew every ttl/3)."""
    r = baseline()
    _unstop_w1(r)
    r.jobs[11] = replace(r.jobs[11], errors=[err(1, "lease_expired", 6)])
    assert r.check().invariants["I1"].verdict == "valid"  # ttl 10: no renewal was due within 4 s
    _ttl(r, 4)
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "invalid", i1.to_json()
    assert any("not renewed" in c and "lease ttl 4" in c for c in i1.counterexamples), i1.counterexamples


def test_i8_a_child_finished_within_the_runs_clock_skew_after_its_parent_is_not_late():
    """invariants_links.py I8: "finished_at comes from the finishing node's clock: allow the run's configured
    clock skew" (`clock_skew` in the fault log). A child stamped 1.5 s after its parent under a 2 s skew is
    within it; without any skew it is a parent that finished before its child."""
    r = baseline()
    r.jobs[7] = replace(r.jobs[7], finished_at=at(10.5))  # the parent finished at +9
    i8 = r.check().invariants["I8"]
    assert i8.verdict == "invalid" and "finished before its children [7]" in i8.counterexamples[0], i8.to_json()
    r.history.append({"t": E0, "type": "clock_skew", "node": "w2-1", "seconds": 2.0})
    i8 = r.check().invariants["I8"]
    assert i8.verdict == "valid", i8.to_json()


# --- soak/judges/verdicts.py: an expected outcome, a row's published verdict -------------------------------------


def test_p9_an_expected_outcome_is_met_by_any_of_its_alternatives():
    """PROTOCOL.md P9: "end every soak job as its kind prescribes (the ledger's expected outcome)"; the driver
    writes alternatives with `|` (a `steps` job it tries to cancel: `cancelled|succeeded`, a last-attempt
    `slow` job: `succeeded|failed:lease_expired`) — any one of them is the prescribed end."""
    r = baseline()
    i = next(n for n, e in enumerate(r.ledger) if e.job_id == 2)
    r.ledger[i] = replace(r.ledger[i], expected="cancelled|succeeded")
    p9 = duty(r.check(), "P9")
    assert p9.violations == 0, p9.to_json()
    r.jobs[2] = replace(r.jobs[2], state="failed", result=None, errors=[err(1, "Planned", 1.8), err(2, "Boom", 4)])
    p9 = duty(r.check(), "P9")
    assert p9.violations == 1 and "prescribes cancelled|succeeded" in p9.counterexamples[0], p9.to_json()


def test_results_json_marks_a_row_valid_only_when_its_verdict_is_valid():
    """PROTOCOL.md §6: `unknown` — "could not be decided, or a scenario did not occur in this run — never
    `valid`": results.json's per-row `valid` flag is true for a `valid` row only, never for an unknown one."""
    r = baseline()
    _failover(r, 50, [])  # D1 too: a failover whose watch saw no commit is unknown
    out = r.check().to_json()
    rows = {**out["invariants"], **out["duties"]}
    assert {row["verdict"] for row in rows.values()} >= {"valid", "unknown"}
    assert rows["D1"]["verdict"] == "unknown"
    for name, row in rows.items():
        assert row["valid"] is (row["verdict"] == "valid"), (name, row)


# --- soak/judges/durability.py: D1 ---------------------------------------------------------------------------------


def _failover(r, t: float, rows) -> None:
    r.history += [
        {"t": E0 + t - 1, "type": "failover_begin", "mode": "async"},
        {"t": E0 + t, "type": "failover_watch", "jobs": rows},
    ]


def _seen(j, state=None):
    return [j.id, j.worker, state or j.state, j.attempt, j.inserted_at.isoformat(), j.finished_at.isoformat()]


def test_d1_a_watched_terminal_job_now_in_another_terminal_state_is_a_lost_ack():
    """durability.py: "a job watched terminal that is no longer terminal with the same state and finish time
    is a lost ack" — the state counts, not only the finish time."""
    r = baseline()
    _failover(r, 50, [_seen(r.jobs[1])])
    assert r.check().invariants["D1"].verdict == "valid"
    r.jobs[1] = replace(r.jobs[1], state="failed", result=None, errors=[err(1, "Boom", 2)])
    d1 = r.check().invariants["D1"]
    assert d1.verdict == "invalid" and "the ack was lost" in d1.counterexamples[0], d1.to_json()


def test_d1_every_failovers_watch_is_compared_not_only_the_first():
    """D1: "Each `failover_watch` in the history lists the commits a client could have observed on the primary
    just before a failover; D1 compares each with the final snapshot" — work lost by a second failover too."""
    r = baseline()
    _failover(r, 50, [_seen(r.jobs[1])])
    _failover(r, 80, [_seen(r.jobs[10])])
    assert r.check().invariants["D1"].verdict == "valid"
    del r.jobs[10]
    d1 = r.check().invariants["D1"]
    assert d1.verdict == "invalid", d1.to_json()
    assert any("job 10" in c and "failover 2" in c and "enqueue was lost" in c for c in d1.counterexamples)


# --- soak/judges/invariants_jobs.py: I1 and I3 ---------------------------------------------------------------------


def test_i1_a_job_awaiting_with_no_deadline_after_a_completed_drain_is_stuck():
    """I1 ("all reach a terminal state given workers"): after a drain that completed only a future deadline or
    a live lease makes a job pending; a job awaiting with no deadline (its wake-up never came) waits for nothing
    pending — it was never run to the end: a violation, not unknown."""
    r = baseline()
    r.jobs[5] = replace(r.jobs[5], state="awaiting", ready_at=None, result=None, finished_at=None)
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "invalid", i1.to_json()
    assert any("job 5" in c and "is awaiting" in c and "after the drain" in c for c in i1.counterexamples)


def test_i1_a_lease_lost_is_judged_against_its_own_attempts_start_only():
    """I1's renewal rule: a `lease_expired` entry of attempt N is judged from attempt N's `start` event (its
    node, its start time). Job 20's attempt 1 ran on w2-1 and failed by itself; attempt 2 ran on w4-1, killed
    2 s later, and lost its lease to the kill: no node that held a lease was alive through its loss."""
    r = baseline()
    r.add(job(20, attempt=3, errors=[err(1, "Planned", 41), err(2, "lease_expired", 62)], finished_at=at(64)))
    r.events += [
        Event(20, 1, {"phase": "start", "attempt": 1, "node": "w2-1"}, at(40)),
        Event(20, 2, {"phase": "start", "attempt": 2, "node": "w4-1"}, at(45)),
        Event(20, 3, {"phase": "start", "attempt": 3, "node": "w2-1"}, at(63)),
    ]
    r.history += [
        {"t": E0 - 1, "type": "worker_start", "node": "w4-1"},
        {"t": E0 + 47, "type": "worker_kill", "node": "w4-1"},
    ]
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "valid", i1.to_json()


def test_i3_a_sampled_step_of_a_job_retention_deleted_has_not_vanished():
    """I3 over time: a step sampled during the run and gone from the snapshot "vanished while its job still
    exists" only while its job exists — a job retention deleted takes its steps with it (§8 prune)."""
    r = baseline()
    s1 = next(s for s in r.steps if (s.job_id, s.name) == (2, "s1"))
    r.history.append({"t": E0 + 100, "type": "step_sample", "rows": [[99, "s1", 1, _digest(encode("gone"))]]})
    i3 = r.check().invariants["I3"]
    assert i3.verdict == "valid", i3.to_json()
    r.history.append({"t": E0 + 100, "type": "step_sample", "rows": [[2, "s9", 3, _digest(s1.value)]]})
    i3 = r.check().invariants["I3"]
    assert i3.verdict == "invalid" and "vanished" in i3.counterexamples[0], i3.to_json()


def _idle_drain_end(r, samples: int, *, ready_at: float = 0.0) -> None:
    """The drain did not finish (job 1 left ready, due at `ready_at`); `samples` lease samples in its last
    10 s, each seeing no running row, both workers alive and the database up."""
    r.jobs[1] = replace(r.jobs[1], state="ready", ready_at=at(ready_at), result=None, finished_at=None)
    r.history = [{**e, "drained": False} if e["type"] == "drain_end" else e for e in r.history]
    r.history += [
        {"t": E0 + 249.5 - i, "type": "lease_sample", "at": E0 + 249.5 - i, "rows": []} for i in range(samples)
    ]


def test_i1_an_idle_drain_end_needs_five_lease_samples_before_it_blames_the_polling_floor():
    """invariants_jobs.py: the polling-floor violation needs "every lease sample of its last IDLE_S seconds (at
    least 5 of them) saw no running row": two empty samples are too little evidence that nothing ran — the
    job left ready is unknown then, not a violation."""
    r = baseline()
    _idle_drain_end(r, 2)
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "unknown" and i1.violations == 0, i1.to_json()
    r = baseline()
    _idle_drain_end(r, 10)
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "invalid" and "nothing polled for it" in i1.counterexamples[0], i1.to_json()


def test_i1_a_job_due_only_moments_before_an_idle_drain_end_is_not_blamed_on_polling():
    """The idle-drain rule blames "a ready job due through that window": a job due 0.2 s before the drain
    ended (a 0.5 s poll may not have come yet) was not left unclaimed through the idle window — unknown."""
    r = baseline()
    _idle_drain_end(r, 10, ready_at=249.8)
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "unknown" and i1.violations == 0, i1.to_json()


def test_i2_an_attempt_whose_pre_ack_saw_the_row_moved_on_is_a_stale_ack_without_an_ack_observation():
    """The `ack` observation of a stale ack is a SHOULD (PROTOCOL.md §3.8; coverage HINTS: "or the worker records no
    `ack` observation for a stale ack … and no `pre_ack` showed the row moved on"): a `pre_ack` that saw the row
    at a later attempt is itself the scenario I2 needs, whether or not an `ack` observation follows."""
    r = baseline()
    r.observations = [o for o in r.observations if o.phase != "ack"]
    result = r.check()
    assert coverage_count(result, "I2", "stale_acks") == 1
    assert result.invariants["I2"].verdict == "valid", result.invariants["I2"].to_json()


# --- soak/judges/invariants_jobs.py: I4 ----------------------------------------------------------------------------


def test_i4_a_costed_job_that_never_crossed_its_budget_yet_failed_budget_exceeded_is_flagged():
    """I4: "Budgets fail the job on the first step whose recorded spend crosses a cap" — and only then: a costed
    job whose ledger names no crossing step (its costs stay within the budget) failed `budget_exceeded`."""
    from model.rows import Step

    r = baseline()
    r.add(
        job(
            17,
            "costed",
            input={"costs": [10, 10]},
            state="failed",
            budget_usd_micros=100,
            spent_usd_micros=20,
            errors=[err(1, "budget_exceeded", 2)],
        ),
        "costed",
        "succeeded",
    )
    r.steps += [
        Step(17, 1, "c1", encode({"token": "p", "attempt": 1}), 10, 0, at(1.5)),
        Step(17, 2, "c2", encode({"token": "q", "attempt": 1}), 10, 0, at(1.6)),
    ]
    i4 = r.check().invariants["I4"]
    assert i4.verdict == "invalid", i4.to_json()
    assert any("job 17" in c and "never cross" in c for c in i4.counterexamples), i4.counterexamples


def test_i4_the_step_a_budget_failure_came_after_is_the_last_journaled_not_the_highest_named():
    """I4's crossing rule compares the ledger's crossing step with the step journaled last (the journal's `seq`),
    the one the failing ack followed: a worker that journaled c2 and then c1 failed after c1, not on its
    crossing step c2, whatever the names sort to."""
    from model.rows import Step

    r = baseline()
    r.jobs[3] = replace(r.jobs[3], input={"costs": [60, 60, 10]}, attempt=1, errors=[err(1, "budget_exceeded", 2)])
    r.steps = [s for s in r.steps if s.job_id != 3]
    r.steps += [
        Step(3, 1, "c2", encode({"token": "y", "attempt": 1}), 60, 0, at(1.5)),
        Step(3, 2, "c1", encode({"token": "x", "attempt": 1}), 60, 0, at(1.6)),
    ]
    i4 = r.check().invariants["I4"]
    assert i4.verdict == "invalid", i4.to_json()
    assert any("after step 'c1'" in c and "on step 'c2'" in c for c in i4.counterexamples), i4.counterexamples


# --- soak/judges/invariants_links.py: I5 ---------------------------------------------------------------------------


def test_i5_a_member_that_ran_with_one_of_two_deps_failed_and_not_ignored_is_flagged():
    """I5: "Workflow releases occur only with satisfied deps" — every dep: a member of deps a (failed) and c
    (succeeded), ignoring nothing, was released by c alone."""
    r = baseline()
    r.add(job(18, "member", workflow_id="wf1", wf_name="d", wf_deps=("a", "c"), wf_ignore=()), "member")
    i5 = r.check().invariants["I5"]
    assert i5.verdict == "invalid", i5.to_json()
    assert any("job 18" in c and "not satisfied" in c for c in i5.counterexamples), i5.counterexamples


def test_i5_a_release_through_an_ignore_flag_counts_only_when_the_member_ran():
    """Coverage I5 "releases through an ignore flag": the member c (deps a failed, ignoring failed) that the
    driver cancelled before it ran was never released through its flag."""
    r = baseline()
    r.jobs[10] = replace(r.jobs[10], state="cancelled", attempt=0, result=None)
    i = next(n for n, e in enumerate(r.ledger) if e.job_id == 10)
    r.ledger[i] = replace(r.ledger[i], expected="cancelled", detail={"cancel": True})
    result = r.check()
    assert coverage_count(result, "I5", "ignore_releases") == 0
    assert result.invariants["I5"].verdict == "unknown", result.invariants["I5"].to_json()


def test_i5_a_release_of_a_member_whose_deps_all_succeeded_is_no_release_through_an_ignore_flag():
    """Coverage I5: a member released because every dep succeeded used no ignore flag, even if it has one."""
    r = baseline()
    r.jobs[10] = replace(r.jobs[10], state="cancelled", attempt=0, result=None)
    i = next(n for n, e in enumerate(r.ledger) if e.job_id == 10)
    r.ledger[i] = replace(r.ledger[i], expected="cancelled", detail={"cancel": True})
    wf = dict(workflow_id="wf2")
    r.add(job(21, "member", wf_name="x", **wf), "member")
    r.add(job(22, "member", wf_name="y", wf_deps=("x",), wf_ignore=("failed",), **wf), "member")
    result = r.check()
    assert coverage_count(result, "I5", "ignore_releases") == 0
    assert result.invariants["I5"].verdict == "unknown", result.invariants["I5"].to_json()


# --- soak/judges/invariants_links.py: I6 ---------------------------------------------------------------------------


def test_i6_a_slot_due_ten_seconds_before_the_cron_was_paused_is_expected():
    """I6 expected slots: "Every-minute slots that were due while the cron was registered, not paused" — the
    slot at +180 was due 20 s before the pause at +200 with workers running: missing it breaks "Cron slots
    insert exactly once cluster-wide"."""
    r = baseline()
    del r.jobs[14]  # the +180 slot's job
    i6 = r.check().invariants["I6"]
    assert i6.verdict == "invalid", i6.to_json()


# --- soak/judges/invariants_links.py: I8 ---------------------------------------------------------------------------


def test_i8_a_parent_that_succeeded_without_journaling_its_spawn_is_flagged():
    """I8: "A parent has exactly the children its spawn declared" — the spawn is a memoized step (§8.4,
    `$spawn:<name>`): a `parent` that succeeded with no `$spawn:kids` row in the journal spawned outside it."""
    r = baseline()
    r.steps = [s for s in r.steps if not (s.job_id == 5 and s.name == "$spawn:kids")]
    i8 = r.check().invariants["I8"]
    assert i8.verdict == "invalid", i8.to_json()
    assert any("job 5" in c and "without a journaled $spawn:kids" in c for c in i8.counterexamples), i8.counterexamples


# --- soak/judges/coverage.py: a cancel scenario counted only from the cancel it names --------------------------------


def _cancel(t, job_id, kind, before, result):
    return {"t": E0 + t, "type": "cancel", "job_id": job_id, "result": result, "state_before": before, "kind": kind}


def test_a_cancel_that_cancelled_nothing_is_no_cancel_scenario():
    """Coverage P9 "cancel of a job awaiting a signal": the cancel must have taken — a request the store answered
    NotCancellable (the awaiter woke and finished between the driver's read and its cancel) or NotFound
    cancelled nothing."""
    r = baseline()
    r.history += [
        _cancel(6, 4, "awaiter", "awaiting", "NotCancellable"),
        _cancel(7, 4, "awaiter", "awaiting", "NotFound"),
    ]
    result = r.check()
    assert coverage_count(result, "P9", "cancel_awaiting_signal") == 0
    r.history.append(_cancel(8, 4, "awaiter", "awaiting", "Cancelled"))
    assert coverage_count(r.check(), "P9", "cancel_awaiting_signal") == 1


def test_a_cancel_of_a_running_sleeper_is_not_a_cancel_of_a_sleeping_job():
    """Coverage P9 "cancel of a sleeping job": the sleeper must have been parked in its durable sleep when the
    driver cancelled it — a cancel requested while it ran is another scenario (P13/P3's)."""
    r = baseline()
    r.history.append(_cancel(6, 30, "sleeper", "running", "CancelRequested"))
    assert coverage_count(r.check(), "P9", "cancel_sleeping") == 0
    r.history.append(_cancel(7, 31, "sleeper", "sleeping", "Cancelled"))
    assert coverage_count(r.check(), "P9", "cancel_sleeping") == 1


def test_a_cancel_of_a_running_parent_is_not_a_cancel_of_a_parent_awaiting_children():
    """Coverage P9 "cancel of a parent awaiting children": the parent must have been parked on its children."""
    r = baseline()
    r.history.append(_cancel(6, 30, "parent", "running", "CancelRequested"))
    assert coverage_count(r.check(), "P9", "cancel_awaiting_children") == 0
    r.history.append(_cancel(7, 31, "parent", "awaiting", "Cancelled"))
    assert coverage_count(r.check(), "P9", "cancel_awaiting_children") == 1


def test_a_cancel_of_a_ready_workflow_member_is_not_a_cancel_of_a_held_member():
    """Coverage I5/P9 "cancel of a held workflow member": a member already released (ready) when the cancel
    took was not held — its deps had settled; the held-member race did not happen."""
    r = baseline()
    r.history = [e for e in r.history if e["type"] != "cancel"]
    r.history.append(_cancel(5, 9, "member", "ready", "Cancelled"))
    result = r.check()
    assert coverage_count(result, "P9", "cancel_held") == 0
    assert coverage_count(result, "I5", "cancel_held") == 0
    assert result.invariants["I5"].verdict == "unknown", result.invariants["I5"].to_json()


def test_a_steps_job_read_as_running_but_cancelled_outright_was_not_cancelled_while_running():
    """Coverage P9 "cancel of a running multi-step job": a cancel of a running job is a request (§8.6:
    CancelRequested, honoured at the next step boundary); one the store answered Cancelled found the job no
    longer running (it had gone back to ready between the driver's read and its cancel)."""
    r = baseline()
    r.history.append(_cancel(6, 30, "steps", "running", "Cancelled"))
    assert coverage_count(r.check(), "P9", "cancel_running_steps") == 0
    r.history.append(_cancel(7, 31, "steps", "running", "CancelRequested"))
    assert coverage_count(r.check(), "P9", "cancel_running_steps") == 1


# --- soak/judges/coverage.py: faults and races counted from what happened --------------------------------------------


def test_a_database_crash_with_no_restart_is_no_crash_restart():
    """Coverage P1 "PostgreSQL crash-restarts under running workers": a crash the run never restarted from
    (`db_crash` with no `db_restarted`) tested no worker's return to a restarted database."""
    r = baseline()
    r.history.append({"t": E0 + 240, "type": "db_crash"})
    assert coverage_count(r.check(), "P1", "db_restarts") == 0
    r.history.append({"t": E0 + 241, "type": "db_restarted"})
    assert coverage_count(r.check(), "P1", "db_restarts") == 1


def test_i3_is_unknown_in_a_run_without_a_kill():
    """Coverage I3 needs both "journaled steps replayed by a later attempt" and "kill -9 of a worker" (a kill
    mid-step is what tests a journal write's atomicity, §8): without any kill, I3 is unknown, never valid."""
    r = baseline()
    r.history = [e for e in r.history if e["type"] != "worker_kill"]
    i3 = r.check().invariants["I3"]
    assert i3.verdict == "unknown" and "kill -9" in (i3.why_unknown or ""), i3.to_json()


def test_i9_a_race_is_judged_from_the_deliverys_own_intent_not_an_older_one_whose_write_failed():
    """coverage.signal_races: a delivery's intent is "the latest one before it not taken by an earlier delivery"
    — an older intent whose write never recorded a `signal` (the connection broke) is not this delivery's, and
    judging from it misses the race that happened."""
    r = baseline()
    r.history += [
        {"t": E0 + 50.0, "type": "signal_intent", "job_id": 41},  # its write failed: no `signal` record
        {"t": E0 + 59.8, "type": "lease_sample", "at": E0 + 59.8, "rows": [[41, 1, "w2-1", E0 + 70, "awaiter"]]},
        {"t": E0 + 60.0, "type": "signal_intent", "job_id": 41},
        {"t": E0 + 60.1, "type": "signal", "job_id": 41, "when": "race", "woken": []},
        {"t": E0 + 60.4, "type": "lease_sample", "at": E0 + 60.4, "rows": [[41, 1, "w2-1", E0 + 70, "awaiter"]]},
    ]
    assert coverage_count(r.check(), "I9", "signal_race") == 2  # the baseline's race and awaiter 41's


def test_i9_a_signal_committed_before_its_awaiter_was_claimed_is_no_race():
    """coverage.signal_races: a race needs the attempt running in a sample taken within the resolution *before
    the intent*; awaiter 40 was first seen running after the intent (claimed while the write was in flight: the
    signal already there at the claim), so its delivery raced nothing."""
    r = baseline()
    r.history += [
        {"t": E0 + 10.0, "type": "signal_intent", "job_id": 40},
        {"t": E0 + 10.2, "type": "lease_sample", "at": E0 + 10.2, "rows": [[40, 1, "w2-1", E0 + 20, "awaiter"]]},
        {"t": E0 + 10.3, "type": "signal", "job_id": 40, "when": "race", "woken": []},
        {"t": E0 + 10.6, "type": "lease_sample", "at": E0 + 10.6, "rows": [[40, 1, "w2-1", E0 + 20, "awaiter"]]},
    ]
    assert coverage_count(r.check(), "I9", "signal_race") == 1  # the baseline's own race only


def test_i4_a_crash_at_crossing_job_still_running_its_next_attempt_is_no_crash_at_crossing_yet():
    """Coverage I4 "crash right after the crossing step (the next attempt's pre-flight)": the scenario is the
    pre-flight failing the job — a crash_at_crossing job whose second attempt still ran (a live lease) when the
    snapshot was taken has not reached it. (Job 23 crossed without a crash, so I4 has its crossing.)"""
    from model.rows import Step

    r = baseline()
    r.jobs[3] = replace(
        r.jobs[3], state="running", errors=[err(1, "lease_expired", 1.9)], finished_at=None, lease_until=at(10_000)
    )
    r.add(
        job(
            23,
            "costed",
            input={"costs": [60, 60]},
            state="failed",
            budget_usd_micros=100,
            spent_usd_micros=120,
            errors=[err(1, "budget_exceeded", 2)],
        ),
        "costed",
        "failed:budget_exceeded",
        crossing="c2",
    )
    r.steps += [
        Step(23, 1, "c1", encode({"token": "x", "attempt": 1}), 60, 0, at(1.5)),
        Step(23, 2, "c2", encode({"token": "y", "attempt": 1}), 60, 0, at(1.6)),
    ]
    result = r.check()
    assert coverage_count(result, "I4", "crossings") == 1
    assert coverage_count(result, "I4", "crash_at_crossing") == 0
    assert result.invariants["I4"].verdict == "unknown", result.invariants["I4"].to_json()


# --- soak/judges/invariants_jobs.py: the jobs I1 expects beyond the ledger, I3's `slow` token ---------------------------


def test_i1_a_cron_job_left_ready_after_a_completed_drain_is_stuck():
    """I1 ("No inserted job is ever lost; all reach a terminal state given workers") covers every job the run
    inserted, not only the driver's ledger: a cron slot's job left ready and due after a completed drain."""
    r = baseline()
    r.jobs[12] = replace(r.jobs[12], state="ready", result=None, finished_at=None)
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "invalid", i1.to_json()
    assert any("job 12" in c and "after the drain" in c for c in i1.counterexamples), i1.counterexamples


def test_i1_a_spawned_child_left_ready_after_a_completed_drain_is_stuck():
    """I1 covers the children a spawn declared (§8.4) too: parent 5 ran out of attempts by lease expiry after
    its spawn (no duty blames that end), and its child 6 stayed ready and due through a completed drain."""
    r = baseline()
    r.jobs[5] = replace(
        r.jobs[5], state="failed", result=None, errors=[err(1, "lease_expired", 3), err(2, "lease_expired", 9)]
    )
    r.jobs[6] = replace(r.jobs[6], state="ready", result=None, finished_at=None)
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "invalid", i1.to_json()
    assert any("job 6" in c and "after the drain" in c for c in i1.counterexamples), i1.counterexamples


def test_i3_a_slow_jobs_result_token_must_be_its_journaled_begin_step():
    """I3: "step values, once journaled, are immutable" — a `slow` result's `token` names the value its `begin`
    step saw (PROTOCOL.md §3.8); one the journal does not hold means the step executed again."""
    r = baseline()
    r.jobs[11] = replace(r.jobs[11], result=encode({"token": "other", "node": "w2-1", "attempt": 2}))
    i3 = r.check().invariants["I3"]
    assert i3.verdict == "invalid", i3.to_json()
    assert any("job 11" in c and "'begin'" in c for c in i3.counterexamples), i3.counterexamples


def test_i1_an_idle_drain_end_with_no_worker_running_is_not_a_polling_failure():
    """The idle-drain rule needs "a worker running and the database up": when every worker had ended before the
    drain's last 10 s, nobody could have polled — the job left ready is unknown, not a violation of §9."""
    r = baseline()
    _idle_drain_end(r, 10)
    r.history = [{**e, "t": E0 + 235} if e["type"] == "worker_term" else e for e in r.history]
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "unknown" and i1.violations == 0, i1.to_json()


# --- soak/judges/invariants_links.py: I9 ---------------------------------------------------------------------------


def test_i9_is_unknown_when_no_awaiter_ran_on_its_delivered_signal():
    """I9: "Awaiting jobs with a delivered signal eventually run" — valid only once some awaiter with a delivered
    signal did run with its payload; a run whose only awaiter the driver cancelled proved nothing about it."""
    r = baseline()
    r.jobs[4] = replace(r.jobs[4], state="cancelled", result=None)
    i = next(n for n, e in enumerate(r.ledger) if e.job_id == 4)
    r.ledger[i] = replace(r.ledger[i], expected="cancelled", detail={"plan": "cancel", "cancel": True})
    i9 = r.check().invariants["I9"]
    assert i9.violations == 0 and i9.verdict == "unknown", i9.to_json()


def test_i1_a_job_due_after_the_snapshot_was_taken_is_pending_not_stuck():
    """I1 judges the snapshot at the time it was taken (the history's `snapshot` event): a ready job due at +255,
    after the snapshot at +251 (the log goes on to +260), waited for a future deadline — unknown, not stuck."""
    r = baseline()
    r.jobs[1] = replace(r.jobs[1], state="ready", ready_at=at(255), result=None, finished_at=None)
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "unknown" and i1.violations == 0, i1.to_json()
    assert "future deadline" in (i1.why_unknown or ""), i1.to_json()


def test_i8_a_node_whose_clock_runs_behind_is_allowed_the_same_skew_as_one_running_ahead():
    """I8 allows "the run's configured clock skew" between a parent's and its children's finish stamps: a
    parent finished by a node whose clock runs 2 s *behind* (`--clock-skew -2`: BELAY_CLOCK_OFFSET may be any
    float, PROTOCOL.md §1) is stamped up to 2 s early, so a child stamped 1.5 s after it is within the skew."""
    r = baseline()
    r.jobs[7] = replace(r.jobs[7], finished_at=at(10.5))  # the parent finished at +9
    r.history.append({"t": E0, "type": "clock_skew", "slot": 2, "seconds": -2.0})
    i8 = r.check().invariants["I8"]
    assert i8.verdict == "valid", i8.to_json()


# --- a third batch: I1 over a long ledger, its excuses, the race and zombie evidence -------------------------------------


def test_i1_a_database_outage_just_before_an_attempts_start_event_excuses_its_lease_loss():
    """I1's renewal rule blames a lost lease only if "the database up for the whole" time since the attempt
    started — from a second before its `start` event (the claim commits before the event is written): an
    outage that ended half a second before the event may have held the attempt's first renewal."""
    r = baseline()
    _unstop_w1(r)
    r.history += [{"t": E0 + 0.5, "type": "db_crash"}, {"t": E0 + 1.5, "type": "db_restarted"}]
    i1 = r.check().invariants["I1"]
    assert i1.verdict == "valid", i1.to_json()


def test_i1_an_idle_drain_end_blames_only_ready_jobs_on_the_polling_floor():
    """The idle-drain rule: "a ready job due through that window was not claimed by anyone" — polling claims
    ready jobs; a parent left awaiting its children is not something a poll would have claimed (unknown)."""
    r = baseline()
    _idle_drain_end(r, 10)
    r.jobs[1] = replace(r.jobs[1], state="succeeded", ready_at=at(0), result=encode({"echo": 1, "attempt": 1}))
    r.jobs[5] = replace(r.jobs[5], state="awaiting", ready_at=None, result=None, finished_at=None)
    i1 = r.check().invariants["I1"]
    assert i1.violations == 0 and i1.verdict == "unknown", i1.to_json()


def test_i4_a_zombie_stop_is_released_by_a_sigcont_after_it_not_by_an_earlier_one():
    """coverage.stale_paid_step_resumes: the nemesis released the frozen attempt "only once `nap` was journaled
    (`zombie_cont` journaled)" — the SIGCONT after that stop; an earlier SIGCONT of the node (another freeze)
    released nothing of it. Without a release of its own, the stop resumed no stale execution."""
    from model.rows import Step

    r = baseline()
    r.observations = [o for o in r.observations if not (o.job_id == 11 and o.phase == "pre_ack")]
    r.steps = [s for s in r.steps if not (s.job_id == 11 and s.name == "nap")]
    r.steps.append(Step(11, 2, "nap", encode({"token": "n", "attempt": 2}), 1, 0, at(34)))
    r.history += [
        {"t": E0 + 3, "type": "zombie_cont", "node": "w1-1", "why": "journaled"},
        {"t": E0 + 5, "type": "zombie_stop", "node": "w1-1", "held": [[11, 1]]},
    ]
    assert coverage_count(r.check(), "I4", "zombies_back") == 0
