"""Worker-level store operations on PostgreSQL (contract §§6–9), mixed into `PgStore`.

Each operation is one transaction built from impl/store/sql/worker.sql, mirroring model/store.py's
transition for the same op. Admission arithmetic is model/admission.py itself, evaluated on counts
read under the queue's advisory lock, so model and implementation cannot drift in rounding.

Lock order (see impl/store/client_store.py): workflow lock → job row locks → signal-scope lock. Acks and reclaim
lock the running row (their UPDATE) before settlement takes the workflow lock; nothing that holds a
workflow lock ever waits on a running row (cancel requests take no workflow lock), so no cycle forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from impl.store.admitted import AdmittedClaims
from impl.store.failpoints import failpoint
from impl.store.pgrows import job_from_row, job_from_tuple
from impl.store.tx import Tx as _Tx
from model import ops
from model import worker_ops as w
from model.cron import cron_job, cron_plan
from model.envelope import decode, encode, encode_step_value
from model.rows import TERMINAL, CronRow, Job
from model.store import PARK_ATTEMPT_CREDIT, claim_order, over_budget, spawn_key

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from psycopg_pool import ConnectionPool

    from impl.store.queries import SchemaSQL
    from impl.store.results import ResultNotices

# The shared park rule (model.store.max_attempts_after_park) as the parameters of the park UPDATEs.
PARK_BUDGET = {"park_credit": PARK_ATTEMPT_CREDIT, "attempts_ceiling": ops.INT4_MAX}


class _Rollback(Exception):
    """Abort the current transaction and return `result` (a fenced write found a stale attempt)."""

    def __init__(self, result: Any) -> None:
        self.result = result


def _over_budget(row: dict) -> bool:
    return over_budget(row["spent_usd_micros"], row["spent_tokens"], row["budget_usd_micros"], row["budget_tokens"])


class WorkerOps(AdmittedClaims):
    """Worker conformance level. Methods are registered in impl.store's handler table."""

    if TYPE_CHECKING:  # what this mixin uses of impl.store.PgStore, the one class it is mixed into
        q: SchemaSQL
        schema: str
        notify: bool
        results: ResultNotices
        pool: ConnectionPool
        transaction: Callable[..., AbstractContextManager[_Tx]]
        statement: Callable[..., list[Any]]
        _insert: Callable[[_Tx, list[tuple[Any, ...]]], list[ops.Inserted | ops.Duplicate]]
        _row: Callable[..., tuple[Any, ...]]
        _after_terminal: Callable[..., None]

    # --- §6 claim ---------------------------------------------------------------------------------

    def _claim(self, op: w.Claim, conn: Any) -> w.Claimed:
        opts, now = op.opts, op.now
        if not opts.needs_admission_lock:
            if op.demand == 0:
                return w.Claimed(())
            # One statement in autocommit: the select-for-update and the claim update commit together.
            # Rows come back as tuples in JOB_COLUMNS order ({job_columns}): the hot path of a drain.
            rows = self.statement(
                self.q.qb_take("claim_plain", op.demand),
                {"queue": op.queue, "now": now, "take": op.demand, "node": op.node, "lease_until": now + op.lease_ttl},
                tuple_row,
                binary=True,
            )
            return w.Claimed(tuple(sorted(map(job_from_tuple, rows), key=claim_order)))
        with self.transaction(now) as tx:
            return self._admitted_claim(tx, op)

    def _renew(self, op: w.Renew, conn: Any) -> w.Renewed:
        kept = {
            r["id"]
            for r in self.statement(
                "renew_leases", {"ids": list(op.job_ids), "node": op.node, "lease_until": op.lease_until}
            )
        }
        return w.Renewed(tuple(sorted(kept)), tuple(sorted(set(op.job_ids) - kept)))

    def held_leases(self, node: str, queues: Sequence[str]) -> list[Job]:
        """The running jobs leased to `node` on `queues` (a read: the runtime's claim recovery)."""
        rows = self.statement("held_leases", {"node": node, "queues": list(queues)}, rows=tuple_row, binary=True)
        return [job_from_tuple(r) for r in rows]

    def _reclaim(self, op: w.Reclaim, conn: Any) -> w.Reclaimed:
        with self.transaction(op.now) as tx:
            expired = tx.all("expired_leases", {"now": op.now, "limit": op.limit})
            failpoint("reclaim.after_read")
            if not expired:
                return w.Reclaimed((), ())
            # One statement for every outcome (reclaim_many): retry or fail is decided by the row itself.
            base = w.error_entry(0, op.now, "lease_expired", None)
            del base["attempt"]
            rows = tx.all(
                "reclaim_many",
                {
                    "ids": [r["id"] for r in expired],
                    "ready_ats": [op.backoff.retry_at(op.now, r["attempt"]) for r in expired],
                    "base": Jsonb(base),
                    "now": op.now,
                },
            )
            rows.sort(key=lambda r: r["id"])
            retried = [r for r in rows if r["state"] == "ready"]
            failed = [r for r in rows if r["state"] == "failed"]
            tx.pokes.update(r["queue"] for r in retried)
            self._terminal(tx, failed)
            return w.Reclaimed(tuple(r["id"] for r in retried), tuple(r["id"] for r in failed))

    def _terminal(self, tx: _Tx, rows: list[dict]) -> None:
        """§7 after-terminal steps; the result notification for each (§9.2) goes after the commit."""
        if not rows:
            return
        self._after_terminal(tx, rows)
        tx.results.extend(r["id"] for r in rows)

    # --- §7 acks ----------------------------------------------------------------------------------

    @staticmethod
    def _ack_params(op: w.Ack) -> tuple[str, dict[str, Any]]:
        outcome = op.outcome
        params: dict[str, Any] = {"id": op.job_id, "attempt": op.attempt, "now": op.now}
        if isinstance(outcome, w.Succeed):
            return "ack_succeed", {**params, "result": outcome.encoded}
        if isinstance(outcome, w.Fail):
            entry = Jsonb([w.error_entry(op.attempt, op.now, outcome.error, outcome.detail)])
            return "ack_error", {**params, "retry_at": outcome.retry_at, "entry": entry}
        if isinstance(outcome, w.CancelSelf):
            return "ack_cancel", params
        return "ack_snooze", {**params, "until": outcome.until}

    def _ack(self, op: w.Ack, conn: Any) -> w.Acked | w.Stale:
        name, params = self._ack_params(op)
        if name == "ack_succeed":
            # The common case in one round trip: a job with no after-terminal duties (no workflow, no
            # parent) succeeds in one fenced autocommit statement; its result notification follows it.
            with self.pool.connection() as c:
                acked = c.execute(self.q.q("ack_succeed_solo"), params).fetchone() is not None
            if acked:
                if self.notify:
                    self.results.add((op.job_id,))
                return w.Acked(op.job_id, "succeeded")
            # Zero rows: stale, or a workflow member / child — the transaction below fences it again.
        with self.transaction(op.now) as tx:
            row = tx.one(name, params)
            failpoint("ack.after_update")
            if row is None:
                return w.Stale(op.job_id, op.attempt)
            if row["state"] in TERMINAL:
                self._terminal(tx, [row])
            else:
                tx.pokes.add(row["queue"])
            return w.Acked(op.job_id, row["state"])

    def _ack_many(self, op: w.AckMany, conn: Any) -> w.AckedMany:
        """Succeeds in one fenced bulk UPDATE, other outcomes row by row; after-terminal once.

        (A one-statement autocommit path for the succeeds with no after-terminal duties was measured
        slower than this transaction in bench.peers — 20.6k vs 23.1k jobs/s batched, notify on — and
        dropped.)"""
        with self.transaction(op.now) as tx:
            return self._ack_many_in(tx, op)

    def _ack_claim(self, op: w.AckClaim, conn: Any) -> w.AckedClaimed:
        """The acks, then the claim of their queue, in one transaction (issue 33: one commit for
        a group of acks and the jobs that take their slots)."""
        claim = op.claim
        if claim.opts.needs_admission_lock:
            # A queue with admission (global_limit, rate, partition): the queue's advisory lock first (§6
            # "first take pg_advisory_xact_lock(...)"; taken before the acks' row locks, the order every
            # admitted claim takes them in, so no ack here waits on a row while holding the queue's lock
            # another claim needs), then the acks, then the admission counts — which see the acks' rows
            # no longer running — and the claim: one commit for the group and the jobs taking its slots.
            with self.transaction(op.acks.now) as tx:
                if not claim.demand:
                    return w.AckedClaimed(self._ack_many_in(tx, op.acks), w.Claimed(()))
                return self._ack_claim_admitted(tx, op)
        if claim.demand and all(isinstance(a.outcome, w.Succeed) for a in op.acks.acks):
            solo = self._ack_claim_solo(op)
            if solo is not None:
                return solo
        with self.transaction(op.acks.now) as tx:
            acked = self._ack_many_in(tx, op.acks)
            rows: list[dict] = []
            if claim.demand:
                params = {
                    "queue": claim.queue,
                    "now": claim.now,
                    "take": claim.demand,
                    "node": claim.node,
                    "lease_until": claim.now + claim.lease_ttl,
                }
                rows = tx.all("claim_plain", params)
            jobs = tuple(sorted((job_from_row(r) for r in rows), key=claim_order))
            return w.AckedClaimed(acked, w.Claimed(jobs))

    def _ack_claim_solo(self, op: w.AckClaim) -> w.AckedClaimed | None:
        """AckClaim of succeeds as one autocommit statement (ack_claim_solo): one round trip instead of five
        (BEGIN, acks, notifications, claim, COMMIT). None when an acked row has after-terminal duties
        (workflow, parent): nothing was written, the transaction path does it all."""
        query = self.q.qb_take("ack_claim_solo", op.claim.demand)
        if not query:  # claim_plain has a shape the solo statement cannot embed
            return None
        acks, claim = op.acks.acks, op.claim
        params = {
            "ids": "{" + ",".join(str(a.job_id) for a in acks) + "}",
            "attempts": "{" + ",".join(str(a.attempt) for a in acks) + "}",
            "results": [a.outcome.encoded for a in acks],
            "nows": [a.now for a in acks],
            "queue": claim.queue,
            "claim_now": claim.now,
            "take": claim.demand,
            "node": claim.node,
            "lease_until": claim.now + claim.lease_ttl,
        }
        with self.pool.connection() as c, c.cursor(row_factory=tuple_row, binary=True) as cur:
            rows = cur.execute(query, params).fetchall()
        acked_ids, blocked = rows[0][0], rows[0][1]
        if blocked:
            return None
        done = set(acked_ids or ())
        if done and self.notify:
            self.results.add(sorted(done))
        jobs = tuple(sorted((job_from_tuple(r[2:]) for r in rows if r[2] is not None), key=claim_order))
        results = tuple(
            w.Acked(a.job_id, "succeeded") if a.job_id in done else w.Stale(a.job_id, a.attempt) for a in acks
        )
        return w.AckedClaimed(w.AckedMany(results), w.Claimed(jobs))

    def _ack_many_in(self, tx: _Tx, op: w.AckMany) -> w.AckedMany:
        rows: dict[int, dict] = {}
        succeeds = [a for a in op.acks if isinstance(a.outcome, w.Succeed)]
        if succeeds:
            name, params = self._succeed_many(succeeds)
            for row in tx.all(name, params):
                rows[row["id"]] = row
        for ack in op.acks:
            if not isinstance(ack.outcome, w.Succeed):
                name, params = self._ack_params(ack)
                row = tx.one(name, params)
                if row is not None:
                    rows[row["id"]] = row
        return self._acked_many(tx, op, rows)

    @staticmethod
    def _succeed_many(succeeds: Sequence[w.Ack]) -> tuple[str, dict[str, Any]]:
        """The statement and parameters of a group of succeeds (each fenced on its own attempt)."""
        results = [a.outcome.encoded for a in succeeds]
        nows = [a.now for a in succeeds]
        # The ids and attempts as array literals (psycopg dumps a list element by element in
        # Python: an eighth of a chunked drain's Python time); a chunk's acks mostly share one
        # result (no-op: `null`) and one time, bound once.
        params: dict[str, Any] = {
            "ids": "{" + ",".join(map(str, (a.job_id for a in succeeds))) + "}",
            "attempts": "{" + ",".join(map(str, (a.attempt for a in succeeds))) + "}",
        }
        if results.count(results[0]) == len(results) and nows.count(nows[0]) == len(nows):
            params["result"], params["now"] = results[0], nows[0]
            return "ack_succeed_many_same", params
        params["results"], params["nows"] = results, nows
        return "ack_succeed_many", params

    def _acked_many(self, tx: _Tx, op: w.AckMany, rows: dict[int, dict]) -> w.AckedMany:
        """The after-terminal steps of the rows a group of acks wrote (by id), and the group's answer."""
        terminal = [rows[a.job_id] for a in op.acks if a.job_id in rows and rows[a.job_id]["state"] in TERMINAL]
        tx.pokes.update(r["queue"] for r in rows.values() if r["state"] not in TERMINAL)
        self._terminal(tx, terminal)
        return w.AckedMany(
            tuple(
                w.Acked(a.job_id, rows[a.job_id]["state"]) if a.job_id in rows else w.Stale(a.job_id, a.attempt)
                for a in op.acks
            )
        )

    def _park_await(self, op: w.ParkAwait, conn: Any) -> w.Parked | w.Stale:
        with self.transaction(op.now) as tx:
            return self._park(tx, op.job_id, op.attempt, op.scope, op.name, op.deadline) or w.Stale(
                op.job_id, op.attempt
            )

    def _park(
        self, tx: _Tx, job_id: int, attempt: int, scope: str, name: str, deadline: datetime | None
    ) -> w.Parked | None:
        """§7 park rule: under the scope lock, a present signal row parks the job as ready instead."""
        tx.one("lock_scope", {"scope": scope})
        present = tx.one("signal_exists", {"scope": scope, "name": name}) is not None
        failpoint("park.after_check")
        params = {
            "id": job_id,
            "attempt": attempt,
            "scope": scope,
            "name": name,
            "deadline": deadline,
            "now": tx.now,
            **PARK_BUDGET,
        }
        parked = tx.one("park_ready" if present else "park_awaiting", params)
        if parked is None:
            return None
        if present:
            tx.pokes.add(parked["queue"])
        return w.Parked(job_id, "ready" if present else "awaiting")

    def _sleep(self, op: w.Sleep, conn: Any) -> w.Slept | w.Stale:
        name = f"$sleep:{op.name}"
        with self.transaction(op.now) as tx:
            if tx.one("fence", {"id": op.job_id, "attempt": op.attempt}) is None:
                return w.Stale(op.job_id, op.attempt)
            tx.one(
                "insert_step",
                {
                    "job_id": op.job_id,
                    "name": name,
                    "value": encode(op.until.isoformat()),
                    "usd": 0,
                    "tokens": 0,
                    "now": op.now,
                },
            )
            until = datetime.fromisoformat(decode(tx.one("read_step", {"job_id": op.job_id, "name": name})["value"]))
            tx.one("sleep_until", {"id": op.job_id, "attempt": op.attempt, "until": until, **PARK_BUDGET})
            return w.Slept(op.job_id, until)

    # --- §8.2 steps and budgets, events -------------------------------------------------------------

    def _read_step(self, op: w.ReadStep, conn: Any) -> w.StepHit | w.StepMiss:
        rows = self.statement("read_step", {"job_id": op.job_id, "name": op.name})
        return w.StepHit(bytes(rows[0]["value"])) if rows else w.StepMiss()

    def _preflight(self, op: w.Preflight, conn: Any) -> w.BudgetOk | w.OverBudget | w.JobGone:
        rows = self.statement("job_budget", {"id": op.job_id})
        row = rows[0] if rows else None
        if row is None:
            return w.JobGone(op.job_id)
        if _over_budget(row):
            return w.OverBudget(row["spent_usd_micros"], row["spent_tokens"], row["cancel_requested"])
        return w.BudgetOk(row["cancel_requested"])

    def _record_step(self, op: w.RecordStep, conn: Any) -> w.Recorded | w.JobGone:
        value = encode_step_value(op.value)
        with self.transaction(op.now) as tx:
            job = tx.one("lock_job_budget", {"id": op.job_id})
            if job is None:
                return w.JobGone(op.job_id)
            params = {
                "job_id": op.job_id,
                "name": op.name,
                "value": value,
                "usd": op.usd_micros,
                "tokens": op.tokens,
                "now": op.now,
            }
            inserted = tx.one("insert_step", params) is not None
            if inserted:  # spend follows the journal: a duplicate execution's costs are not added twice
                job = tx.one("add_spend", params)
            else:
                value = bytes(tx.one("read_step", params)["value"])
            return w.Recorded(inserted, value, job["spent_usd_micros"], job["spent_tokens"], _over_budget(job))

    def _emit(self, op: w.EmitEvent, conn: Any) -> w.Emitted | w.JobGone:
        with self.transaction(op.now) as tx:
            if tx.one("lock_job_row", {"id": op.job_id}) is None:
                return w.JobGone(op.job_id)
            params = {"job_id": op.job_id, "payload": Jsonb(op.payload), "now": op.now}
            if op.once:  # retried: the event a try whose answer was lost appended (sdk-guide §7)
                found = tx.one("find_event", params)
                if found is not None:
                    return w.Emitted(found["seq"])
            row = tx.one("insert_event", params)
            return w.Emitted(row["seq"])

    # --- §8.4 children --------------------------------------------------------------------------------

    def _spawn(self, op: w.Spawn, conn: Any) -> w.Spawned | w.JobGone:
        step_name = f"$spawn:{op.name}"
        with self.transaction(op.now) as tx:
            if tx.one("lock_job_row", {"id": op.job_id}) is None:
                return w.JobGone(op.job_id)
            memo = tx.one("read_step", {"job_id": op.job_id, "name": step_name})
            if memo is not None:
                return w.Spawned(tuple(decode(bytes(memo["value"]))), True)
            keys = [spawn_key(op.job_id, op.name, i) for i in range(len(op.children))]
            if keys:
                specs = [
                    replace(c, unique_key=k, unique_mode="always", parent_id=op.job_id)
                    for c, k in zip(op.children, keys, strict=True)
                ]
                self._insert(tx, [self._row(s, op.now) for s in specs])
            # Rebuild the id list from the keys: never trust a possibly partial insert's ids (§8.4).
            holders = {r["unique_key"]: r["id"] for r in tx.all("spawn_holders", {"keys": keys})}
            ids = [holders[k] for k in keys]
            tx.one(
                "insert_step",
                {"job_id": op.job_id, "name": step_name, "value": encode(ids), "usd": 0, "tokens": 0, "now": op.now},
            )
            return w.Spawned(tuple(ids), False)

    def _spawn_children(self, op: w.SpawnChildren, conn: Any) -> w.Spawned | w.JobGone:
        """§8.4's insert half alone: the children with their always-mode keys, no `$spawn:<name>` journal (a
        later `Spawn` journals the list rebuilt from the keys). The reference runtime spawns in one
        transaction; this is the shape a foreign SDK may take, held to the model like every other operation."""
        with self.transaction(op.now) as tx:
            if tx.one("lock_job_row", {"id": op.job_id}) is None:
                return w.JobGone(op.job_id)
            memo = tx.one("read_step", {"job_id": op.job_id, "name": f"$spawn:{op.name}"})
            if memo is not None:
                return w.Spawned(tuple(decode(bytes(memo["value"]))), True)
            keys = [spawn_key(op.job_id, op.name, i) for i, _ in op.children]
            if keys:
                specs = [
                    replace(c, unique_key=k, unique_mode="always", parent_id=op.job_id)
                    for (_, c), k in zip(op.children, keys, strict=True)
                ]
                self._insert(tx, [self._row(s, op.now) for s in specs])
            holders = {r["unique_key"]: r["id"] for r in tx.all("spawn_holders", {"keys": keys})}
            return w.Spawned(tuple(holders[k] for k in keys if k in holders), False)

    def _await_children(self, op: w.AwaitChildren, conn: Any) -> w.ChildrenDone | w.Parked | w.Stale:
        scope = f"job:{op.job_id}"
        try:
            with self.transaction(op.now) as tx:
                if tx.one("fence_check", {"id": op.job_id, "attempt": op.attempt}) is None:
                    return w.Stale(op.job_id, op.attempt)
                done, ids = self._children_done(tx, op.job_id)
                if done:
                    return w.ChildrenDone(ids)
                # The scope lock first: a child's `$children` delivery cannot interleave from here on.
                tx.one("lock_scope", {"scope": scope})
                tx.cur.execute(self.q.q("clear_signal"), {"scope": scope, "name": "$children"})
                done, ids = self._children_done(tx, op.job_id)
                if done:
                    return w.ChildrenDone(ids)
                failpoint("await_children.before_park")
                parked = self._park(tx, op.job_id, op.attempt, scope, "$children", op.deadline)
                if parked is None:
                    raise _Rollback(w.Stale(op.job_id, op.attempt))
                return parked
        except _Rollback as rollback:
            return rollback.result

    @staticmethod
    def _children_done(tx: _Tx, parent_id: int) -> tuple[bool, tuple[int, ...]]:
        rows = tx.all("children_states", {"parent_id": parent_id})
        return all(r["state"] in TERMINAL for r in rows), tuple(r["id"] for r in rows)

    def _reconcile(self, op: w.Reconcile, conn: Any) -> w.Reconciled:
        with self.transaction(op.now) as tx:
            rows = tx.all("reconcile_children", {"now": op.now})
            tx.pokes.update(r["queue"] for r in rows)
            return w.Reconciled(tuple(sorted(r["id"] for r in rows)))

    # --- §8.5 cron, §8.7 retention -----------------------------------------------------------------------

    def _fire_crons(self, op: w.FireCrons, conn: Any) -> w.CronsFired:
        with self.transaction(op.now) as tx:
            rows = [CronRow(**r) for r in tx.all("cron_rows")]
            plan = cron_plan(op.static, rows, op.since, op.now, op.queues)
            if not plan:
                return w.CronsFired(())
            outcomes = self._insert(tx, [self._row(cron_job(c, slot), op.now) for c, slot in plan])
            return w.CronsFired(
                tuple(
                    w.Fired(c.name, slot, o.id, isinstance(o, ops.Inserted))
                    for (c, slot), o in zip(plan, outcomes, strict=True)
                )
            )

    def _prune(self, op: w.Prune, conn: Any) -> w.Pruned:
        def before(state: str) -> datetime | None:
            keep = op.retention.get(state)
            return None if keep is None else op.now - timedelta(seconds=keep)

        with self.transaction(op.now) as tx:
            ids = sorted(
                r["id"]
                for r in tx.all(
                    "prune_jobs",
                    {
                        "succeeded_before": before("succeeded"),
                        "failed_before": before("failed"),
                        "cancelled_before": before("cancelled"),
                        "limit": op.limit,
                    },
                )
            )
            if ids:
                tx.cur.execute(self.q.q("prune_steps"), {"ids": ids})
                tx.cur.execute(self.q.q("prune_events"), {"ids": ids})
            signals = 0
            if op.signal_ttl is not None:
                signals = tx.cur.execute(
                    self.q.q("prune_signals"), {"before": op.now - timedelta(seconds=op.signal_ttl)}
                ).rowcount
            rate = tx.cur.execute(self.q.q("prune_rate"), {"before": op.now - timedelta(days=1)}).rowcount
            return w.Pruned(tuple(ids), signals, rate)


WORKER_HANDLERS = {
    w.Claim: WorkerOps._claim,
    w.Renew: WorkerOps._renew,
    w.Reclaim: WorkerOps._reclaim,
    w.Ack: WorkerOps._ack,
    w.AckMany: WorkerOps._ack_many,
    w.AckClaim: WorkerOps._ack_claim,
    w.ParkAwait: WorkerOps._park_await,
    w.Sleep: WorkerOps._sleep,
    w.ReadStep: WorkerOps._read_step,
    w.Preflight: WorkerOps._preflight,
    w.RecordStep: WorkerOps._record_step,
    w.EmitEvent: WorkerOps._emit,
    w.Spawn: WorkerOps._spawn,
    w.SpawnChildren: WorkerOps._spawn_children,
    w.AwaitChildren: WorkerOps._await_children,
    w.Reconcile: WorkerOps._reconcile,
    w.FireCrons: WorkerOps._fire_crons,
    w.Prune: WorkerOps._prune,
}
