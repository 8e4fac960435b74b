"""Mutants of the trace validation (soak/judges/refine/) and the committed-history replay (soak/judges/replay/)
found by a second mutation hunt over them (issue 54): bugs planted in the validator, the candidate recovery,
the row comparisons, the decoding feed, the verdict and the replayer that the existing history tests let
pass. Each is killed by tests/test_refine_edges.py (pure, hand-built histories, a few seconds), which leads
its suite here; docs/mutants.md "Mutation hunts" describes the method.
"""

from __future__ import annotations

from properties.mutants.kinds import Edit, Mutant

VALIDATOR_PY = "soak/judges/refine/validator.py"
RECOVERY_PY = "soak/judges/refine/recovery.py"
WORLD_PY = "soak/judges/refine/world.py"
REFINE_PY = "soak/judges/refine/__init__.py"
FEED_PY = "soak/judges/refine/feed.py"
REPLAYER_PY = "soak/judges/replay/replayer.py"
REPLAY_PY = "soak/judges/replay/__init__.py"

REFINE2_SUITE = ("tests/test_refine_edges.py", "tests/test_refine.py")
REPLAY2_SUITE = ("tests/test_refine_edges.py", "tests/test_history_capture.py")

REFINE_HUNT: tuple[Mutant, ...] = (
    Mutant(
        "cert_refine2_update_of_an_unheld_row_no_gap",
        (
            "trace validation: an update of a row the validation never held is no capture gap (nothing "
            "resynced; an honest renewal after a missed insert is INVALID)"
        ),
        "§refine",
        (
            Edit(
                VALIDATOR_PY,
                '                out.gap.append(f"{table} {key!r} {kind}d but not held")\n',
                "                pass  # MUTANT\n",
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_an_update_of_a_job_row_the_validation_never_held_is_a_gap_and_resynced_not_a_violation
    Mutant(
        "cert_refine2_job_gap_does_not_taint",
        (
            "trace validation: a gap on a job row does not taint the job (a later unexplained "
            "transaction on it is INVALID instead of unknown)"
        ),
        "§refine",
        (
            Edit(
                VALIDATOR_PY,
                "            for k in rows.rows.get(JOBS, {}):\n                self.taint.add(k)\n",
                "            for k in ():  # MUTANT\n                self.taint.add(k)\n",
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_gap_on_a_job_row_taints_the_job_for_the_transactions_after_it
    Mutant(
        "cert_refine2_own_gap_not_tainted",
        (
            "trace validation: an unexplained transaction with a gap of its own on no job row (a "
            "signal) counts as hard (INVALID instead of unknown)"
        ),
        "§refine",
        (
            Edit(
                VALIDATOR_PY,
                "            tainted = bool(involved & self.taint) or bool(rows.gap)\n",
                "            tainted = bool(involved & self.taint)  # MUTANT\n",
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_an_unexplained_transaction_with_a_gap_of_its_own_on_a_signal_row_is_unknown_not_invalid
    Mutant(
        "cert_refine2_rows_the_model_deletes_ignored",
        (
            "trace validation: a row the model deletes and the transaction leaves is no difference (a "
            "prune that leaves its jobs' steps is VALID)"
        ),
        "§refine",
        (Edit(VALIDATOR_PY, "            keys |= was.keys() - model_rows.keys()\n", "            pass  # MUTANT\n"),),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_prune_that_deletes_a_job_but_leaves_its_journal_is_invalid
    Mutant(
        "cert_refine2_late_claim_by_either_clock",
        (
            "refine P11: a claim counts as after its node's SIGTERM when either clock says so (a claim "
            "built before the signal and committed 3 s later fails an honest drain)"
        ),
        "§refine P11",
        (
            Edit(
                VALIDATOR_PY,
                "        if at > t + CLAIM_SETTLE and now > t + NOW_SLACK:\n",
                "        if at > t + CLAIM_SETTLE or now > t + NOW_SLACK:  # MUTANT\n",
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_claim_built_before_the_sigterm_and_committed_after_it_is_no_claim_after_the_term
    Mutant(
        "cert_refine2_claim_now_not_judged_fresh",
        (
            "trace validation: a claim's now (started_at) is not judged for freshness against its node "
            "(stale claims pass)"
        ),
        "§timing now",
        (
            Edit(
                RECOVERY_PY,
                (
                    '            self.now_ok(now, at, f"claim of job(s) {sorted(r.id for r in rows)[:5]} by '
                    '{node}", node)\n'
                ),
                (
                    '            self.now_ok(now, at, f"claim of job(s) {sorted(r.id for r in rows)[:5]} by '
                    '{node}")  # MUTANT\n'
                ),
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_claim_stamped_long_before_its_commit_is_a_stale_now
    Mutant(
        "cert_refine2_retry_not_attested",
        (
            "trace validation: a failed job made ready again is an operator Retry even under the "
            "harness ledger (a worker resurrecting failed jobs is VALID)"
        ),
        "§refine",
        (
            Edit(
                RECOVERY_PY,
                '            if self.ledger.strict:\n                raise Mismatch(f"job {a.id} retried',
                '            if False:  # MUTANT\n                raise Mismatch(f"job {a.id} retried',
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_failed_job_made_ready_again_by_anyone_but_the_harness_is_unexplained
    Mutant(
        "cert_refine2_reclaim_retry_before_now",
        (
            "trace validation: a reclaim may retry a job at a ready_at before its own now (the model "
            "takes whatever backoff the rows show)"
        ),
        "§refine",
        (
            Edit(
                RECOVERY_PY,
                "                        if a.ready_at is None or a.ready_at < now:\n",
                "                        if a.ready_at is None:  # MUTANT\n",
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_reclaim_that_retries_a_job_before_its_own_now_is_invalid
    Mutant(
        "cert_refine2_ack_batch_now_earliest",
        (
            "trace validation: an ack batch's after-terminal now is its oldest ack's (one stale ack "
            "counted twice: an honest worker is INVALID)"
        ),
        "§timing now",
        (
            Edit(
                RECOVERY_PY,
                "            now = ats[0] if ats else max(x.now for x in ack_ops)\n",
                "            now = ats[0] if ats else min(x.now for x in ack_ops)  # MUTANT\n",
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_batch_of_acks_is_judged_fresh_at_its_latest_now_once_not_again_at_its_oldest
    Mutant(
        "cert_refine2_prune_ttl_from_the_oldest_signal",
        (
            "trace validation: a prune's signal TTL is recovered from the oldest deleted signal (an "
            "honest prune of signals of two ages is INVALID)"
        ),
        "§refine",
        (
            Edit(
                RECOVERY_PY,
                "            youngest = max(self.world.signals[k].inserted_at",
                "            youngest = min(self.world.signals[k].inserted_at",
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_prune_of_two_signals_of_different_ages_is_explained_by_the_youngest_ones_ttl
    Mutant(
        "cert_refine2_errors_compared_by_prefix",
        (
            "trace validation: error lists compare pairwise up to the shorter (an ack that also appends "
            "an error entry is VALID)"
        ),
        "§refine",
        (
            Edit(
                WORLD_PY,
                (
                    '    if column == "errors" and isinstance(x, list) and isinstance(y, list) and len(x) == len(y):\n'
                    "        return all(_same_entry(p, q) for p, q in zip(x, y, strict=True))\n"
                ),
                (
                    '    if column == "errors" and isinstance(x, list) and isinstance(y, list):  # MUTANT\n'
                    "        return all(_same_entry(p, q) for p, q in zip(x, y))\n"
                ),
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_success_ack_that_also_appends_an_error_entry_is_invalid
    Mutant(
        "cert_refine2_children_delivery_instant_ignored",
        (
            "trace validation: a $children delivery compares by scope and payload only (stamped at "
            "another instant than its ack: VALID)"
        ),
        "§refine",
        (
            Edit(
                WORLD_PY,
                "    if (a.scope, a.inserted_at) != (b.scope, b.inserted_at):\n",
                "    if a.scope != b.scope:  # MUTANT\n",
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_children_delivery_stamped_at_another_instant_than_its_ack_is_invalid
    Mutant(
        "cert_replay2_signal_gap_awaiters_untainted",
        (
            "replay: a gap on a signal does not taint the jobs parked on it (a finding about them is "
            "reported: an honest worker is INVALID)"
        ),
        "§replay",
        (
            Edit(
                REPLAYER_PY,
                "                self.tainted |= self.awaits.get(key, set())\n",
                "                pass  # MUTANT\n",
            ),
        ),
        suite=REPLAY2_SUITE,
    ),  # killed by test_refine_edges::test_a_gap_on_a_signal_taints_the_jobs_awaiting_it
    Mutant(
        "cert_replay2_capture_errors_ignored",
        "replay: capture errors do not make the replay unknown (VALID)",
        "§replay",
        (
            Edit(
                REPLAY_PY,
                '        or r.capture.get("errors")\n        or r.capture.get("truncated")\n',
                '        or r.capture.get("truncated")  # MUTANT\n',
            ),
        ),
        suite=REPLAY2_SUITE,
    ),  # killed by test_refine_edges::test_a_replay_whose_capture_reported_errors_is_unknown_not_valid
    Mutant(
        "cert_replay2_step_costs_not_summed",
        (
            "replay: a transaction's journaled step costs are not summed per job (two costed steps in "
            "one transaction: an honest spend is illegal)"
        ),
        "§replay",
        (
            Edit(
                REPLAYER_PY,
                '                costs[inserted["job_id"]] = (u + inserted["usd_micros"], t + inserted["tokens"])\n',
                (
                    '                costs[inserted["job_id"]] = (inserted["usd_micros"], inserted["tokens"])  '
                    "# MUTANT\n"
                ),
            ),
        ),
        suite=REPLAY2_SUITE,
    ),  # killed by test_refine_edges::test_two_costed_steps_journaled_in_one_transaction_account_for_the_spend_together
    Mutant(
        "cert_refine2_awaiters_not_in_the_substate",
        (
            "trace validation: the jobs parked on a delivered signal are not in the model's sub-state "
            "(a delivery that wakes nobody is VALID)"
        ),
        "§refine",
        (
            Edit(
                WORLD_PY,
                "        for k in list(keys):  # every awaiter of a signal in play is woken by its delivery\n",
                "        for k in ():  # MUTANT\n",
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_signal_delivered_without_waking_the_job_parked_on_it_is_invalid
    Mutant(
        "cert_refine2_reclaim_mask_misses_a_lease_ending_at_now",
        (
            "trace validation: a lease ending exactly at the sweep's now is not hidden from the model's "
            "sweep (an honest sweep that passed it over is INVALID)"
        ),
        "§refine",
        (
            Edit(
                VALIDATOR_PY,
                "j.lease_until is not None and j.lease_until <= op.now:\n",
                "j.lease_until is not None and j.lease_until < op.now:  # MUTANT\n",
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_sweep_that_passes_over_a_lease_expiring_exactly_at_its_now_is_explained
    Mutant(
        "cert_refine2_p11_from_the_last_sigterm",
        "refine P11: a node signalled twice is judged from its last SIGTERM (claims between the two pass)",
        "§refine P11",
        (
            Edit(
                WORLD_PY,
                '                terms.setdefault(str(r["node"]), float(r["t"]))\n',
                '                terms[str(r["node"])] = float(r["t"])  # MUTANT\n',
            ),
        ),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_claim_after_a_second_sigterm_of_the_node_counts_from_the_first
    Mutant(
        "cert_refine2_zero_lease_claim_crashes",
        (
            "trace validation: a claim whose lease ends at its own now reaches the model, which raises: "
            "the validation crashes instead of INVALID"
        ),
        "§refine",
        (Edit(RECOVERY_PY, "            if lease_until <= now:\n", "            if lease_until < now:  # MUTANT\n"),),
        suite=REFINE2_SUITE,
    ),  # killed by test_refine_edges::test_a_claim_whose_lease_ends_at_its_own_now_is_unexplained_not_a_crash
)
