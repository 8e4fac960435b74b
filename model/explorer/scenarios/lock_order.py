"""Lock order: workflow advisory lock before signal-scope lock (contract §7 "Lock ordering MUST be
workflow-lock before signal-scope-lock; never the reverse").

One transaction takes both locks when it makes a workflow member *and* a child terminal together —
a chunk worker's AckMany (§6 chunked execution) or a reclaim sweep. Here chunk k acks workflow member
Mk and child Kk of an awaiting parent P in one transaction; a held member D depends on every Mk. Its
after-terminal steps (§7) settle the workflow under the workflow lock (which may release D) and deliver
`$children` to P under P's scope lock.

Variants:
  correct  every chunk settles first, then signals: row locks → workflow lock → scope lock
           (impl/store/client_store.py `_after_terminal`).
  broken   the last chunk's after-terminal path signals the parent first and settles afterwards
           (scope lock, then workflow lock). One chunk holds the workflow lock waiting for the scope
           lock while the other holds the scope lock waiting for the workflow lock: a deadlock, which
           PostgreSQL resolves by aborting one of the acks.
"""

from __future__ import annotations

from model.explorer.db import View
from model.explorer.program import Actor, Program
from model.explorer.protocols import Db, Sql
from model.explorer.scenarios.common import assemble
from model.explorer.search import Invariant, Liveness, Scenario

VARIANTS = ("correct", "broken")
WF = "belay_wf:wf"
SCOPE = "belay_sig:job:P"
SIGNAL = "sig(job:P,$children)"

HYPOTHESES = {
    "correct": """When every path takes the workflow lock before the scope lock, concurrent chunk acks
        never deadlock, settlement releases the dependent only when all its deps
        succeeded, and every ack finishes.""",
    "broken": """One path taking the scope lock before the workflow lock is enough for a deadlock: a chunk
        that settled first waits for the scope lock held by a chunk that signalled first, which waits for
        the workflow lock.""",
}


def chunk(s: Sql, name: str, jobs: list[str], *, reverse: bool) -> Actor:
    """AckMany of a workflow member and a child of P: the bulk UPDATE, then §7's after-terminal steps."""
    p = Program()
    s.ack_succeed_many(p, jobs)
    if reverse:
        s.deliver(p, SIGNAL, SCOPE, ["P"])
        s.lock_workflow(p, WF)
        s.settle(p)
    else:
        s.lock_workflow(p, WF)
        s.settle(p)
        s.deliver(p, SIGNAL, SCOPE, ["P"])
    p.commit()
    return p.build(name)


def settlement_releases_only_satisfied(dependent: str, deps: list[str]) -> Invariant:
    """I5's release rule on committed data."""

    def check(view: View) -> str | None:
        state = view.row(dependent)
        unmet = [f"{d}={view.row(d)}" for d in deps if view.row(d) != "succeeded"]
        if state in ("ready", "running") and unmet:
            return f"{dependent} is {state} while its deps are not all succeeded: {', '.join(unmet)}"
        if state == "cancelled":
            return f"{dependent} was doomed although no dep failed"
        return None

    return Invariant(
        "i5_settlement_consistent",
        "§11.5: Workflow releases occur only with satisfied deps; dooms only with a doomed dep",
        check,
    )


def scenario(variant: str = "correct", size: int = 2) -> Scenario:
    """`size` concurrent chunks (2 or 3); in `broken` the last one takes the locks in reverse."""
    if variant not in VARIANTS:
        raise ValueError(f"lock_order variants are {VARIANTS}, not {variant!r}")
    ks = range(1, size + 1)
    members, kids = [f"M{k}" for k in ks], [f"K{k}" for k in ks]
    db = Db()
    db.job("P", "awaiting")
    for m in members:
        db.job(m, "running", member=True)
    db.job("D", "held", deps=members)
    for c in kids:
        db.job(c, "running")
    db.signal(SIGNAL)
    db.lock(WF)
    db.lock(SCOPE)
    s = Sql(db)
    actors = [chunk(s, f"chunk{k}", [f"M{k}", f"K{k}"], reverse=variant == "broken" and k == size) for k in ks]
    return assemble(
        name="lock_order",
        variant=variant,
        size=size,
        db=db,
        actors=actors,
        title="Lock order: workflow lock before scope lock, vs one path in reverse",
        hypothesis=HYPOTHESES[variant],
        invariants=[settlement_releases_only_satisfied("D", members)],
        liveness=[
            Liveness(
                "settles_and_wakes",
                "§8.3/§8.4: the dependent is released and the parent woken",
                lambda v: v.row("D") == "ready" and v.row("P") == "ready",
            )
        ],
        expect="valid" if variant == "correct" else "invalid",
    )
