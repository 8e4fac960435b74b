"""The implementation's statements over a scenario's tiny database, one interleaving point each.

`Db` declares a scenario's rows and advisory locks; `Sql(db)` appends statements to a `Program`, each
named after the query in impl/store/sql/queries.sql or impl/store/sql/worker.sql it models, in the order
impl/store/client_store.py and impl/store/worker_store.py issue them:

    §7 ack            ack_succeed | ack_succeed_many      (row locks on the jobs, held to COMMIT)
    §7 after-terminal lock_workflow → workflow_members → release_held/doom_held (§8.3), then
                      lock_scope → upsert_signal → wake_awaiters (§8.1)           — workflow before scope
    §7 park rule      lock_scope → signal_exists → park_ready | park_awaiting
    §8.4 await        children_states → lock_scope → clear_signal → children_states → park rule
    §8.4 backstop     reconcile_children
    §6 claim          claim_plain (one autocommit statement, FOR UPDATE SKIP LOCKED)
    §8.6 retry        job_header → lock_workflow → lock_job → retry_job → settlement
    §8.6 cancel       job_header → lock_workflow → lock_job → request_cancel
    §8.7 retention    prune_signals (the TTL prune of one signal row)

Row values: a job row holds its state ("ready", "running", "awaiting", "held", "succeeded", "failed",
"cancelled"); a scenario awaits one (scope, name) per awaiting job, so "awaiting" needs no key. A signal
row holds "present" or "absent". Settlement reuses model/settle.py itself, so the explorer and the
store cannot disagree about what settles.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from model.explorer.db import Layout, Tx
from model.explorer.program import Program
from model.rows import TERMINAL
from model.settle import Member, settle

PRESENT, ABSENT = "present", "absent"


class Db:
    """The rows and advisory locks of one scenario, with their initial values."""

    def __init__(self) -> None:
        self.rows: list[str] = []
        self.initial: dict[str, Any] = {}
        self.locks: list[str] = []
        self.deps: dict[str, tuple[str, ...]] = {}  # workflow members' wf_deps
        self.workflow: list[str] = []  # the members of the scenario's workflow, in id order

    def job(self, name: str, state: str, *, deps: Sequence[str] | None = None, member: bool = False) -> str:
        """A belay_jobs row (`member`: in the scenario's workflow, with `deps`)."""
        self._row(name, state)
        if member or deps is not None:
            self.workflow.append(name)
            self.deps[name] = tuple(deps or ())
        return name

    def signal(self, name: str, present: bool = False) -> str:
        """A belay_signals row, (scope, name) abbreviated to `name`."""
        return self._row(name, PRESENT if present else ABSENT)

    def lock(self, name: str) -> str:
        """An advisory transaction lock key (`belay_wf:<id>`, `belay_sig:<scope>`)."""
        self.locks.append(name)
        return name

    def _row(self, name: str, value: Any) -> str:
        if name in self.initial:
            raise ValueError(f"row {name!r} declared twice")
        self.rows.append(name)
        self.initial[name] = value
        return name

    def layout(self, actors: Iterable[str]) -> Layout:
        return Layout(tuple(actors), tuple(self.rows), tuple(self.locks))

    def world(self, layout: Layout) -> tuple[Any, ...]:
        return layout.initial(self.initial)


def _terminal(state: Any) -> bool:
    return state in TERMINAL


class Sql:
    """Statement builders over one `Db`: `Sql(db).ack_succeed(program, "C1")` appends one statement."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self.r = {name: i for i, name in enumerate(db.rows)}  # row name → index
        self.k = {name: i for i, name in enumerate(db.locks)}  # lock name → index

    # --- §7 acks --------------------------------------------------------------------------------

    def ack_succeed(self, p: Program, job: str) -> None:
        """§7 fenced terminal write: the job's row lock is held from here to COMMIT."""
        row = self.r[job]

        def run(tx: Tx) -> None:
            tx.note = "1 row" if tx.update(row, ("running",), "succeeded") else "0 rows (stale)"

        p.sql("ack_succeed", f"UPDATE belay_jobs SET state='succeeded' WHERE id={job} AND state='running'", run)

    def ack_succeed_many(self, p: Program, jobs: Sequence[str]) -> None:
        """§7 AckMany's bulk fenced UPDATE (chunked execution): every row's lock in one statement."""
        rows = [(j, self.r[j]) for j in jobs]

        def run(tx: Tx) -> None:
            done = [j for j, row in rows if tx.update(row, ("running",), "succeeded")]
            tx.note = f"{len(done)} rows"

        p.sql(
            "ack_succeed_many",
            f"UPDATE belay_jobs SET state='succeeded' WHERE id IN ({', '.join(jobs)}) "
            "AND state='running' AND attempt=…",
            run,
        )

    # --- advisory locks -------------------------------------------------------------------------

    def lock_scope(self, p: Program, key: str) -> None:
        k = self.k[key]

        def run(tx: Tx) -> None:
            tx.advisory(k)
            tx.note = "acquired"

        p.sql("lock_scope", f"SELECT pg_advisory_xact_lock(hashtext('{key}'))", run)

    def lock_workflow(self, p: Program, key: str) -> None:
        k = self.k[key]

        def run(tx: Tx) -> None:
            tx.advisory(k)
            tx.note = "acquired"

        p.sql("lock_workflow", f"SELECT pg_advisory_xact_lock(hashtext('{key}'))", run)

    # --- §8.1 signals -----------------------------------------------------------------------------

    def upsert_signal(self, p: Program, signal: str) -> None:
        row = self.r[signal]

        def run(tx: Tx) -> None:
            tx.note = "inserted" if tx.read(row) == ABSENT else "updated"
            tx.write(row, PRESENT)

        p.sql("upsert_signal", f"INSERT INTO belay_signals … ({signal}) ON CONFLICT DO UPDATE", run)

    def wake_awaiters(self, p: Program, signal: str, awaiters: Sequence[str]) -> None:
        """§8.1: every job parked on the signal becomes ready. Rows still 'running' in this statement's
        view — e.g. a park not yet committed — do not match and are not waited for."""
        rows = [(j, self.r[j]) for j in awaiters]

        def run(tx: Tx) -> None:
            woken = [j for j, row in rows if tx.update(row, ("awaiting",), "ready")]
            tx.note = f"woke {', '.join(woken)}" if woken else "0 rows"

        p.sql("wake_awaiters", f"UPDATE belay_jobs SET state='ready' WHERE state='awaiting' AND await=({signal})", run)

    def deliver(self, p: Program, signal: str, scope: str | None, awaiters: Sequence[str]) -> None:
        """§8.1 delivery: [lock_scope] → upsert_signal → wake_awaiters (scope None: without the lock)."""
        if scope is not None:
            self.lock_scope(p, scope)
        self.upsert_signal(p, signal)
        self.wake_awaiters(p, signal, awaiters)

    def signal_exists(self, p: Program, signal: str) -> None:
        row = self.r[signal]

        def run(tx: Tx) -> None:
            tx.reg = tx.read(row) == PRESENT
            tx.note = "present" if tx.reg else "absent"

        p.sql("signal_exists", f"SELECT 1 FROM belay_signals WHERE ({signal})", run)

    def clear_signal(self, p: Program, signal: str, *, query: str = "clear_signal", autocommit: bool = False) -> None:
        """DELETE the signal row (`query` "prune_signals": the §8.7 TTL prune deleting the same row).
        `autocommit`: the statement is its own transaction (it commits as it ends)."""
        row = self.r[signal]

        def run(tx: Tx) -> None:
            tx.note = "deleted" if tx.update(row, (PRESENT,), ABSENT) else "0 rows"
            if autocommit:
                tx.commit()

        where = f"({signal})" if query == "clear_signal" else "inserted_at < now - ttl"
        p.sql(query, f"DELETE FROM belay_signals WHERE {where}" + (" -- autocommit" if autocommit else ""), run)

    # --- §7 park rule -------------------------------------------------------------------------------

    def park_by_register(self, p: Program, job: str) -> None:
        """park_ready when signal_exists found the row (the register), else park_awaiting — fenced on
        the job still running."""
        row = self.r[job]

        def run(tx: Tx) -> None:
            if tx.reg:
                tx.update(row, ("running",), "ready")
                tx.note = "signal present → park_ready"
            else:
                tx.update(row, ("running",), "awaiting")
                tx.note = "signal absent → park_awaiting"

        p.sql("park", f"UPDATE belay_jobs SET state = ready|awaiting WHERE id={job} AND state='running'", run)

    def park(self, p: Program, job: str, signal: str, scope: str | None) -> None:
        """§7 await park: [lock_scope] → signal_exists → park_ready | park_awaiting."""
        if scope is not None:
            self.lock_scope(p, scope)
        self.signal_exists(p, signal)
        self.park_by_register(p, job)

    # --- §6 claims ----------------------------------------------------------------------------------

    def claim(self, p: Program, job: str, *, then: str | None = None) -> None:
        """claim_plain in autocommit: waits (polls) until the job is visibly ready and not locked."""
        row = self.r[job]

        def run(tx: Tx) -> str | None:
            if tx.read(row) != "ready" or tx.skip_locked(row):
                tx.wait(f"{job} claimable")
            tx.write(row, "running")
            tx.commit()
            tx.note = f"claimed {job}"
            return then

        p.sql(
            "claim_plain",
            f"UPDATE belay_jobs SET state='running' WHERE id IN (… {job} ready … FOR UPDATE SKIP LOCKED) -- autocommit",
            run,
        )

    # --- §8.4 children ------------------------------------------------------------------------------

    def children_states(self, p: Program, parent: str, children: Sequence[str], *, if_done: str) -> None:
        """The re-verify: jump to `if_done` when every child is terminal in this statement's view."""
        rows = [(c, self.r[c]) for c in children]

        def run(tx: Tx) -> str | None:
            states = [tx.read(row) for _, row in rows]
            done = all(_terminal(s) for s in states)
            tx.note = ", ".join(f"{c}={s}" for (c, _), s in zip(rows, states, strict=True)) + (
                " → all terminal" if done else ""
            )
            return if_done if done else None

        p.sql("children_states", f"SELECT id, state FROM belay_jobs WHERE parent_id={parent}", run)

    def count_incomplete_siblings(
        self, p: Program, parent: str, me: str, siblings: Sequence[str], *, if_any: str
    ) -> None:
        """The R1 anti-pattern: count the siblings still incomplete; jump to `if_any` if there are any."""
        rows = [(c, self.r[c]) for c in siblings if c != me]

        def run(tx: Tx) -> str | None:
            incomplete = [c for c, row in rows if not _terminal(tx.read(row))]
            tx.note = f"count = {len(incomplete)}" + (" → not the last: no signal" if incomplete else " → last")
            return if_any if incomplete else None

        p.sql(
            "count_siblings",
            f"SELECT count(*) FROM belay_jobs WHERE parent_id={parent} AND id<>{me} AND state NOT IN (terminal)",
            run,
        )

    def reconcile_children(self, p: Program, parent: str, children: Sequence[str]) -> None:
        """§8.4 backstop (R2): an awaiting parent whose children all exist and are terminal → ready."""
        prow = self.r[parent]
        rows = [self.r[c] for c in children]

        def run(tx: Tx) -> None:
            if all(_terminal(tx.read(row)) for row in rows) and tx.update(prow, ("awaiting",), "ready"):
                tx.note = f"woke {parent}"
            else:
                tx.note = "0 rows"

        p.sql(
            "reconcile_children",
            f"UPDATE belay_jobs p SET state='ready' WHERE p.id={parent} AND "
            "p.state='awaiting' AND all children terminal",
            run,
        )

    # --- §8.3 settlement -------------------------------------------------------------------------------

    def settle(self, p: Program) -> None:
        """workflow_members (a plain read, under the workflow lock), then release_held/doom_held — the
        apply statement is skipped when there is nothing to settle (label "settled": once per program)."""
        members = [(m, self.r[m], self.db.deps[m]) for m in self.db.workflow]

        def read(tx: Tx) -> str | None:
            verdict = settle(Member(m, tx.read(row), deps) for m, row, deps in members)
            changes = tuple(
                sorted(
                    [(self.r[m], "ready") for m in verdict.released]
                    + [(self.r[m], "cancelled") for m in verdict.doomed]
                )
            )
            tx.reg = changes
            names = {self.r[m]: m for m, _, _ in members}
            tx.note = ", ".join(f"{names[r]}→{s}" for r, s in changes) or "nothing to settle"
            return None if changes else "settled"

        def apply(tx: Tx) -> None:
            names = {self.r[m]: m for m, _, _ in members}
            done = [f"{names[row]}→{state}" for row, state in tx.reg if tx.update(row, ("held",), state)]
            tx.note = ", ".join(done) or "0 rows"

        p.sql("workflow_members", "SELECT id, wf_name, state, wf_deps FROM belay_jobs WHERE workflow_id=wf", read)
        p.sql(
            "release_held/doom_held",
            "UPDATE belay_jobs SET state=ready|cancelled WHERE id=ANY(…) AND state='held'",
            apply,
        )
        p.label("settled")

    # --- §8.6 operator commands ------------------------------------------------------------------------

    def job_header(self, p: Program, job: str) -> None:
        """The immutable facts read before locking (which workflow lock to take first)."""
        p.sql("job_header", f"SELECT id, workflow_id FROM belay_jobs WHERE id={job}", lambda tx: None)

    def lock_job(self, p: Program, job: str) -> None:
        row = self.r[job]

        def run(tx: Tx) -> None:
            tx.lock_row(row)
            tx.reg = tx.read(row)
            tx.note = f"{job} is {tx.reg}"

        p.sql("lock_job", f"SELECT id, state, … FROM belay_jobs WHERE id={job} FOR UPDATE", run)

    def retry_job(self, p: Program, job: str, state: str, *, if_not: str) -> None:
        """failed|cancelled → `state` ('held' for a dep-bearing member per §8.6, else 'ready')."""
        row = self.r[job]

        def run(tx: Tx) -> str | None:
            if tx.update(row, ("failed", "cancelled"), state):
                tx.note = f"{job}→{state}"
                return None
            tx.note = "0 rows (not retryable)"
            return if_not

        p.sql(
            "retry_job",
            f"UPDATE belay_jobs SET state='{state}', … WHERE id={job} AND state IN ('failed','cancelled')",
            run,
        )

    def request_cancel(self, p: Program, job: str, *, if_running: str | None = None) -> None:
        """§8.6: a running job is cancelled cooperatively (UPDATE … WHERE state='running')."""
        row = self.r[job]

        def run(tx: Tx) -> str | None:
            if tx.update(row, ("running",), "running"):
                tx.note = "cancel_requested=true"
                return if_running
            tx.note = "0 rows (not running)"
            return None

        p.sql("request_cancel", f"UPDATE belay_jobs SET cancel_requested=true WHERE id={job} AND state='running'", run)
