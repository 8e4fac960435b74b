"""Mutants of impl/ found by issue 54's mutation hunts (seventh session): bugs planted in the store, the worker
runtime, the HTTP API and the operator's surface that the suites of their layer let pass. Each is killed by
the test its hunt added (tests/test_store_edges.py, tests/test_runtime_edges.py, tests/test_surface_edges.py),
which leads its layer's suite here; docs/mutants.md "Mutation hunts" lists what was planted and what survived.
"""

from __future__ import annotations

from properties.mutants.kinds import STORE_SUITE, Edit, Mutant

STORE_EDGES_SUITE = ("tests/test_store_edges.py", *STORE_SUITE)
RUNTIME_EDGES_SUITE = ("tests/test_runtime_edges.py", "tests/test_faults.py", "tests/test_runtime.py")
SURFACE_EDGES_SUITE = ("tests/test_surface_edges.py", "tests/test_http_api.py", "tests/test_cli_ops.py")

HUNTS: tuple[Mutant, ...] = (
    Mutant(
        "runtime_backoff_without_jitter",
        (
            "the transient-fault retry sleeps its nominal delays: a fleet retries a"
            " restarted database in lockstep (sdk-guide §7: jittered)"
        ),
        "§ops retries",
        (
            Edit(
                "impl/runtime/faults.py",
                "            sleep(random.uniform(0, delay) if delay > policy.initial else delay)\n",
                "            sleep(delay)  # MUTANT: no jitter\n",
            ),
        ),
        suite=RUNTIME_EDGES_SUITE,
    ),
    Mutant(
        "runtime_client_errors_transient",
        "every psycopg error without a SQLSTATE (a programming error too) is retried as transient",
        "§ops retries",
        (
            Edit(
                "impl/runtime/faults.py",
                "            return isinstance(exc, psycopg.OperationalError)\n",
                "            return True  # MUTANT: any client-side error without SQLSTATE\n",
            ),
        ),
        suite=RUNTIME_EDGES_SUITE,
    ),
    Mutant(
        "runtime_lock_timeout_permanent",
        "lock_not_available (55P03, a lock_timeout) is permanent, not retried (sdk-guide §7 lists it)",
        "§ops retries",
        (Edit("impl/runtime/faults.py", '    "55P03",  # lock_not_available\n', ""),),
        suite=RUNTIME_EDGES_SUITE,
    ),
    Mutant(
        "runtime_saturated_limit_decays",
        "a queue whose every slot is busy shrinks its limit (only an idle queue decays)",
        "§6",
        (
            Edit(
                "impl/runtime/producer.py",
                "            elif claimed == 0 and not self.running and self.limit > lo:\n",
                "            elif claimed == 0 and self.limit > lo:  # MUTANT\n",
            ),
        ),
        suite=RUNTIME_EDGES_SUITE,
    ),
    Mutant(
        "runtime_chunk_acks_with_the_first_attempt",
        "a chunk acks every job with the first job's attempt (a reclaimed job's ack is fenced out)",
        "§7",
        (
            Edit(
                "impl/runtime/node.py",
                "                    acks.append(w.Ack(now, ctx.id, ctx.attempt, outcome))\n",
                "                    acks.append(w.Ack(now, ctx.id, contexts[0].attempt, outcome))  # MUTANT\n",
            ),
        ),
        suite=RUNTIME_EDGES_SUITE,
    ),
    Mutant(
        "runtime_await_children_leaves_releasing",
        (
            "await_children that returns without parking leaves the attempt marked"
            " releasing: a later lost lease is not flagged"
        ),
        "§8.4",
        (
            Edit(
                "impl/worker.py",
                "            self.releasing.clear()  # no park: the attempt runs on under its lease\n",
                "            pass  # MUTANT\n",
            ),
        ),
        suite=RUNTIME_EDGES_SUITE,
    ),
    Mutant(
        "runtime_call_deadline_without_floor",
        "the default call deadline loses its 2 s floor (docs/connections.md: max(ttl/4, 2 s))",
        "§ops connections",
        (
            Edit(
                "impl/runtime/node.py",
                (
                    "call_timeout = max(config.lease_ttl / 4, 2.0) if config.call_timeout is None"
                    " else config.call_timeout"
                ),
                (
                    "call_timeout = config.lease_ttl / 4 if config.call_timeout is None else"
                    " config.call_timeout  # MUTANT"
                ),
            ),
        ),
        suite=RUNTIME_EDGES_SUITE,
    ),
    Mutant(
        "runtime_sighup_not_a_drain",
        "SIGHUP is not turned into a drain: its default action kills the node mid-job",
        "§ops shutdown",
        (
            Edit(
                "impl/runtime/termination.py",
                "        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n",
                "        for signum in (signal.SIGTERM, signal.SIGINT):  # MUTANT: SIGHUP not drained\n",
            ),
        ),
        suite=RUNTIME_EDGES_SUITE,
    ),
    Mutant(
        "runtime_no_budget_check_before_success",
        ("no budget check before a success ack: a rerun that only replays a crossing journal succeeds (§8.2)"),
        "§8.2",
        (
            Edit(
                "impl/runtime/node.py",
                "            if job.budget_usd_micros is not None or job.budget_tokens is not None:\n",
                "            if False:  # MUTANT: no budget check before a budgeted job succeeds\n",
            ),
        ),
        suite=RUNTIME_EDGES_SUITE,
    ),
    Mutant(
        "store_signal_ttl_boundary_inclusive",
        "prune deletes a signal exactly signal_ttl old (not yet past its TTL)",
        "§8.7",
        (
            Edit(
                "impl/store/sql/worker.sql",
                "DELETE FROM {signals} WHERE inserted_at < %(before)s",
                "DELETE FROM {signals} WHERE inserted_at <= %(before)s",
            ),
        ),
        suite=STORE_EDGES_SUITE,
    ),
    Mutant(
        "store_partitioned_claim_overwrites_started_at",
        "a partitioned claim overwrites started_at instead of keeping the first",
        "§6",
        (
            Edit(
                "impl/store/sql/worker.sql",
                ("started_at = COALESCE(started_at, %(now)s)\nWHERE id = ANY(%(ids)s)\nRETURNING"),
                ("started_at = %(now)s\nWHERE id = ANY(%(ids)s)\nRETURNING"),
            ),
        ),
        suite=STORE_EDGES_SUITE,
    ),
    Mutant(
        "store_claim_waits_on_locked_rows",
        (
            "the plain claim's ready scan is FOR UPDATE without SKIP LOCKED: a claim waits"
            " on a row another transaction holds"
        ),
        "§6",
        (
            Edit(
                "impl/store/sql/worker.sql",
                (
                    "    ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC\n"
                    "    LIMIT %(take)s\n"
                    "    FOR UPDATE SKIP LOCKED\n"
                    "), due AS"
                ),
                (
                    "    ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC\n"
                    "    LIMIT %(take)s\n"
                    "    FOR UPDATE\n"
                    "), due AS"
                ),
            ),
        ),
        suite=STORE_EDGES_SUITE,
    ),
    Mutant(
        "store_due_scan_latest_first",
        (
            "the due scan of awaiting jobs is ordered ready_at DESC under its LIMIT: a small"
            " claim takes a later deadline"
        ),
        "§6",
        (
            Edit(
                "impl/store/sql/worker.sql",
                (
                    "    WHERE queue = %(queue)s AND state = 'awaiting' AND ready_at <= %(now)s\n"
                    "    ORDER BY priority ASC, ready_at ASC, id ASC\n"
                ),
                (
                    "    WHERE queue = %(queue)s AND state = 'awaiting' AND ready_at <= %(now)s\n"
                    "    ORDER BY priority ASC, ready_at DESC, id ASC\n"
                ),
            ),
        ),
        suite=STORE_EDGES_SUITE,
    ),
    Mutant(
        "store_partitioned_due_exclusive",
        "a partitioned claim does not take an awaiting job due exactly now",
        "§6",
        (
            Edit(
                "impl/store/sql/worker.sql",
                "           OR (state = 'awaiting' AND ready_at <= %(now)s))\n",
                "           OR (state = 'awaiting' AND ready_at < %(now)s))\n",
            ),
        ),
        suite=STORE_EDGES_SUITE,
    ),
    Mutant(
        "http_cancelled_task_listed_failed",
        ("a task cancelled with its workflow run is listed as failed, not canceled (the OpenAPI's task status)"),
        "§http",
        (
            Edit(
                "impl/http/sql.py",
                "WHEN j.state = 'cancelled' THEN 'canceled'",
                "WHEN j.state = 'cancelled' THEN 'failed'",
            ),
        ),
        suite=SURFACE_EDGES_SUITE,
    ),
    Mutant(
        "http_run_two_claims_ahead_is_409",
        "a run id two claims ahead of a never-claimed task answers 409 STALE_RUN, not 404",
        "§http",
        (Edit("impl/http/base.py", 'ref.attempt > row["attempt"] + 1:', 'ref.attempt > row["attempt"] + 2:'),),
        suite=SURFACE_EDGES_SUITE,
    ),
    Mutant(
        "http_workflow_run_failed_with_live_tasks",
        "a workflow run can be marked failed while it still has unfinished tasks (409 expected)",
        "§http",
        (
            Edit(
                "impl/http/workflow_runs.py",
                'if status in ("completed", "failed") and live:',
                'if status == "completed" and live:',
            ),
        ),
        suite=SURFACE_EDGES_SUITE,
    ),
    Mutant(
        "http_delete_without_the_token",
        "DELETE no longer needs the bearer token (an anonymous client deletes a queue)",
        "§http",
        (
            Edit(
                "impl/http/hot.py",
                'method not in ("POST", "PUT", "PATCH", "DELETE")',
                'method not in ("POST", "PUT", "PATCH")',
            ),
        ),
        suite=SURFACE_EDGES_SUITE,
    ),
    Mutant(
        "ops_prune_cancelled_on_the_failed_retention",
        "belay prune applies --failed's retention to cancelled jobs (§8.7: per-state retention)",
        "§8.7",
        (
            Edit(
                "impl/ops/cli_queues.py",
                '"cancelled": seconds(cancelled, "--cancelled"),',
                '"cancelled": seconds(failed, "--cancelled"),',
            ),
        ),
        suite=SURFACE_EDGES_SUITE,
    ),
    Mutant(
        "ops_mcp_list_jobs_ignores_queue",
        "the MCP list_jobs tool ignores its queue argument",
        "§ops day-2",
        (Edit("impl/ops/mcp_server.py", "                queue=queue,\n", "                queue=None,\n"),),
        suite=SURFACE_EDGES_SUITE,
    ),
    Mutant(
        "ops_dashboard_tile_queue_unescaped",
        "a dashboard tile writes the queue name unescaped (HTML injection)",
        "§ops dashboard",
        (
            Edit(
                "impl/ops/dashboard/templates/_tiles.html",
                '<section class="tile" data-queue="{{ t.queue }}">',
                '<section class="tile" data-queue="{{ t.queue | safe }}">',
            ),
        ),
        suite=SURFACE_EDGES_SUITE,
    ),
    Mutant(
        "ops_dashboard_backlog_without_held",
        "the dashboard's backlog count leaves out held jobs",
        "§ops dashboard",
        (
            Edit(
                "impl/ops/dashboard/views.py",
                'BACKLOG_STATES = ("ready", "awaiting", "held", "paused")',
                'BACKLOG_STATES = ("ready", "awaiting", "paused")',
            ),
        ),
        suite=SURFACE_EDGES_SUITE,
    ),
    Mutant(
        "ops_list_jobs_limit_below_one",
        "Operator.list_jobs accepts a limit below 1 (an IndexError instead of the refusal)",
        "§ops day-2",
        (Edit("impl/ops/operator.py", "if not 1 <= limit <= 1000:", "if not limit <= 1000:"),),
        suite=SURFACE_EDGES_SUITE,
    ),
)
