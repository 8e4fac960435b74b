"""Operator cancel of a running workflow member vs that member's own ack (contract §7 lock order,
§8.6 cancel) — a deadlock this explorer found in impl/store/client_store.py, fixed there since.

The lock order the implementation documents is workflow lock → job row locks → scope lock, with one
exception it relies on: an ack locks its running row (the fenced UPDATE) *before* settlement takes the
workflow lock, which is safe only if "nothing that holds a workflow lock ever waits on a running row"
(impl/store/worker_store.py). `PgStore._cancel` used to take the workflow lock and then `SELECT … FOR
UPDATE` on the job row whatever its state — including a running one.

Variants:
  broken Cancel(C1) as impl/store/client_store.py issued it before the fix: job_header → lock_workflow → lock_job (FOR UPDATE) →
         request_cancel, racing the worker's ack of C1: ack_succeed → lock_workflow → settlement.
         The ack holds C1's row lock and waits for the workflow lock; the cancel holds the workflow lock
         and waits for C1's row: a deadlock (PostgreSQL aborts one side with 40P01). Retry of a running
         member goes through the same `_lock_job` and has the same cycle.
  correct the cancel first tries `request_cancel` (UPDATE … WHERE state='running', row lock only, no
         workflow lock) and takes the workflow lock only when the job is not running — so no one holds
         the workflow lock while waiting on a running row. (impl/store/client_store.py now does this, and takes the
         row with SKIP LOCKED after the workflow lock, retrying while it is busy.)
"""

from __future__ import annotations

from model.explorer.db import Tx
from model.explorer.program import Actor, Program
from model.explorer.protocols import Db, Sql
from model.explorer.scenarios.common import assemble
from model.explorer.scenarios.lock_order import settlement_releases_only_satisfied
from model.explorer.search import Scenario
from model.rows import TERMINAL

VARIANTS = ("correct", "broken")
WF = "belay_wf:wf"

HYPOTHESES = {
    "broken": """Cancel takes the workflow lock before the job's row lock even for a running job, while an
        ack holds the running row's lock before it takes the workflow lock: the two can deadlock.""",
    "correct": """Requesting the cancel of a running job with a row lock alone, and taking the workflow lock
        only for jobs that are not running, removes the cycle.""",
}


def worker(s: Sql) -> Actor:
    """The worker acking C1: ack_succeed → lock_workflow → settlement → COMMIT."""
    p = Program()
    s.ack_succeed(p, "C1")
    s.lock_workflow(p, WF)
    s.settle(p)
    p.commit()
    return p.build("ack")


def operator(s: Sql, *, fixed: bool) -> Actor:
    """Cancel(C1)."""
    p = Program()
    if fixed:
        s.request_cancel(p, "C1", if_running="commit")
    s.job_header(p, "C1")
    s.lock_workflow(p, WF)
    s.lock_job(p, "C1")
    if not fixed:
        row = s.r["C1"]

        def cancel(tx: Tx) -> str | None:
            if tx.reg in TERMINAL:
                tx.note = "terminal → NotCancellable"
                return "commit"
            tx.update(row, ("running",), "running")
            tx.note = "running → cancel_requested=true"
            return None

        p.sql("request_cancel", "UPDATE belay_jobs SET cancel_requested=true WHERE id=C1 AND state='running'", cancel)
    p.label("commit").commit()
    return p.build("cancel")


def scenario(variant: str = "correct", size: int = 1) -> Scenario:
    if variant not in VARIANTS:
        raise ValueError(f"cancel_ack variants are {VARIANTS}, not {variant!r}")
    db = Db()
    db.job("C1", "running", member=True)
    db.job("D", "held", deps=["C1"])
    db.lock(WF)
    s = Sql(db)
    return assemble(
        name="cancel_ack",
        variant=variant,
        size=size,
        db=db,
        actors=[worker(s), operator(s, fixed=variant == "correct")],
        title="Cancel of a running workflow member vs its ack (workflow lock vs running row lock)",
        hypothesis=HYPOTHESES[variant],
        invariants=[settlement_releases_only_satisfied("D", ["C1"])],
        expect="invalid" if variant == "broken" else "valid",
    )
