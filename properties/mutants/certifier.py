"""The certifier tier (issue 32): mutants of the soak's own judges, `python -m properties.mutants --tier certifier`.

The certifier is code under test too: a rule of soak/judges/ — the §11 invariants (checker.py, inputs.py,
invariants_jobs.py, invariants_links.py), the worker duties P1–P20 (duties/), which scenarios a row needs before it
may say `valid` (coverage.py), D1 (durability.py), how a rule's findings become a verdict (verdicts.py), the trace
validation of the committed history (refine/), the per-commit replay of the captured history (replay/), the judges
of order and time (timing/) — or the report's verdict line (soak/report/artifacts.py) that is
weakened must make some test fail. So must the harness the verdict rests on (issue 54's mutation hunts): a
fault that does not happen as its log says (soak/faults/), the driver's intents and plans (soak/workload/),
the capture's decoding and spill (soak/record/), the console's verdict and an interrupted run's exit code.
Each mutant here is one small weakening — a predicate that always passes, a comparison off by one, a skipped
row, a scenario counted too generously, refinement accepting any candidate, the taint set swallowing every
finding — that makes the certifier pass a run it must fail (or call `valid` a run whose scenario never
happened).

The killers are fast tests over synthesized or recorded evidence, never a soak: the checker and duty rules
on hand-built snapshots, ledgers and fault logs (tests/test_soak_checker.py, tests/test_soak_duties.py,
tests/test_certifier_checks.py), the trace validation and the replay on small histories captured from a
real PostgreSQL in the test itself (tests/test_refine.py, tests/test_history_capture.py,
tests/test_certifier_history.py). Like every tier, each edit is an exact text patch applied to a throwaway
copy (properties/mutants/runner.py), never a switch in the checker's source.
"""

from __future__ import annotations

from properties.mutants.kinds import Edit, Mutant

# soak/judges/ (docs/architecture.md "soak/ by part"); the constant names the module each patch's text is in
CHECKER_PY = "soak/judges/checker.py"
COVERAGE_PY = "soak/judges/coverage.py"
VERDICTS_PY = "soak/judges/verdicts.py"
DURABILITY_PY = "soak/judges/durability.py"
INVARIANTS_JOBS_PY = "soak/judges/invariants_jobs.py"
INVARIANTS_LINKS_PY = "soak/judges/invariants_links.py"
DUTIES_RUNNING_PY = "soak/judges/duties/running.py"
DUTIES_OUTCOMES_PY = "soak/judges/duties/outcomes.py"
INPUTS_PY = "soak/judges/inputs.py"
DUTIES_TIMING_PY = "soak/judges/duties/timing.py"
DUTIES_EVIDENCE_PY = "soak/judges/duties/evidence.py"
REFINE_VALIDATOR_PY = "soak/judges/refine/validator.py"
REFINE_RECOVERY_PY = "soak/judges/refine/recovery.py"
REFINE_PY = "soak/judges/refine/__init__.py"
REPLAY_REPLAYER_PY = "soak/judges/replay/replayer.py"
CLAIM_ORDER_PY = "soak/judges/timing/claim_order.py"
NODE_FAULTS_PY = "soak/judges/timing/nodes.py"
FRESHNESS_PY = "soak/judges/timing/freshness.py"
REPLAY_PY = "soak/judges/replay/__init__.py"

# the suites, fastest first (the runner stops at the first failure): pure checks of hand-built evidence
CHECKER_SUITE = (
    "tests/test_soak_checker.py",
    "tests/test_soak_duties.py",
    "tests/test_certifier_checks.py",
)
# small histories captured from a real PostgreSQL inside the test (an embedded cluster; seconds each)
REFINE_SUITE = ("tests/test_refine.py", "tests/test_certifier_history.py")
# issue 51: the outcome obligations (P19, P4's hand-back rule) and the risky-case coverage (I9, P16)
OUTCOMES_SUITE = ("tests/test_soak_outcomes.py", *CHECKER_SUITE)
REPORT_PY = "soak/report/artifacts.py"
REPORT_SUITE = ("tests/test_soak_report_verdict.py",)
REPLAY_SUITE = ("tests/test_history_capture.py", "tests/test_certifier_history.py")
TIMING_SUITE = ("tests/test_timing_judges.py", "tests/test_soak_duties.py")  # issue 51, pure
# issue 54, seventh session's mutation hunts: each layer's edge cases first (pure, a second or two), then the layer's suite
EDGES_CHECKS_SUITE = ("tests/test_judge_edges_checks.py", *OUTCOMES_SUITE)
EDGES_HISTORY_SUITE = (
    "tests/test_judge_edges_history.py",
    *TIMING_SUITE,
    *REFINE_SUITE,
    "tests/test_soak_report_verdict.py",
)
HARNESS_SUITE = (
    "tests/test_harness_honesty.py",
    "tests/test_soak_fault_rates.py",
    "tests/test_soak_zombies.py",
    "tests/test_soak_proxy.py",
)


def _one(
    name: str, description: str, section: str, path: str, old: str, new: str, suite: tuple[str, ...] = CHECKER_SUITE
) -> Mutant:
    return Mutant(name, description, section, (Edit(path, old, new),), suite)


