"""Mutants of the end-of-run judges (soak/judges/checker.py, invariants_jobs.py, invariants_links.py, durability.py,
coverage.py, verdicts.py) found by a second mutation hunt over them (issue 54, hunt K): bugs planted in the §11
invariants, D1, the scenario coverage and the verdict rules that the existing checker tests let pass. Each is killed
by tests/test_checker_edges.py (pure, tests/test_soak_checker.py's baseline run changed in one place, about a second),
which leads its suite here; docs/mutants.md "Mutation hunts" describes the method.
"""

from __future__ import annotations

from properties.mutants.kinds import Edit, Mutant

CHECKER_PY = "soak/judges/checker.py"
VERDICTS_PY = "soak/judges/verdicts.py"
DURABILITY_PY = "soak/judges/durability.py"
JOBS_PY = "soak/judges/invariants_jobs.py"
LINKS_PY = "soak/judges/invariants_links.py"
COVERAGE_PY = "soak/judges/coverage.py"

# the hunt's tests first, then the checker's existing suites (tests/test_judge_edges_checks.py, the outcomes, the checker)
CHECKS3_SUITE = (
    "tests/test_checker_edges.py",
    "tests/test_judge_edges_checks.py",
    "tests/test_soak_outcomes.py",
    "tests/test_soak_checker.py",
    "tests/test_soak_duties.py",
    "tests/test_certifier_checks.py",
)
D1_3_SUITE = ("tests/test_checker_edges.py", "tests/test_soak_netfault_checks.py", "tests/test_certifier_checks.py")

