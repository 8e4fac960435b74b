"""Mutants of impl/ found by issue 54's second mutation hunt over the HTTP Durable Execution API and the
operator's surface (hunt M): bugs planted in impl/http/, impl/ops/ (the day-2 operator, the MCP server, the
dashboard, the bind checks) and impl/telemetry/ that the existing tests of the layer let pass. Each is
killed by tests/test_surface_edges2.py (pure, or a throwaway database and a served API through the
existing fixtures; about 15 s for the file), which leads its suite here; docs/mutants.md "Mutation hunts"
describes the method.
"""

from __future__ import annotations

from properties.mutants.kinds import Edit, Mutant

EDGES2 = "tests/test_surface_edges2.py"
HTTP2_SUITE = (EDGES2, "tests/test_http_api.py")
OPS2_SUITE = (EDGES2, "tests/test_cli_ops.py")
TELEMETRY2_SUITE = (EDGES2, "tests/test_telemetry.py")
DASHBOARD2_SUITE = (EDGES2, "tests/test_dashboard_robust.py")

RUNS_PY = "impl/http/runs.py"
TASKS_PY = "impl/http/tasks.py"
ERRORS_PY = "impl/http/errors.py"
HTTP_SQL_PY = "impl/http/sql.py"
LOGGER_PY = "impl/telemetry/logger.py"
VIEWS_PY = "impl/ops/dashboard/views.py"

