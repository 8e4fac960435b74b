"""Operator retry of a workflow dependent (contract §8.6 "Retry", §8.3 settlement, §11.5).

Workflow wf: A (no deps) failed, so settlement doomed its dependent D (deps A) to cancelled. An operator
retries D while another retries A; a worker runs A (to success) once it is ready, and another worker
runs D whenever D is ready.

Variants:
  correct  §8.6: a dep-bearing member is retried to *held*, then settled under the workflow lock in the
           same transaction — re-doomed if A is still failed, left held if A is pending (A's own
           settlement releases it later), released if A already succeeded (impl/store/client_store.py `_retry`).
  broken   retry sends D straight to ready without the re-hold and the settlement: D is claimed and
           runs beside its failed dependency.
"""

from __future__ import annotations

from model.explorer.db import View
from model.explorer.program import Actor, Program
from model.explorer.protocols import Db, Sql
from model.explorer.scenarios.common import assemble
from model.explorer.search import Invariant, Liveness, Scenario

VARIANTS = ("correct", "broken")
WF = "belay_wf:wf"

HYPOTHESES = {
    "correct": """Re-holding the retried dependent and settling it under the workflow lock means it never
        becomes ready, let alone runs, unless its dependency succeeded — in every interleaving with the
        dependency's own retry and run — and a held dependent with a satisfied dep is always released.""",
    "broken": """Retrying a dependent straight to ready lets it run beside its failed dependency.""",
}


def retry(s: Sql, job: str, *, rehold: bool, actor: str) -> Actor:
    """Operator Retry(job), as impl/store/client_store.py `_retry` issues it (`rehold` False: the pre-§8.6 bug)."""
    p = Program()
    s.job_header(p, job)
    s.lock_workflow(p, WF)
    s.lock_job(p, job)
    has_deps = bool(s.db.deps[job])
    s.retry_job(p, job, "held" if (has_deps and rehold) else "ready", if_not="commit")
    if rehold:
        s.settle(p)
    p.label("commit").commit()
    return p.build(actor)


def run(s: Sql, job: str, *, actor: str) -> Actor:
    """A worker: claim the job once it is ready, ack success, settle (§7 after-terminal), COMMIT."""
    p = Program()
    s.claim(p, job)
    s.ack_succeed(p, job)
    s.lock_workflow(p, WF)
    s.settle(p)
    p.commit()
    return p.build(actor)


def no_run_beside_failed_dep(dependent: str, dep: str) -> Invariant:
    def check(view: View) -> str | None:
        state = view.row(dependent)
        if state in ("ready", "running", "succeeded") and view.row(dep) != "succeeded":
            return f"{dependent} is {state} while its dep {dep} is {view.row(dep)}"
        return None

    return Invariant(
        "i5_settlement_consistent",
        "§11.5: Workflow releases occur only with satisfied deps (§8.6: a retried dependent is "
        "re-held and settled, never sent straight to ready)",
        check,
    )


def held_with_met_deps_released(dependent: str, dep: str) -> Liveness:
    return Liveness(
        "held_members_settle",
        "§8.3: a held member whose deps are satisfied is eventually released",
        goal=lambda v: not (v.row(dependent) == "held" and v.row(dep) == "succeeded"),
    )


def scenario(variant: str = "correct", size: int = 1) -> Scenario:
    if variant not in VARIANTS:
        raise ValueError(f"settlement variants are {VARIANTS}, not {variant!r}")
    rehold = variant == "correct"
    db = Db()
    db.job("A", "failed", member=True)
    db.job("D", "cancelled", deps=["A"])
    db.lock(WF)
    s = Sql(db)
    actors = [
        retry(s, "D", rehold=rehold, actor="retry D"),
        retry(s, "A", rehold=rehold, actor="retry A"),
        run(s, "A", actor="run A"),
        run(s, "D", actor="run D"),
    ]
    return assemble(
        name="settlement",
        variant=variant,
        size=size,
        db=db,
        actors=actors,
        title="§8.6 operator retry of a dependent: re-hold and settle, vs straight to ready",
        hypothesis=HYPOTHESES[variant],
        invariants=[no_run_beside_failed_dep("D", "A")],
        liveness=[held_with_met_deps_released("D", "A")],
        expect="valid" if rehold else "invalid",
    )
