"""Mutants of the harness the certifier's verdict rests on, found by a second mutation hunt over it (issue 54, hunt
J): the fault log read as a timeline (soak/judges/inputs.py `Timeline`), the fault injection and its log
(soak/faults/), the driver's ledger, step samples and scenario intents (soak/workload/), the fault log read back
(soak/record/history.py) and a torn capture file (soak/record/capture.py) — bugs the existing tests let pass.
Each is killed by tests/test_harness_edges.py (pure, or with `sleep` processes and a local echo server; a few
seconds in all), which leads its suite here; docs/mutants.md "Mutation hunts" describes the method.
"""

from __future__ import annotations

from properties.mutants.kinds import Edit, Mutant

INPUTS_PY = "soak/judges/inputs.py"
WORKERS_PY = "soak/faults/workers.py"
SCHEDULE_PY = "soak/faults/schedule.py"
NETFAULTS_PY = "soak/faults/netfaults.py"
NEMESIS_PY = "soak/faults/nemesis.py"
ZOMBIES_PY = "soak/faults/zombies.py"
PROXY_PY = "soak/faults/proxy.py"
DRIVER_PY = "soak/workload/driver.py"
SCENARIOS_PY = "soak/workload/scenarios.py"
HISTORY_PY = "soak/record/history.py"
CAPTURE_PY = "soak/record/capture.py"

EDGES = "tests/test_harness_edges.py"
# the hunt's file first (the runner stops at the first failure), then the existing tests of the same layer;
# tests/test_harness_honesty.py was left out of these suites: its SIGSTOP test failed now and then on a loaded
# machine (a worker process caught in uninterruptible sleep, 'D', past the test's wait; it now accepts 'D' with
# the SIGSTOP queued), and a suite that fails its unmutated baseline makes every mutant of it unjudged
TIMELINE2_SUITE = (EDGES, "tests/test_soak_netfault_checks.py", "tests/test_timing_judges.py")
FAULTS2_SUITE = (EDGES, "tests/test_faults.py", "tests/test_soak_fault_rates.py", "tests/test_soak_zombies.py")
PROXY2_SUITE = (EDGES, "tests/test_soak_proxy.py")
WORKLOAD2_SUITE = (EDGES, "tests/test_soak_outcomes.py", "tests/test_soak_checker.py")
RECORD2_SUITE = (EDGES, "tests/test_history_merge.py", "tests/test_soak_memory.py")
CAPTURE2_SUITE = (EDGES, "tests/test_history_capture.py")