SURFACE_HUNT2: tuple[Mutant, ...] = (
    Mutant(
        "hunt2_sf_runs_listing_limit_not_clamped",
        "GET /runs hands out as many runs as the limit asks for: a limit above 1,000 returns more than 1,000",
        "§http Limits",
        (Edit(RUNS_PY, "        limit = min(limit, MAX_PAGE)\n        found:", "        found:"),),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_a_listing_limit_above_1000_returns_1000
    Mutant(
        "hunt2_sf_runs_cursor_on_the_last_page",
        "GET /runs gives a next_cursor on a page that ends exactly at the last run (the OpenAPI: absent when "
        "there are no more results)",
        "§http Listing",
        (Edit(RUNS_PY, "        if len(found) > limit:\n", "        if len(found) >= limit:\n"),),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_a_page_that_holds_the_last_run_has_no_next_cursor
    Mutant(
        "hunt2_sf_failed_task_attempt_one_past",
        "GET /tasks lists a failed task's attempt as one past its last run (attempt 3 of max_attempts 2)",
        "§http Counting",
        (
            Edit(
                RUNS_PY,
                '"attempt": failures if row["state"] == "failed" and failures else failures + 1,',
                '"attempt": failures + 1,',
            ),
        ),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_a_failed_tasks_attempt_is_its_last_runs
    Mutant(
        "hunt2_sf_utc_offset_added_not_taken_off",
        "an RFC 3339 date-time's UTC offset is added instead of taken off (run_at 14:00+02:00 read as 16:00Z)",
        "§http date-time",
        (Edit(ERRORS_PY, 'sign = 1 if zone[0] == "+" else -1', 'sign = -1 if zone[0] == "+" else 1'),),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_a_run_at_with_a_utc_offset_names_the_same_instant
    Mutant(
        "hunt2_sf_task_due_now_listed_sleeping",
        "GET /tasks lists a task whose wait deadline is exactly now as sleeping, though it is claimable (§6: "
        "ready_at <= now)",
        "§http GET /tasks",
        (
            Edit(
                HTTP_SQL_PY,
                "WHEN j.state = 'awaiting' AND j.ready_at <= %(now)s THEN 'pending'",
                "WHEN j.state = 'awaiting' AND j.ready_at < %(now)s THEN 'pending'",
            ),
        ),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_a_task_whose_wait_deadline_is_now_is_listed_pending
    Mutant(
        "hunt2_sf_held_task_listed_sleeping",
        "GET /tasks lists a held (or paused) job as sleeping instead of pending",
        "§http GET /tasks",
        (
            Edit(
                HTTP_SQL_PY,
                "WHEN j.state IN ('held', 'paused') THEN 'pending'",
                "WHEN j.state IN ('held', 'paused') THEN 'sleeping'",
            ),
        ),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_a_held_job_is_listed_as_a_pending_task
    Mutant(
        "hunt2_sf_sweep_skips_foreign_jobs_it_leased",
        "the HTTP sweep reclaims only jobs with a $http:task step: a job another client enqueued that this "
        "server handed out stays running with its claim expired until some other node reclaims it",
        "§http Runs",
        (Edit(HTTP_SQL_PY, "  AND (j.leased_by = %(node)s\n       OR EXISTS", "  AND (false\n       OR EXISTS"),),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_the_sweep_reclaims_a_job_of_another_client_that_this_server_handed_out
    Mutant(
        "hunt2_sf_json_log_time_local",
        "belay worker --log-format json stamps each line with the host's local time, suffixed Z as if UTC",
        "§ops telemetry",
        (
            Edit(
                LOGGER_PY,
                'time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))',
                'time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created))',
            ),
        ),
        suite=TELEMETRY2_SUITE,
    ),  # killed by test_surface_edges2::test_a_json_log_lines_time_is_utc_whatever_the_local_zone
    Mutant(
        "hunt2_sf_dashboard_authorizer_binds_loopback_only",
        "belay dashboard refuses to bind beyond loopback with an --authorizer and no token (only a token "
        "may open it up)",
        "§ops dashboard",
        (
            Edit(
                "impl/ops/dashboard/auth.py",
                "    if not token and authorizer is None and not is_loopback(host):\n",
                "    if not token and not is_loopback(host):\n",
            ),
        ),
        suite=DASHBOARD2_SUITE,
    ),  # killed by test_surface_edges2::test_a_dashboard_with_an_authorizer_may_bind_beyond_loopback
    Mutant(
        "hunt2_sf_fixed_retry_not_capped",
        "a fixed retry strategy ignores max_seconds: the retry waits base_seconds even when max_seconds is "
        "shorter (only exponential is capped)",
        "§http Timeouts and retries",
        (
            Edit(
                TASKS_PY,
                "            seconds = min(seconds, float(self.max_seconds))",
                '            seconds = min(seconds, float(self.max_seconds)) if self.kind == "exponential" else seconds',
            ),
        ),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_a_fixed_retry_strategy_is_capped_at_max_seconds_too
    Mutant(
        "hunt2_sf_outage_without_retry_after",
        "a request the database could not serve answers 503 DATABASE_UNAVAILABLE without Retry-After: the "
        "client is told to retry but not when",
        "§http errors",
        (Edit("impl/http/hot.py", '            headers={"Retry-After": "1"},\n', ""),),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_a_database_outage_answers_503_with_a_retry_after
    Mutant(
        "hunt2_sf_bearer_scheme_case_sensitive",
        "the bearer token is refused unless the scheme is spelled exactly 'Bearer' (the authentication "
        "scheme is case-insensitive: 'bearer s3cret' is a 401)",
        "§http bearer token",
        (Edit("impl/http/hot.py", 'if scheme.lower() != "bearer" or', 'if scheme != "Bearer" or'),),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_the_bearer_scheme_is_matched_case_insensitively
    Mutant(
        "hunt2_sf_mcp_authorizer_none_allows",
        "an MCP authorizer that returns None (or 0, '') lets the mutation through: only an explicit False "
        "or an exception refuses",
        "§ops day-2 (MCP)",
        (Edit("impl/ops/mcp_server.py", "            if not allowed:\n", "            if allowed is False:\n"),),
        suite=OPS2_SUITE,
    ),  # killed by test_surface_edges2::test_an_mcp_authorizer_that_returns_nothing_refuses_the_mutation
    Mutant(
        "hunt2_sf_prune_stops_after_a_full_batch",
        "Operator.prune (belay prune) stops after its first batch when that batch was full: jobs past their "
        "retention are left for the next prune",
        "§8.7",
        (
            Edit(
                "impl/ops/operator.py",
                "            if len(pruned.jobs) < batch:\n",
                "            if len(pruned.jobs) <= batch:\n",
            ),
        ),
        suite=OPS2_SUITE,
    ),  # killed by test_surface_edges2::test_prune_deletes_in_batches_until_nothing_is_left
    Mutant(
        "hunt2_sf_prune_preview_rate_windows_by_the_hour",
        "belay prune --dry-run counts rate windows older than an hour, while the prune deletes only those "
        "older than a day: the preview says more than the prune then deletes",
        "§8.7",
        (
            Edit(
                "impl/ops/operator.py",
                '"rate_before": now - timedelta(days=1),',
                '"rate_before": now - timedelta(hours=1),',
            ),
        ),
        suite=OPS2_SUITE,
    ),  # killed by test_surface_edges2::test_a_prune_dry_run_counts_the_rate_windows_the_prune_then_deletes
    Mutant(
        "hunt2_sf_events_pruned_despite_a_zero_ttl",
        "the HTTP sweep prunes events past the longest event_ttl_seconds even while a queue's cleanup "
        "policy says 0 (never)",
        "§http Queues (cleanup policy)",
        (Edit("impl/http/service.py", "        if 0 not in ttls:  # events", "        if True:  # events"),),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_events_are_kept_while_any_queues_cleanup_policy_still_wants_them
    Mutant(
        "hunt2_sf_sweep_reclaims_one_batch",
        "one HTTP sweep reclaims a single batch of expired claims even when the batch was full: the rest "
        "stay expired and unclaimable until a later sweep",
        "§http Runs (sweeper)",
        (
            Edit(
                "impl/http/service.py",
                "            if len(retried) + len(failed) < batch:\n",
                "            if len(retried) + len(failed) <= batch:\n",
            ),
        ),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_one_sweep_reclaims_every_expired_claim_and_prunes_every_expired_task_batch_by_batch
    Mutant(
        "hunt2_sf_zero_task_ttl_read_as_the_default",
        "a queue's cleanup policy task_ttl_seconds: 0 (never prune) is read as the 3-day default: finished "
        "tasks are pruned, and GET /queues shows 259200",
        "§http Queues (cleanup policy)",
        (
            Edit(
                "impl/http/base.py",
                '"task_ttl_seconds": given.get("task_ttl_seconds", DEFAULT_TTL),',
                '"task_ttl_seconds": given.get("task_ttl_seconds") or DEFAULT_TTL,',
            ),
        ),
        suite=HTTP2_SUITE,
    ),  # killed by test_surface_edges2::test_a_cleanup_policy_of_zero_never_prunes_finished_tasks
    Mutant(
        "hunt2_sf_replay_after_a_raise_skips_the_rest",
        "belay replay: when the code raises, the journal entries it never asked for are not checked — code "
        "that now raises before journaled steps replays clean (exit 0 instead of 3)",
        "§ops day-2 (replay)",
        (
            Edit(
                "impl/ops/replay.py",
                '            report.notes.append(f"the recorded last error is {last!r}, the replay raised {raised!r}")\n'
                "        _check_rest(ctx, report)\n",
                '            report.notes.append(f"the recorded last error is {last!r}, the replay raised {raised!r}")\n',
            ),
        ),
        suite=(EDGES2, "tests/test_replay.py"),
    ),  # killed by test_surface_edges2::test_code_that_now_raises_before_journaled_steps_it_never_asks_for_is_a_divergence
    Mutant(
        "hunt2_sf_dashboard_filter_case_sensitive",
        "the dashboard's queue filter matches names case-sensitively ('mail' no longer finds 'Mailers')",
        "§ops dashboard",
        (
            Edit(
                VIEWS_PY,
                "kept = [t for t in tiles if needle in t.queue.casefold()]",
                "kept = [t for t in tiles if needle in t.queue]",
            ),
        ),
        suite=DASHBOARD2_SUITE,
    ),  # killed by test_surface_edges2::test_the_queue_filter_matches_names_case_insensitively
    Mutant(
        "hunt2_sf_dashboard_failures_sort_flipped",
        "the dashboard's 'failures' order puts the queues with the fewest failed jobs first",
        "§ops dashboard",
        (
            Edit(
                VIEWS_PY,
                'key=lambda t: (-t.counts.get("failed", 0), t.queue)',
                'key=lambda t: (t.counts.get("failed", 0), t.queue)',
            ),
        ),
        suite=DASHBOARD2_SUITE,
    ),  # killed by test_surface_edges2::test_sorting_queues_by_failures_puts_the_most_failed_first
    Mutant(
        "hunt2_sf_dashboard_doomed_ignores_wf_ignore",
        "the dashboard's workflow DAG draws a cancelled member as doomed by a failed dep it ignores "
        "(wf_ignore disregarded)",
        "§8.3 / §ops dashboard",
        (
            Edit(
                VIEWS_PY,
                'if states.get(dep) in ("failed", "cancelled") and states[dep] not in (m.wf_ignore or ()):',
                'if states.get(dep) in ("failed", "cancelled"):',
            ),
        ),
        suite=DASHBOARD2_SUITE,
    ),  # killed by test_surface_edges2::test_a_cancelled_member_whose_failed_dep_it_ignores_is_not_drawn_as_doomed
    Mutant(
        "hunt2_sf_dashboard_budget_reached_is_over",
        "the dashboard's journal marks a step over budget when its running total only reaches the budget "
        "(§8.2: strictly greater)",
        "§8.2 / §ops dashboard",
        (
            Edit(
                VIEWS_PY,
                "over_budget(usd_total, tokens_total, job.budget_usd_micros, job.budget_tokens),",
                "(job.budget_usd_micros is not None and usd_total >= job.budget_usd_micros) or "
                "(job.budget_tokens is not None and tokens_total >= job.budget_tokens),",
            ),
        ),
        suite=DASHBOARD2_SUITE,
    ),  # killed by test_surface_edges2::test_a_step_whose_running_total_only_reaches_the_budget_is_not_over_it
    Mutant(
        "hunt2_sf_dashboard_doomed_counts_members_that_ran",
        "the dashboard's workflow DAG draws a member an operator cancelled after it had run as doomed by its "
        "failed dep (settlement only dooms members that never ran)",
        "§8.3 / §ops dashboard",
        (
            Edit(
                VIEWS_PY,
                '        if m.state == "cancelled" and m.attempt == 0:\n',
                '        if m.state == "cancelled":\n',
            ),
        ),
        suite=DASHBOARD2_SUITE,
    ),  # killed by test_surface_edges2::test_a_cancelled_member_that_ran_was_not_doomed_by_its_dep
    Mutant(
        "hunt2_sf_journal_without_the_awaited_scope",
        "belay jobs show (Operator.journal) lists only the signals of the job's own scope, not those of the "
        "scope it awaits",
        "§ops day-2",
        (
            Edit(
                "impl/ops/operator.py",
                "        if job.await_scope and job.await_scope not in scopes:\n"
                "            scopes.append(job.await_scope)\n",
                "",
            ),
        ),
        suite=OPS2_SUITE,
    ),  # killed by test_surface_edges2::test_a_jobs_journal_lists_the_signals_of_the_scope_it_awaits
    Mutant(
        "hunt2_sf_worker_fails_on_an_unmigrated_database",
        "belay worker fails at once on a database with no Belay schema yet instead of waiting for the "
        "migration with backoff",
        "§ops worker (docs/python.md)",
        (
            Edit(
                "impl/ops/failures.py",
                'not_yet_migrated = isinstance(cause, IncompatibleSchema) and "no Belay schema" in str(cause)',
                "not_yet_migrated = False",
            ),
        ),
        suite=(EDGES2,),  # test_cli_failures.py starts real worker processes: two minutes of baseline
    ),  # killed by test_surface_edges2::test_belay_worker_waits_for_a_database_not_migrated_yet
)
