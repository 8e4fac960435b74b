"""Which SQL statements the model comparison executes, and how often (issue 32).

Every named block of impl/store/sql/ (`-- name --` in queries.sql, worker.sql, http.sql, ops.sql, dashboard.sql,
dashboard_indexes.sql) and every statement built in Python (`BUILT`) is either executed by
`properties.stateful.BelayMachine` while the model and PostgreSQL run side by side — at least its floor
(`FLOORS`) times in the `ci` profile — or listed in `ELSEWHERE` with the reason it cannot be and the test
that covers it instead. properties/test_statement_coverage.py is the gate; docs/statements.md the table.

Counting: `recording()` wraps `SchemaSQL.q` / `SchemaSQL.qb` (every named statement the store executes is
fetched through one of them immediately before its execute) and impl.store's `_compact_insert` builder,
and counts each fetch while the machine runs. A fetch is an execution: the store never fetches a statement
it does not run.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SQL_DIR = ROOT / "impl" / "store" / "sql"
SQL_FILES = ("queries.sql", "worker.sql", "ops.sql", "http.sql", "dashboard.sql", "dashboard_indexes.sql")
_BLOCK = re.compile(r"^-- ([a-z_]+) --\n", re.MULTILINE)

# Statements built in Python rather than named in impl/store/sql/ (name → where it is built).
BUILT = {
    "store.compact_insert": "impl/store/client_store.py _compact_insert (§5.1's insert, one text per pattern of varying columns)",
    "store.enqueue_solo": "impl/store/client_store.py _enqueue_solo (§5.1's insert of one job and its poke, one statement)",
    "http.expired_http": "impl/http/sql.py expired_http (the HTTP sweeper's §6 reclaim selection)",
    "http.tasks_page": "impl/http/sql.py tasks_page (listTasks)",
}


def inventory() -> dict[str, str]:
    """{statement name: the file that defines it} for every named block and built statement."""
    out: dict[str, str] = {}
    for filename in SQL_FILES:
        for name in _BLOCK.findall((SQL_DIR / filename).read_text(encoding="utf-8")):
            out[name] = filename
    for name, where in BUILT.items():
        out[name] = where.split()[0]
    return out


# --- the floors: executions under the comparison in the ci profile (200 examples × ≤50 steps) -----------
#
# Each floor is a third of the count measured in the ci profile (docs/statements.md), so that the
# gate trips when a generator change stops reaching a path, not when a count drifts a little. The batched
# forms' floors are at least their single-row forms' (issue 32: the batched and chunked paths are reached
# as often as the single-row ones).
FLOORS: dict[str, int] = {  # measured in the ci profile (docs/statements.md), floor = count // 3
    "ack_cancel": 138,
    "ack_claim_solo": 2,  # also driven directly: properties/test_ack_claim_solo.py
    "ack_error": 111,
    "ack_snooze": 46,
    "ack_succeed": 46,
    "ack_succeed_many": 185,
    "ack_succeed_many_same": 288,
    "ack_succeed_solo": 49,
    "add_spend": 7,
    "cancel_parked": 5,
    "children_states": 1,
    "claim_partitioned": 5,
    "claim_plain": 770,
    "claim_update": 3,
    "clear_signal": 5,
    "cron_rows": 98,
    "doom_held": 12,
    "duplicate_holders": 77,
    "expired_leases": 77,
    "fence": 44,
    "fence_check": 1,
    "insert_event": 157,
    "find_event": 157,  # every emit rule retries its emit once (properties/stateful.py `emit`)
    "insert_staged_jobs": 7,
    "insert_step": 21,
    "job_budget": 7,
    "job_header": 308,
    "job_state": 9,
    "live_running": 11,
    "lock_job_budget": 7,
    "lock_job_row": 165,
    "lock_job_skip_locked": 93,
    "lock_queue": 37,
    "lock_running": 16,
    "lock_scope": 403,
    "lock_workflow": 823,
    "meta": 4494,
    "missing_deps": 1,
    "next_job_ids": 739,
    "notify": 1003,
    "notify_results": 575,
    "park_awaiting": 10,
    "park_ready": 13,
    "prune_jobs": 44,
    "prune_rate": 44,
    "prune_signals": 26,
    "put_cron": 51,
    "put_queue": 28,
    "rate_counts": 20,
    "rate_debit": 8,
    "read_events": 15,
    "read_job": 15,
    "read_signals": 15,
    "read_step": 23,
    "read_steps": 15,
    "read_workflow": 15,
    "reclaim_many": 79,
    "reconcile_children": 255,
    "release_held": 166,
    "renew_leases": 9,
    "request_cancel": 8,
    "retry_job": 9,
    "signal_exists": 24,
    "sleep_until": 7,
    "snapshot_crons": 3815,
    "snapshot_events": 3815,
    "snapshot_jobs": 3815,
    "snapshot_queues": 3815,
    "snapshot_rate": 3815,
    "snapshot_seq": 3815,
    "snapshot_signals": 3815,
    "snapshot_steps": 3815,
    "spawn_holders": 6,
    "stage_jobs_copy": 7,
    "stage_jobs_table": 7,
    "store.compact_insert": 731,
    "store.enqueue_solo": 60,
    "upsert_signal": 379,
    "wake_awaiters": 379,
    "workflow_members": 795,
    "workflow_names": 262,
}

# --- statements the comparison does not execute: why, and the test that covers each instead -------------
#
# (name → (reason, covering test as "path::test_name")). The gate checks the test exists.
_HTTP = "the HTTP service's own SQL (impl/http/): the machine drives PgStore's vocabulary, not the HTTP routes"
_DASH = "a dashboard read (impl/ops/dashboard/queries.py): read-only, no operation of the vocabulary runs it"
_IDX = "dashboard index DDL (impl/ops/dashboard): created by `belay dashboard --create-indexes`, changes no row"
_OPS = "an operator read or command (impl/ops/operator.py, belay CLI/MCP): outside the store's vocabulary"
_API = "tests/test_http_api.py::"
_HOT = "tests/test_http_hot_routes.py::"
_DT = "tests/test_dashboard.py::"
_CLI = "tests/test_cli_ops.py::"
# Statements outside the comparison that its programs reach in some runs of the generator: under the
# random `dev` profile their being executed is not a finding (under the derandomized `ci` and `mutants`
# profiles the run is fixed, and any execution of an ELSEWHERE statement must be given a floor).
# unique_holder: "almost never" (its ELSEWHERE reason) is sometimes — a local run of the suite (dev profile)
# reached it once on an unchanged tree and failed the gate
SOMETIMES = frozenset({"prune_steps", "prune_events", "unique_holder"})


def _covered(reason: str, test: str, *statements: str) -> dict[str, tuple[str, str]]:
    """ELSEWHERE's entries for `statements`, each covered by `test` (for `reason`)."""
    return dict.fromkeys(statements, (reason, test))