HARNESS_HUNT: tuple[Mutant, ...] = (
    Mutant(
        "cert_harness2_stall_heal_keeps_the_excuse",
        "timeline: a stall's net_heal does not end it (the node is excused, as partitioned, to the end of the run)",
        "§harness timeline",
        (
            Edit(
                INPUTS_PY,
                'elif kind == "net_heal" and e.get("fault") in ("partition", "stall") and self.isolated[e["slot"]]:',
                'elif kind == "net_heal" and e.get("fault") == "partition" and self.isolated[e["slot"]]:',
            ),
        ),
        suite=TIMELINE2_SUITE,
    ),  # killed by test_harness_edges::test_a_stall_of_a_route_excuses_its_node_only_until_its_heal
    Mutant(
        "cert_harness2_cut_end_closes_another_nodes_cut",
        "timeline: a cut_end closes the latest open cut of any node (another node's cut ends early, its own lasts on)",
        "§harness timeline",
        (
            Edit(
                INPUTS_PY,
                '                    if c[0] == e.get("node") and c[2] == float("inf"):',
                '                    if c[2] == float("inf"):',
            ),
        ),
        suite=TIMELINE2_SUITE,
    ),  # killed by test_harness_edges::test_the_end_of_a_cut_ends_only_the_cut_of_its_own_node
    Mutant(
        "cert_harness2_route_windows_without_the_cut_of_every_node",
        "timeline: a cut of every node is no fault of each node's route (a claim it held is blamed on the worker: P11, claim order)",
        "§harness timeline",
        (
            Edit(
                INPUTS_PY,
                "            *((a, b) for n, a, b in self.cuts if n is None or n == node),",
                "            *((a, b) for n, a, b in self.cuts if n == node),",
            ),
        ),
        suite=TIMELINE2_SUITE,
    ),  # killed by test_harness_edges::test_a_cut_of_every_node_is_a_cut_of_each_node
    Mutant(
        "cert_harness2_cut_during_without_the_cut_of_every_node",
        "timeline: a cut of every node does not excuse a node's lease expiry or drain (P4, P11 judged through it)",
        "§harness timeline",
        (
            Edit(
                INPUTS_PY,
                "        return any((n is None or n == node) and a <= t1 and b >= t0 for n, a, b in self.cuts)",
                "        return any(n == node and a <= t1 and b >= t0 for n, a, b in self.cuts)",
            ),
        ),
        suite=TIMELINE2_SUITE,
    ),  # killed by test_harness_edges::test_a_cut_of_every_node_is_a_cut_of_each_node
    Mutant(
        "cert_harness2_node_ends_at_its_last_ending_event",
        "timeline: a node ends at its last ending event (a drained node SIGTERMed again at the run's end counts as running in between)",
        "§harness timeline",
        (Edit(INPUTS_PY, "                self.ended.setdefault(node, t)", "                self.ended[node] = t"),),
        suite=TIMELINE2_SUITE,
    ),  # killed by test_harness_edges::test_a_node_ends_at_its_first_ending_event_not_its_last
    Mutant(
        "cert_harness2_sigcont_closes_the_first_stop",
        "timeline: a SIGCONT closes the node's first stop, not its latest (a node stopped twice is excused to the end of the run)",
        "§harness timeline",
        (
            Edit(
                INPUTS_PY,
                'elif kind == "worker_cont" and self.stopped[node]:\n                self.stopped[node][-1][1] = t',
                'elif kind == "worker_cont" and self.stopped[node]:\n                self.stopped[node][0][1] = t',
            ),
        ),
        suite=TIMELINE2_SUITE,
    ),  # killed by test_harness_edges::test_every_sigstop_of_a_node_ends_at_its_own_sigcont
    Mutant(
        "cert_harness2_timeline_in_file_order",
        "timeline: the fault log is read in file order, not time order (a SIGCONT written before its SIGSTOP leaves the stop open)",
        "§harness timeline",
        (Edit(INPUTS_PY, 'for e in sorted(history, key=lambda e: float(e["t"])):', "for e in history:"),),
        suite=TIMELINE2_SUITE,
    ),  # killed by test_harness_edges::test_the_timeline_orders_the_fault_log_by_time_not_by_line
    Mutant(
        "cert_harness2_drained_logged_while_the_group_runs",
        "worker_drained is logged when the shell exits, while the worker it started still drains (P11's window closes early)",
        "§harness faults",
        (
            Edit(
                WORKERS_PY,
                (
                    "            while group_alive(proc.pid) and time.monotonic() - t0 < DRAIN_WAIT_S:\n"
                    "                time.sleep(0.05)  # what the command started (a compound command's worker) drains too\n"
                    "            if group_alive(proc.pid):\n"
                    "                raise subprocess.TimeoutExpired(self.cmd, DRAIN_WAIT_S)\n"
                ),
                "",
            ),
        ),
        suite=FAULTS2_SUITE,
    ),  # killed by test_harness_edges::test_a_drain_is_logged_drained_only_once_every_process_of_the_worker_has_exited
    Mutant(
        "cert_harness2_fault_returning_none_not_counted",
        "a fault whose fire() returns None (a failover) counts as no target: not injected, fired again after RETRY_S",
        "§harness faults",
        (Edit(SCHEDULE_PY, "happened = fire() is not False", "happened = bool(fire())"),),
        suite=FAULTS2_SUITE,
    ),  # killed by test_harness_edges::test_a_fault_whose_fire_returns_none_happened_and_is_counted_once
    Mutant(
        "cert_harness2_partition_of_the_last_connected_worker",
        "a partition or stall may isolate the last worker that reaches the database",
        "§harness faults",
        (
            Edit(
                NETFAULTS_PY,
                "if isolating and len([s for s in running if s.index not in self.isolated]) < 2:",
                "if isolating and len([s for s in running if s.index not in self.isolated]) < 1:",
            ),
        ),
        suite=FAULTS2_SUITE,
    ),  # killed by test_harness_edges::test_an_isolating_fault_never_takes_the_last_worker_that_reaches_the_database
    Mutant(
        "cert_harness2_end_of_run_sigterm_is_a_self_exit",
        "the end-of-run SIGTERM is not marked expected: every worker's exit is logged worker_exit and P1 fails an honest run",
        "§harness faults",
        (Edit(WORKERS_PY, '                    slot.expected_end = "term"\n', ""),),
        suite=FAULTS2_SUITE,
    ),  # killed by test_harness_edges::test_the_end_of_run_sigterm_is_no_self_exit_of_the_worker
    Mutant(
        "cert_harness2_drained_worker_is_a_self_exit",
        "a SIGTERM drain is not marked expected: the drained worker's exit is logged worker_exit and P1 fails it",
        "§harness faults",
        (Edit(WORKERS_PY, '            slot.expected_end = "drain"\n', ""),),
        suite=FAULTS2_SUITE,
    ),  # killed by test_harness_edges::test_a_drained_worker_is_no_self_exit_of_the_worker
    Mutant(
        "cert_harness2_sigstop_of_the_last_running_worker",
        "a plain SIGSTOP may freeze the last running worker",
        "§harness faults",
        (
            Edit(
                NEMESIS_PY,
                "            if not slots or len(running) < 2 or self.halt.is_set():  # keep at least one worker running\n",
                "            if not slots or len(running) < 1 or self.halt.is_set():  # keep at least one worker running\n",
            ),
        ),
        suite=FAULTS2_SUITE,
    ),  # killed by test_harness_edges::test_a_plain_sigstop_never_freezes_the_last_running_worker
    Mutant(
        "cert_harness2_zombie_hold_spares_no_later_attempt",
        "a zombie hold does not spare the nodes running the later attempts (kill -9 ends them: the hold runs to its cap, no duplicate write)",
        "§harness faults",
        (Edit(ZOMBIES_PY, "            spare.update(later_nodes(rows, held))\n", ""),),
        suite=FAULTS2_SUITE,
    ),  # killed by test_harness_edges::test_a_zombie_hold_names_the_nodes_running_the_later_attempts_as_spared
    Mutant(
        "cert_harness2_partition_during_a_connect_forwards",
        "a connection opened as its route was partitioned is forwarded (the partitioned, excused slot still reaches the database)",
        "§harness faults",
        (
            Edit(
                PROXY_PY,
                "            if lst.partitioned:  # partitioned while we connected\n                return\n",
                "            if False:  # partitioned while we connected\n                return\n",
            ),
        ),
        suite=PROXY2_SUITE,
    ),  # killed by test_harness_edges::test_a_connection_partitioned_while_it_connected_forwards_nothing
    Mutant(
        "cert_harness2_cancelled_awaiter_may_succeed",
        "the ledger accepts success of an awaiter the driver cancels and never signals (a worker ignoring the cancel at a park is VALID)",
        "§harness workload",
        (
            Edit(
                DRIVER_PY,
                '"cancelled" if plan == "cancel" else "succeeded",',
                '"cancelled|succeeded" if plan == "cancel" else "succeeded",',
            ),
        ),
        suite=WORKLOAD2_SUITE,
    ),  # killed by test_harness_edges::test_an_awaiter_the_driver_cancels_and_never_signals_is_expected_cancelled_only
    Mutant(
        "cert_harness2_last_attempt_slow_job_any_failure",
        "the ledger accepts any failure of a last-attempt slow job, not only lease_expired (a worker failing it with its own error is VALID)",
        "§harness workload",
        (Edit(DRIVER_PY, '"succeeded|failed:lease_expired",', '"succeeded|failed",'),),
        suite=WORKLOAD2_SUITE,
    ),  # killed by test_harness_edges::test_a_last_attempt_slow_job_may_fail_only_by_its_lease_expiry
    Mutant(
        "cert_harness2_step_sample_compares_seq_only",
        "the step sampler compares seq only: a journaled value rewritten under the same seq is never sampled (I3)",
        "§harness workload",
        (
            Edit(
                DRIVER_PY, "if self.digests.get(key) != (seq, digest):", "if self.digests.get(key, (None,))[0] != seq:"
            ),
        ),
        suite=WORKLOAD2_SUITE,
    ),  # killed by test_harness_edges::test_a_step_sample_records_a_step_whose_value_changed_under_the_same_seq
    Mutant(
        "cert_harness2_lost_wakeup_intent_after_the_ack",
        (
            "the lost wake-up scenario records its intent after the harness's ack (an ack committed as the "
            "connection broke is unattested)"
        ),
        "§harness workload",
        (
            Edit(
                SCENARIOS_PY,
                (
                    '            self.d.history.record("lost_wakeup_intent", parent=parent, children=[job_id])\n'
                    "            row = c.execute(\n"
                ),
                "            row = c.execute(\n",
            ),
            Edit(
                SCENARIOS_PY,
                "            if row:\n                done.append(row[0])\n",
                (
                    '            self.d.history.record("lost_wakeup_intent", parent=parent, children=[job_id])  # MUTANT\n'
                    "            if row:\n"
                    "                done.append(row[0])\n"
                ),
            ),
        ),
        suite=WORKLOAD2_SUITE,
    ),  # killed by test_harness_edges::test_the_lost_wakeup_intent_is_recorded_before_the_harness_acks_the_child
    Mutant(
        "cert_harness2_history_snapshot_keeps_skipped_types",
        "the fault log's snapshot keeps the types it is told to skip (every lease and priority sample in memory and twice in the checker)",
        "§harness record",
        (
            Edit(
                HISTORY_PY,
                'return [e for e in events if e.get("type") not in skip] if skip else list(events)',
                "return list(events)",
            ),
        ),
        suite=RECORD2_SUITE,
    ),  # killed by test_harness_edges::test_a_snapshot_leaves_out_the_event_types_it_is_told_to_skip
    Mutant(
        "cert_harness2_torn_uncompressed_capture_not_truncated",
        "an uncompressed capture file torn inside a record is not truncated (the replay may say valid with transactions lost)",
        "§harness record",
        (
            Edit(
                CAPTURE_PY,
                "        if len(buf) > pos:\n            self.truncated = True\n",
                "        if False:\n            self.truncated = True\n",
            ),
        ),
        suite=CAPTURE2_SUITE,
    ),  # killed by test_harness_edges::test_an_uncompressed_capture_torn_inside_a_record_is_truncated_and_its_replay_unknown
    Mutant(
        "cert_harness2_fault_rates_first_lane_only",
        (
            "the report's injected faults count the first lane (schedule) of a kind only: a run fired by two "
            "lanes reports part of the faults it survived"
        ),
        "§harness report",
        (
            Edit(
                SCHEDULE_PY,
                "injected = sum(s.injected for s in owner.schedules.get(name, ()))",
                "injected = sum(s.injected for s in owner.schedules.get(name, ())[:1])",
            ),
        ),
        suite=("tests/test_soak_fault_rates.py",),
    ),  # killed by test_soak_fault_rates::test_fault_rates_counts_every_lane_of_a_kind
)
