"""Mutants of the judges of order and time (soak/judges/timing/: the fault log per node, `now` freshness, claim
order) and of the worker duties (soak/judges/duties/) found by a mutation hunt over them (issue 54, hunt I):
bugs planted there that the existing tests let pass. Each is killed by tests/test_timing_duty_edges.py (pure:
hand-built fault logs, committed claims and the baseline run broken in one place; about a second), which leads
its suite here; docs/mutants.md "Mutation hunts" describes the method. One of them,
`cert_time3_p14_first_attempt_at_an_instant_hides_the_rest`, is the rule P14 had before this hunt: its survivor
showed the certifier itself mis-judging a run, and P14 was fixed.
"""

from __future__ import annotations

from properties.mutants.kinds import Edit, Mutant

NODES_PY = "soak/judges/timing/nodes.py"
FRESHNESS_PY = "soak/judges/timing/freshness.py"
CLAIM_ORDER_PY = "soak/judges/timing/claim_order.py"
EVIDENCE_PY = "soak/judges/duties/evidence.py"
OUTCOMES_PY = "soak/judges/duties/outcomes.py"
RUNNING_PY = "soak/judges/duties/running.py"
DUTY_TIMING_PY = "soak/judges/duties/timing.py"
DUTIES_PY = "soak/judges/duties/__init__.py"

TIMING3_SUITE = ("tests/test_timing_duty_edges.py", "tests/test_timing_judges.py", "tests/test_judge_edges_history.py")
DUTY3_SUITE = ("tests/test_timing_duty_edges.py", "tests/test_soak_duties.py", "tests/test_judge_edges_checks.py")