ELSEWHERE: dict[str, tuple[str, str]] = {
    # --- impl/store/sql/http.sql ---
    **_covered(
        _HTTP,
        _API + "test_queue_is_a_belay_queues_row_and_a_duplicate_is_409",
        "http_queue_insert",
        "http_queue_list",
        "http_queue_get",
    ),
    **_covered(_HTTP, _API + "test_task_is_a_job_with_kind_input_meta_and_max_attempts", "http_queue_share"),
    **_covered(_HTTP, _API + "test_delete_queue_with_a_pending_task_is_409_and_deletes_nothing", "http_queue_lock"),
    **_covered(_HTTP, _API + "test_delete_queue_with_a_claimed_task_is_409_and_deletes_nothing", "http_queue_pinned"),
    **_covered(
        _HTTP,
        _API + "test_delete_queue_with_only_finished_tasks_deletes_them_as_the_served_document_says",
        "http_queue_purge",
        "http_queue_delete",
    ),
    **_covered(_HTTP, _API + "test_queue_stats_count_runs_and_report_the_oldest_pending_age", "http_queue_stats"),
    **_covered(
        _HTTP, _API + "test_a_retried_tasks_next_run_id_and_next_attempt_at_match_the_strategy", "http_task_configs"
    ),
    **_covered(_HTTP, _API + "test_stale_run_complete_is_409_and_the_task_is_unchanged", "http_run_context"),
    **_covered(
        _HTTP, _API + "test_checkpoints_are_written_only_by_the_live_run_and_a_put_replaces_the_state", "http_step"
    ),
    **_covered(_HTTP, _API + "test_checkpoints_and_waits_are_per_task_when_tasks_share_step_names", "http_checkpoint"),
    **_covered(_HTTP, _API + "test_execution_timeout_cancels_a_running_task_and_fences_its_run", "http_extend_lease"),
    **_covered(_HTTP, _API + "test_wait_parks_the_run_with_its_deadline_and_emit_wakes_it", "http_signal"),
    **_covered(_HTTP, _API + "test_concurrent_emit_and_wait_for_event_never_strand_a_run", "http_signal_lock"),
    **_covered(_HTTP, _API + "test_workflow_runs_group_tasks_and_report_status_consistently", "http_workflow_tasks"),
    **_covered(_HTTP, _API + "test_runs_listing_defaults_to_50_and_pages_with_a_stable_cursor", "http_runs_page"),
    **_covered(_HTTP, _API + "test_execution_timeout_is_enforced_by_the_sweeper_across_retries", "http_timed_out"),
    **_covered(
        _HTTP,
        _API + "test_cleanup_removes_expired_tasks_and_events_and_nothing_else",
        "http_prune_tasks",
        "http_prune_events",
    ),
    **_covered(
        _HTTP,
        _HOT + "test_completions_through_the_hot_route_keep_each_runs_result_and_clock",
        "http_complete_solo",
        "http_complete_batch",
    ),
    **_covered(
        _HTTP, _HOT + "test_a_claim_through_the_hot_route_hands_out_what_the_starlette_route_does", "http_claim_solo"
    ),
    **_covered(
        _HTTP, _API + "test_an_expired_claim_is_claimable_again_without_spending_an_attempt", "http.expired_http"
    ),
    **_covered(
        _HTTP, _API + "test_tasks_listing_filters_by_queue_and_status_and_pages_with_a_cursor", "http.tasks_page"
    ),
    # --- impl/store/sql/ops.sql ---
    **_covered(_OPS, _CLI + "test_stats_counts_jobs_per_queue_and_state", "ops_stats"),
    **_covered(_OPS, _CLI + "test_jobs_list_filters_and_pages_newest_first_by_keyset", "ops_jobs_page"),
    **_covered(
        _OPS, _CLI + "test_jobs_show_prints_the_journal_with_attempts_costs_events_children_and_signals", "ops_children"
    ),
    **_covered(_OPS, _CLI + "test_events_follow_streams_new_events_until_the_job_is_terminal", "ops_events_after"),
    **_covered(_OPS, _CLI + "test_queue_put_show_pause_and_resume_keep_each_others_options", "ops_queue_rows"),
    **_covered(
        _OPS,
        _CLI + "test_prune_dry_run_reports_exactly_what_prune_then_deletes",
        "ops_prune_preview",
        "ops_prune_preview_other",
    ),
    **_covered(
        _OPS,
        "tests/test_cli_day2.py::test_queue_delete_removes_the_row_and_refuses_an_unknown_one",
        "ops_queue_has_jobs",
        "ops_delete_queue",
    ),
    **_covered(
        _OPS,
        "tests/test_cron_cli.py::test_cron_put_list_pause_resume_delete_with_next_slots",
        "ops_cron_rows",
        "ops_cron_last_fired",
        "ops_delete_cron",
    ),
    # --- impl/store/sql/dashboard.sql, dashboard_indexes.sql ---
    **_covered(
        _DASH,
        _DT + "test_no_job_list_query_under_any_filters_uses_offset",
        "dash_jobs_page",
        "dash_jobs_error_window",
        "dash_where_true",
        "dash_where_before",
        "dash_where_queue",
        "dash_where_state",
        "dash_where_kind",
        "dash_where_workflow",
        "dash_where_parent",
        "dash_where_error",
    ),
    **_covered(
        _DASH,
        _DT + "test_capped_tile_counts_equal_the_exact_counts_below_the_cap_and_are_marked_at_it",
        "dash_pair_counts",
        "dash_pair_counts_scan",
    ),
    **_covered(_DASH, _DT + "test_tiles_show_the_per_node_limit", "dash_queue_rows"),
    **_covered(_DASH, _DT + "test_the_live_fragments_follow_the_database", "dash_finished_since", "dash_oldest_ready"),
    **_covered(
        _DASH,
        _DT + "test_the_job_list_pages_by_keyset_and_shows_every_job_exactly_once",
        "dash_children",
        "dash_children_count",
    ),
    **_covered(
        _DASH, _DT + "test_the_index_variants_are_additive_idempotent_and_used_by_the_tiles", "dash_index_names"
    ),
    **_covered(
        _DASH,
        _DT + "test_the_crons_page_shows_expressions_next_slots_last_fired_jobs_and_paused",
        "dash_crons",
        "dash_cron_names_fired",
    ),
    **_covered(
        _DASH, _DT + "test_the_charts_count_finished_jobs_per_minute_by_outcome_and_claim_latency", "dash_charts"
    ),
    **_covered(
        _IDX,
        _DT + "test_the_index_variants_are_additive_idempotent_and_used_by_the_tiles",
        "belay_jobs_dash_queue_state_idx",
        "belay_jobs_dash_state_idx",
        "belay_jobs_dash_errors_idx",
    ),
    # --- store statements the machine does not reach in the ci profile ---
    **{
        name: (
            "§8.7 prune of a terminal job that has steps or events: the ci profile's programs prune such "
            "jobs in some runs of the generator (21 in one calibration run) and none in the current one",
            "properties/test_conformance.py::test_conformance",  # case "§8.7 prune deletes terminal jobs ..."
        )
        for name in ("prune_steps", "prune_events")
    },
    "held_leases": (
        "a read of the runtime's claim recovery (impl/runtime/node.py recover_claims): changes no row, and the "
        "machine runs one operation at a time, so no claim's commit is ever in doubt",
        "tests/test_claim_recovery.py::test_jobs_claimed_by_a_commit_the_node_could_not_confirm_run_on_that_node_first_attempt",
    ),
    "unique_holder": (
        "§8.6 a retry blocked by a new live holder of the job's incomplete key: the machine's unique keys "
        "(k1, k2 in four modes) almost never leave a failed holder with a newer live one when a retry comes",
        "properties/test_conformance.py::test_conformance",  # case "§8.6 retrying a job whose incomplete key ..."
    ),
}