CERTIFIER: tuple[Mutant, ...] = (
    # --- soak/judges/verdicts.py and the overall verdict -----------------------------------------------------------
    _one(
        "cert_unexercised_rule_is_valid",
        "a rule whose scenario never happened (exercised False, no reason given) finishes valid, not unknown",
        "§cert verdict",
        VERDICTS_PY,
        '        elif not self.exercised:\n            self.verdict = "unknown"\n',
        '        elif False:  # MUTANT: an unexercised rule is valid\n            self.verdict = "unknown"\n',
    ),
    _one(
        "cert_violations_of_an_unexercised_rule_ignored",
        "a rule's violations make it invalid only when its scenario was also exercised",
        "§cert verdict",
        VERDICTS_PY,
        "        if self.violations:\n",
        "        if self.violations and self.exercised:  # MUTANT\n",
    ),
    _one(
        "cert_unknown_outranks_invalid",
        "the run's verdict is unknown when any row is unknown, even with an invalid row (exit 2, not 1)",
        "§cert verdict",
        CHECKER_PY,
        '    verdict = "invalid" if "invalid" in verdicts else "unknown" if "unknown" in verdicts else "valid"\n',
        '    verdict = "unknown" if "unknown" in verdicts else "invalid" if "invalid" in verdicts else "valid"  # MUTANT\n',
    ),
    # --- soak/judges/checker.py: the §11 invariants ----------------------------------------------------------------
    _one(
        "cert_i1_lost_jobs_not_checked",
        "I1: the model's no-job-lost predicate is not applied (a ledger job gone from the database passes)",
        "§11 I1",
        INVARIANTS_JOBS_PY,
        "        r.add(inv.i1_no_job_lost(state, chunk, drained=False))\n",
        "        r.add([])  # MUTANT: inv.i1_no_job_lost not applied\n",
    ),
    _one(
        "cert_i1_stuck_after_a_drain_not_flagged",
        "I1: a due job left non-terminal after a drain that completed is not a violation",
        "§11 I1",
        INVARIANTS_JOBS_PY,
        "    stuck = stuck if drained else []\n",
        "    stuck = []  # MUTANT\n",
    ),
    _one(
        "cert_i1_lease_loss_blamed_only_after_two_ttls",
        "I1: a lost lease is blamed on the worker only when its node held it for two ttls (not half a ttl)",
        "§11 I1",
        INVARIANTS_JOBS_PY,
        "                    and t1 - t0 >= ttl / 2\n",
        "                    and t1 - t0 >= ttl * 2  # MUTANT\n",
    ),
    _one(
        "cert_i2_older_attempts_result_accepted",
        "I2: a succeeded row carrying an older attempt's result passes (only a newer attempt's is flagged)",
        "§11 I2",
        INVARIANTS_JOBS_PY,
        '        if result["attempt"] != job.attempt:\n',
        '        if result["attempt"] > job.attempt:  # MUTANT\n',
    ),
    _one(
        "cert_i2_attempt_ending_twice_accepted",
        "I2: the error entries' attempts need only not decrease: one attempt ending twice passes",
        "§11 I2",
        INVARIANTS_JOBS_PY,
        "            if not (isinstance(a, int) and isinstance(b, int) and b > a):\n",
        "            if not (isinstance(a, int) and isinstance(b, int) and b >= a):  # MUTANT\n",
    ),
    _one(
        "cert_i2_pre_ack_compares_state_only",
        "I2: a pre-ack observation of a running row counts as current whatever attempt it saw",
        "§11 I2",
        INVARIANTS_JOBS_PY,
        '        if seen.get("state") == "running" and seen.get("attempt") == o.attempt:\n',
        '        if seen.get("state") == "running":  # MUTANT: the attempt is not compared\n',
    ),
    _one(
        "cert_i3_result_token_compared_with_itself",
        "I3: a result's step token is compared with itself instead of the journaled value (re-execution passes)",
        "§11 I3",
        INVARIANTS_JOBS_PY,
        '            stored = value.get("token") if isinstance(value, Mapping) else value\n',
        "            stored = tok  # MUTANT\n",
    ),
    Mutant(
        "cert_i3_samples_compare_seq_only",
        "I3: step-journal samples are compared by seq only, not by the value's digest (a rewritten value passes)",
        "§11 I3",
        (
            Edit(
                INVARIANTS_JOBS_PY,
                "            if key in first and first[key] != (seq, digest):\n",
                "            if key in first and first[key][0] != seq:  # MUTANT\n",
            ),
            Edit(
                INVARIANTS_JOBS_PY,
                "        elif (s.seq, _digest(s.value)) != (seq, digest):\n",
                "        elif s.seq != seq:  # MUTANT\n",
            ),
        ),
        CHECKER_SUITE,
    ),
    _one(
        "cert_i3_late_journal_compared_by_day",
        "I3: a step journaled after its job finished is flagged only when it is a day later",
        "§11 I3",
        INVARIANTS_JOBS_PY,
        "            elif job.finished_at is not None and s.inserted_at > job.finished_at:\n",
        "            elif job.finished_at is not None and s.inserted_at.date() > job.finished_at.date():  # MUTANT\n",
    ),
    _one(
        "cert_i3_unjournaled_step_skipped",
        "I3: a result naming a step the journal does not hold is skipped instead of flagged",
        "§11 I3",
        INVARIANTS_JOBS_PY,
        "            if s is None:\n                r.add(\n",
        "            if s is None:\n                continue  # MUTANT\n                r.add(\n",
    ),
    _one(
        "cert_i4_budget_predicate_dropped",
        "I4: the model's budget predicate (fail on the crossing step, no step past it) is not applied",
        "§11 I4",
        INVARIANTS_JOBS_PY,
        "    r.add(inv.i4_budget_fails_on_crossing_step(state))\n",
        "    r.add([])  # MUTANT\n",
    ),
    _one(
        "cert_i4_crossing_step_judged_only_with_two_steps",
        "I4: the step a budget failure came after is compared with the crossing step only when two were journaled",
        "§11 I4",
        INVARIANTS_JOBS_PY,
        "            if names and names[-1] != want:\n",
        "            if len(names) > 1 and names[-1] != want:  # MUTANT\n",
    ),
    _one(
        "cert_i5_settlement_predicate_dropped",
        "I5: the model's settlement predicate (no missed doom, no early release) is not applied",
        "§11 I5",
        INVARIANTS_LINKS_PY,
        "    r.add(inv.i5_settlement_consistent(state, retried=frozenset()))\n",
        "    r.add([])  # MUTANT\n",
    ),
    _one(
        "cert_i5_first_attempt_beside_failed_dep_accepted",
        "I5: a member that ran beside an unsatisfied dep is flagged only from its second attempt (off by one)",
        "§11 I5",
        INVARIANTS_LINKS_PY,
        "            if job.attempt > 0 and not satisfied:\n",
        "            if job.attempt > 1 and not satisfied:  # MUTANT\n",
    ),
    _one(
        "cert_i6_due_slots_not_expected",
        "I6: the due cron slots are not passed to the predicate: a slot missed while workers ran passes",
        "§11 I6",
        INVARIANTS_LINKS_PY,
        "    r.add(inv.i6_cron_slots_once(state, slots))\n",
        "    r.add(inv.i6_cron_slots_once(state, set()))  # MUTANT\n",
    ),
    _one(
        "cert_i7_window_mode_admissions_not_counted",
        "I7: admissions per unique key are counted for the always mode only: window-mode duplicates pass",
        "§11 I7",
        INVARIANTS_LINKS_PY,
        '        if a.outcome == "inserted" and a.job_id is not None and a.mode in ("always", "window"):\n',
        '        if a.outcome == "inserted" and a.job_id is not None and a.mode == "always":  # MUTANT\n',
    ),
    _one(
        "cert_i7_always_mode_admissions_not_counted",
        "I7: admissions per unique key are counted for the window mode only: always-mode duplicates pass",
        "§11 I7",
        INVARIANTS_LINKS_PY,
        '        if a.outcome == "inserted" and a.job_id is not None and a.mode in ("always", "window"):\n',
        '        if a.outcome == "inserted" and a.job_id is not None and a.mode == "window":  # MUTANT\n',
    ),
    _one(
        "cert_i7_incomplete_group_allows_two_holders",
        "I7: a concurrent insert group of an incomplete-mode key may admit two live holders (off by one)",
        "§11 I7",
        INVARIANTS_LINKS_PY,
        '        if attempts[0].mode == "incomplete" and len(inserted) > 1:\n',
        '        if attempts[0].mode == "incomplete" and len(inserted) > 2:  # MUTANT\n',
    ),
    _one(
        "cert_i8_children_compared_by_count",
        "I8: a parent's children are compared with its declared spawn by count, not by id",
        "§11 I8",
        INVARIANTS_LINKS_PY,
        "        if actual != sorted(declared):\n",
        "        if len(actual) != len(declared):  # MUTANT\n",
    ),
    _one(
        "cert_i8_children_finishing_after_the_parent_accepted",
        "I8: a child that finished after its succeeded parent passes (a minute of slack instead of the skew)",
        "§11 I8",
        INVARIANTS_LINKS_PY,
        "c.finished_at.timestamp() > job.finished_at.timestamp() + skew\n",
        "c.finished_at.timestamp() > job.finished_at.timestamp() + skew + 60  # MUTANT\n",
    ),
    _one(
        "cert_i9_payload_not_compared",
        "I9: an awaiter that ran with another payload than its delivered signal passes",
        "§11 I9",
        INVARIANTS_LINKS_PY,
        '            if isinstance(result, Mapping) and result.get("payload") != signal.payload:\n',
        '            if isinstance(result, Mapping) and result.get("payload") is None:  # MUTANT\n',
    ),
    _one(
        "cert_i9_only_failed_awaiters_flagged",
        "I9: an awaiter left non-terminal despite its delivered signal passes (only failed ones are flagged)",
        "§11 I9",
        INVARIANTS_LINKS_PY,
        '        elif not (job.state == "failed" and _last_error(job) == "lease_expired"):\n',
        '        elif job.state == "failed" and _last_error(job) != "lease_expired":  # MUTANT\n',
    ),
    _one(
        "cert_i9_awaiting_predicate_not_quiescent",
        "I9: the model's awaiter predicate runs as if the snapshot were mid-run (no lost wake-up after the drain)",
        "§11 I9",
        INVARIANTS_LINKS_PY,
        "    r.add(inv.i9_awaiters_eventually_run(state, quiescent=True))\n",
        "    r.add(inv.i9_awaiters_eventually_run(state, quiescent=False))  # MUTANT\n",
    ),
    # --- soak/judges/durability.py: D1, committed work survives a failover ---------------------------------------
    _one(
        "cert_d1_lost_acks_not_compared",
        "D1: an ack committed on the old primary before a failover and missing after it is not lost work",
        "§11 D1",
        DURABILITY_PY,
        "            elif st in TERMINAL and (\n",
        "            elif False and st in TERMINAL and (  # MUTANT\n",
    ),
    _one(
        "cert_d1_enqueue_identity_not_compared",
        "D1: a watched job whose id now holds another enqueue (other inserted_at) counts as surviving",
        "§11 D1",
        DURABILITY_PY,
        "            if job is None or job.inserted_at != datetime.fromisoformat(inserted):\n",
        "            if job is None:  # MUTANT: the row's identity (inserted_at) is not compared\n",
    ),
    # --- soak/judges/duties/: the worker duties ----------------------------------------------------------------
    _one(
        "cert_p1_any_observation_makes_an_exit_deliberate",
        "P1: a node that wrote any observation (not an `exit` one) may exit by itself",
        "§duty P1",
        DUTIES_RUNNING_PY,
        '    deliberate = {o.node for o in ledger.observations if o.phase == "exit"}\n    for e in ev.by_type["worker_unstable"]:',
        '    deliberate = {o.node for o in ledger.observations}  # MUTANT\n    for e in ev.by_type["worker_unstable"]:',
    ),
    _one(
        "cert_p1_unstable_worker_not_reported",
        "P1: a worker that cannot stay up (the harness's worker_unstable) is not a violation",
        "§duty P1",
        DUTIES_RUNNING_PY,
        "        r.add([f\"P1 {e['message']}\"])\n",
        "        pass  # MUTANT: r.add([f\"P1 {e['message']}\"])\n",
    ),
    _one(
        "cert_p2_renewal_due_only_after_two_ttls",
        "P2: a lost lease is blamed only when the attempt was seen holding it for two ttls",
        "§duty P2",
        DUTIES_RUNNING_PY,
        "            if first_seen > t1 - ttl / 2:\n",
        "            if first_seen > t1 - ttl * 2:  # MUTANT\n",
    ),
    _one(
        "cert_p3_only_failures_after_a_cancel_flagged",
        "P3: a job that succeeded after a cancel requested before its await passes (only failed ones flagged)",
        "§duty P3",
        DUTIES_RUNNING_PY,
        '        if job.terminal and job.state != "cancelled":\n',
        '        if job.terminal and job.state == "failed":  # MUTANT\n',
    ),
    _one(
        "cert_p4_tempfail_exit_is_a_drain",
        "P4: a worker exiting with status 75 (EX_TEMPFAIL) after SIGTERM is taken as drained",
        "§duty P4",
        DUTIES_RUNNING_PY,
        '        elif d.get("code") != 0:\n',
        '        elif d.get("code") not in (0, 75):  # MUTANT\n',
    ),
    _one(
        "cert_p4_short_grace_accepted",
        "P4: a worker exiting a second after SIGTERM, its running job left to lease expiry, is not flagged",
        "§duty P4",
        DUTIES_RUNNING_PY,
        "            if isinstance(lived, int | float) and lived < GRACE_MIN - 0.5:\n",
        "            if isinstance(lived, int | float) and lived < 0.5:  # MUTANT\n",
    ),
    _one(
        "cert_p4_abandoned_jobs_not_flagged",
        "P4: a job a SIGTERMed worker left to lease expiry is only flagged when no sample attributed it",
        "§duty P4",
        DUTIES_RUNNING_PY,
        '            elif (job_id, attempt) in listed and kind != "slow":\n',
        '            elif (job_id, attempt) in listed and kind != "slow" and False:  # MUTANT\n',
    ),
    _one(
        "cert_p5_priority_compared_below_zero",
        "P5: only a waiting job of a negative priority counts as passed over (priority 0 waits unjudged)",
        "§duty P5",
        DUTIES_OUTCOMES_PY,
        "        waiting_low = sorted(i for i in ready_a & ready_b if prio[i] == 0)\n",
        "        waiting_low = sorted(i for i in ready_a & ready_b if prio[i] < 0)  # MUTANT\n",
    ),
    _one(
        "cert_p5_claim_begun_any_time_excuses_a_wait",
        "P5: a waiting priority-0 job counts as held by a claim in flight whenever its claim began (even after the wait)",
        "§duty P5",
        DUTIES_OUTCOMES_PY,
        "            waiting_low = [i for i in waiting_low if (c := began[i]) is None or c > tb + ev.max_skew]\n",
        "            waiting_low = [i for i in waiting_low if began[i] is None]  # MUTANT\n",
    ),
    _one(
        "cert_p5_a_node_frozen_before_the_batch_excuses_its_waits",
        "P5: a node SIGSTOPped or cut off before the batch was due counts as holding its rows",
        "§duty P5",
        INPUTS_PY,
        "        if any(since <= a <= t1 and b >= t0 for a, b in frozen):\n",
        "        if any(a <= t1 and b >= t0 for a, b in frozen):  # MUTANT\n",
    ),
    _one(
        "cert_p6_cron_queue_not_compared",
        "P6: a cron job's queue is not compared with its belay_crons row",
        "§duty P6",
        DUTIES_OUTCOMES_PY,
        "        if job.queue != want_queue or job.worker != row.worker or job.input != row.input:\n",
        "        if job.worker != row.worker or job.input != row.input:  # MUTANT\n",
    ),
    _one(
        "cert_p7_first_resume_not_judged",
        "P7: a sleeper resumed once without a journaled `$sleep:` step passes (judged from two resumes)",
        "§duty P7",
        DUTIES_OUTCOMES_PY,
        '        if resumes >= 1 and sleep_step is None and job.state != "cancelled":\n',
        '        if resumes >= 2 and sleep_step is None and job.state != "cancelled":  # MUTANT\n',
    ),
    _one(
        "cert_p8_result_attempt_not_required",
        "P8: any mapping result passes, with or without the attempt that produced it",
        "§duty P8",
        DUTIES_OUTCOMES_PY,
        '        if not (isinstance(result, Mapping) and isinstance(result.get("attempt"), int)):\n'
        "            r.add(\n                [\n                    f'P8",
        "        if not isinstance(result, Mapping):  # MUTANT\n            r.add(\n                [\n                    f'P8",
    ),
    _one(
        "cert_p9_any_terminal_outcome_accepted",
        "P9: every terminal job matches its kind's prescribed outcome (the predicate always passes)",
        "§duty P9",
        DUTIES_OUTCOMES_PY,
        "        if _matches(e.expected, job):\n",
        "        if True:  # MUTANT: _matches(e.expected, job)\n",
    ),
    _one(
        "cert_p2_renewed_lease_after_a_fault_excused",
        "P2: any lease claimed just after a fault is excused as a claim whose reply was lost, renewed or not",
        "§duty P2",
        DUTIES_RUNNING_PY,
        "            if last is not None and first is not None and float(last) == float(first):\n",
        "            if last is not None and first is not None:  # MUTANT\n",
    ),
    _one(
        "cert_p10_stranded_parents_skipped",
        "P10: a parent seen parked with all its children terminal is skipped instead of flagged",
        "§duty P10",
        DUTIES_OUTCOMES_PY,
        "            if pid in flagged or timeline.db_down_during(at - 2, at + 1):\n",
        "            if pid not in flagged or timeline.db_down_during(at - 2, at + 1):  # MUTANT\n",
    ),
    _one(
        "cert_p11_every_sampled_attempt_counts_as_seen",
        "P11: every attempt of any later sample counts as already seen: no claim after SIGTERM is found",
        "§duty P11",
        DUTIES_TIMING_PY,
        "        seen = {k for k, v in settled[1].items() if v[0] == node}\n",
        "        seen = {key for _at, key, _until, _kind in ev.attempts.of_node(node)}  # MUTANT\n",
    ),
    _one(
        "cert_p11_samples_any_route_fault_excuses",
        "P11 (lease samples): a route fault anywhere between the SIGTERM and a claim excuses it, healed or not",
        "§duty P11",
        INPUTS_PY,
        "        return any(a <= now and b >= t and b >= now - settle for a, b in self.route_windows(node))\n",
        "        return any(a <= now and b >= t for a, b in self.route_windows(node))  # MUTANT\n",
    ),
    _one(
        "cert_p11_committed_any_route_fault_excuses",
        "P11 (committed claims): a route fault anywhere between the SIGTERM and a claim excuses it, healed or not",
        "§refine P11",
        REFINE_VALIDATOR_PY,
        "            if any(w[2] in ROUTE_FAULTS and w[1] >= t_now - CLAIM_SETTLE for w in held):\n",
        "            if any(w[2] in ROUTE_FAULTS for w in held):  # MUTANT\n",
        REFINE_SUITE,
    ),
    _one(
        "cert_p11_committed_claims_ignored",
        "P11: the trace validation's claims after SIGTERM are not added to the duty",
        "§duty P11",
        CHECKER_PY,
        '        for line in committed.get("claims_after_term") or ():\n            duties["P11"].add([line])\n',
        '        for line in committed.get("claims_after_term") or ():\n            pass  # MUTANT\n',
    ),
    _one(
        "cert_p12_early_slots_allowed_a_minute",
        "P12: a cron slot inserted up to a minute before it was due passes",
        "§duty P12",
        DUTIES_TIMING_PY,
        "        if early > STAMP_SLACK:\n",
        "        if early > 60:  # MUTANT\n",
    ),
    _one(
        "cert_p12_paused_rows_allowed_two_minutes",
        "P12: a slot due up to two minutes after its cron row was paused passes",
        "§duty P12",
        DUTIES_TIMING_PY,
        "        if t_paused is not None and slot > t_paused + ev.max_skew + 1.0:\n",
        "        if t_paused is not None and slot > t_paused + ev.max_skew + 120.0:  # MUTANT\n",
    ),
    _one(
        "cert_p13_two_steps_after_a_cancel_allowed",
        "P13: two steps journaled after a pending cancel pass (the rule allows the step in flight only)",
        "§duty P13",
        DUTIES_TIMING_PY,
        "        if len(after) >= 2:\n",
        "        if len(after) >= 3:  # MUTANT\n",
    ),
    _one(
        "cert_p14_one_late_renewal_needs_a_whole_ttl",
        "P14: one renewal interval is late only a whole ttl past its limit (not one missed renewal, ttl/3)",
        "§duty P14",
        DUTIES_TIMING_PY,
        "        if not slow or (slow[0][0] <= slow[0][1] + period and len(slow) < 2):\n",
        "        if not slow or (slow[0][0] <= slow[0][1] + ev.ttl and len(slow) < 2):  # MUTANT\n",
    ),
    _one(
        "cert_p14_slow_renewals_need_three",
        "P14: two renewal intervals above their limit on a node pass (three are needed)",
        "§duty P14",
        DUTIES_TIMING_PY,
        "        if not slow or (slow[0][0] <= slow[0][1] + period and len(slow) < 2):\n",
        "        if not slow or (slow[0][0] <= slow[0][1] + period and len(slow) < 3):  # MUTANT\n",
    ),
    _one(
        "cert_p14_latency_anywhere_excuses",
        "P14: injected latency on any worker's route excuses every node's late renewal (not only that node's)",
        "§duty P14",
        INPUTS_PY,  # Timeline.route_windows: the route faults of P14's (and P2's, P11's) excuses
        "            *self.slowed.get(slot, ()),\n",
        "            *(w for ws in self.slowed.values() for w in ws),  # MUTANT\n",
    ),
    _one(
        "cert_p15_only_lowered_budgets_flagged",
        "P15: a park that spent an attempt passes as long as max_attempts did not drop below its enqueued value",
        "§duty P15",
        DUTIES_TIMING_PY,
        "        if job.max_attempts != m0 + parks:\n",
        "        if job.max_attempts < m0:  # MUTANT\n",
    ),
    _one(
        "cert_p16_one_attempt_past_the_budget_allowed",
        "P16: a job may run one attempt past its max_attempts (off by one)",
        "§duty P16",
        DUTIES_TIMING_PY,
        "        if job.attempt > job.max_attempts:\n",
        "        if job.attempt > job.max_attempts + 1:  # MUTANT\n",
    ),
    _one(
        "cert_p17_expired_leases_allowed_a_minute",
        "P17: a lease may stay expired for a minute while workers run before it counts as unreclaimed",
        "§duty P17",
        DUTIES_TIMING_PY,
        "            if until is None or at - until <= RECLAIM_OVERDUE or key in flagged:\n",
        "            if until is None or at - until <= 60 or key in flagged:  # MUTANT\n",
    ),
    _one(
        "cert_p18_global_limit_off_by_one",
        "P18 (global_limit admission): one live lease over a queue's global_limit passes (off by one)",
        "§duty P18",
        DUTIES_TIMING_PY,
        "            if n > limit and n > worst.get(q, (0, 0.0))[0]:\n",
        "            if n > limit + 1 and n > worst.get(q, (0, 0.0))[0]:  # MUTANT\n",
    ),
    _one(
        "cert_p18_partition_keys_not_judged",
        "P18 (partitioned admission): the live leases per partition key are not compared with its limit",
        "§duty P18",
        DUTIES_TIMING_PY,
        "            if q not in per_key:\n                continue\n",
        "            if True:  # MUTANT: q not in per_key\n                continue\n",
    ),
    _one(
        "cert_p18_one_below_the_limit_counts_as_contention",
        "P18 coverage: a queue one lease below its global_limit counts as one whose limit was binding",
        "§cov P18",
        DUTIES_TIMING_PY,
        "            if n >= limit:\n                at_limit += 1\n",
        "            if n >= limit - 1:  # MUTANT\n                at_limit += 1\n",
    ),
    # --- soak/judges/coverage.py: what a row needs before it may say valid ------------------------------------------
    _one(
        "cert_cov_every_sigterm_counts_as_a_drain",
        "P4 coverage: every SIGTERM counts as a drain, also one that found no job running",
        "§cov P4",
        COVERAGE_PY,
        '        "drains": sum(1 for e in t["worker_drain_term"] if e.get("running")),\n',
        '        "drains": len(t["worker_drain_term"]),  # MUTANT\n',
    ),
    _one(
        "cert_cov_missing_scenarios_ignored",
        "coverage: a row whose scenario occurred zero times is not marked unknown (< 0 instead of <= 0)",
        "§cov all",
        COVERAGE_PY,
        "        missing = [(key, desc) for key, desc in scenarios if counts.get(key, 0) <= 0]\n",
        "        missing = [(key, desc) for key, desc in scenarios if counts.get(key, 0) < 0]  # MUTANT\n",
    ),
    _one(
        "cert_cov_only_the_first_scenario_required",
        "coverage: only the first scenario of each row must occur (a row with several needs one)",
        "§cov all",
        COVERAGE_PY,
        "        missing = [(key, desc) for key, desc in scenarios if counts.get(key, 0) <= 0]\n",
        "        missing = [(key, desc) for key, desc in scenarios[:1] if counts.get(key, 0) <= 0]  # MUTANT\n",
    ),
    _one(
        "cert_cov_any_error_counts_as_a_reclaim",
        "I1/P16 coverage: any error entry counts as a reclaimed lease, not only lease_expired",
        "§cov I1",
        COVERAGE_PY,
        '        1 for j in state.jobs.values() for e in j.errors if isinstance(e, Mapping) and e.get("error") == "lease_expired"\n',
        "        1 for j in state.jobs.values() for e in j.errors if isinstance(e, Mapping)  # MUTANT\n",
    ),
    _one(
        "cert_cov_self_exits_count_as_kills",
        "I1/I3/P17 coverage: a worker's own exit counts as a kill -9",
        "§cov I1",
        COVERAGE_PY,
        '        "kills": len(t["worker_kill"]),\n',
        '        "kills": len(t["worker_kill"]) + len(t["worker_exit"]),  # MUTANT\n',
    ),
    _one(
        "cert_cov_every_lease_is_long",
        "P2/P14 coverage: every sampled attempt counts as one that held its lease longer than the ttl",
        "§cov P2",
        DUTIES_EVIDENCE_PY,
        "        return self.attempts.longer_than(self.ttl)\n",
        "        return self.attempts.longer_than(-1.0)  # MUTANT\n",
    ),
    _one(
        "cert_cov_cancels_of_any_state_count",
        "P9 coverage: a cancel of an awaiter counts as one of a job awaiting its signal whatever state it was in",
        "§cov P9",
        COVERAGE_PY,
        '        if kind == "awaiter" and before == "awaiting":\n',
        '        if kind == "awaiter":  # MUTANT\n',
    ),
    # --- soak/judges/refine/: the trace validation ---------------------------------------------------------
    _one(
        "cert_refine_any_candidate_explains",
        "refine: the first candidate explains the transaction whatever the model's rows say",
        "§refine",
        REFINE_VALIDATOR_PY,
        "            if why is None:\n                explained = cand\n",
        "            if True:  # MUTANT: why is None\n                explained = cand\n",
        REFINE_SUITE,
    ),
    _one(
        "cert_refine_rows_the_model_changed_ignored",
        "refine: rows the model writes and the transaction does not are not compared (one-way comparison)",
        "§refine",
        REFINE_VALIDATOR_PY,
        "            for k, v in model_rows.items():\n                if was.get(k) is not v:\n                    keys.add(k)\n",
        "            for k, v in ():  # MUTANT: model_rows.items()\n                if was.get(k) is not v:\n                    keys.add(k)\n",
        REFINE_SUITE,
    ),
    _one(
        "cert_refine_taken_rows_not_checked_claimable",
        "refine: a claim's taken rows need not be claimable under the model's predicate (a future row is claimed)",
        "§refine",
        REFINE_VALIDATOR_PY,
        "                if taken is None or not model_store.claimable(taken, op.now):\n",
        "                if taken is None:  # MUTANT\n",
        REFINE_SUITE,
    ),
    _one(
        "cert_refine_taint_swallows_everything",
        "refine: every unexplained transaction counts as one on rows with a capture gap (unknown, never invalid)",
        "§refine",
        REFINE_VALIDATOR_PY,
        "            tainted = bool(involved & self.taint) or bool(rows.gap)\n",
        "            tainted = True  # MUTANT\n",
        REFINE_SUITE,
    ),
    _one(
        "cert_refine_now_skew_unbounded",
        "refine: an operation's `now` may run any time ahead of its commit (the clock tolerance is not applied)",
        "§refine",
        REFINE_RECOVERY_PY,
        "        if now > at + SKEW:\n",
        "        if now > at + SKEW * 1000:  # MUTANT\n",
        REFINE_SUITE,
    ),
    _one(
        "cert_refine_capture_gaps_ignored",
        "refine: a capture gap with every transaction explained is valid, not unknown",
        "§refine",
        REFINE_PY,
        "    elif r.unexplained or r.capture_gaps or r.matches_snapshot is False:\n",
        "    elif r.unexplained or r.matches_snapshot is False:  # MUTANT\n",
        REFINE_SUITE,
    ),
    _one(
        "cert_refine_client_writes_not_attested",
        "refine: a client cancel need not be one the harness ledger recorded",
        "§refine",
        REFINE_RECOVERY_PY,
        "            if self.ledger.strict and a.id not in self.ledger.cancels:\n",
        "            if False:  # MUTANT: self.ledger.strict and a.id not in self.ledger.cancels\n",
        REFINE_SUITE,
    ),
    _one(
        "cert_refine_queue_options_ignored",
        "refine P18 (rate and global_limit admission): claims are judged with default options, not the queue's row",
        "§refine P18",
        REFINE_RECOVERY_PY,
        "                qopts = QueueOpts.parse(qrow.opts) if qrow is not None else QueueOpts()\n",
        "                qopts = QueueOpts()  # MUTANT: the belay_queues row is ignored\n",
        REFINE_SUITE,
    ),
    _one(
        "cert_refine_late_claims_need_a_minute",
        "refine P11: a committed claim counts as after its node's SIGTERM only when its `now` is a minute later",
        "§refine P11",
        REFINE_VALIDATOR_PY,
        "        if at > t + CLAIM_SETTLE and now > t + NOW_SLACK:\n",
        "        if at > t + CLAIM_SETTLE and now > t + NOW_SLACK + 60:  # MUTANT\n",
        REFINE_SUITE,
    ),
    # --- soak/judges/replay/: the per-commit replay ---------------------------------------------------------
    _one(
        "cert_replay_illegal_transitions_ignored",
        "replay: an illegal belay_jobs transition is not a finding",
        "§replay",
        REPLAY_REPLAYER_PY,
        "                if not j.legal:\n                    new_findings.append(\n                        Finding(\n"
        '                            "transition",\n                            tx.commit_lsn,\n                            at,\n'
        '                            cast("str", j.rule),  # an illegal judgement names its rule\n'
        "                            job_id,\n",
        "                if False:  # MUTANT: not j.legal\n                    new_findings.append(\n                        Finding(\n"
        '                            "transition",\n                            tx.commit_lsn,\n                            at,\n'
        '                            cast("str", j.rule),  # an illegal judgement names its rule\n'
        "                            job_id,\n",
        REPLAY_SUITE,
    ),
    _one(
        "cert_replay_state_predicates_skipped",
        "replay: the §11 state predicates are not evaluated on the committed states",
        "§replay",
        REPLAY_REPLAYER_PY,
        "            for v in self._predicates(touched_jobs, touched_signals):\n",
        "            for v in ():  # MUTANT: self._predicates(touched_jobs, touched_signals)\n",
        REPLAY_SUITE,
    ),
    _one(
        "cert_replay_taint_swallows_everything",
        "replay: every finding counts as related to a capture gap and is suppressed",
        "§replay",
        REPLAY_REPLAYER_PY,
        "        return bool(f.related_jobs & self.tainted) or bool(f.related_rows & self.tainted_rows)\n",
        "        return True  # MUTANT\n",
        REPLAY_SUITE,
    ),
    # --- issue 51: the report's verdict, the risky cases, the outcome obligations, two survivors ---------------
    _one(
        "cert_report_states_the_checks_verdict",
        "report: results.json, summary.md and report.html state the checks' verdict, not the exit code's "
        "(the committed history's INVALID left out)",
        "§cert report",
        REPORT_PY,
        "    verdict, exit_code = final if final is not None else (result.verdict, result.exit_code)\n",
        "    verdict, exit_code = (result.verdict, result.exit_code)  # MUTANT\n",
        REPORT_SUITE,
    ),
    _one(
        "cert_cov_i9_race_counted_from_the_plan",
        "I9 coverage: every delivery the driver's plan called a race counts as a signal racing the park",
        "§cov I9",
        COVERAGE_PY,
        "    races = len(signal_races(ev))",
        '    races = sum(1 for e in t["signal"] if e.get("when") == "race")  # MUTANT',
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_cov_i9_race_needs_no_commit_inside_the_window",
        "I9 coverage: an attempt seen running before a delivery makes it a race, whether or not the signal "
        "committed before the park (no sample after it, no wake)",
        "§cov I9",
        COVERAGE_PY,
        "        after = woken or any(\n",
        "        after = True or any(  # MUTANT\n",
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_cov_p16_every_reclaim_is_on_a_last_attempt",
        "P16 coverage: every lease_expired entry counts as a reclaim on a last attempt",
        "§cov P16",
        COVERAGE_PY,
        '        and e["attempt"] >= j.max_attempts\n',
        '        and e["attempt"] >= 0  # MUTANT\n',
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_p20_a_pre_ack_is_evidence_enough",
        "P20: an attempt known only from its pre_ack observation is not judged (the start event is looked for "
        "only where a begin step names the attempt)",
        "§duty P20",
        DUTIES_RUNNING_PY,
        "    missing = sorted(key for key in ran if key not in started)\n",
        '    missing = sorted(k for k in ran if k not in started and ran[k] != "wrote a pre_ack observation")  # MUTANT\n',
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_cov_p20_exercised_without_a_slow_attempt",
        "P20 coverage: a run in which no slow attempt ran reads as exercised",
        "§cov P20",
        DUTIES_RUNNING_PY,
        "    return len(ran)\n",
        "    return len(ran) or 1  # MUTANT\n",
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_p19_a_retry_whose_next_attempt_failed_passes",
        "P19: a crossing attempt passes when the job ended failed budget_exceeded, whichever attempt failed it "
        "(the crossing acked as a retry, the next pre-flight failed it)",
        "§duty P19",
        DUTIES_RUNNING_PY,
        '        if job.attempt == attempt and job.state == "failed" and errors[-1:] == ["budget_exceeded"]:\n',
        '        if job.state == "failed" and [x.get("error") for x in job.errors][-1:] == ["budget_exceeded"]:  # MUTANT\n',
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_p19_a_later_attempt_excuses_the_crossing_attempt",
        "P19: a crossing attempt with an error entry and a later attempt is taken for one that never acked (a "
        "crash), whatever the entry says",
        "§duty P19",
        DUTIES_RUNNING_PY,
        '        if "lease_expired" in errors:\n            continue  # never acked',
        '        if "lease_expired" in errors or (errors and job.attempt > attempt):  # MUTANT\n            continue  # never acked',
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_p19_unacked_crossings_exercise_the_duty",
        "P19 coverage: a crossing attempt that never acked (killed after the step) counts as the scenario",
        "§cov P19",
        DUTIES_RUNNING_PY,
        "        r.checks += 1\n        entries = [e for e in job.errors if isinstance(e, Mapping) and "
        'e.get("attempt") == attempt]\n        errors = [e.get("error") for e in entries]\n'
        '        if "lease_expired" in errors:\n',
        "        r.checks += 1\n        judged += 1  # MUTANT\n        entries = [e for e in job.errors if "
        'isinstance(e, Mapping) and e.get("attempt") == attempt]\n        errors = [e.get("error") for e in '
        'entries]\n        if "lease_expired" in errors:\n',
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_p4_hand_back_not_judged",
        "P4: jobs a SIGTERMed worker handed back (acked to ready) are not judged: only lease expiries are",
        "§duty P4",
        DUTIES_RUNNING_PY,
        "        handed_back(r, state, node, e, steps, outage=timeline.db_down_during(t, end + 1))\n",
        "        pass  # MUTANT: handed_back(r, state, node, e, steps, outage=…)\n",
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_p4_hand_back_excused_by_any_error",
        "P4: a handed-back attempt with any error entry passes as the job's own failure (a made-up retry too)",
        "§duty P4",
        DUTIES_RUNNING_PY,
        "            errors and planned_failure(job, attempt, str(kind), {} if steps is None else steps.get(job.id, {}))\n",
        "            bool(errors)  # MUTANT\n",
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_p4_hand_back_every_kind_may_park",
        "P4: every kind but `slow` is taken for one that may park, so no handed-back job is judged but slow ones",
        "§duty P4",
        DUTIES_RUNNING_PY,
        "        if job is None or job.attempt <= attempt or kind in PARKING_KINDS:\n",
        '        if job is None or job.attempt <= attempt or kind != "slow":  # MUTANT\n',
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_cov_i9_race_window_widened",
        "I9 coverage: the race window is twice the sampling resolution (a park a second before the signal races it)",
        "§cov I9",
        COVERAGE_PY,
        "RACE_RESOLUTION = 0.5  #",
        "RACE_RESOLUTION = 1.0  # MUTANT",
        OUTCOMES_SUITE,
    ),
    _one(
        "cert_p11_drains_judged_through_a_capture_gap",
        "refine: a committed history with a capture gap still judges every SIGTERMed node's claims (P11 "
        "certified valid through the gap)",
        "§refine P11",
        REFINE_VALIDATOR_PY,
        "        r.drains_judged = 0 if r.capture_gaps else len(self.ledger.terms)",
        "        r.drains_judged = len(self.ledger.terms)  # MUTANT",
    ),
    _one(
        "cert_history_duties_exercised_through_a_capture_gap",
        "checker: the history's judged drains (P11) and admitted claims (P18) count as exercised although it "
        "has capture gaps",
        "§cov P11 P18",
        CHECKER_PY,
        '        gaps = int(committed.get("capture_gaps") or 0)\n',
        "        gaps = 0  # MUTANT\n",
    ),
    _one(
        "cert_cov_i4_zombie_counted_from_its_own_journal",
        "I4 coverage: a zombie stop counts as a duplicate execution when the journal's `nap` is the frozen "
        "attempt's own write (no later attempt executed it)",
        "§cov I4",
        COVERAGE_PY,
        "            if isinstance(by, int) and by > attempt:\n",
        "            if isinstance(by, int) and by >= attempt:  # MUTANT\n",
    ),
    _one(
        "cert_replay_old_rows_not_compared",
        "replay: an update's old row is not compared with the replayed one (a missed commit is no gap)",
        "§replay",
        REPLAY_REPLAYER_PY,
        "                if old != current:\n",
        "                if old != current and False:  # MUTANT\n",
        REPLAY_SUITE,
    ),
    Mutant(
        "cert_replay_snapshot_difference_ignored",
        "replay: a replay that does not end in the final snapshot is complete (its differences neither taint "
        "nor count): valid",
        "§replay",
        (
            Edit(
                REPLAY_PY,
                "            if table in CONVERT:\n                rp.taint(table, key)\n",
                "            if table in CONVERT and False:  # MUTANT\n                rp.taint(table, key)\n",
            ),
            Edit(
                REPLAY_PY,
                '        or r.matches_snapshot is False\n        or r.capture.get("errors")\n',
                '        or r.capture.get("errors")  # MUTANT: r.matches_snapshot is False\n',
            ),
        ),
        REPLAY_SUITE,
    ),
    # --- issue 51: judges of order and time, fault-aware per node (soak/judges/timing/, P17) ---------------
    _one(
        "cert_p5_choice_counts_every_claim",
        "P5 coverage: every judged claim counts as one that had a choice within its priority (a run whose "
        "claims never had one — no standing backlog — reads exercised)",
        "§cert coverage",
        CLAIM_ORDER_PY,
        "        if rank or self._had_choice(lst, last, ids, jobs, now, t_now):\n",
        "        if True:  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_p5_choice_not_required",
        "P5 coverage: the claim_choice scenario is not required (claim order unexposed reads valid)",
        "§cert coverage",
        CHECKER_PY,
        '        extra["claim_choice"] = 0 if gaps else int(timing.get("claims_with_choice") or 0)\n',
        '        extra["claim_choice"] = 1  # MUTANT\n',
        TIMING_SUITE,
    ),
    _one(
        "cert_p17_counts_from_lease_until",
        "P17: an expired lease counts as overdue from its lease_until even before its claim committed",
        "§duty P17",
        DUTIES_TIMING_PY,
        "            start = max(until, began)\n",
        "            start = until  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_p17_any_outage_excuses_the_whole_window",
        "P17: any fault inside the expiry window excuses all of it, not only its own duration",
        "§duty P17",
        DUTIES_TIMING_PY,
        "            since = max(since, b)\n",
        "            return None  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_now_any_nodes_sigstop_excuses",
        "now freshness: a SIGSTOP of any node excuses a write's lag, not only its own node's",
        "§refine",
        NODE_FAULTS_PY,
        '        out = [(a, b, "SIGSTOP") for a, b in self.stopped.get(node, ())]\n',
        '        out = [(a, b, "SIGSTOP") for ws in self.stopped.values() for a, b in ws]  # MUTANT\n',
        TIMING_SUITE,
    ),
    _one(
        "cert_now_fault_excuses_beyond_its_duration",
        "now freshness: a fault of the node excuses any lag, not only the fault's duration plus the base",
        "§refine",
        FRESHNESS_PY,
        "        if lag <= NOW_BASE + excused:\n",
        "        if excused or lag <= NOW_BASE:  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_now_stale_writes_not_a_verdict",
        "now freshness: stale writes are counted but do not make the trace validation invalid",
        "§refine",
        REFINE_PY,
        "    elif r.stale_now:",
        "    elif False:  # MUTANT",
        TIMING_SUITE,
    ),
    _one(
        "cert_claim_order_repeat_never_proves",
        "claim order (P5): a row passed over again long after the first claim is still an honest race",
        "§duty P5",
        CLAIM_ORDER_PY,
        "            if p.gap > hold:\n",
        "            if False:  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_claim_order_judges_the_harness",
        "claim order (P5): the harness's own lost-wakeup claims (by parent_id, not §6) are judged as an SDK's",
        "§duty P5",
        CLAIM_ORDER_PY,
        "            if node == HARNESS_NODE:  # the harness's scenario write, not an SDK's claim: P5 judges SDKs\n",
        "            if False:  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_claim_order_capacity_never_proves",
        "claim order (P5): a claim passing over more free rows than all in flight could hold is an honest race",
        "§duty P5",
        CLAIM_ORDER_PY,
        "                if passed - held > untraced + c[9]:\n",
        "                if False:  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_claim_order_freeze_excuses_every_row",
        "claim order (P5): a freeze excuses every row a claim passed over, not only what a frozen claim holds",
        "§duty P5",
        CLAIM_ORDER_PY,
        "            if rank <= can_hold and self.faults.froze_holding(written, t_now - CLAIM_HOLD_MIN, t):\n",
        "            if self.faults.froze_holding(written, t_now - CLAIM_HOLD_MIN, t):  # MUTANT\n",
        TIMING_SUITE,
    ),
    Mutant(
        "cert_claim_order_any_later_fault_excuses",
        "claim order (P5): a SIGSTOP after the row's write excuses every later claim, even once it is over",
        "§duty P5",
        (
            Edit(
                NODE_FAULTS_PY,
                "        return any(written - 1.0 <= a <= t1 and min(b, self.end) >= t0 for a, b in frozen)\n",
                "        return any(written - 1.0 <= a <= t1 for a, b in frozen)  # MUTANT\n",
            ),
            Edit(
                NODE_FAULTS_PY,
                "        n = sum(1 for ws in self.stopped.values() for a, b in ws if a <= t1 and min(b, self.end) >= t0)\n",
                "        n = sum(1 for ws in self.stopped.values() for a, b in ws if a <= t1)  # MUTANT\n",
            ),
        ),
        TIMING_SUITE,
    ),
    _one(
        "cert_claim_order_not_reported_in_p5",
        "claim order (P5): the committed history's claim-order findings never reach the P5 row",
        "§duty P5",
        CHECKER_PY,
        '        for line in committed.get("claim_order") or ():\n',
        "        for line in ():  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_claim_order_untraced_never_proves",
        "claim order (P5): free rows only an untraced transaction could have held never make P5 invalid",
        "§duty P5",
        CLAIM_ORDER_PY,
        "        if self.aborts_needed >= OVER_MIN and self.aborts_needed >= UNTRACED_SHARE * self.judged:\n",
        "        if False:  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_claim_order_any_concurrent_claim_holds",
        "claim order (P5): any claim in flight could have held a passed-over row, whatever rows it took",
        "§duty P5",
        CLAIM_ORDER_PY,
        "            if c_now <= t + BEGAN_SLACK and not (c_now == t_now and c_at == t) and last < key:\n",
        "            if c_now <= t + BEGAN_SLACK and not (c_now == t_now and c_at == t):  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_p2_renewal_needs_a_whole_free_ttl",
        "P2: a lost lease is blamed only when its node was free of faults for a whole ttl, not for one renewal",
        "§duty P2",
        DUTIES_RUNNING_PY,
        "                n > ttl / 3 + SAMPLE_EVERY + CALL_S + (RETRY_BACKOFF_S if after else 0.0) for n, after in stretches\n",
        "                n > ttl for n, after in stretches  # MUTANT\n",
        TIMING_SUITE,
    ),
    _one(
        "cert_p2_window_ends_at_the_reclaim",
        "P2: the ttl judged ends at the reclaim, not at the lease's own expiry (an outage after it excuses)",
        "§duty P2",
        DUTIES_RUNNING_PY,
        "            expiry = (float(last) - offset) if last is not None else t1\n",
        "            expiry = t1  # MUTANT\n",
        TIMING_SUITE,
    ),
    # --- end of issue 51's block -----------------------------------------------------------------------------
    # --- issue 54, seventh session: three mutation hunts over soak/ (the end-of-run judges, the history judges
    # and the report, the fault injection and workload); each a survivor of the suites above, killed by the test
    # the hunt added for it ------------------------------------------------------------------------------------
    _one(
        "cert_p9_outcome_ignores_the_error",
        (
            "P9: a job that ended in the prescribed state passes whatever its last error (a costed job failed"
            " with 'Boom', not budget_exceeded)"
        ),
        "§duty P9",
        VERDICTS_PY,
        "        if job.state == state and (not error or _last_error(job) == error):\n",
        "        if job.state == state:\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p5_choice_counted_through_a_gap",
        "P5: claims with a choice are counted from a committed history with capture gaps (a gap may hide the holder)",
        "§duty P5",
        CHECKER_PY,
        '        extra["claim_choice"] = 0 if gaps else int(timing.get("claims_with_choice") or 0)\n',
        '        extra["claim_choice"] = int(timing.get("claims_with_choice") or 0)\n',
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i4_crash_at_crossing_on_attempt_one",
        "I4 coverage: a crash_at_crossing job failed by its first attempt (no crash) counts as the scenario",
        "§11 I4",
        COVERAGE_PY,
        "            and j.attempt >= 2\n",
        "            and j.attempt >= 1\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i9_rescue_of_a_parent_that_never_succeeded",
        "I9 coverage: a lost wake-up counts as rescued by the reconciler whatever its parent's end (cancelled too)",
        "§11 I9",
        COVERAGE_PY,
        '        if parent is not None and parent.state == "succeeded":\n',
        "        if parent is not None:\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i1_expired_running_row_not_stuck",
        "I1: a row left running with its lease long expired after a completed drain is pending, not stuck",
        "§11 I1",
        INVARIANTS_JOBS_PY,
        '                or (job.state == "running" and not due(job.lease_until))\n',
        '                or (job.state == "running")\n',
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i2_any_ack_counts_as_stale",
        "I2 coverage: every applied ack counts as a stale ack",
        "§11 I2",
        INVARIANTS_JOBS_PY,
        '    stale_seen = sum(1 for o in acks.values() if o.observed.get("state") == "stale")\n',
        "    stale_seen = len(acks)\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i2_success_after_its_attempt_expired",
        "I2: a success by an attempt that had already ended with lease_expired passes",
        "§11 I2",
        INVARIANTS_JOBS_PY,
        "        elif attempts and isinstance(attempts[-1], int) and attempts[-1] >= job.attempt:\n",
        "        elif attempts and isinstance(attempts[-1], int) and attempts[-1] > job.attempt:\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i3_fewer_step_values_accepted",
        "I3: a result listing fewer step values than its input declares passes",
        "§11 I3",
        INVARIANTS_JOBS_PY,
        '            if len(result["tokens"]) != len(names):\n',
        '            if len(result["tokens"]) > len(names):\n',
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i3_every_success_counts_as_a_replay",
        "I3 coverage: a job whose steps its final attempt journaled counts as a journal replay",
        "§11 I3",
        INVARIANTS_JOBS_PY,
        'isinstance(value.get("attempt"), int) and value["attempt"] < job.attempt:\n',
        'isinstance(value.get("attempt"), int) and value["attempt"] <= job.attempt:\n',
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i6_first_slot_not_expected",
        "I6: the first minute slot after the cron was registered is never expected (missing it passes)",
        "§11 I6",
        INVARIANTS_LINKS_PY,
        "        s = (int(t0) // 60 + 1) * 60\n",
        "        s = (int(t0) // 60 + 2) * 60\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i7_single_insert_is_a_concurrent_group",
        "I7 coverage: a unique group of a single insert counts as concurrent",
        "§11 I7",
        INVARIANTS_LINKS_PY,
        "        concurrent += len(attempts) > 1\n",
        "        concurrent += len(attempts) >= 1\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i8_fewer_children_accepted",
        "I8: a parent that spawned fewer children than it asked for passes",
        "§11 I8",
        INVARIANTS_LINKS_PY,
        "        if not isinstance(declared, list) or len(declared) != want:\n",
        "        if not isinstance(declared, list):\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_i8_parent_succeeded_over_a_live_child",
        "I8: a parent that succeeded while a child was not terminal passes",
        "§11 I8",
        INVARIANTS_LINKS_PY,
        ("                if not c.terminal\n                or (\n"),
        ("                if False\n                or (\n"),
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_d1_exercised_without_a_watch",
        "D1: valid when no commit was watched (exercised without checks)",
        "§11 D1",
        DURABILITY_PY,
        "    r.exercised = r.checks > 0\n",
        "    r.exercised = True\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p1_status_75_is_deliberate",
        "P1: an exit with status 75 and no exit observation counts as deliberate",
        "§duty P1",
        DUTIES_RUNNING_PY,
        ('        if e["node"] in deliberate:\n            continue\n        t = float(e["t"])\n'),
        (
            '        if e["node"] in deliberate or e.get("code") == 75:\n'
            "            continue\n"
            '        t = float(e["t"])\n'
        ),
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p4_lease_outliving_sigterm_excused",
        (
            "P4: a node that exits 0.5 s after SIGTERM leaving a live lease to expire passes (the lease's last"
            " renewal compared with the signal plus a ttl)"
        ),
        "§duty P4",
        DUTIES_RUNNING_PY,
        "            if not expired or ((u := ev.attempts.last_until((job_id, attempt))) is not None and u < t):\n",
        "            if not expired or ((u := ev.attempts.last_until((job_id, attempt))) is not None and u < t + ev.ttl):\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p4_flaky_plan_one_attempt_longer",
        "P4: a flaky job's planned raises last one attempt longer (a retry made up at SIGTERM on the next attempt passes)",
        "§duty P4",
        DUTIES_RUNNING_PY,
        '        return inp.get("mode") == "raise" and isinstance(until, int) and attempt <= until\n',
        '        return inp.get("mode") == "raise" and isinstance(until, int) and attempt <= until + 1\n',
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p19_spend_at_the_budget_crosses",
        "P19: a spend that reaches its budget without exceeding it is a crossing (an honest success is INVALID)",
        "§duty P19",
        DUTIES_RUNNING_PY,
        "        if (job.budget_usd_micros is not None and usd > job.budget_usd_micros) or (\n",
        "        if (job.budget_usd_micros is not None and usd >= job.budget_usd_micros) or (\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p6_cron_queue_defaults_to_the_jobs",
        "P6: a cron row without a queue option accepts its job in any queue (the default is 'default')",
        "§duty P6",
        DUTIES_OUTCOMES_PY,
        '        want_queue = opts.get("queue", "default")\n',
        '        want_queue = opts.get("queue", job.queue)\n',
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p7_sleeper_that_never_parked_resumed",
        "P7 coverage: a sleeper that slept in process, never parking, counts as resumed",
        "§duty P7",
        DUTIES_OUTCOMES_PY,
        "                resumed += resumes >= 1\n",
        "                resumed += 1\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p9_cancelled_workflows_not_judged",
        "P9: every workflow the driver cancelled into is skipped as a lost race (a wrongly failed member passes)",
        "§duty P9",
        DUTIES_OUTCOMES_PY,
        ('        and state.jobs[e.job_id].terminal\n        and state.jobs[e.job_id].state != "cancelled"\n'),
        "        and state.jobs[e.job_id].terminal\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p17_sweeper_judged_from_the_latest_free_node",
        "P17: the node most recently back from a stop is judged, not the one free all along (an unreclaimed lease passes)",
        "§duty P17",
        DUTIES_TIMING_PY,
        "            free, sweeper = min(frees)\n",
        "            free, sweeper = max(frees)\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p13_steps_counted_from_the_last_cancel",
        "P13: steps are counted from the last cancel request, not the first (re-issued cancels hide a worker ignoring them)",
        "§duty P13",
        DUTIES_TIMING_PY,
        '            first.setdefault(e["job_id"], float(e["t"]))\n',
        '            first[e["job_id"]] = float(e["t"])\n',
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p2_skew_seen_without_leases_ahead",
        "P2 coverage: a node whose leases are not ahead of the harness clock counts as skew seen",
        "§duty P2",
        DUTIES_EVIDENCE_PY,
        "(ahead := until - at - ttl) > 0.1:\n",
        "(ahead := until - at - ttl) > -0.1:\n",
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_p4_another_attempts_lease_expiry_blamed",
        "P4: a later attempt's lease expiry on another node is blamed on a clean drain (an honest drain is INVALID)",
        "§duty P4",
        DUTIES_EVIDENCE_PY,
        (
            '    return [e for e in job.errors if isinstance(e, Mapping) and e.get("attempt") == attempt and'
            ' e.get("error") == error]\n'
        ),
        '    return [e for e in job.errors if isinstance(e, Mapping) and e.get("error") == error]\n',
        EDGES_CHECKS_SUITE,
    ),
    _one(
        "cert_now_offset_added_not_taken_off",
        "now freshness: a node's declared clock offset is added to its now, not taken off (a stale now passes)",
        "§timing now",
        FRESHNESS_PY,
        ("t_now = now.timestamp() - self.faults.offset.get(node, 0.0)\n        t_at"),
        ("t_now = now.timestamp() + self.faults.offset.get(node, 0.0)\n        t_at"),
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_cut_of_every_node_excuses_none",
        "fault log: a cut of every node (no node named) excuses no node's lag (an honest worker is INVALID)",
        "§timing faults",
        NODE_FAULTS_PY,
        "for n, a, b in self.cuts if n is None or n == node]",
        "for n, a, b in self.cuts if n == node]",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_claim_order_snapshot_slack_doubled",
        "P5: a row committed up to 2 s before the claim's now is taken as not yet visible (the 1 s slack doubled)",
        "§duty P5",
        CLAIM_ORDER_PY,
        "            if written > t_now - SNAP_SLACK:\n",
        "            if written > t_now - 2 * SNAP_SLACK:\n",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_claim_order_proven_min_off_by_one",
        "P5: exactly PROVEN_MIN rows passed over again do not make P5 invalid",
        "§duty P5",
        CLAIM_ORDER_PY,
        "        if self.repeat_rows >= PROVEN_MIN:\n",
        "        if self.repeat_rows > PROVEN_MIN:\n",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_claim_order_untraced_rounded_down",
        "P5: the untraced transactions needed per window are rounded down, not up",
        "§duty P5",
        CLAIM_ORDER_PY,
        "                self.aborts_needed += -(-len(rows) // per)\n",
        "                self.aborts_needed += len(rows) // per\n",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_claim_order_hold_from_a_frozen_claim",
        "P5: a claim slowed by another node's freeze lengthens HOLD (later passes over are excused)",
        "§duty P5",
        CLAIM_ORDER_PY,
        "if not self.faults.excuse(node, t_now, t)[0] and self.faults.any_freeze(t_now, t) is None:",
        "if not self.faults.excuse(node, t_now, t)[0]:",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_claim_order_nulls_last",
        "P5: a row without ready_at sorts after dated rows (§6 says NULLS FIRST)",
        "§duty P5",
        CLAIM_ORDER_PY,
        "return (priority, 0 if ready_at is None else 1,",
        "return (priority, 1 if ready_at is None else 0,",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_claim_order_later_writer_counts_as_concurrent",
        "P5: a writer that began up to HOLD after the passing claim counts as holding the row",
        "§duty P5",
        CLAIM_ORDER_PY,
        "(writer_now is not None and writer_now <= c[2] + BEGAN_SLACK)",
        "(writer_now is not None and writer_now <= c[2] + self.hold)",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_claim_order_freeze_before_the_write_excuses",
        "P5: a freeze that began up to 10 s before a row was written excuses passing it over",
        "§duty P5",
        NODE_FAULTS_PY,
        "return any(written - 1.0 <= a <= t1 and min(b, self.end) >= t0 for a, b in frozen)",
        "return any(written - 10.0 <= a <= t1 and min(b, self.end) >= t0 for a, b in frozen)",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_refine_step_gap_does_not_taint",
        "trace validation: a gap on a job's step or event rows does not taint the job (INVALID instead of unknown)",
        "§refine",
        REFINE_VALIDATOR_PY,
        (
            "            for table in (STEPS, EVENTS):\n"
            "                for k in rows.rows.get(table, {}):\n"
            "                    self.taint.add(k[0])"
        ),
        (
            "            for table in ():\n"
            "                for k in rows.rows.get(table, {}):\n"
            "                    self.taint.add(k[0])"
        ),
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_refine_lag_doubled",
        "trace validation: a now up to twice LAG before its commit is accepted",
        "§refine",
        REFINE_RECOVERY_PY,
        "        if now < at - LAG:\n",
        "        if now < at - 2 * LAG:\n",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_refine_success_ack_not_judged_fresh",
        "trace validation: a success ack's now is not judged for freshness against its node",
        "§timing now",
        REFINE_RECOVERY_PY,
        (
            '            self.now_ok(now, at, f"ack of job {a.id} attempt {b.attempt}", b.leased_by)\n'
            "            return w.Ack(now, a.id, b.attempt, w.Succeed(value))"
        ),
        (
            '            self.now_ok(now, at, f"ack of job {a.id} attempt {b.attempt}")\n'
            "            return w.Ack(now, a.id, b.attempt, w.Succeed(value))"
        ),
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_refine_claim_order_through_a_gap",
        "trace validation: claim order findings are kept through a capture gap (an honest worker is INVALID)",
        "§duty P5",
        REFINE_VALIDATOR_PY,
        "        r.claim_order = [] if r.capture_gaps else self.order.lines()",
        "        r.claim_order = self.order.lines()",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_refine_insert_over_a_held_row",
        "trace validation: an insert of a row already held is no gap (it overwrites the held row; VALID)",
        "§refine",
        REFINE_VALIDATOR_PY,
        (
            "                if current is not None:\n"
            '                    out.gap.append(f"{table} {key!r} inserted but already held")'
        ),
        ('                if False:\n                    out.gap.append(f"{table} {key!r} inserted but already held")'),
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_refine_snapshot_difference_valid",
        "trace validation: a history that does not end in the final snapshot is valid on its own",
        "§refine",
        REFINE_PY,
        "    elif r.unexplained or r.capture_gaps or r.matches_snapshot is False:\n",
        "    elif r.unexplained or r.capture_gaps:\n",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_replay_lost_ranges_ignored",
        "replay: ranges the slot passed without the capture do not make the replay unknown",
        "§replay",
        REPLAY_PY,
        ("        gaps\n        or lost\n"),
        "        gaps\n",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_spill_series_window_open_below",
        "spilled samples: a time window on disk leaves out a sample at its start (the in-memory filter keeps it)",
        "§replay",
        "soak/record/spill.py",
        "WHERE at >= ? AND at <= ? ORDER BY at, id",
        "WHERE at > ? AND at <= ? ORDER BY at, id",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_pgoutput_relation_cache_kept",
        "pgoutput: a relation announced again with other columns keeps the old column loaders",
        "§replay",
        "soak/record/pgoutput.py",
        ("            if self.relations.get(oid) != rel:\n                self._by_relation.pop(oid, None)\n"),
        "",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_console_prints_the_checks_verdict",
        "the console prints the checks' verdict, not the run's final one (VALID printed, exit 1)",
        "§cert verdict",
        "soak/run.py",
        ("    verdict, code = final if final is not None else (result.verdict, result.exit_code)\n    t = Table"),
        ("    verdict, code = (result.verdict, result.exit_code)\n    t = Table"),
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_interrupted_run_exits_zero",
        "an interrupted run exits 0 (reads as valid)",
        "§cert verdict",
        "soak/report/interrupted.py",
        "EXIT_UNKNOWN = 2",
        "EXIT_UNKNOWN = 0",
        EDGES_HISTORY_SUITE,
    ),
    _one(
        "cert_harness_kill_reaches_only_the_shell",
        "kill -9 reaches only the shell's pid: a compound worker command keeps running, its crash logged",
        "§harness faults",
        "soak/faults/workers.py",
        (
            '            self.history.record("worker_kill", node=slot.node)\n'
            "            self._signal(slot, signal.SIGKILL)\n"
        ),
        ('            self.history.record("worker_kill", node=slot.node)\n            slot.proc.kill()\n'),
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_kill_sends_sigterm",
        "the logged kill -9 sends SIGTERM: the worker drains instead of crashing",
        "§harness faults",
        "soak/faults/workers.py",
        ("            self._signal(slot, signal.SIGKILL)\n            self.kills += 1\n"),
        ("            self._signal(slot, signal.SIGTERM)\n            self.kills += 1\n"),
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_stop_reaches_only_the_shell",
        "SIGSTOP reaches only the shell's pid: the worker keeps running while its stop excuses its leases",
        "§harness faults",
        "soak/faults/workers.py",
        "            self._signal(slot, signal.SIGSTOP)\n",
        "            slot.proc.send_signal(signal.SIGSTOP)\n",
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_stop_released_early",
        "a plain SIGSTOP is released after a tenth of its time (never past the lease)",
        "§harness faults",
        "soak/faults/nemesis.py",
        ("            self.halt.wait(self.stop_for)\n            self.workers.cont(slot)\n            return True\n"),
        (
            "            self.halt.wait(self.stop_for / 10)\n"
            "            self.workers.cont(slot)\n"
            "            return True\n"
        ),
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_db_restarted_logged_early",
        "db_restarted is logged before the restart returns (the outage window ends too early)",
        "§harness faults",
        "soak/faults/nemesis.py",
        (
            "            self.cluster.crash()\n"
            "            self.cluster.restart()\n"
            '            self.history.record("db_restarted", took=round(time.monotonic() - t0, 3))\n'
        ),
        (
            "            self.cluster.crash()\n"
            '            self.history.record("db_restarted", took=round(time.monotonic() - t0, 3))\n'
            "            self.cluster.restart()\n"
        ),
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_zombie_hold_settles_on_a_read_error",
        "a zombie hold whose database read failed counts as settled (released too early)",
        "§harness faults",
        "soak/faults/zombies.py",
        ("        except psycopg.Error:\n            rows = None\n"),
        ("        except psycopg.Error:\n            rows = {}\n"),
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_conn_stall_logged_as_route_stall",
        "a one-connection stall is logged as a stall of the whole route (excuses the node)",
        "§harness faults",
        "soak/faults/netfaults.py",
        '        return self._fault("stall_conn", False, self.proxy.stall_one)\n',
        '        return self._fault("stall", False, self.proxy.stall_one)\n',
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_heal_keeps_latency",
        "a heal leaves the injected latency on (the route slow after net_heal)",
        "§harness faults",
        "soak/faults/proxy.py",
        ("            lst.partitioned = lst.stalled = False\n            lst.latency = 0.0\n"),
        "            lst.partitioned = lst.stalled = False\n",
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_failed_fault_counted",
        "a fault that raised counts as injected",
        "§harness faults",
        "soak/faults/schedule.py",
        ("            schedule.skip()\n            schedule.not_before = clock() + MIN_GAP * schedule.every\n"),
        "            schedule.done(clock())\n",
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_signal_intent_after_the_write",
        "the driver records a signal's intent after the write (a write committed as the connection broke is unattested)",
        "§harness workload",
        "soak/workload/driver.py",
        (
            '            self.history.record("signal_intent", job_id=job_id)\n'
            "            # The payload is a function of the job: a redelivery (late follow-up) upserts the same value.\n"
            "            result = self.store.apply(\n"
            '                ops.DeliverSignal(utc_now(), f"job:{job_id}", name, {"for": job_id, "n": job_id * 7919 % 1_000_003})\n'
            "            )\n"
        ),
        (
            "            # The payload is a function of the job: a redelivery (late follow-up) upserts the same value.\n"
            "            result = self.store.apply(\n"
            '                ops.DeliverSignal(utc_now(), f"job:{job_id}", name, {"for": job_id, "n": job_id * 7919 % 1_000_003})\n'
            "            )\n"
            '            self.history.record("signal_intent", job_id=job_id)\n'
        ),
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_cancel_intent_after_the_write",
        "the driver records a cancel's intent after the write",
        "§harness workload",
        "soak/workload/driver.py",
        (
            '            self.history.record("cancel_intent", job_id=job_id)  # attested before the write, as a signal is\n'
            "            result = self.store.apply(ops.Cancel(utc_now(), job_id))\n"
        ),
        (
            "            result = self.store.apply(ops.Cancel(utc_now(), job_id))\n"
            '            self.history.record("cancel_intent", job_id=job_id)  # attested before the write, as a signal is\n'
        ),
        HARNESS_SUITE,
    ),
    _one(
        "cert_i9_unwoken_delivery_counts_after_park",
        "I9 coverage: a delivery after the park that woke nothing counts as signal_after_park",
        "§11 I9",
        COVERAGE_PY,
        '    woken_after = sum(1 for e in t["signal"] if e.get("woken") and e.get("when") in ("after", "after-cancel"))\n',
        '    woken_after = sum(1 for e in t["signal"] if e.get("when") in ("after", "after-cancel"))\n',
        HARNESS_SUITE,
    ),
    _one(
        "cert_p3_cancel_at_park_any_result",
        "P3 coverage: a cancel_at_park counts whatever its result (a job not yet running too)",
        "§duty P3",
        COVERAGE_PY,
        '        1 for e in t["cancel"] if e.get("plan") == "cancel_at_park" and e.get("result") == "CancelRequested"\n',
        '        1 for e in t["cancel"] if e.get("plan") == "cancel_at_park"\n',
        HARNESS_SUITE,
    ),
    _one(
        "cert_i4_zombie_exit_after_cont_ignored",
        "I4 coverage: a zombie that exited right after its SIGCONT still counts as re-executing its paid step",
        "§11 I4",
        COVERAGE_PY,
        '    for e in (*ev.by_type.get("worker_kill", ()), *ev.by_type.get("worker_exit", ())):\n',
        '    for e in ev.by_type.get("worker_kill", ()):\n',
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_fault_log_not_flushed",
        "the fault log is not flushed per event (a killed harness loses its last events)",
        "§harness record",
        "soak/record/history.py",
        ("                self.file.write(line)\n                self.file.flush()\n"),
        "                self.file.write(line)\n",
        HARNESS_SUITE,
    ),
    _one(
        "cert_harness_costed_budget_equals_the_spend",
        "a costed job's budget equals the crossing step's spend (the ledger names a step that does not cross)",
        "§harness workload",
        "soak/workload/driver.py",
        "            budget = sum(costs[:k]) - 1\n",
        "            budget = sum(costs[:k])\n",
        HARNESS_SUITE,
    ),
    # --- issue 54, target 5: the claim-order judge's memory flat in the run's length ------------------------
    _one(
        "cert_claim_order_trim_drops_a_kept_claims_neighbours",
        "P5 claim order: the trim keeps a claim only inside a kept judged claim's [now, commit] (not up to "
        "INFLIGHT_MAX after): the claim in flight beside an honest one is dropped and it is judged over capacity",
        "§duty P5",
        CLAIM_ORDER_PY,
        "            windows[c[0]].append((c[1] - SNAP_SLACK, c[2] + INFLIGHT_MAX))\n",
        "            windows[c[0]].append((c[1] - SNAP_SLACK, c[2]))  # MUTANT\n",
        TIMING_SUITE,
    ),  # killed by test_timing_judges::test_the_claims_a_kept_judged_claim_needs_survive_the_trim_and_its_judgement_is_unchanged
    _one(
        "cert_claim_order_keeps_every_judged_claim",
        "P5 claim order: every judged claim's record is kept to the end (memory grows with the run's length)",
        "§duty P5",
        CLAIM_ORDER_PY,
        "        if not mine[5]:  # passed over nothing: no row refers to it, no capacity is judged for it\n",
        "        if False:  # MUTANT\n",
        TIMING_SUITE,
    ),  # killed by test_timing_judges::test_an_honest_run_keeps_no_judged_claim_and_only_the_claims_a_later_claim_can_look_back_to
    _one(
        "cert_claim_order_never_trims",
        "P5 claim order: the claims no judged claim can look back to are never dropped (memory grows with the "
        "run's length)",
        "§duty P5",
        CLAIM_ORDER_PY,
        "            if self._since_trim >= TRIM_EVERY and self.claim_lag_max is not None:\n",
        "            if False:  # MUTANT\n",
        TIMING_SUITE,
    ),  # killed by test_timing_judges::test_an_honest_run_keeps_no_judged_claim_and_only_the_claims_a_later_claim_can_look_back_to
    # --- found by a 1,200 s soak of the reference worker (ninth session): two honest histories judged INVALID ---
    _one(
        "cert_p4_outage_retry_is_a_hand_back",
        "P4: an attempt failed by a PostgreSQL crash during its node's drain counts as handed back (an honest "
        "worker whose job's statements failed with the crash is INVALID)",
        "§duty P4",
        DUTIES_RUNNING_PY,
        "        handed_back(r, state, node, e, steps, outage=timeline.db_down_during(t, end + 1))\n",
        "        handed_back(r, state, node, e, steps, outage=False)  # MUTANT\n",
        OUTCOMES_SUITE,
    ),  # killed by test_soak_outcomes::test_p4_an_attempt_failed_by_a_database_crash_during_the_drain_is_not_a_hand_back
    _one(
        "cert_refine_workflow_ids_numbered_from_the_first",
        "trace validation: a workflow's members are numbered from the first member's id (a concurrent insert "
        "that took an id between them makes an honest enqueue unexplained: INVALID)",
        "§refine",
        REFINE_RECOVERY_PY,
        '            head.append(("enqueue_workflow", _by_ids([m.id for m in members], ops.EnqueueWorkflow(now, wf_id, ms))))\n',
        '            head.append(("enqueue_workflow", ("next_id", members[0].id, ops.EnqueueWorkflow(now, wf_id, ms))))  # MUTANT\n',
        ("tests/test_refine_edges.py", *REFINE_SUITE),
    ),  # killed by test_refine_edges::test_a_workflow_whose_members_ids_have_a_gap_a_concurrent_insert_took_is_explained
)