TIMING_HUNT: tuple[Mutant, ...] = (
    Mutant(
        "cert_time3_heal_closes_the_other_kind",
        (
            "fault log: a partition's heal closes the latency window and a latency's heal the "
            "partition's (the healed fault stays open to the end of the log and excuses every later "
            "lag of the node)"
        ),
        "§timing faults",
        (
            Edit(
                NODES_PY,
                '            by = self.isolated if e.get("fault") in ("partition", "stall") else self.slowed\n',
                (
                    '            by = self.slowed if e.get("fault") in ("partition", "stall") else '
                    "self.isolated  # MUTANT\n"
                ),
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_heal_ends_the_fault_it_names_and_no_other
    Mutant(
        "cert_time3_cut_end_closes_the_latest_cut",
        (
            "fault log: a cut_end closes the latest open cut of any node (the named node's cut stays "
            "open and excuses its later stale writes)"
        ),
        "§timing faults",
        (
            Edit(
                NODES_PY,
                "                if c[0] == node and c[2] == INF:\n",
                "                if c[2] == INF:  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_the_end_of_a_cut_of_one_node_ends_that_nodes_cut_not_the_latest_one
    Mutant(
        "cert_time3_machine_stall_holds_nothing",
        (
            "P5 claim order: a machine-wide stall after a row's write is not a freeze that could hold "
            "it (rows passed over around it count: an honest worker is INVALID)"
        ),
        "§duty P5",
        (
            Edit(
                NODES_PY,
                "        frozen += [[a, b] for _n, a, b in self.cuts] + self.stalls\n",
                "        frozen += [[a, b] for _n, a, b in self.cuts]  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_machine_stall_after_a_rows_write_can_hold_it_frozen
    Mutant(
        "cert_time3_stall_starts_a_sample_late",
        (
            "now freshness: a machine stall starts one sample interval late (STALL_GAP after the last "
            "sample, not SAMPLE_EVERY): half a second of it excuses nothing (an honest worker is "
            "INVALID)"
        ),
        "§timing now",
        (
            Edit(
                NODES_PY,
                "                self.stalls.append([self.last_sample + SAMPLE_EVERY, at])\n",
                "                self.stalls.append([self.last_sample + STALL_GAP, at])  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_machine_stall_excuses_from_the_first_sample_that_was_due
    Mutant(
        "cert_time3_excuse_window_on_the_nodes_clock",
        (
            "now freshness: a node's faults are overlapped with [now, commit] read on its own clock, "
            "not the true one (a skewed node's own SIGSTOP excuses less: an honest worker is INVALID)"
        ),
        "§timing now",
        (
            Edit(
                FRESHNESS_PY,
                "        excused, names = self.faults.excuse(node, t_now, t_at)\n",
                "        excused, names = self.faults.excuse(node, now.timestamp(), t_at)  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_skewed_nodes_own_fault_is_measured_on_the_true_clock
    Mutant(
        "cert_time3_due_by_the_commit",
        (
            "P5 claim order: a row counts as claimable when due by the claim's commit, not its now "
            "(rows that became due while the claim ran are passed over: an honest worker is INVALID)"
        ),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                "            if ready_at is not None and ready_at > now:\n",
                "            if ready_at is not None and ready_at.timestamp() > t:  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_row_due_at_the_claims_now_is_claimable_one_due_after_it_is_not
    Mutant(
        "cert_time3_due_exactly_now_not_claimable",
        ("P5 claim order: a row due exactly at the claim's now is taken as not yet due (passing it over is VALID)"),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                "            if ready_at is not None and ready_at > now:\n",
                "            if ready_at is not None and ready_at >= now:  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_row_due_at_the_claims_now_is_claimable_one_due_after_it_is_not
    Mutant(
        "cert_time3_own_write_is_a_choice",
        (
            "P5 coverage: a row the claim's own transaction wrote counts as passed over, so the claim "
            "had a choice (a run whose claims never had one reads exercised)"
        ),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                (
                    "            if job_id in ids or job_id in jobs:\n                continue  # taken, "
                    "or written by this very transaction\n"
                ),
                (
                    "            if job_id in ids:  # MUTANT\n                continue  # taken, or "
                    "written by this very transaction\n"
                ),
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_row_the_claims_own_transaction_writes_is_neither_passed_over_nor_a_choice
    Mutant(
        "cert_time3_freezes_counted_from_the_claims_now",
        (
            "P5 claim order: the faults around a claim are counted from its now, not CLAIM_HOLD_MIN "
            "before (a freeze that thawed just before holds nothing: an honest worker is INVALID)"
        ),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                (
                    "        can_hold = LOCKS_PER_TAKE * self.max_take * self.faults.freezes(t_now - "
                    "CLAIM_HOLD_MIN, t)\n"
                ),
                "        can_hold = LOCKS_PER_TAKE * self.max_take * self.faults.freezes(t_now, t)  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_fault_that_thawed_just_before_the_claims_now_excuses_what_it_held
    Mutant(
        "cert_time3_repeat_from_the_later_commit",
        (
            "P5 claim order: a row passed over again is dated by the later claim's commit, not its now "
            "(a slow claim begun within HOLD proves the row: an honest worker is INVALID)"
        ),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                (
                    "                if t_now - p.claim_at > p.gap:\n                    p.gap, "
                    "p.again_lsn = t_now - p.claim_at, lsn\n"
                ),
                (
                    "                if t - p.claim_at > p.gap:  # MUTANT\n                    p.gap, "
                    "p.again_lsn = t - p.claim_at, lsn\n"
                ),
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_row_passed_over_again_is_measured_from_the_later_claims_now_not_its_commit
    Mutant(
        "cert_time3_late_unclaimed_write_holds",
        (
            "P5 claim order: a non-claim write up to INFLIGHT_MAX (60 s) after a claim counts as a "
            "concurrent holder of the row (claims over capacity pass)"
        ),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                "                writer_now is None and t <= c[2] + self.hold\n",
                "                writer_now is None and t <= c[2] + INFLIGHT_MAX  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_exactly_over_min_claims_over_capacity_make_p5_invalid_and_a_later_unclaimed_write_holds_nothing
    Mutant(
        "cert_time3_capacity_by_the_largest_claim",
        (
            "P5 claim order: each claim in flight beside one could hold LOCKS_PER_TAKE x the run's "
            "largest claim, not x the rows it took (claims over capacity pass)"
        ),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                "                held += LOCKS_PER_TAKE * n\n",
                "                held += LOCKS_PER_TAKE * self.max_take  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_the_claims_in_flight_beside_hold_two_rows_per_row_they_took_not_per_the_largest_claim
    Mutant(
        "cert_time3_over_capacity_off_by_one",
        "P5 claim order: exactly OVER_MIN claims over capacity do not make P5 invalid",
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                "        return n >= OVER_MIN and n >= OVER_SHARE * self.judged\n",
                "        return n > OVER_MIN and n >= OVER_SHARE * self.judged  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_exactly_over_min_claims_over_capacity_make_p5_invalid_and_a_later_unclaimed_write_holds_nothing
    Mutant(
        "cert_time3_id_descending",
        (
            "P5 claim order: rows of one priority and ready_at are ordered by id DESC (a claim taking "
            "the newer row first passes)"
        ),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                (
                    "    return (priority, 0 if ready_at is None else 1, 0.0 if ready_at is None else "
                    "ready_at.timestamp(), job_id)\n"
                ),
                (
                    "    return (priority, 0 if ready_at is None else 1, 0.0 if ready_at is None else "
                    "ready_at.timestamp(), -job_id)  # MUTANT\n"
                ),
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_rows_of_one_priority_and_ready_at_are_claimed_by_id_ascending
    Mutant(
        "cert_time3_untraced_windows_unsorted",
        (
            "P5 claim order: untraced rows are grouped in HOLD windows in the order they settled, not "
            "in time order (rows far apart share one window: fewer aborts needed, VALID)"
        ),
        "§duty P5",
        (Edit(CLAIM_ORDER_PY, "        pairs.sort()\n", "        pass  # MUTANT\n"),),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_untraced_rows_are_grouped_in_windows_of_hold_in_time_order
    Mutant(
        "cert_time3_lease_ending_at_the_commit_alive",
        (
            "P17: a claim whose lease ends exactly at its commit is not recorded as committed with its "
            "lease expired (P17 counts from a later sample)"
        ),
        "§duty P17",
        (
            Edit(
                CLAIM_ORDER_PY,
                (
                    "                if a.lease_until is not None and a.lease_until <= at and "
                    "len(self.claimed_expired) < 20000:\n"
                ),
                (
                    "                if a.lease_until is not None and a.lease_until < at and "
                    "len(self.claimed_expired) < 20000:  # MUTANT\n"
                ),
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_claim_committed_exactly_at_its_lease_until_committed_with_its_lease_expired
    Mutant(
        "cert_time3_hold_on_the_nodes_clock",
        (
            "P5 claim order: HOLD is measured from the claim's now on the node's clock, its offset not "
            "taken off (a skewed node's slow claim shortens HOLD: an honest worker is INVALID)"
        ),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                "                self.claim_lags.append(t - t_now)\n",
                "                self.claim_lags.append(t - now.timestamp())  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_hold_is_the_longest_claim_on_the_true_clock
    Mutant(
        "cert_time3_p5_retried_row_is_contention",
        (
            "P5 coverage: a retried priority-0 row left ready (attempt > 0, due at its backoff) counts "
            "as a claim choosing between priorities"
        ),
        "§duty P5",
        (
            Edit(
                OUTCOMES_PY,
                '        ready_a = {i for i, p, s, att in a["rows"] if s == "ready" and att == 0}\n',
                '        ready_a = {i for i, p, s, att in a["rows"] if s == "ready"}  # MUTANT\n',
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p5_a_retried_priority_0_job_left_ready_is_no_fresh_batch_job_passed_over
    Mutant(
        "cert_time3_p5_same_priority_running_ahead",
        (
            "P5: a priority-0 job running while another priority-0 job waits is a priority inversion "
            "(an honest worker is INVALID)"
        ),
        "§duty P5",
        (
            Edit(
                OUTCOMES_PY,
                "        ahead = sorted(i for i in running_a if prio[i] > 0)\n",
                "        ahead = sorted(i for i in running_a if prio[i] >= 0)  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p5_a_priority_0_job_waiting_while_another_priority_0_job_runs_is_no_priority_inversion
    Mutant(
        "cert_time3_p5_contention_without_a_ready_job",
        "P5 coverage: a batch sampled with nothing left ready counts as claims choosing between priorities",
        "§duty P5",
        (Edit(OUTCOMES_PY, "        if ready_a and running_a:\n", "        if ready_a or running_a:  # MUTANT\n"),),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p5_a_retried_priority_0_job_left_ready_is_no_fresh_batch_job_passed_over
    # (the first in file order; test_p5_a_batch_with_no_job_left_ready_is_no_claim_choosing_between_priorities kills it too)
    Mutant(
        "cert_time3_p6_input_not_compared",
        "P6: a cron job's input is not compared with its belay_crons row",
        "§duty P6",
        (
            Edit(
                OUTCOMES_PY,
                "        if job.queue != want_queue or job.worker != row.worker or job.input != row.input:\n",
                "        if job.queue != want_queue or job.worker != row.worker:  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p6_a_cron_job_with_another_input_than_its_row_says_is_flagged
    Mutant(
        "cert_time3_p7_unjournaled_success",
        ("P7: a sleeper that succeeded without a journaled `$sleep:` step passes (only resumed ones are judged)"),
        "§duty P7",
        (
            Edit(
                OUTCOMES_PY,
                (
                    '            if sleep_step is None:\n                r.add([f"P7 sleeper job {job.id} '
                    'succeeded without a journaled `$sleep:nap` step"])\n'
                ),
                "            if sleep_step is None:\n                pass  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p7_a_sleeper_that_succeeded_without_journaling_its_sleep_is_flagged
    Mutant(
        "cert_time3_p8_children_not_judged",
        "P8: a spawned child's result is not judged (a child succeeding without its attempt passes)",
        "§duty P8",
        (
            Edit(
                OUTCOMES_PY,
                "        if job.cron_name is None and job.parent_id is None and job.id not in by_id:\n",
                "        if job.cron_name is None and job.id not in by_id:  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p8_a_spawned_childs_result_without_its_attempt_is_flagged
    Mutant(
        "cert_time3_p10_outage_a_minute_away_excuses",
        (
            "P10: a database outage up to a minute from the sample excuses a parent left parked with "
            "all its children terminal"
        ),
        "§duty P10",
        (
            Edit(
                OUTCOMES_PY,
                "            if pid in flagged or timeline.db_down_during(at - 2, at + 1):\n",
                "            if pid in flagged or timeline.db_down_during(at - 60, at + 60):  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p10_a_stranded_parent_long_before_a_database_crash_is_flagged
    Mutant(
        "cert_time3_p3_any_jobs_signal_excuses",
        "P3: any job's signal before the cancel request excuses a job that ignored it (not only its own)",
        "§duty P3",
        (
            Edit(
                RUNNING_PY,
                "        if any(t < tc for t in signals[job.id]):\n",
                "        if any(t < tc for ts in signals.values() for t in ts):  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p3_another_jobs_signal_excuses_no_cancel
    Mutant(
        "cert_time3_p4_exit_observation_any_time",
        (
            "P4: an exit observation of the node at any time excuses a nonzero exit after SIGTERM (not "
            "only one during the drain)"
        ),
        "§duty P4",
        (
            Edit(
                RUNNING_PY,
                "        asked = [o for o in exits if o.node == node and t - 2 <= _ts(o.at) <= end + 2]\n",
                "        asked = [o for o in exits if o.node == node]  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p4_an_exit_observation_long_before_the_sigterm_excuses_no_failed_drain
    Mutant(
        "cert_time3_p4_any_earlier_stop_excuses",
        (
            "P4: a SIGSTOP of the node at any time before its SIGTERM excuses the leases it left to "
            "expire (not only one within a ttl)"
        ),
        "§duty P4",
        (
            Edit(
                RUNNING_PY,
                "        if any(a <= t and b >= t - ev.ttl - 2 for a, b in timeline.stopped.get(node, ())):\n",
                "        if any(a <= t for a, b in timeline.stopped.get(node, ())):  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p4_a_stop_long_before_the_sigterm_excuses_no_job_left_to_lease_expiry
    Mutant(
        "cert_time3_p4_steps_raise_after_more_steps",
        (
            "P4: a `steps` attempt that journaled past s<raise_after> and then failed counts as its "
            "planned raise (a made-up retry at SIGTERM passes)"
        ),
        "§duty P4",
        (
            Edit(
                RUNNING_PY,
                (
                    "            at_k is not None and _step_attempt(at_k) == attempt and (after is None or "
                    "_step_attempt(after) != attempt)\n"
                ),
                "            at_k is not None and _step_attempt(at_k) == attempt  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p4_a_steps_job_that_journaled_past_its_planned_raise_then_failed_was_handed_back
    Mutant(
        "cert_time3_p4_every_member_fails_by_itself",
        (
            "P4: every `member` attempt's error counts as planned, `fail` or not (a member handed back "
            "with an error passes)"
        ),
        "§duty P4",
        (Edit(RUNNING_PY, '        return bool(inp.get("fail"))\n', "        return True  # MUTANT\n"),),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p4_a_member_that_does_not_fail_by_itself_and_failed_an_attempt_at_sigterm_was_handed_back
    Mutant(
        "cert_time3_p19_token_budget_ignored",
        "P19: a token budget never crosses (a job that succeeded past its token budget passes)",
        "§duty P19",
        (
            Edit(
                RUNNING_PY,
                "            job.budget_tokens is not None and tokens > job.budget_tokens\n",
                "            False  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p19_a_token_budget_crossed_and_the_job_succeeded_is_flagged
    Mutant(
        "cert_time3_p19_crossing_by_step_name",
        (
            "P19: the crossing step is found with the steps sorted by name, not seq (the wrong attempt "
            "is judged: an honest worker is INVALID)"
        ),
        "§duty P19",
        (
            Edit(
                RUNNING_PY,
                "    for s in sorted(steps, key=lambda x: x.seq):\n",
                "    for s in sorted(steps, key=lambda x: x.name):  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p19_the_crossing_step_is_the_first_in_journal_order_not_by_name
    Mutant(
        "cert_time3_p2_backoff_without_a_fault",
        (
            "P2: every free stretch is allowed a retry backoff, also one before any fault (a lease "
            "lost after 7 s free passes)"
        ),
        "§duty P2",
        (
            Edit(
                RUNNING_PY,
                (
                    "                n > ttl / 3 + SAMPLE_EVERY + CALL_S + (RETRY_BACKOFF_S if after else "
                    "0.0) for n, after in stretches\n"
                ),
                (
                    "                n > ttl / 3 + SAMPLE_EVERY + CALL_S + RETRY_BACKOFF_S for n, after in "
                    "stretches  # MUTANT\n"
                ),
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p2_a_free_stretch_before_any_fault_allows_no_retry_backoff
    Mutant(
        "cert_time3_p11_claims_within_the_settle_pass",
        ("P11: a claim whose lease was written up to CLAIM_SETTLE (1.5 s) after the SIGTERM is no claim after it"),
        "§duty P11",
        (
            Edit(
                DUTY_TIMING_PY,
                (
                    "            if stamped > t + STAMP_SLACK and not timeline.route_held(node, t, "
                    "stamped, CLAIM_SETTLE):\n"
                ),
                (
                    "            if stamped > t + CLAIM_SETTLE and not timeline.route_held(node, t, "
                    "stamped, CLAIM_SETTLE):  # MUTANT\n"
                ),
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p11_a_claim_stamped_a_second_after_the_sigterm_is_a_claim_after_it
    Mutant(
        "cert_time3_p11_unleased_attempt_excused",
        "P11: an attempt first seen after the SIGTERM without a lease_until is not a claim after it",
        "§duty P11",
        (
            Edit(
                DUTY_TIMING_PY,
                "            if until is None:\n                late[key] = at\n                continue\n",
                "            if until is None:\n                continue  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p11_an_attempt_first_seen_after_the_sigterm_without_a_lease_is_a_claim_after_it
    Mutant(
        "cert_time3_p11_any_nodes_skew",
        (
            "P11: the largest clock offset of any node is taken off the claim's lease, not its own "
            "node's (another node running ahead excuses late claims)"
        ),
        "§duty P11",
        (
            Edit(
                DUTY_TIMING_PY,
                "        skew = ev.skewed_nodes.get(node, 0.0)\n        late: dict",
                "        skew = ev.max_skew  # MUTANT\n        late: dict",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p11_another_nodes_clock_offset_excuses_no_claim
    Mutant(
        "cert_time3_p12_fractional_slot",
        "P12: a cron slot off the whole minute by less than a second passes",
        "§duty P12",
        (
            Edit(
                DUTY_TIMING_PY,
                "        if job.cron_slot.second or job.cron_slot.microsecond:\n",
                "        if job.cron_slot.second:  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p12_a_cron_slot_off_the_minute_by_half_a_second_is_flagged
    Mutant(
        "cert_time3_p13_offset_added",
        (
            "P13: a node's clock offset is added to its steps' inserted_at, not taken off (a skewed "
            "node's honest steps are after the cancel: INVALID)"
        ),
        "§duty P13",
        (
            Edit(
                DUTY_TIMING_PY,
                "            if st.inserted_at.timestamp() - skew > tc + STAMP_SLACK:\n",
                "            if st.inserted_at.timestamp() + skew > tc + STAMP_SLACK:  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p13_a_skewed_nodes_steps_are_dated_on_the_true_clock
    Mutant(
        "cert_time3_p15_base_is_the_largest",
        (
            "P15: the enqueued max_attempts is the largest any non-parking job kept, not the most "
            "common (one retried job fails honest parks)"
        ),
        "§duty P15",
        (Edit(DUTY_TIMING_PY, "    m0 = base.most_common(1)[0][0]\n", "    m0 = max(base)  # MUTANT\n"),),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p15_the_enqueued_max_attempts_is_the_one_most_jobs_kept
    Mutant(
        "cert_time3_p17_whole_sampler_gap_late",
        (
            "P17: a sampler gap that began before the free stretch counts whole as lateness (an "
            "unreclaimed lease passes)"
        ),
        "§duty P17",
        (
            Edit(
                DUTY_TIMING_PY,
                "            late = max((min(g, t - free) - SAMPLE_EVERY for t, g in gaps[i:]), default=0.0)\n",
                "            late = max((g - SAMPLE_EVERY for t, g in gaps[i:]), default=0.0)  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p17_sampler_lateness_counts_only_inside_the_free_stretch
    Mutant(
        "cert_time3_p17_dead_node_is_a_sweeper",
        (
            "P17: a node that had ended counts as a sweeper running free (a lease left expired after "
            "every worker ended is INVALID)"
        ),
        "§duty P17",
        (
            Edit(
                DUTY_TIMING_PY,
                '    if started is None or started > t1 or timeline.ended.get(node, float("inf")) < t1:\n',
                "    if started is None or started > t1:  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p17_no_node_alive_means_no_sweeper_to_blame
    Mutant(
        "cert_time3_p17_latency_not_a_fault",
        (
            "P17: injected latency on a node's route does not keep it from running free (an honest "
            "sweep under latency is INVALID)"
        ),
        "§duty P17",
        (
            Edit(
                DUTY_TIMING_PY,
                "        *timeline.slowed.get(slot, ()),\n        *timeline.db_down,\n",
                "        *timeline.db_down,  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p17_latency_on_every_live_nodes_route_excuses_the_sweep
    Mutant(
        "cert_time3_no_clock_skew_allowed",
        (
            "duties: the run's largest clock offset is taken as 0 (a slot a node running ahead fired "
            "just before the pause is INVALID)"
        ),
        "§duty P12",
        (
            Edit(
                EVIDENCE_PY,
                "        self.max_skew = max([0.0, *self.skewed_nodes.values()])\n",
                "        self.max_skew = 0.0  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p12_a_slot_due_just_after_the_pause_by_a_clock_running_ahead_is_not_flagged
    Mutant(
        "cert_time3_p17_commit_times_misfiled",
        (
            "P17: the claims committed with their lease expired are filed under (attempt, job), so "
            "none is found: counted from its first sample (an unreclaimed lease passes)"
        ),
        "§duty P17",
        (
            Edit(
                DUTIES_PY,
                (
                    "    claimed_at = {(int(j), int(a)): float(t) for j, a, t in ((committed or "
                    '{}).get("claimed_expired") or ())}\n'
                ),
                (
                    "    claimed_at = {(int(a), int(j)): float(t) for j, a, t in ((committed or "
                    '{}).get("claimed_expired") or ())}  # MUTANT\n'
                ),
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p17_counts_from_the_claims_commit_recorded_by_the_trace_validation
    Mutant(
        "cert_time3_choice_of_an_unseen_row",
        (
            "P5 coverage: a row committed just before the claim's now (maybe not in its snapshot) "
            "counts as a choice it had"
        ),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                "            if (ready_at is None or ready_at <= now) and written <= t_now - SNAP_SLACK:\n",
                "            if ready_at is None or ready_at <= now:  # MUTANT\n",
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_claim_had_a_choice_only_with_a_row_of_its_priority_it_could_see
    Mutant(
        "cert_time3_capacity_from_claims_long_done",
        (
            "P5 claim order: claims committed up to INFLIGHT_MAX before a claim began count as in "
            "flight beside it (claims over capacity pass)"
        ),
        "§duty P5",
        (
            Edit(
                CLAIM_ORDER_PY,
                "        i = bisect.bisect_left(lst, t_now - SNAP_SLACK, key=lambda c: c[1])\n        held = 0\n",
                (
                    "        i = bisect.bisect_left(lst, t_now - INFLIGHT_MAX, key=lambda c: c[1])  # "
                    "MUTANT\n        held = 0\n"
                ),
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_exactly_over_min_claims_over_capacity_make_p5_invalid_and_a_later_unclaimed_write_holds_nothing
    # (the first in file order; test_a_claim_that_committed_long_before_is_not_in_flight_beside_one kills it too)
    Mutant(
        "cert_time3_failover_excuses_nothing",
        "fault log: a failover is no database outage (lags across it are stale: an honest worker is INVALID)",
        "§timing faults",
        (
            Edit(
                NODES_PY,
                ('        elif kind in ("db_crash", "failover_begin"):\n            self.db_down.append([t, INF])\n'),
                '        elif kind == "db_crash":  # MUTANT\n            self.db_down.append([t, INF])\n',
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_failover_and_a_stall_of_the_nodes_route_excuse_its_lag
    Mutant(
        "cert_time3_route_stall_excuses_nothing",
        (
            "fault log: a stall of a node's route is no fault of it (lags across it are stale: an "
            "honest worker is INVALID)"
        ),
        "§timing faults",
        (
            Edit(
                NODES_PY,
                '        elif kind in ("net_partition", "net_stall"):\n',
                '        elif kind == "net_partition":  # MUTANT\n',
            ),
        ),
        suite=TIMING3_SUITE,
    ),  # killed by test_timing_duty_edges::test_a_failover_and_a_stall_of_the_nodes_route_excuse_its_lag
    Mutant(
        "cert_time3_p3_not_cancellable_judged",
        (
            "P3: a cancel_at_park the store answered NotCancellable (the job already ended) is judged "
            "as a request (an honest worker is INVALID)"
        ),
        "§duty P3",
        (
            Edit(
                RUNNING_PY,
                '        if e.get("plan") != "cancel_at_park" or e.get("result") != "CancelRequested":\n',
                '        if e.get("plan") != "cancel_at_park":  # MUTANT\n',
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p3_a_cancel_that_found_the_job_already_finished_requested_nothing
    Mutant(
        "cert_time3_p14_first_attempt_at_an_instant_hides_the_rest",
        (
            "P14: a renewal instant counts at the first attempt judged there (the code before this "
            "hunt): an attempt the renewal statements left out is hidden by another renewed at that "
            "instant"
        ),
        "§duty P14",
        (
            Edit(
                DUTY_TIMING_PY,
                (
                    "            worst = gaps[node].get(instant)\n            if u2 - u1 > limit and "
                    "(worst is None or u2 - u1 - limit > worst[0] - worst[1]):\n"
                ),
                (
                    "            gaps[node].setdefault(instant, (u2 - u1, limit, key))  # MUTANT: the "
                    "first interval judged counts\n            if False:\n"
                ),
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p14_an_attempt_the_renewal_statements_left_out_is_not_hidden_by_another_renewed_at_that_instant
    Mutant(
        "cert_time3_p14_faults_on_the_nodes_clock",
        (
            "P14: a skewed node's renewal instants meet its faults on its own clock, not the true one "
            "(its own SIGSTOP excuses less: an honest worker is INVALID)"
        ),
        "§duty P14",
        (
            Edit(
                DUTY_TIMING_PY,
                (
                    "            t1, t2 = u1 - ev.ttl - skew, u2 - ev.ttl - skew  # the two writes' `now`, "
                    "on the harness clock\n"
                ),
                "            t1, t2 = u1 - ev.ttl, u2 - ev.ttl  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p14_a_skewed_nodes_renewals_meet_its_faults_on_the_true_clock
    Mutant(
        "cert_time3_p2_dead_node_should_renew",
        (
            "P2: a lease lost after its node died is judged over the whole ttl, as if the dead node "
            "could renew (an honest kill is INVALID)"
        ),
        "§duty P2",
        (
            Edit(
                RUNNING_PY,
                '            end = min(expiry, t1 - ev.max_skew, timeline.ended.get(node, float("inf")))\n',
                "            end = min(expiry, t1 - ev.max_skew)  # MUTANT\n",
            ),
        ),
        suite=DUTY3_SUITE,
    ),  # killed by test_timing_duty_edges::test_p2_a_lease_lost_after_its_node_died_is_not_a_renewal_failure
)
