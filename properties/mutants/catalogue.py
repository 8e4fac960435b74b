"""The mutant catalogue: protocol bugs the project's tests must catch, each a small named patch to impl/.

A mutant is never a switch in production code. Each one is a list of exact text edits (`Edit`: a file
under impl/, the `old` text, the `new` text) applied to a throwaway copy of the repository; every `old`
must occur exactly once in the current tree, so a patch that no longer applies fails loudly instead of
silently testing the unmutated code. Mutants only touch impl/ — never model/, which is the oracle the
stateful test compares against; where a bug lives in shared arithmetic (rounding, settlement), the
patch replaces impl's *use* of the shared function with an inline, wrong version.

Each mutant names the suite that should catch it: the project's own test files for its layer, in the
order they run under `pytest -x` — store mutants: the conformance cases, the regression tests, then the
model-vs-PostgreSQL state machine; the scope-lock race: tests/test_workflows_signals.py's park/deliver
race first; runtime mutants: tests/test_runtime.py. A suite is per layer, never a test written against
one patch's text. properties/test_mutants_regressions.py holds the contract behaviours this catalogue
found no test pinning down (each a legitimate regression test for the real implementation). The
runner (properties/mutants/runner.py) applies the patch to a copy and runs the suite there.
"""

from __future__ import annotations

from properties.mutants.certifier import CERTIFIER
from properties.mutants.checker_hunt import CHECKER_HUNT
from properties.mutants.harness_hunt import HARNESS_HUNT
from properties.mutants.hunts import HUNTS
from properties.mutants.kinds import (
    ADMISSION_RACES,
    DURABLE_SUITE,
    PEER_BUGS,
    RACE_SUITE,
    RUNTIME_SUITE,
    STORE_SUITE,
    TELEMETRY_SUITE,
    Edit,
    Mutant,
)
from properties.mutants.refine_hunt import REFINE_HUNT
from properties.mutants.runtime_hunt2 import RUNTIME_HUNT2
from properties.mutants.sdk_judge import SDK_JUDGE
from properties.mutants.surface_hunt2 import SURFACE_HUNT2
from properties.mutants.timing_hunt import TIMING_HUNT

STORE_PY = "impl/store/client_store.py"
INSERTS_PY = "impl/store/inserts.py"
WORKER_STORE_PY = "impl/store/worker_store.py"
ADMITTED_PY = "impl/store/admitted.py"  # claims under the queue's advisory lock (mixed into WorkerOps)
QUERIES_SQL = "impl/store/sql/queries.sql"
WORKER_SQL = "impl/store/sql/worker.sql"
WORKER_PY = "impl/worker.py"
RUNTIME_PY = "impl/runtime/node.py"  # the Worker
PRODUCER_PY = "impl/runtime/producer.py"
EXECUTOR_PY = "impl/runtime/executor.py"
ACK_GROUP_PY = "impl/runtime/ack_group.py"
CLIENT_PY = "impl/client.py"
PGROWS_PY = "impl/store/pgrows.py"
LISTENER_SUITE = ("tests/test_listener.py",)
RESULT_NOTICES_SUITE = ("tests/test_result_notices.py", "tests/test_drain_hot_path.py")
# The runtime's deferred jobs and acks (issue 33): the executor's and the ack group's own tests.
DEFERRAL_SUITE = ("tests/test_executor.py", "tests/test_ack_group.py")

_FENCE = "WHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s\n"
_NO_FENCE = "WHERE id = %(id)s AND state || '' = 'running'\n"
_ORDER = "ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC"
_ORDER_NULLS_LAST = "ORDER BY priority ASC, ready_at ASC, id ASC"


def _unfenced(set_line: str) -> Edit:
    """Drop the attempt fence from the ack UPDATE whose SET clause ends with `set_line`."""
    return Edit(WORKER_SQL, set_line + _FENCE, set_line + _NO_FENCE)


QUERIES_PY = "impl/store/queries.py"
# The one-statement group commit (issue 33) has its own model comparison; the store's suite follows it.
GROUP_COMMIT_SUITE = ("properties/test_ack_claim_solo.py", *STORE_SUITE)

