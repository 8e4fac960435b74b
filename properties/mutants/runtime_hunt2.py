"""Mutants of the worker runtime and the Client SDK found by a second mutation hunt over them (issue 54, hunt L):
bugs planted in impl/worker.py (the job-code API), impl/runtime/ (the node, the producer, the ack group, the
executor, transient faults, the configuration), impl/client.py and impl/flag.py that the existing suites of
the layer let pass. Each is killed by tests/test_runtime_edges2.py (most pure: a JobContext over a hand-built
store, a Worker's renew / sweep / prune / refresh over a fake store; a few on a throwaway database; about
five seconds for the file), which leads its suite here; docs/mutants.md "Mutation hunts" describes the method.
"""

from __future__ import annotations

from properties.mutants.kinds import Edit, Mutant

WORKER_PY = "impl/worker.py"
NODE_PY = "impl/runtime/node.py"
PRODUCER_PY = "impl/runtime/producer.py"
ACK_GROUP_PY = "impl/runtime/ack_group.py"
EXECUTOR_PY = "impl/runtime/executor.py"
FAULTS_PY = "impl/runtime/faults.py"
CONFIG_PY = "impl/runtime/config.py"
CLIENT_PY = "impl/client.py"
FLAG_PY = "impl/flag.py"

RUNTIME2_SUITE = ("tests/test_runtime_edges2.py", "tests/test_runtime_edges.py")

