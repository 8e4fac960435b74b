"""The broken-worker catalogue: variants of the reference worker, each breaking one duty or invariant.

Like the mutant catalogue (properties/mutants/) but for workers. Each variant is a module here that
patches one piece of the impl/ SDK *in its own worker process only* (a store subclass, a Worker
subclass, a patched JobContext method) and runs the reference worker's `main` with it:

    soak/run.sh --worker '"$BELAY_SOAK_PYTHON" -m soak.broken.unfenced_ack' ...

`python -m soak.broken` soaks every variant (plus the reference worker as a control) and prints a
matrix; a variant is caught when the verdict is invalid and one of its expected rows (an invariant
I1–I9, a worker duty P1–P18, or `refine`: trace validation of the committed history) is among the
invalid ones. A VALID verdict is a failure of the harness.

Adding a variant: write `soak/broken/<name>.py` (docstring: what is broken, the expected verdict) and add
one `Variant` line to VARIANTS below. `options` are extra `soak.run` options that give its scenario
room (later options win over the matrix defaults).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Variant:
    expects: tuple[str, ...]  # caught when one of these rows is invalid
    summary: str
    options: tuple[str, ...] = field(default=())
    fast: bool = False  # part of the CI subset (tests/test_soak_broken.py)


VARIANTS: dict[str, Variant] = {
    "no_reconciler": Variant(("I9",), "no $children reconciler (§8.4 R2)"),
    "exits_on_db_loss": Variant(
        ("P1",), "exits when PostgreSQL goes away (PROTOCOL §1)", ("--db-restart-every", "8"), fast=True
    ),
    "ignores_cancel_at_park": Variant(
        ("P3",), "parks/resumes are not step boundaries: a pending cancel is ignored", ("--duration", "40")
    ),
    "renews_every_ttl": Variant(
        ("P2", "I1", "P14"),
        "renews leases every ttl instead of ttl/3 (§6)",
        ("--lease-ttl", "2", "--clock-skew", "0.6"),
    ),
    "no_renewal": Variant(("P2", "I1"), "never renews leases (§6)"),
    "unfenced_ack": Variant(("I2",), "acks without the attempt fence (§7)", ("--stop-every", "10")),
    "reexecute_steps": Variant(("I3",), "re-executes journaled steps (§8.2)"),
    "no_budget_preflight": Variant(("I4",), "no §8.2 pre-flight before a missed step", ("--duration", "45")),
    "ignore_budget": Variant(("I4",), "ignores budgets entirely (§8.2)"),
    "count_gated_children": Variant(("P10", "I9", "refine"), "count-gated $children signal, reconciler kept (§7, R1)"),
    "ack_before_journal": Variant(("I3",), "acks before the step journal commits (§8.2)"),
    "spend_for_duplicate_step": Variant(
        ("I4",),
        "adds spend for a duplicate step execution (§8.2)",
        ("--stop-every", "8", "--stop-for", "16", "--duration", "60", "--db-restart-every", "0"),
    ),
    "ignores_sigterm_drain": Variant(("P4",), "exits at once on SIGTERM (PROTOCOL §1 drain)", ("--term-every", "6")),
    "claims_out_of_priority": Variant(("P5",), "claims priority DESC (§6 claim order)"),
    "cron_wrong_queue": Variant(("P6", "I1"), "inserts cron slots into the wrong queue (§8.5)", ("--duration", "65")),
    "sleep_without_journal": Variant(("P7",), "durable sleep without journaling $sleep:<name>"),
    "drops_attempt": Variant(("P8",), 'results without "attempt" (PROTOCOL §2)', fast=True),
    # --- issue 30: one per breakable row of docs/certification.md that the catalogue above did not cover ---
    "claims_after_sigterm": Variant(
        ("P11", "P4"),
        "keeps claiming through the SIGTERM grace (operations: stop claiming first)",
        ("--term-every", "8"),
    ),
    "reclaim_past_max_attempts": Variant(
        ("P16",), "reclaim retries past max_attempts (§6)", ("--max-attempts", "1", "--kill-every", "6")
    ),
    "ignores_queue_options": Variant(
        ("P18", "refine"), "never reads belay_queues: claims soak-global/soak-rate without admission (§6)"
    ),
    "park_spends_attempt": Variant(("P15",), "a park does not raise max_attempts (a wait spends an attempt, §7)"),
    "cron_early": Variant(
        ("P12",), "fires each cron slot up to a minute before it is due (§8.5)", ("--duration", "65")
    ),
    "ignores_cancel_at_steps": Variant(
        ("P13",), "steps are not cancel boundaries (§8.6), parks still are", ("--duration", "60")
    ),
    "renews_late": Variant(("P14", "P2"), "renews leases every 0.8 ttl instead of ttl/3 (§6)", ("--duration", "60")),
    "short_grace": Variant(
        ("P4",), "a 1 s shutdown grace (PROTOCOL §1: 10-15 s)", ("--term-every", "5", "--duration", "60")
    ),
    "drain_exit_nonzero": Variant(("P4",), "exits 1 after a clean drain (PROTOCOL §1: exit 0)", ("--term-every", "8")),
    "ignores_sigterm": Variant(
        ("P4", "P11"), "ignores SIGTERM (PROTOCOL §1: stop claiming, exit within 15 s)", ("--term-every", "8")
    ),
    "no_reclaim": Variant(("P17", "I1"), "never reclaims expired leases (§6)"),
    "no_crons": Variant(("I6",), "never fires crons (§8.5)", ("--duration", "65")),
    "park_ignores_signal_row": Variant(("I9",), "parks without the §7 signal-row check"),
    "spawn_per_attempt": Variant(("I8",), "spawn not idempotent across re-runs (§8.4)"),
    "no_settlement": Variant(("I5", "I1"), "terminal writes do not settle the workflow (§7, §8.3)"),
    "reclaims_live_leases": Variant(("P2", "I1"), "reclaims leases 3 s before they expire (§6)"),
    "exit_unrecorded": Variant(("P1",), "self-kills without the `exit` observation (PROTOCOL §1)"),
    "wrong_result_attempt": Variant(("I2",), "results name attempt 1 whatever the attempt (PROTOCOL §2)"),
    "prunes_during_run": Variant(("I1",), "prunes terminal jobs at once (PROTOCOL §1: no pruning during a run)"),
    # --- issue 30 item 2: the last nine gaps of docs/certification.md (refine = trace validation) ---
    "claims_early": Variant(("refine",), "claims ready rows up to 30 s before they are due (§4)"),
    # --- issue 51: order and time, judged per node ---
    "claims_newest_first": Variant(("P5",), "within a priority claims the most recently due job first (§6 order)"),
    "stale_now": Variant(("refine",), "an execution's writes (steps, ack) carry the `now` read at its start (§2)"),
    "inserts_attempt_one": Variant(("refine",), "spawned children and cron slots inserted at attempt 1 (§5.1)"),
    "claims_without_row_lock": Variant(("refine", "I2"), "claims without FOR UPDATE SKIP LOCKED (§6)"),
    "renews_unguarded": Variant(("refine",), "renews without the state/leased_by guard (§6)"),
    "clears_cancel_on_retry": Variant(("refine",), "error acks and reclaim retries clear cancel_requested (§7)"),
    "await_children_no_reverify": Variant(
        ("refine", "I9", "P10"), "await-children parks without re-verifying after the clear (§8.4)"
    ),
    "notifications_only": Variant(("I1",), "no polling floor: only pokes wake a producer (§9)"),
    "gathers_past_clamp": Variant(
        ("P2",), "chunk gather window of 3 ttl, unclamped, gathered jobs not renewed (operations: Chunks)"
    ),
    # --- issue 51: outcome obligations the final state alone hides ---
    "budget_crossing_retried": Variant(
        ("P19",), "acks the budget-crossing step as a retry; the next attempt's pre-flight fails it (§8.2)"
    ),
    "no_start_event": Variant(
        ("P20",), "`slow` emits no start event, so no judge can tell which node ran an attempt (PROTOCOL §3.8)"
    ),
    "hands_back_on_sigterm": Variant(
        ("P4",), "on SIGTERM hands running jobs back (snooze to ready) and exits 0 at once", ("--term-every", "8")
    ),
    "no_call_deadlines": Variant(
        ("P2", "refine"),
        "no call deadline, connect_timeout or keepalives (PROTOCOL §1)",
        # conn stalls only: a SIGSTOP, kill or restart would excuse the leases a hung renewal loses
        (
            *("--stall-conn-every", "2", "--kill-every", "0", "--stop-every", "0"),
            *("--db-restart-every", "0", "--term-every", "0", "--duration", "45"),
        ),
    ),
}

# The matrix's default soak settings for every variant (short, faults dense).
DEFAULTS: tuple[str, ...] = (
    "--workers",
    "3",
    "--duration",
    "30",
    "--heal",
    "5",
    "--drain-timeout",
    "25",
    "--kill-every",
    "12",
    "--stop-every",
    "15",
    "--db-restart-every",
    "15",
    "--term-every",
    "12",
    "--lease-ttl",
    "4",
    "--clock-skew",
    "0.5",
    "--seed",
    "11",
    "--no-progress",
)