CATALOGUE: tuple[Mutant, ...] = (
    # --- the one-statement group commit (ack_claim_solo, issue 33) ------------------------------------
    Mutant(
        "group_commit_ack_without_attempt_fence",
        "the all-succeed group commit's acks match any running attempt: a stale attempt's ack finishes the "
        "attempt another node now runs",
        "§7",
        (
            Edit(
                WORKER_SQL,
                "    WHERE j.id = v.id AND j.state || '' = 'running' AND j.attempt = v.attempt AND NOT (SELECT b FROM blocked)\n",
                "    WHERE j.id = v.id AND j.state || '' = 'running' AND NOT (SELECT b FROM blocked)\n",
            ),
        ),
        GROUP_COMMIT_SUITE,
    ),
    Mutant(
        "group_commit_ignores_a_childs_parent",
        "the group commit's statement takes a child's ack as one without after-terminal duties: the parent "
        "parked on $children is never signalled",
        "§7 R1",
        (
            Edit(
                WORKER_SQL,
                "(j.workflow_id IS NOT NULL OR j.parent_id IS NOT NULL)",
                "j.workflow_id IS NOT NULL",
            ),
        ),
        GROUP_COMMIT_SUITE,
    ),
    Mutant(
        "group_commit_claims_when_it_defers",
        "the group commit's statement claims even when it writes no ack (a workflow member or a child in the "
        "group): the transaction path then claims the slots again, past the demand",
        "§6",
        (Edit(QUERIES_PY, '"WHERE NOT (SELECT b FROM blocked) AND queue = %(queue)s"', "where"),),
        GROUP_COMMIT_SUITE,
    ),
    Mutant(
        "inlined_take_claims_one_more",
        "a claim whose LIMIT is written into the statement (SchemaSQL.qb_take, issue 33) writes take + 1: "
        "every plain claim and group commit takes one job past the node's free slots",
        "§6",
        (Edit(QUERIES_PY, 'base.replace(b"%(take)s", b"%d" % take)', 'base.replace(b"%(take)s", b"%d" % (take + 1))'),),
        GROUP_COMMIT_SUITE,
    ),
    Mutant(
        "enqueue_solo_sends_no_poke",
        "a single enqueue's one statement (impl.store.client_store._enqueue_solo, issue 33) inserts the job but sends no "
        "poke: listening workers learn of it only at their next poll",
        "§9.2",
        (Edit(INSERTS_PY, "FROM ins WHERE %(payload)s::text IS NOT NULL", "FROM ins WHERE false"),),
        ("tests/test_enqueue.py", *STORE_SUITE),
    ),
    Mutant(
        "emit_retry_appends_again",
        "a retried emit (EmitEvent once, sdk-guide §7) appends its event again after a try whose answer was "
        "lost had committed it: the job's stream holds the event twice",
        "§8.2",
        (Edit(WORKER_STORE_PY, "            if op.once:  # retried", "            if False:  # MUTANT retried"),),
        ("tests/test_runtime.py", *STORE_SUITE),
    ),
    # --- §7 acks and the fence -----------------------------------------------------------------------
    Mutant(
        "ack_without_attempt_fence",
        "single-row acks match any running attempt, so a stale attempt's ack lands on the live one",
        "§7",
        (
            _unfenced("result = %(result)s, finished_at = %(now)s, lease_until = NULL, leased_by = NULL\n"),
            _unfenced("    errors = errors || %(entry)s, lease_until = NULL, leased_by = NULL\n"),
            _unfenced(
                "UPDATE {jobs} SET state = 'cancelled', finished_at = %(now)s, lease_until = NULL, leased_by = NULL\n"
            ),
            _unfenced("max_attempts = max_attempts + 1,\n                  lease_until = NULL, leased_by = NULL\n"),
            Edit(  # the one-statement succeed of a job with no after-terminal duties
                WORKER_SQL,
                "\nWHERE id = %(id)s AND state || '' = 'running' AND attempt = %(attempt)s AND workflow_id IS NULL",
                "\nWHERE id = %(id)s AND state || '' = 'running' AND workflow_id IS NULL",
            ),
        ),
    ),
    Mutant(
        "batched_ack_without_attempt_fence",
        "AckMany's bulk succeed matches rows by id and state only: a stale row in a batch is acked",
        "§7",
        (
            Edit(  # the bulk succeed with a result and a time per row
                WORKER_SQL,
                "AS v(id, attempt, result, now)\nWHERE j.id = v.id AND j.state || '' = 'running' AND j.attempt = v.attempt\n",
                "AS v(id, attempt, result, now)\nWHERE j.id = v.id AND j.state || '' = 'running'\n",
            ),
            Edit(  # ... and the one for a chunk sharing one result and time
                WORKER_SQL,
                "AS v(id, attempt)\nWHERE j.id = v.id AND j.state || '' = 'running' AND j.attempt = v.attempt\n",
                "AS v(id, attempt)\nWHERE j.id = v.id AND j.state || '' = 'running'\n",
            ),
        ),
    ),
    Mutant(
        "batched_ack_keeps_lease_owner",
        "AckMany's bulk succeed with a result and a time per row (ack_succeed_many) leaves leased_by on the "
        "finished rows (issue 32: survived properties/ while the machine never reached that statement)",
        "§7",
        (
            Edit(
                WORKER_SQL,
                "result = v.result, finished_at = v.now, lease_until = NULL,\n                       leased_by = NULL\n",
                "result = v.result, finished_at = v.now, lease_until = NULL\n",
            ),
        ),
    ),
    Mutant(
        "chunk_ack_keeps_lease",
        "a chunk's bulk succeed sharing one result and time (ack_succeed_many_same) leaves lease_until and "
        "leased_by on the finished rows",
        "§7",
        (
            Edit(
                WORKER_SQL,
                "result = %(result)s, finished_at = %(now)s, lease_until = NULL,\n                       leased_by = NULL\n",
                "result = %(result)s, finished_at = %(now)s\n",
            ),
        ),
    ),
    Mutant(
        "count_gated_children_signal",
        "R1: a terminal child signals $children only when no sibling is still live (a sibling count gate)",
        "§7 R1",
        (
            Edit(
                STORE_PY,
                "        for parent in sorted(by_parent):\n"
                '            self._deliver(tx, f"job:{parent}", "$children", '
                '{"children": sorted(by_parent[parent])})\n',
                "        for parent in sorted(by_parent):\n"
                '            live = tx.one("live_siblings", {"parent_id": parent, '
                '"ids": sorted(by_parent[parent])})\n'
                '            if live["n"] == 0:  # MUTANT: count-gated sibling completion signal\n'
                '                self._deliver(tx, f"job:{parent}", "$children", '
                '{"children": sorted(by_parent[parent])})\n',
            ),
            Edit(
                QUERIES_SQL,
                "-- missing_deps --\n",
                "-- live_siblings --\n"
                "-- MUTANT: how many of a parent's other children are still live.\n"
                "SELECT count(*) AS n FROM {jobs} WHERE parent_id = %(parent_id)s AND NOT (id = ANY(%(ids)s))\n"
                "  AND state NOT IN ('succeeded', 'failed', 'cancelled')\n\n"
                "-- missing_deps --\n",
            ),
        ),
    ),
    Mutant(
        "await_park_without_signal_check",
        "an await parks as awaiting even when the signal row already exists (a lost wake-up)",
        "§7",
        (
            Edit(
                WORKER_STORE_PY,
                'present = tx.one("signal_exists", {"scope": scope, "name": name}) is not None\n',
                "present = False  # MUTANT: no signal check before parking\n",
            ),
        ),
    ),
    Mutant(
        "park_spends_an_attempt",
        "the park UPDATEs leave max_attempts as it was, so every resume of a wait spends a retry attempt",
        "§7",
        (
            Edit(
                WORKER_STORE_PY,
                'PARK_BUDGET = {"park_credit": PARK_ATTEMPT_CREDIT,',
                'PARK_BUDGET = {"park_credit": 0,  # MUTANT: a wait spends an attempt\n               ',
            ),
        ),
    ),
    Mutant(
        "signal_delivery_without_scope_lock",
        "signal delivery skips the scope advisory lock, so it can interleave with a park and lose the wake-up",
        "§8.1",
        (
            Edit(
                STORE_PY,
                "    def _deliver(self, tx: _Tx, scope: str, name: str, payload: Any) -> list[int]:\n"
                '        tx.one("lock_scope", {"scope": scope})\n',
                "    def _deliver(self, tx: _Tx, scope: str, name: str, payload: Any) -> list[int]:\n"
                "        # MUTANT: no scope lock\n",
            ),
        ),
        suite=RACE_SUITE,
    ),
    # --- §6 claims and leases ---------------------------------------------------------------------------
    Mutant(
        "claim_order_without_nulls_first",
        "claims order ready_at with PostgreSQL's default NULLS LAST: a foreign SDK's NULL ready_at row waits",
        "§6",
        (
            Edit(WORKER_SQL, f"{_ORDER}) AS rn", f"{_ORDER_NULLS_LAST}) AS rn"),
            Edit(
                WORKER_SQL,
                "ORDER BY c.priority ASC, c.ready_at ASC NULLS FIRST, c.id ASC",
                "ORDER BY c.priority ASC, c.ready_at ASC, c.id ASC",
            ),
            Edit(
                WORKER_SQL,
                "    WHERE queue = %(queue)s AND state = 'ready' AND (ready_at IS NULL OR ready_at <= %(now)s)\n"
                f"    {_ORDER}\n",
                "    WHERE queue = %(queue)s AND state = 'ready' AND (ready_at IS NULL OR ready_at <= %(now)s)\n"
                f"    {_ORDER_NULLS_LAST}\n",
            ),
            Edit(
                WORKER_SQL,
                "    ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC\n    LIMIT %(take)s\n)\nUPDATE",
                "    ORDER BY priority ASC, ready_at ASC, id ASC\n    LIMIT %(take)s\n)\nUPDATE",
            ),
        ),
    ),
    Mutant(
        "global_limit_counts_expired_leases",
        "global_limit counts every running row, also leases that expired (dead nodes' jobs block the queue)",
        "§6",
        (
            Edit(
                WORKER_SQL,
                "WHERE queue = %(queue)s AND state = 'running' AND lease_until > %(now)s\n\n-- rate_counts --",
                "WHERE queue = %(queue)s AND state = 'running'\n\n-- rate_counts --",
            ),
        ),
    ),
    Mutant(
        "python_rounding_in_rate_admission",
        "rate admission rounds the previous window's weighted count with Python's round (halves to even)",
        "§6",
        (
            Edit(
                ADMITTED_PY,
                "from datetime import timedelta\n",
                "from datetime import timedelta\nfrom fractions import Fraction\n",
            ),
            Edit(
                ADMITTED_PY,
                "            used = admission.rate_used(epoch_us(now), opts.rate.period, counts.get(window, 0), "
                "counts.get(previous, 0))\n",
                "            elapsed = epoch_us(now) - start * admission.US_PER_S\n"
                "            weight = 1 - Fraction(elapsed, opts.rate.period * admission.US_PER_S)\n"
                "            # MUTANT: Python's round (banker's), not PostgreSQL's round(numeric)\n"
                "            used = counts.get(window, 0) + round(counts.get(previous, 0) * weight)\n",
            ),
        ),
    ),
    Mutant(
        "rate_debit_without_estimate",
        "a rate-limited claim debits N instead of N × estimate into the window",
        "§6",
        (
            Edit(
                ADMITTED_PY,
                '"n": admission.debit(len(rows), opts.rate.estimate),\n',
                '"n": len(rows),  # MUTANT: the estimate is ignored\n',
            ),
        ),
    ),
    Mutant(
        "partition_ignores_running",
        "partitioned claims admit per_key_limit per key without subtracting that key's live running jobs",
        "§6",
        (
            Edit(
                WORKER_SQL,
                "WHERE c.rn <= greatest(%(per_key_limit)s - COALESCE(r.n, 0), 0)",
                "WHERE c.rn <= %(per_key_limit)s",
            ),
        ),
    ),
    Mutant(
        "lease_renewal_not_filtered_by_node",
        "renew extends every listed running lease, also ones another node holds since a reclaim",
        "§6",
        (
            Edit(
                WORKER_SQL,
                "WHERE id = ANY(%(ids)s) AND state = 'running' AND leased_by = %(node)s\n",
                "WHERE id = ANY(%(ids)s) AND state = 'running'\n",
            ),
        ),
    ),
    Mutant(
        "reclaim_without_settlement",
        "reclaim-fail signals parents but never settles the workflow: dependents of a dead job stay held",
        "§6",
        (
            Edit(
                WORKER_STORE_PY,
                "            self._terminal(tx, failed)\n            return w.Reclaimed(",
                "            # MUTANT: no settlement after reclaim-fail\n"
                '            self._notify_parents(tx, [(r["id"], r["parent_id"]) for r in failed])\n'
                "            return w.Reclaimed(",
            ),
        ),
    ),
    # --- §8 semantics ---------------------------------------------------------------------------------
    Mutant(
        "no_budget_preflight",
        "a step boundary ignores durable over-budget spend: a replay after a crossing runs one more paid step",
        "§8.2",
        (
            Edit(
                WORKER_PY,
                "        if isinstance(verdict, w.OverBudget):\n"
                '            raise BudgetExceeded(f"spent {verdict.spent_usd_micros} µ$ / '
                '{verdict.spent_tokens} tokens")\n'
                "        return verdict\n",
                "        return verdict  # MUTANT: no budget pre-flight\n",
            ),
        ),
        suite=RUNTIME_SUITE,
    ),
    Mutant(
        "spend_added_for_duplicate_step",
        "a duplicate step execution adds its costs although its value was not journaled",
        "§8.2",
        (
            Edit(
                WORKER_STORE_PY,
                "            if inserted:  # spend follows the journal: "
                "a duplicate execution's costs are not added twice\n"
                '                job = tx.one("add_spend", params)\n'
                "            else:\n",
                '            job = tx.one("add_spend", params)  # MUTANT: spend added for duplicates too\n'
                "            if not inserted:\n",
            ),
        ),
    ),
    Mutant(
        "settlement_not_iterated_to_fixpoint",
        "settlement decides every held member once from the stored states: dooms do not cascade",
        "§8.3",
        (
            Edit(
                STORE_PY,
                "from model.settle import Member, settle\n",
                "from model.settle import Member, Settlement, _verdict\n\n\n"
                "def settle(members):  # MUTANT: one pass over the stored states, not iterated to a fixpoint\n"
                "    members = list(members)\n"
                "    states = {m.name: m.state for m in members}\n"
                '    verdicts = {m.name: _verdict(m, states) for m in members if m.state == "held" and m.deps}\n'
                '    return Settlement(frozenset(n for n, v in verdicts.items() if v == "release"),\n'
                '                      frozenset(n for n, v in verdicts.items() if v == "doom"))\n\n\n',
            ),
        ),
    ),
    Mutant(
        "spawn_trusts_insert_ids",
        "spawn journals the ids the insert returned, dropping children a partial earlier insert created",
        "§8.4",
        (
            Edit(
                WORKER_STORE_PY,
                "                self._insert(tx, [self._row(s, op.now) for s in specs])\n"
                "            # Rebuild the id list from the keys: never trust a possibly partial insert's ids (§8.4).\n"
                '            holders = {r["unique_key"]: r["id"] '
                'for r in tx.all("spawn_holders", {"keys": keys})}\n'
                "            ids = [holders[k] for k in keys]\n",
                "                outcomes = self._insert(tx, [self._row(s, op.now) for s in specs])\n"
                "            # MUTANT: trust the insert's RETURNING ids\n"
                "            ids = [o.id for o in outcomes if isinstance(o, ops.Inserted)] if keys else []\n",
            ),
        ),
    ),
    Mutant(
        "await_children_keeps_stale_signal",
        "await-children parks without clearing the stale $children signal, so it wakes at once and spins",
        "§8.4",
        (
            Edit(
                WORKER_STORE_PY,
                '                tx.cur.execute(self.q.q("clear_signal"), {"scope": scope, "name": "$children"})\n',
                "                # MUTANT: the stale $children signal is kept\n",
            ),
        ),
    ),
    Mutant(
        "no_children_reconciler",
        "R2: the $children reconciler backstop matches nothing, so a lost wake-up parks a parent forever",
        "§8.4 R2",
        (
            Edit(
                WORKER_SQL,
                "WHERE p.state = 'awaiting' AND p.await_name = '$children'",
                "WHERE false AND p.state = 'awaiting' AND p.await_name = '$children'",
            ),
        ),
    ),
    Mutant(
        "window_unique_key_without_bucket",
        "a window-mode unique key is stored without its @<bucket>, so it dedupes forever",
        "§5.2",
        (
            Edit(
                STORE_PY,
                '        if spec.unique_mode == "window":\n'
                "            key = ops.window_key(key, now, spec.unique_window)\n",
                "        # MUTANT: the window bucket is not embedded in the key\n",
            ),
        ),
    ),
    Mutant(
        "retry_without_rehold",
        "an operator retry sends a dep-bearing workflow member straight to ready beside a failed dep",
        "§8.6",
        (Edit(STORE_PY, '"state": "held" if row["wf_deps"] else "ready"}', '"state": "ready"}  # MUTANT: no re-hold'),),
    ),
    Mutant(
        "retry_keeps_cancel_requested",
        "an operator retry keeps cancel_requested, so a cooperatively cancelled job cancels itself again",
        "§8.6",
        (
            Edit(
                QUERIES_SQL,
                "UPDATE {jobs} SET state = %(state)s, ready_at = %(now)s, cancel_requested = false,\n",
                "UPDATE {jobs} SET state = %(state)s, ready_at = %(now)s,\n",
            ),
        ),
    ),
    Mutant(
        "prune_deletes_non_terminal_jobs",
        "retention applies the succeeded cutoff to every job not failed or cancelled, live ones included",
        "§8.7",
        (
            Edit(
                WORKER_SQL,
                "    WHERE ((state = 'succeeded' AND finished_at < %(succeeded_before)s)\n",
                "    WHERE ((state NOT IN ('failed', 'cancelled')\n"
                "            AND COALESCE(finished_at, inserted_at) < %(succeeded_before)s)\n",
            ),
        ),
    ),
    # --- the runtime ------------------------------------------------------------------------------------
    Mutant(
        "cancel_request_ignored_at_step_boundary",
        "the runtime never honours cancel_requested at a step boundary; a cancelled job runs to the end",
        "§8.6",
        (
            Edit(
                WORKER_PY,
                "        if verdict.cancel_requested:\n"
                '            raise CancelRequested(f"job {self.id}: cancel requested")\n',
                "        # MUTANT: cancel requests are not checked\n",
            ),
        ),
        suite=RUNTIME_SUITE,
    ),
    Mutant(
        "zombie_attempt_forgets_live_attempt",
        "a zombie attempt ending on a node unregisters the job's live attempt there, which then stops renewing",
        "§6",
        (
            Edit(
                PRODUCER_PY,
                "            if self.running.get(ctx.id) is ctx:\n",
                "            if ctx.id in self.running:  # MUTANT: any attempt of the job\n",
            ),
        ),
        suite=RUNTIME_SUITE,
    ),
    # --- the durable-execution tier: SDK and runtime duties (issue 20) -----------------------------------
    Mutant(
        "step_memo_keyed_on_truthiness",
        'a journaled step whose value is falsy (0, "", [], False, None) runs again on replay',
        "§8.2",
        (
            Edit(
                WORKER_PY,
                "        if isinstance(hit, w.StepHit):\n            return decode(hit.value)\n",
                "        if isinstance(hit, w.StepHit) and decode(hit.value):  # MUTANT: memo keyed on truthiness\n"
                "            return decode(hit.value)\n",
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "transactional_enqueue_commits_on_its_own",
        "an enqueue on the caller's connection runs in a transaction of its own: a rollback leaves the job",
        "§5.1",
        (
            Edit(
                STORE_PY,
                "        with self.transaction(op.now, conn) as tx:\n"
                "            return ops.Enqueued(tuple(self._insert(tx, rows)))\n",
                "        with self.transaction(op.now, None) as tx:  # MUTANT: commits on its own\n"
                "            return ops.Enqueued(tuple(self._insert(tx, rows)))\n",
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "lost_lease_ignored_at_step_boundary",
        "an execution whose lease was lost keeps running steps instead of stopping at its next boundary",
        "§6",
        (
            Edit(
                WORKER_PY,
                "        if self.lost.is_set():\n"
                '            raise LeaseLost(f"job {self.id} attempt {self.attempt}: lease lost")\n',
                "        # MUTANT: the lost flag is not checked at the step boundary\n",
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "children_reconciler_only_after_a_reclaim",
        "R2: the sweeper runs the $children reconciler only on passes that also reclaimed an expired lease",
        "§8.4 R2",
        (
            Edit(
                RUNTIME_PY,
                '        woken = self.call(lambda: self.store.apply(w.Reconcile(now)), "reconcile")\n',
                '        woken = (self.call(lambda: self.store.apply(w.Reconcile(now)), "reconcile")\n'
                "                 if reclaimed.retried or reclaimed.failed else w.Reconciled(()))  # MUTANT\n",
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "chunk_refill_with_acks_past_the_limit",
        "a chunk whose jobs all succeeded claims with its acks (Producer.ack_refill, issue 33) twice as many "
        "jobs as it frees, past the queue's limit",
        "§6",
        (
            Edit(
                PRODUCER_PY,
                "        take = self.refill_slots(contexts)\n        if not take:\n            return None",
                "        take = self.refill_slots(contexts) and len(contexts) * 2\n        if not take:\n            return None",
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "chunk_gather_window_not_clamped",
        "a partial chunk waits its whole gather_ms, not at most half the lease ttl (operations guide, chunks)",
        "§6",
        (
            Edit(
                PRODUCER_PY,
                "gather_s = min(kind.gather_ms / 1000, self.worker.config.lease_ttl / 2)",
                "gather_s = kind.gather_ms / 1000  # MUTANT: no clamp to ttl/2",
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "adaptive_limit_doubled_past_max",
        "saturated rounds double a queue's limit without clamping it to its max (adaptive concurrency)",
        "§6",
        (Edit(PRODUCER_PY, "new = min(self.limit * 2, hi)", "new = self.limit * 2  # MUTANT: no clamp to max"),),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "fast_jsonb_empty_list_as_object",
        "the jsonb loaders' fast path (claim rows, issues 17 and 33) decodes an empty array as an empty object: "
        "a job enqueued with input [] runs with {}",
        "§6",
        (Edit(PGROWS_PY, '{b"[]": list, b"{}": dict,', '{b"[]": dict, b"{}": dict,  # MUTANT\n'),),
        suite=("tests/test_drain_hot_path.py", *STORE_SUITE),
    ),
    Mutant(
        "relisten_without_a_poll",
        "a listener that stopped listening while its node was busy LISTENs again without polling: a poke sent "
        "meanwhile is lost until the next poll (issue 33)",
        "§9.2",
        (
            Edit(
                PGROWS_PY,
                "                        on_payload(None)  # what was poked meanwhile: polled now\n",
                "                        pass  # MUTANT: no poll after the re-LISTEN\n",
            ),
        ),
        suite=LISTENER_SUITE,
    ),
    Mutant(
        "busy_node_keeps_listening",
        "a node whose every slot is taken keeps listening, receiving a result notification for every job "
        "completed anywhere on the channel (issue 33)",
        "§9.2",
        (
            Edit(
                PRODUCER_PY,
                "        return self.opts.paused or len(self.running) >= self.limit\n",
                "        return False  # MUTANT: never saturated\n",
            ),
        ),
        suite=LISTENER_SUITE,
    ),
    Mutant(
        "result_notice_before_commit",
        "a transaction's result notifications are handed to the sender before it commits: a waiter is woken, "
        "re-reads the job and finds it still running (the notification announced a write not yet visible)",
        "§9.2",
        (
            Edit(
                STORE_PY,
                "            if self.notify:\n"
                "                tx.flush_pokes()\n"
                '            failpoint("store.before_commit")\n'
                "        if tx.results and self.notify:  # committed: the jobs are terminal for anyone who reads them now\n"
                "            self.results.add(tx.results)\n",
                "            if self.notify:\n"
                "                tx.flush_pokes()\n"
                "            if tx.results and self.notify:  # MUTANT: before the commit\n"
                "                self.results.add(tx.results)\n"
                '            failpoint("store.before_commit")\n',
            ),
        ),
        suite=RESULT_NOTICES_SUITE,
    ),
    Mutant(
        "group_commit_sends_no_results",
        "the one-statement group commit (ack_claim_solo) acks its jobs but never hands their ids to the "
        "result sender: awaiters of those jobs wait for their polling floor",
        "§9.2",
        (Edit(WORKER_STORE_PY, "            self.results.add(sorted(done))\n", "            pass  # MUTANT\n"),),
        suite=RESULT_NOTICES_SUITE,
    ),
    Mutant(
        "deferred_job_never_handed_off",
        "a job deferred on an ack group leader's thread (issue 33) waits for that thread even when it is in a "
        "long job: the watchdog never hands it to another thread",
        "§6",
        (
            Edit(
                EXECUTOR_PY,
                "            self.submit(task[1], *task[2])\n",
                "            self._deferred.appendleft(task)  # MUTANT: never handed off\n            return True\n",
            ),
        ),
        suite=DEFERRAL_SUITE,
    ),
    Mutant(
        "deferred_ack_never_led",
        "an ack queued with no leader while its thread runs the group's next job (issue 33) is never led by the "
        "watchdog: it commits only when that thread's long job ends",
        "§7",
        (
            Edit(
                ACK_GROUP_PY,
                "            if time.monotonic() - since < older_than:\n                return True\n",
                "            if True:  # MUTANT: a deferred ack is never stale\n                return True\n",
            ),
        ),
        suite=DEFERRAL_SUITE,
    ),
    Mutant(
        "renew_every_ttl",
        "the renewer extends leases every ttl instead of every ttl/3: a node ahead within tolerance reclaims",
        "§6",
        (Edit(RUNTIME_PY, "period = self.config.lease_ttl / 3", "period = self.config.lease_ttl  # MUTANT"),),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "zombie_not_told_when_its_node_reclaims",
        "a node claiming a job whose earlier attempt still runs there does not flag that zombie as lost",
        "§6",
        (
            Edit(
                PRODUCER_PY,
                "                    zombie.lost.set()  # the renewer",
                "                    pass  # MUTANT: zombie.lost.set() — the renewer",
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "sweeper_prunes_only_after_a_reclaim",
        "retention (and crons) run only on sweeper passes that reclaimed something",
        "§8.7",
        (
            Edit(
                RUNTIME_PY,
                '        self.call(lambda: self.store.apply(w.FireCrons(now, since, self.crons, self.cron_queues)), "cron")\n',
                "        if not (reclaimed.retried or reclaimed.failed):  # MUTANT: duties only after a reclaim\n"
                "            return now\n"
                '        self.call(lambda: self.store.apply(w.FireCrons(now, since, self.crons, self.cron_queues)), "cron")\n',
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "idle_poll_not_capped",
        "an idle producer's poll interval keeps doubling past poll_interval",
        "§6",
        (
            Edit(
                PRODUCER_PY,
                "interval = min(interval * 2, self.worker.config.poll_interval)",
                "interval = interval * 2  # MUTANT: no idle ceiling",
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "busy_poll_ignored",
        "a producer that just claimed work waits the idle poll_interval before its next claim",
        "§6",
        (
            Edit(
                PRODUCER_PY,
                "                interval = self.worker.config.busy_poll\n                if claimed == demand:",
                "                interval = self.worker.config.poll_interval  # MUTANT: no busy cadence\n"
                "                if claimed == demand:",
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    Mutant(
        "shutdown_ignores_the_grace",
        "stop() abandons running jobs at once instead of waiting up to the shutdown grace",
        "§6",
        (
            Edit(
                RUNTIME_PY,
                "        deadline = time.monotonic() + grace\n",
                "        deadline = time.monotonic()  # MUTANT: no grace\n",
            ),
        ),
        suite=DURABLE_SUITE,
    ),
    # --- telemetry (issue 32): a raised attempt that the ack retries is still an exception ----------
    Mutant(
        "retried_exception_reported_as_stop",
        "a job whose code raised and was scheduled for a retry is reported as job.stop, not job.exception",
        "§ops telemetry",
        (
            Edit(
                RUNTIME_PY,
                '            if error is not None and state != "parked":\n',
                '            if error is not None and state not in ("parked", "ready"):  # MUTANT\n',
            ),
        ),
        suite=TELEMETRY_SUITE,
    ),
    Mutant(
        "chunk_exception_reported_as_stop",
        "a chunk job whose result was an exception is reported as job.stop (the chunk path's bug until issue 32)",
        "§ops telemetry",
        (
            Edit(
                RUNTIME_PY,
                'elif (event := "job.exception" if ack.job_id in raised else "job.stop") in taken:',
                'elif (event := "job.stop") in taken:  # MUTANT',
            ),
        ),
        suite=TELEMETRY_SUITE,
    ),
    Mutant(
        "global_limit_count_without_running_lock",
        "a global_limit claim counts the live leases without locking the queue's running rows: a renewal that "
        "revives an expired lease and commits between the count and the claim's commit leaves the queue above "
        "its limit (the two-hour soak of seed 2028)",
        "§6",
        (
            Edit(
                WORKER_SQL,
                "SELECT id FROM {jobs} WHERE queue = %(queue)s AND state = 'running' AND lease_until <= %(now)s "
                "ORDER BY id FOR UPDATE\n",
                "SELECT id FROM {jobs} WHERE queue = %(queue)s AND state = 'running' AND lease_until <= %(now)s "
                "ORDER BY id\n",
            ),
        ),
        suite=ADMISSION_RACES,
    ),
    Mutant(
        "ack_claim_admission_unlocked",
        "a group of acks and the claim of their slots on a queue with admission (AckClaim, issue 54) counts "
        "without the queue's advisory lock: a claim of another node counting meanwhile sees the group's acked "
        "jobs still running and none of its new leases, and the queue ends above its global limit",
        "§6",
        (
            Edit(
                ADMITTED_PY,
                """                tx.cur.execute(self.q.qb("lock_queue"), {"queue": claim.queue})
                statements = [self._succeed_many(succeeds)] if succeeds else []
""",
                """                statements = [self._succeed_many(succeeds)] if succeeds else []
""",
            ),
        ),
        suite=ADMISSION_RACES,
    ),
    Mutant(
        "ack_claim_admission_counts_before_acks",
        "a group of acks and the claim of their slots on a queue with a global limit counts the live leases "
        "before the acks are written (the pipeline's order swapped): the acked jobs still count as running and "
        "the claim takes fewer than the model admits",
        "§6",
        (
            Edit(
                ADMITTED_PY,
                """                for cur, (name, params) in zip(cursors, statements, strict=True):
                    cur.execute(self.q.qb(name), params)
                if opts.global_limit is not None or opts.partition is not None:
                    tx.cur.execute(self.q.qb("lock_running"), {"queue": claim.queue, "now": claim.now})
                if opts.global_limit is not None:
                    tx.cur.execute(self.q.qb("live_running"), {"queue": claim.queue, "now": claim.now})
""",
                """                if opts.global_limit is not None or opts.partition is not None:
                    tx.cur.execute(self.q.qb("lock_running"), {"queue": claim.queue, "now": claim.now})
                if opts.global_limit is not None:
                    tx.cur.execute(self.q.qb("live_running"), {"queue": claim.queue, "now": claim.now})
                for cur, (name, params) in zip(cursors, statements, strict=True):
                    cur.execute(self.q.qb(name), params)
""",
            ),
        ),
        suite=("properties/test_ack_claim_admission.py",),
    ),
    # --- the peers' bugs (issue 13; tests/test_peer_bugs.py documents each) ------------------------------
    Mutant(
        "peer_river_1302_unlocked_rescue",
        "River #1302: the sweeper reads expired leases without locking them, so an ack committed between its "
        "read and its by-id update is overwritten (a completed job back to ready)",
        "§6",
        (
            Edit(
                WORKER_SQL,
                "WHERE state = 'running' AND lease_until <= %(now)s\nORDER BY id\nLIMIT %(limit)s\n"
                "FOR UPDATE SKIP LOCKED\n",
                "WHERE state = 'running' AND lease_until <= %(now)s\nORDER BY id\nLIMIT %(limit)s\n",
            ),
        ),
        suite=PEER_BUGS,
    ),
    Mutant(
        "peer_oban_lifeline_rescue_by_elapsed_time",
        "Oban Lifeline: renewals do not extend the lease, so a job is rescued a fixed time after its claim "
        "while it is still executing",
        "§6",
        (
            Edit(
                WORKER_SQL,
                "UPDATE {jobs} SET lease_until = GREATEST(lease_until, %(lease_until)s)\nWHERE id = ANY(%(ids)s)",
                "UPDATE {jobs} SET lease_until = lease_until\nWHERE id = ANY(%(ids)s)",
            ),
        ),
        suite=PEER_BUGS,
    ),
    Mutant(
        "peer_procrastinate_1518_liveness_per_worker_id",
        "procrastinate #1518: a renewal keeps every running job of the node id alive, so a restarted process "
        "reusing the id keeps its dead predecessor's job running forever",
        "§6",
        (
            Edit(
                WORKER_SQL,
                "WHERE id = ANY(%(ids)s) AND state = 'running' AND leased_by = %(node)s\n",
                "WHERE state = 'running' AND leased_by = %(node)s AND %(ids)s IS NOT NULL\n",
            ),
        ),
        suite=PEER_BUGS,
    ),
    Mutant(
        "peer_pg_boss_592_cron_key_per_registration",
        "pg-boss #592: a cron slot's exactly-once key includes the schedule's registration, so unschedule + "
        "schedule fires the same slot again",
        "§8.5",
        (
            Edit(
                WORKER_STORE_PY,
                "outcomes = self._insert(tx, [self._row(cron_job(c, slot), op.now) for c, slot in plan])",
                "outcomes = self._insert(tx, [self._row(replace(cron_job(c, slot), cron_name=c.name + '#' + str(int("
                "{r.name: r.updated_at for r in rows}[c.name].timestamp() * 1e6))), op.now) for c, slot in plan])",
            ),
        ),
        suite=PEER_BUGS,
    ),
    Mutant(
        "peer_pg_boss_613_cron_key_per_queue",
        "pg-boss #613: a cron slot's key is the queue, so two schedules of one queue due together make one job",
        "§8.5",
        (
            Edit(
                WORKER_STORE_PY,
                "outcomes = self._insert(tx, [self._row(cron_job(c, slot), op.now) for c, slot in plan])",
                "outcomes = self._insert(tx, [self._row(replace(cron_job(c, slot), cron_name=c.queue), op.now) "
                "for c, slot in plan])",
            ),
        ),
        suite=PEER_BUGS,
    ),
    # --- issue 54's mutation hunts in impl/: the store, the runtime, the HTTP API and the operator's surface --
    *HUNTS,
    # issue 54's hunt L: the worker runtime and the Client SDK again (properties/mutants/runtime_hunt2.py)
    *RUNTIME_HUNT2,
    # issue 54's second hunt over the HTTP API and the operator's surface (properties/mutants/surface_hunt2.py)
    *SURFACE_HUNT2,
    # --- the certifier tier (issue 32): the soak's own judges, properties/mutants/certifier.py ---------
    *CERTIFIER,
    # issue 54's second hunt over the trace validation and the replay (properties/mutants/refine_hunt.py)
    *REFINE_HUNT,
    # issue 54's second hunt over the harness the verdict rests on (properties/mutants/harness_hunt.py)
    *HARNESS_HUNT,
    # issue 54's hunt I over the judges of order and time and the worker duties (properties/mutants/timing_hunt.py)
    *TIMING_HUNT,
    # issue 54's second hunt over the end-of-run judges: the §11 invariants, D1, coverage, verdicts
    # (properties/mutants/checker_hunt.py)
    *CHECKER_HUNT,
    # issue 54's hunt over the SDK adapter's judge, properties/sdk/ (properties/mutants/sdk_judge.py)
    *SDK_JUDGE,
)

BY_NAME: dict[str, Mutant] = {m.name: m for m in CATALOGUE}
TIERS: dict[str, tuple[str, ...]] = {  # `python -m properties.mutants --tier NAME`
    "durable": tuple(m.name for m in CATALOGUE if m.suite == DURABLE_SUITE),
    # the soak's own rules (issue 32, 54)
    "certifier": tuple(m.name for m in (*CERTIFIER, *REFINE_HUNT, *HARNESS_HUNT, *TIMING_HUNT, *CHECKER_HUNT)),
    "sdk-judge": tuple(m.name for m in SDK_JUDGE),  # the judge of SDKs in other languages (issue 54)
    # impl/ bugs issue 54's mutation hunts found untested
    "hunts": tuple(m.name for m in (*HUNTS, *RUNTIME_HUNT2, *SURFACE_HUNT2)),
}