# Named blocks nothing in impl/ executes (the gate checks no Python file under impl/ names them).
DEAD: dict[str, str] = {
    "cron_holder": "superseded by duplicate_holders (one lookup for every skipped row: cron slot owner, else key holder)",
    "http_tasks_page": "listTasks' query is built in impl/http/sql.py (tasks_page), not read from http.sql",
}


@dataclass
class Recorder:
    counts: Counter[str] = field(default_factory=Counter)
    by_rule: Counter[tuple[str, str]] = field(default_factory=Counter)  # (statement, machine rule)
    rules: Counter[str] = field(default_factory=Counter)  # compared operations per machine rule
    paths: Counter[str] = field(default_factory=Counter)  # shapes of claims and bulk acks (BelayMachine)
    rule: str | None = None  # the rule whose operation the store is applying (set by BelayMachine.both)
    active: bool = False
    _inner: threading.local = field(default_factory=threading.local)


RECORDER = Recorder()


@contextmanager
def recording() -> Iterator[Counter[str]]:
    """Count every named statement the store fetches (and the compact insert it builds) in this block, from
    zero: the counter is process-wide, and an earlier run in this process (the model comparison, in an xdist
    worker that ran it first) must not leak into the block's counts."""
    import impl.store.client_store as store_module
    from impl.store.queries import SchemaSQL

    rec = RECORDER
    rec.counts.clear()
    rec.by_rule.clear()
    orig_q, orig_qb, orig_compact = SchemaSQL.q, SchemaSQL.qb, store_module._compact_insert
    orig_solo = store_module._enqueue_solo

    def q(self: SchemaSQL, name: str, **extra: Any) -> Any:
        if rec.active and not getattr(rec._inner, "busy", False):
            rec.counts[name] += 1
            rec.by_rule[name, rec.rule or "-"] += 1
        return orig_q(self, name, **extra)

    def qb(self: SchemaSQL, name: str) -> bytes:
        if rec.active:
            rec.counts[name] += 1
            rec.by_rule[name, rec.rule or "-"] += 1
        rec._inner.busy = True
        try:
            return orig_qb(self, name)
        finally:
            rec._inner.busy = False

    def built(name: str, build: Callable[..., bytes]) -> Callable[..., bytes]:
        """A statement builder of BUILT, counted under `name` at every call."""

        def counted(*args: Any) -> bytes:
            if rec.active:
                rec.counts[name] += 1
                rec.by_rule[name, rec.rule or "-"] += 1
            return build(*args)

        return counted

    SchemaSQL.q, SchemaSQL.qb = q, qb  # type: ignore[method-assign]
    store_module._compact_insert = built("store.compact_insert", orig_compact)
    store_module._enqueue_solo = built("store.enqueue_solo", orig_solo)
    rec.active = True
    try:
        yield rec.counts
    finally:
        rec.active = False
        SchemaSQL.q, SchemaSQL.qb = orig_q, orig_qb  # type: ignore[method-assign]
        store_module._compact_insert = orig_compact
        store_module._enqueue_solo = orig_solo