CHECKER_HUNT: tuple[Mutant, ...] = (
    Mutant(
        "cert_check3_lease_ttl_from_the_wrong_key",
        (
            "I1 renewal rule: the run's lease ttl read from a key run_start does not have (always 10 s): a "
            "worker that never renews a 4 s lease loses it 4 s in, unblamed (VALID)"
        ),
        "§11 I1",
        (Edit(CHECKER_PY, 'float(run.get("lease_ttl", 10))', 'float(run.get("ttl", 10))'),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_the_renewal_rule_uses_the_runs_own_lease_ttl
    Mutant(
        "cert_check3_i8_clock_skew_not_passed",
        (
            "I8: the run's clock skew is not handed to the children's finish rule (a child stamped by a "
            "node running ahead, within the skew, fails an honest parent)"
        ),
        "§11 I8",
        (Edit(CHECKER_PY, '_i8(results["I8"], state, by_id, steps, skew)', '_i8(results["I8"], state, by_id, steps)'),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i8_a_child_finished_within_the_runs_clock_skew_after_its_parent_is_not_late
    Mutant(
        "cert_check3_i8_clock_skew_taken_off",
        (
            "I8: the clock skew is taken off the parent's finish instead of added (children finished just "
            "before the parent are late: an honest worker is INVALID)"
        ),
        "§11 I8",
        (Edit(LINKS_PY, "job.finished_at.timestamp() + skew", "job.finished_at.timestamp() - skew"),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i8_a_child_finished_within_the_runs_clock_skew_after_its_parent_is_not_late
    Mutant(
        "cert_check3_p9_first_alternative_only",
        (
            "P9: only the first alternative of an expected outcome counts ('cancelled|succeeded': a steps "
            "job whose cancel lost the race and succeeded is INVALID)"
        ),
        "§duty P9",
        (Edit(VERDICTS_PY, '    for option in expected.split("|"):', '    for option in expected.split("|")[:1]:'),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_p9_an_expected_outcome_is_met_by_any_of_its_alternatives
    Mutant(
        "cert_check3_json_valid_unless_invalid",
        ("results.json: a row's valid flag is true unless it is invalid (unknown rows published as valid: true)"),
        "§cert verdict",
        (
            Edit(
                VERDICTS_PY,
                '            "valid": self.verdict == "valid",',
                '            "valid": self.verdict != "invalid",',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_results_json_marks_a_row_valid_only_when_its_verdict_is_valid
    Mutant(
        "cert_check3_d1_json_valid_unless_invalid",
        (
            "D1's results.json row: valid is true unless invalid (a failover run that watched no commit "
            "published as valid: true)"
        ),
        "§11 D1",
        (
            Edit(
                DURABILITY_PY,
                '            "valid": self.verdict == "valid",',
                '            "valid": self.verdict != "invalid",',
            ),
        ),
        suite=D1_3_SUITE,
    ),  # killed by test_checker_edges::test_results_json_marks_a_row_valid_only_when_its_verdict_is_valid
    Mutant(
        "cert_check3_d1_state_change_not_a_lost_ack",
        "D1: a watched terminal job now in another state with the same finish time is no lost ack",
        "§11 D1",
        (
            Edit(
                DURABILITY_PY,
                "                job.state != st or job.finished_at is None",
                "                job.finished_at is None",
            ),
        ),
        suite=D1_3_SUITE,
    ),  # killed by test_checker_edges::test_d1_a_watched_terminal_job_now_in_another_terminal_state_is_a_lost_ack
    Mutant(
        "cert_check3_d1_only_the_first_failover",
        "D1: only the first failover's watch is compared (work lost by a later failover: VALID)",
        "§11 D1",
        (Edit(DURABILITY_PY, "    for n, w in enumerate(watches, 1):", "    for n, w in enumerate(watches[:1], 1):"),),
        suite=D1_3_SUITE,
    ),  # killed by test_checker_edges::test_d1_every_failovers_watch_is_compared_not_only_the_first
    Mutant(
        "cert_check3_i1_idle_drain_from_one_sample",
        (
            "I1 idle drain end: one empty lease sample in the last 10 s suffices to blame the polling "
            "floor (an honest worker whose drain was cut short is INVALID)"
        ),
        "§11 I1",
        (Edit(JOBS_PY, "    if len(samples) < 5 or any(", "    if len(samples) < 1 or any("),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_an_idle_drain_end_needs_five_lease_samples_before_it_blames_the_polling_floor
    Mutant(
        "cert_check3_i1_idle_drain_blames_jobs_due_inside_it",
        (
            "I1 idle drain end: a ready job due at any time up to the drain's end counts as unclaimed "
            "through the idle window (a job due 0.2 s before the end: an honest worker is INVALID)"
        ),
        "§11 I1",
        (
            Edit(
                JOBS_PY,
                '            if job.state == "ready" and due_t <= idle[0]:',
                '            if job.state == "ready" and due_t <= idle[0] + IDLE_S:',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_a_job_due_only_moments_before_an_idle_drain_end_is_not_blamed_on_polling
    Mutant(
        "cert_check3_i1_awaiting_without_deadline_pending",
        (
            "I1: a job awaiting with no deadline after a completed drain counts as pending (UNKNOWN "
            "instead of INVALID for a wake-up that never came)"
        ),
        "§11 I1",
        (
            Edit(
                JOBS_PY,
                '(job.state == "awaiting" and job.ready_at is not None and not due(job.ready_at))',
                '(job.state == "awaiting" and (job.ready_at is None or not due(job.ready_at)))',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_a_job_awaiting_with_no_deadline_after_a_completed_drain_is_stuck
    Mutant(
        "cert_check3_i1_lease_loss_paired_with_any_attempt",
        (
            "I1 renewal rule: a lease_expired entry is judged against every attempt's start event, not its "
            "own (an attempt killed with its node is blamed on another attempt's live node: an honest "
            "worker is INVALID)"
        ),
        "§11 I1",
        (
            Edit(
                JOBS_PY,
                'e.get("error") == "lease_expired" and e.get("attempt") == p.get("attempt"):',
                'e.get("error") == "lease_expired":',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_a_lease_lost_is_judged_against_its_own_attempts_start_only
    Mutant(
        "cert_check3_i3_pruned_jobs_step_vanished",
        "I3: a sampled step of a job retention deleted counts as vanished (an honest prune is INVALID)",
        "§11 I3",
        (
            Edit(
                JOBS_PY,
                "            if key[0] in state.jobs:\n                r.add(",
                "            if True:\n                r.add(",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i3_a_sampled_step_of_a_job_retention_deleted_has_not_vanished
    Mutant(
        "cert_check3_i4_budget_failure_without_crossing",
        "I4: a costed job that never crossed its budget yet failed budget_exceeded passes",
        "§11 I4",
        (
            Edit(
                JOBS_PY,
                '        if want is None and job.state == "failed" and _last_error(job) == "budget_exceeded":',
                "        if False:",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i4_a_costed_job_that_never_crossed_its_budget_yet_failed_budget_exceeded_is_flagged
    Mutant(
        "cert_check3_i4_last_step_by_name",
        (
            "I4 crossing rule: the step a budget failure came after is the highest-named, not the last "
            "journaled (a worker that journaled c2 then c1 and failed after c1 passes)"
        ),
        "§11 I4",
        (Edit(JOBS_PY, "key=lambda s: s.seq)]", "key=lambda s: s.name)]"),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i4_the_step_a_budget_failure_came_after_is_the_last_journaled_not_the_highest_named
    Mutant(
        "cert_check3_i2_moved_on_needs_an_ack_observation",
        (
            "I2 coverage: an attempt whose pre_ack saw the row moved on counts as a stale ack only with an "
            "ack observation (a SHOULD): an honest worker stays UNKNOWN"
        ),
        "§11 I2",
        (
            Edit(
                JOBS_PY,
                "        moved_on += 1\n        ack = acks.get(key)",
                "        ack = acks.get(key)\n        moved_on += ack is not None",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i2_an_attempt_whose_pre_ack_saw_the_row_moved_on_is_a_stale_ack_without_an_ack_observation
    Mutant(
        "cert_check3_i5_one_dep_satisfies",
        (
            "I5: a member is satisfied when any one of its deps is (a member released beside a failed, "
            "unignored dep passes)"
        ),
        "§11 I5",
        (
            Edit(
                LINKS_PY,
                '            satisfied = all(d.state == "succeeded" or d.state in ignore for d in deps)',
                '            satisfied = any(d.state == "succeeded" or d.state in ignore for d in deps)',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i5_a_member_that_ran_with_one_of_two_deps_failed_and_not_ignored_is_flagged
    Mutant(
        "cert_check3_i5_release_counted_without_a_run",
        "I5 coverage: a release through an ignore flag counts although the member never ran",
        "§11 I5",
        (
            Edit(
                LINKS_PY,
                "            if satisfied and ignore & {d.state for d in deps} and job.attempt > 0:",
                "            if satisfied and ignore & {d.state for d in deps}:",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i5_a_release_through_an_ignore_flag_counts_only_when_the_member_ran
    Mutant(
        "cert_check3_i5_every_release_through_an_ignore_flag",
        (
            "I5 coverage: every satisfied member that ran counts as a release through an ignore flag (deps "
            "that all succeeded too)"
        ),
        "§11 I5",
        (
            Edit(
                LINKS_PY,
                "            if satisfied and ignore & {d.state for d in deps} and job.attempt > 0:",
                "            if satisfied and job.attempt > 0:",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i5_a_release_of_a_member_whose_deps_all_succeeded_is_no_release_through_an_ignore_flag
    Mutant(
        "cert_check3_i6_slot_needs_a_whole_minute",
        (
            "I6: a slot is expected only if its whole minute passed before the pause (a slot due 20 s "
            "before the pause, missed: VALID)"
        ),
        "§11 I6",
        (Edit(LINKS_PY, "        while s + 10 <= t_end:", "        while s + 60 <= t_end:"),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i6_a_slot_due_ten_seconds_before_the_cron_was_paused_is_expected
    Mutant(
        "cert_check3_i8_success_without_a_spawn",
        "I8: a parent that succeeded without journaling its $spawn step passes",
        "§11 I8",
        (
            Edit(
                LINKS_PY,
                (
                    '            if job.state == "succeeded":\n                r.add([inv.Violation("I8", job.id, '
                    '"succeeded without a journaled $spawn:kids step")])'
                ),
                "            pass",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i8_a_parent_that_succeeded_without_journaling_its_spawn_is_flagged
    Mutant(
        "cert_check3_cov_refused_cancels_count",
        ("P9 coverage: cancels the store answered NotCancellable or NotFound count as cancels of parked jobs"),
        "§cov P9",
        (
            Edit(
                COVERAGE_PY,
                '        if e.get("result") not in ("Cancelled", "CancelRequested"):\n            continue\n',
                "",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_a_cancel_that_cancelled_nothing_is_no_cancel_scenario
    Mutant(
        "cert_check3_cov_running_sleeper_cancel_counts",
        "P9 coverage: a cancel of a sleeper in any state (running) counts as a cancel of a sleeping job",
        "§cov P9",
        (
            Edit(
                COVERAGE_PY,
                '        elif kind == "sleeper" and before == "sleeping":',
                '        elif kind == "sleeper":',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_a_cancel_of_a_running_sleeper_is_not_a_cancel_of_a_sleeping_job
    Mutant(
        "cert_check3_cov_running_parent_cancel_counts",
        ("P9 coverage: a cancel of a parent in any state (running) counts as a cancel of a parent awaiting children"),
        "§cov P9",
        (
            Edit(
                COVERAGE_PY, '        elif kind == "parent" and before == "awaiting":', '        elif kind == "parent":'
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_a_cancel_of_a_running_parent_is_not_a_cancel_of_a_parent_awaiting_children
    Mutant(
        "cert_check3_cov_ready_member_cancel_counts_held",
        ("I5/P9 coverage: a cancel of a ready (released) workflow member counts as a cancel of a held member"),
        "§cov I5",
        (
            Edit(
                COVERAGE_PY,
                '(e.get("result") == "Cancelled" and before != "ready")',
                '(e.get("result") == "Cancelled")',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_a_cancel_of_a_ready_workflow_member_is_not_a_cancel_of_a_held_member
    Mutant(
        "cert_check3_cov_steps_cancelled_outright_counts_running",
        (
            "P9 coverage: a steps job read as running but cancelled outright (Cancelled, not "
            "CancelRequested) counts as a cancel of a running job"
        ),
        "§cov P9",
        (
            Edit(
                COVERAGE_PY,
                '        elif kind == "steps" and before == "running" and e.get("result") == "CancelRequested":',
                '        elif kind == "steps" and before == "running":',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_a_steps_job_read_as_running_but_cancelled_outright_was_not_cancelled_while_running
    Mutant(
        "cert_check3_cov_db_crash_counts_as_restart",
        "P1 coverage: a database crash with no restart counts as a crash-restart",
        "§cov P1",
        (
            Edit(
                COVERAGE_PY,
                '        "db_restarts": len(t["db_restarted"]),',
                '        "db_restarts": len(t["db_crash"]),',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_a_database_crash_with_no_restart_is_no_crash_restart
    Mutant(
        "cert_check3_cov_i3_needs_no_kill",
        "I3 coverage: the kill -9 scenario dropped from I3's row (VALID in a run without a kill)",
        "§cov I3",
        (
            Edit(
                COVERAGE_PY,
                (
                    '    "I3": [("replays", "journaled steps replayed by a later attempt"), ("kills", "kill -9 of '
                    'a worker")],'
                ),
                '    "I3": [("replays", "journaled steps replayed by a later attempt")],',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i3_is_unknown_in_a_run_without_a_kill
    Mutant(
        "cert_check3_cov_race_from_the_oldest_intent",
        (
            "I9 race coverage: a delivery is judged from the oldest unclaimed intent (one whose write "
            "failed), not its own: a real race missed"
        ),
        "§cov I9",
        (Edit(COVERAGE_PY, "        began = max(mine, default=done)", "        began = min(mine, default=done)"),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i9_a_race_is_judged_from_the_deliverys_own_intent_not_an_older_one_whose_write_failed
    Mutant(
        "cert_check3_cov_race_running_seen_after_the_intent",
        (
            "I9 race coverage: the 'running before' window reaches the delivery's record (an awaiter "
            "claimed while the signal's write was in flight counts as a race)"
        ),
        "§cov I9",
        (
            Edit(
                COVERAGE_PY,
                'ev.series["lease_sample"].between(began - resolution, began)',
                'ev.series["lease_sample"].between(began - resolution, done)',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i9_a_signal_committed_before_its_awaiter_was_claimed_is_no_race
    Mutant(
        "cert_check3_cov_crash_at_crossing_any_end",
        (
            "I4 coverage: a crash_at_crossing job at attempt 2 counts whatever its state (its next attempt "
            "still running: VALID row)"
        ),
        "§cov I4",
        (
            Edit(
                COVERAGE_PY,
                '            and j.attempt >= 2\n            and j.state == "failed"\n',
                "            and j.attempt >= 2\n",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i4_a_crash_at_crossing_job_still_running_its_next_attempt_is_no_crash_at_crossing_yet
    Mutant(
        "cert_check3_i3_slow_token_unchecked",
        (
            "I3: a slow job's result token is never compared with its journaled begin step (a begin "
            "executed again passes)"
        ),
        "§11 I3",
        (Edit(JOBS_PY, '        elif job.worker == "slow" and "token" in result:', "        elif False:"),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i3_a_slow_jobs_result_token_must_be_its_journaled_begin_step
    Mutant(
        "cert_check3_i1_cron_jobs_not_expected",
        ("I1: cron jobs are not among the expected jobs (a cron job left ready after a completed drain: VALID)"),
        "§11 I1",
        (
            Edit(
                JOBS_PY,
                "    crons = {j.id for j in state.jobs.values() if j.cron_name is not None}",
                "    crons: set[int] = set()",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_a_cron_job_left_ready_after_a_completed_drain_is_stuck
    Mutant(
        "cert_check3_i1_spawned_children_not_expected",
        (
            "I1: the children a spawn declared are not among the expected jobs (a child left ready after a "
            "completed drain passes I1)"
        ),
        "§11 I1",
        (
            Edit(
                JOBS_PY, "                declared.update(i for i in ids if isinstance(i, int))", "                pass"
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_a_spawned_child_left_ready_after_a_completed_drain_is_stuck
    Mutant(
        "cert_check3_i9_exercised_without_a_run_awaiter",
        ("I9: exercised although no awaiter ran on its delivered signal (VALID when the only awaiters were cancelled)"),
        "§11 I9",
        (Edit(LINKS_PY, "    r.exercised = ran > 0\n", "    r.exercised = True\n"),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i9_is_unknown_when_no_awaiter_ran_on_its_delivered_signal
    Mutant(
        "cert_check3_i1_idle_drain_with_no_worker_running",
        (
            "I1 idle drain end: blamed on the polling floor with no worker running in the window (an "
            "honest run whose workers had ended is INVALID)"
        ),
        "§11 I1",
        (Edit(JOBS_PY, "    return (t0, ran) if ran else None", "    return (t0, ran)"),),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_an_idle_drain_end_with_no_worker_running_is_not_a_polling_failure
    Mutant(
        "cert_check3_i1_due_at_the_history_end",
        (
            "I1: due-ness judged at the history's last event, not the snapshot (a job due after the "
            "snapshot is stuck: an honest worker is INVALID)"
        ),
        "§11 I1",
        (
            Edit(
                CHECKER_PY,
                (
                    '    snapshot_t = next((float(e["t"]) for e in reversed(history) if e.get("type") == '
                    '"snapshot"), timeline.end)'
                ),
                "    snapshot_t = timeline.end",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_a_job_due_after_the_snapshot_was_taken_is_pending_not_stuck
    Mutant(
        "cert_check3_i1_outage_just_before_the_start_not_excused",
        (
            "I1 renewal rule: a database outage that ended within the second before an attempt's start "
            "event no longer excuses its lost lease (an honest worker is INVALID)"
        ),
        "§11 I1",
        (
            Edit(
                JOBS_PY,
                "                    and not timeline.db_down_during(t0 - 1, t1)",
                "                    and not timeline.db_down_during(t0, t1)",
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_a_database_outage_just_before_an_attempts_start_event_excuses_its_lease_loss
    Mutant(
        "cert_check3_i1_idle_drain_blames_any_state",
        (
            "I1 idle drain end: jobs in any state (a parent awaiting its children) are blamed on the "
            "polling floor, not only ready ones (an honest worker is INVALID)"
        ),
        "§11 I1",
        (
            Edit(
                JOBS_PY, '            if job.state == "ready" and due_t <= idle[0]:', "            if due_t <= idle[0]:"
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i1_an_idle_drain_end_blames_only_ready_jobs_on_the_polling_floor
    Mutant(
        "cert_check3_cov_zombie_released_by_an_earlier_cont",
        (
            "I4 coverage: a zombie stop is paired with the node's first journaled SIGCONT, even one before "
            "the stop (a stop never released counts as a duplicate execution)"
        ),
        "§cov I4",
        (
            Edit(
                COVERAGE_PY,
                '        cont = next((c for c in conts if c.get("node") == node and float(c["t"]) >= t), None)',
                '        cont = next((c for c in conts if c.get("node") == node), None)',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i4_a_zombie_stop_is_released_by_a_sigcont_after_it_not_by_an_earlier_one
    Mutant(
        "cert_check3_i8_clock_behind_allows_no_skew",
        (
            "I8 (hunt K's fix undone): a node whose clock runs behind (negative clock skew) is allowed no "
            "skew, so a parent it stamped early fails with children finished just after (an honest worker "
            "is INVALID)"
        ),
        "§11 I8",
        (
            Edit(
                CHECKER_PY,
                '[abs(float(e.get("seconds") or 0)) for e in history',
                '[float(e.get("seconds") or 0) for e in history',
            ),
        ),
        suite=CHECKS3_SUITE,
    ),  # killed by test_checker_edges::test_i8_a_node_whose_clock_runs_behind_is_allowed_the_same_skew_as_one_running_ahead
)