RUNTIME_HUNT2: tuple[Mutant, ...] = (
    Mutant(
        "hunt2_rt_sleep_resumed_at_its_wake_time_parks_again",
        (
            "ctx.sleep compares the journaled wake time with now strictly: a resume whose clock reads "
            "exactly the wake time parks the job for another whole duration"
        ),
        "§6",
        (
            Edit(
                WORKER_PY,
                "datetime.fromisoformat(decode(hit.value)) <= now",
                "datetime.fromisoformat(decode(hit.value)) < now",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_sleep_resumed_exactly_at_its_wake_time_returns_and_does_not_park_again
    Mutant(
        "hunt2_rt_step_returns_its_own_value_not_the_journaled_one",
        (
            "a step whose journal INSERT lost to another attempt's first write returns the value this "
            "attempt computed, not the journaled one (two values for one step)"
        ),
        "§8.2",
        (Edit(WORKER_PY, "        return decode(recorded.value)\n", "        return value\n"),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_step_whose_journal_write_lost_to_another_attempt_returns_the_journaled_value
    Mutant(
        "hunt2_rt_zero_timeout_parks_forever",
        (
            "an await with timeout=0 is taken as no timeout: the job parks with no deadline (forever) "
            "instead of a deadline of now"
        ),
        "§8.4",
        (
            Edit(
                WORKER_PY,
                "    if timeout is None:\n        return None\n    return now +",
                "    if not timeout:\n        return None\n    return now +",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_an_await_with_a_zero_timeout_parks_with_a_deadline_of_now_not_forever
    Mutant(
        "hunt2_rt_signal_timeout_matched_by_name_only",
        (
            "await_signal tells a timeout by the await's name alone: a job that timed out on a signal "
            "in one scope raises SignalTimeout for an await of the same name in another scope instead "
            "of parking"
        ),
        "§sdk-guide 10",
        (
            Edit(
                WORKER_PY,
                "if (self.job.await_scope, self.job.await_name) == (scope, name):",
                "if self.job.await_name == name:",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_job_that_timed_out_on_one_scope_parks_on_a_signal_of_the_same_name_in_another
    Mutant(
        "hunt2_rt_snooze_duration_from_the_attempts_start",
        (
            "Snooze(timedelta) counts from the attempt's started_at, not the ack's now: a long job "
            "snoozed for 5 minutes is ready at once (a time already past)"
        ),
        "§7",
        (
            Edit(
                WORKER_PY,
                "until = exc.until if isinstance(exc.until, datetime) else now + exc.until",
                "until = exc.until if isinstance(exc.until, datetime) else ctx.job.started_at + exc.until",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_snooze_for_a_duration_counts_from_now_not_from_the_attempts_start
    Mutant(
        "hunt2_rt_retry_backoff_of_the_next_attempt",
        (
            "a raise is retried after the kind's backoff for the next attempt, not the one that failed "
            "(the first retry waits 2 s instead of 1 s, every delay doubled)"
        ),
        "§7",
        (Edit(WORKER_PY, "kind.backoff.retry_at(now, ctx.attempt))", "kind.backoff.retry_at(now, ctx.attempt + 1))"),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_raise_is_retried_after_the_kinds_backoff_for_the_attempt_that_failed
    Mutant(
        "hunt2_rt_chunk_size_zero_accepted",
        ("Registry.kind accepts chunk size 0 (the check is size < 0): a chunk kind whose chunks never fill"),
        "§ops chunks",
        (Edit(WORKER_PY, "if size < 1 or gather < 0:", "if size < 0 or gather < 0:"),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_chunk_size_below_one_is_refused_at_registration
    Mutant(
        "hunt2_rt_chunk_job_missing_from_results_succeeds",
        ("a job missing from a chunk function's result dict succeeds with a null result instead of failing"),
        "§ops chunks",
        (
            Edit(
                NODE_PY,
                "results = [returned.get(c.id, missing) for c in contexts]",
                "results = [returned.get(c.id) for c in contexts]",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_job_missing_from_a_chunks_results_fails_and_the_others_succeed
    Mutant(
        "hunt2_rt_chunk_longer_result_list_not_refused",
        (
            "a chunk function returning a list longer than its chunk is not refused (the check is len "
            "< contexts): the acks' strict zip then raises, nothing is acked and every job of the "
            "chunk waits out its lease instead of failing"
        ),
        "§ops chunks",
        (Edit(NODE_PY, "if len(results) != len(contexts):", "if len(results) < len(contexts):"),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_chunk_function_returning_more_results_than_jobs_fails_the_chunk
    Mutant(
        "hunt2_rt_recovery_adopts_a_lease_a_claim_in_flight_may_hold",
        (
            "claim recovery adopts a lease ending exactly at the oldest in-flight claim's start + ttl "
            "(<= for <): a job that claim leased runs twice on the node"
        ),
        "§6",
        (
            Edit(
                NODE_PY,
                "j.lease_until is not None and j.lease_until < limit]",
                "j.lease_until is not None and j.lease_until <= limit]",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_claim_recovery_leaves_a_lease_that_a_claim_in_flight_may_have_taken
    Mutant(
        "hunt2_rt_reconciler_wake_pokes_no_producer",
        (
            "a sweep whose $children reconciler made a parent ready pokes no producer: the parent "
            "waits for the idle poll (operations: releases poke producers instantly)"
        ),
        "§ops wake-ups",
        (Edit(NODE_PY, "if reclaimed.retried or woken.woken:", "if reclaimed.retried:"),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_sweep_whose_reconciler_woke_a_parent_pokes_the_producers
    Mutant(
        "hunt2_rt_every_operational_error_is_an_outage",
        (
            "every transient OperationalError counts as the database unreachable (a deadlock, a lock "
            "timeout, a serialization failure): Connectivity logs an outage and --exit-on-unreachable "
            "counts a deadlock storm against its limit"
        ),
        "§ops retries",
        (Edit(FAULTS_PY, '        return code is None or code[:2] == "08"\n', "        return True\n"),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_deadlock_or_lock_timeout_is_retried_but_is_no_database_outage
    Mutant(
        "hunt2_rt_outage_counted_per_retry",
        (
            "Connectivity counts every retry of an outage as another outage (outages is meant to count "
            "changes, lost then back, never once per retry)"
        ),
        "§ops retries",
        (
            Edit(
                FAULTS_PY,
                "            else:\n                self._log.debug(",
                "            else:\n                self.outages += 1\n                self._log.debug(",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_an_outage_is_counted_once_however_many_retries_it_takes
    Mutant(
        "hunt2_rt_local_poke_before_the_callers_commit",
        (
            "an enqueue on the caller's connection (transactional enqueue) sends its local poke at "
            "once, before the caller committed: a local worker claims before the job is visible, and a "
            "rolled-back enqueue pokes too"
        ),
        "§5.1",
        (Edit(CLIENT_PY, "if self.on_enqueue is not None and conn is None:", "if self.on_enqueue is not None:"),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_an_enqueue_in_the_callers_transaction_sends_no_local_poke
    Mutant(
        "hunt2_rt_workflow_pokes_its_first_members_queue_only",
        (
            "enqueue_workflow pokes only its first member's queue: the ready members of a workflow "
            "spanning queues wait for their producers' idle poll"
        ),
        "§ops wake-ups",
        (
            Edit(
                CLIENT_PY,
                "self._poke(conn, {m.job.queue for m in members})",
                "self._poke(conn, {members[0].job.queue})",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_workflow_over_several_queues_pokes_each_of_them
    Mutant(
        "hunt2_rt_result_awaiter_unregisters_every_awaiter_of_the_job",
        (
            "an await_result that ends unregisters every awaiter of the same job: the others are never "
            "woken by its result notification and wait for the polling floor"
        ),
        "§9.2",
        (
            Edit(
                CLIENT_PY,
                "            if not events:\n                self._waiters.pop(job_id, None)\n",
                "            self._waiters.pop(job_id, None)\n",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_two_awaiters_of_one_job_are_each_woken_after_the_other_gave_up
    Mutant(
        "hunt2_rt_result_listener_reconnect_wakes_nobody",
        (
            "the client's result listener wakes no awaiter after a (re)connect: a result committed "
            "while it was disconnected is found only at the next poll"
        ),
        "§9.2",
        (Edit(CLIENT_PY, "targets = [e for events in self._waiters.values() for e in events]", "targets = []"),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_reconnected_result_listener_wakes_every_awaiter_to_re_read
    Mutant(
        "hunt2_rt_flag_set_racing_the_first_wait_lost",
        (
            "Flag.wait does not carry over a set() that ran while it made its Event: a lease-lost (or "
            "releasing) flag set as an execution starts waiting is lost and the wait runs to its "
            "timeout"
        ),
        "§6",
        (Edit(FLAG_PY, "        if self._set:\n            self._event.set()\n", ""),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_set_that_races_the_first_wait_is_not_lost
    Mutant(
        "hunt2_rt_ack_group_commits_at_its_earliest_clock",
        (
            "a group of acks commits as an AckMany at its earliest ack's clock: the after-terminal "
            "writes (settlement, the parent's $children signal) are stamped before the very acks that "
            "caused them"
        ),
        "§7",
        (
            Edit(
                ACK_GROUP_PY,
                "acks = w.AckMany(max(x.op.now for x in batch),",
                "acks = w.AckMany(min(x.op.now for x in batch),",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_group_of_acks_commits_at_the_latest_of_its_acks_clocks
    Mutant(
        "hunt2_rt_deferred_ack_wait_measured_from_the_newest",
        (
            "AckGroup measures a leaderless deferred ack's wait from the newest deferred ack, not the "
            "oldest: a stream of deferred acks postpones the first one's hand-off behind a long job "
            "indefinitely"
        ),
        "§ops hand-off",
        (
            Edit(
                ACK_GROUP_PY,
                (
                    "                if self.deferred_since is None:\n"
                    "                    self.deferred_since = time.monotonic()\n"
                ),
                "                self.deferred_since = time.monotonic()\n",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_deferred_ack_is_led_once_the_oldest_has_waited_not_the_newest
    Mutant(
        "hunt2_rt_zero_shutdown_grace_refused",
        (
            "WorkerConfig refuses shutdown_grace=0 (the check is <= 0) although its own rule is "
            "shutdown_grace >= 0: a node configured to stop at once cannot start"
        ),
        "§ops shutdown",
        (Edit(CONFIG_PY, "self.shutdown_grace < 0", "self.shutdown_grace <= 0"),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_shutdown_grace_of_zero_is_a_valid_configuration
    Mutant(
        "hunt2_rt_recovery_census_known_only_after_it",
        (
            "claim recovery reads the registered executions only after the census: a job acked and "
            "forgotten while the census was read still shows its lease and is adopted as an orphan, "
            "run again on the node"
        ),
        "§6",
        (
            Edit(
                NODE_PY,
                "            known = {(i, c.attempt) for i, c in self._running_contexts().items()}\n",
                "            known = set()\n",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_claim_recovery_never_adopts_an_execution_that_finished_while_the_census_was_read
    Mutant(
        "hunt2_rt_renewal_flags_an_execution_that_finished_meanwhile",
        (
            "a renewal flags as lost every listed execution whose lease it did not find, also one that "
            "finished and acked between the listing and the renewal: a spurious lease.lost event"
        ),
        "§6",
        (
            Edit(
                NODE_PY,
                (
                    "            if registered.get(job_id) is not ctx:\n"
                    "                continue  # it finished (and acked) between the listing and the renewal\n"
                ),
                "",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_renewal_that_crossed_an_executions_end_flags_nothing
    Mutant(
        "hunt2_rt_listener_stops_when_any_queue_is_saturated",
        (
            "the pg_notify listener stops listening as soon as any queue is saturated, not only when "
            "every queue is: a node's other queues hear of new jobs only at their poll"
        ),
        "§ops wake-ups",
        (
            Edit(
                NODE_PY,
                "return not all(p.saturated() for p in self.producers.values())",
                "return not any(p.saturated() for p in self.producers.values())",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_the_listener_listens_while_any_queue_has_a_free_slot
    Mutant(
        "hunt2_rt_queue_row_lowering_the_limit_not_applied",
        (
            "a belay_queues row that lowers a queue's limit max is merged but the node's running limit "
            "is not clamped to it: a busy queue keeps running more jobs than the operator's limit"
        ),
        "§6",
        (
            Edit(
                NODE_PY,
                "producer.limit = min(max(producer.limit, opts.limit_min), opts.limit_max)",
                "producer.limit = max(producer.limit, opts.limit_min)",
            ),
        ),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_queue_row_that_lowers_limit_max_clamps_the_running_limit
    Mutant(
        "hunt2_rt_parked_job_reported_as_an_exception",
        (
            "an execution that parked (sleep, await) is reported as job.exception with state parked, "
            "not job.stop: every durable sleep and await counts as a failure in telemetry"
        ),
        "§ops telemetry",
        (Edit(NODE_PY, 'if error is not None and state != "parked":', "if error is not None:"),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_a_job_that_parks_is_reported_as_a_stop_not_as_an_exception
    Mutant(
        "hunt2_rt_claim_event_reports_the_demand_as_claimed",
        (
            "the claim telemetry event reports the demand as the jobs claimed: a queue drained dry "
            "looks saturated to every metric built on it"
        ),
        "§ops telemetry",
        (Edit(PRODUCER_PY, '"claimed": len(jobs),', '"claimed": demand,'),),
        suite=RUNTIME2_SUITE,
    ),  # killed by test_runtime_edges2::test_the_claim_event_reports_the_jobs_claimed_not_the_demand
)