# --- one run of the machine per process, shared by the comparison test and the gate ---------------------


@dataclass
class Run:
    profile: str
    examples: int
    steps: int
    seconds: float
    counts: Counter[str]
    by_rule: Counter[tuple[str, str]]
    rules: Counter[str]
    paths: Counter[str]
    error: BaseException | None

    def top_rules(self, name: str, n: int = 3) -> list[tuple[str, int]]:
        found = Counter({rule: c for (stmt, rule), c in self.by_rule.items() if stmt == name})
        return found.most_common(n)


_RUNS: dict[str, Run] = {}


def run_machine(db_url: str, profile: str, stateful: Any) -> Run:
    """`stateful` is the properties.stateful module (passed in: it imports this one)."""
    """Run BelayMachine under `profile` with the statement counter on (once per process and profile)."""
    found = _RUNS.get(profile)
    if found is not None:
        return found
    import psycopg
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    from impl.store import PgStore
    from impl.store.pgrows import configure_connection

    machine_steps: list[int] = []

    class Machine(stateful.BelayMachine):
        def teardown(self) -> None:
            machine_steps.append(self.steps)
            super().teardown()

    RECORDER.rules.clear()  # recording() below starts counts and by_rule from zero
    RECORDER.paths.clear()
    error: BaseException | None = None
    started = time.perf_counter()
    # The comparison judges results and rows, never what survives a crash: its commits need not wait for
    # the WAL flush (about 0.2 ms each on this machine, several per compared step). Crash behaviour has its
    # own tests on clusters of their own (tests/test_capture_crash.py, the soak).
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(
            psycopg.sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(
                psycopg.sql.Identifier(c.info.dbname)
            )
        )
    with psycopg.connect(db_url, autocommit=True) as conn, PgStore(db_url, pool_size=2) as store:
        configure_connection(conn)  # the snapshot after every step decodes jsonb as the store's claims do
        stateful.TARGET.update(store=store, conn=conn)
        try:
            with recording() as counts:
                run_state_machine_as_test(Machine, settings=settings.get_profile(profile))
        except BaseException as exc:  # noqa: BLE001 - re-raised by the comparison test
            error = exc
        finally:
            stateful.TARGET.clear()
    run = Run(
        profile,
        len(machine_steps),
        sum(machine_steps),
        time.perf_counter() - started,
        Counter(counts),
        Counter(RECORDER.by_rule),
        Counter(RECORDER.rules),
        Counter(RECORDER.paths),
        error,
    )
    if not isinstance(error, KeyboardInterrupt):
        _RUNS[profile] = run
    return run


def table(run: Run) -> str:
    """The per-statement counts of one run, as `pytest properties/` prints them."""
    names = inventory()
    lines = [f"statements under the comparison [{run.profile}] ({run.examples} examples, {run.steps} steps):"]
    width = max(map(len, names))
    for name in sorted(names, key=lambda n: (names[n], n)):
        count = run.counts.get(name, 0)
        if name in ELSEWHERE:
            note = f"elsewhere: {ELSEWHERE[name][1]}"
        else:
            rules = ", ".join(f"{r} {c}" for r, c in run.top_rules(name))
            note = f"floor {FLOORS.get(name, '?'):<5} {rules}"
        lines.append(f"  {names[name]:<22} {name:<{width}} {count:>7}  {note}")
    lines.append("paths: " + ", ".join(f"{p} {c}" for p, c in sorted(run.paths.items())))
    lines.append("compared operations per rule: " + ", ".join(f"{r} {c}" for r, c in run.rules.most_common()))
    return "\n".join(lines)
