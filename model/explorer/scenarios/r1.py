"""R1 — the last children completing concurrently (contract §7 step 2, §8.4, §11 race R1).

A parent P is parked awaiting (`job:P`, `$children`); its children C1…Cn are running and all ack
success at the same time. Each child's ack transaction is the §7 sequence: the fenced terminal UPDATE,
then the `$children` delivery under the scope lock, then COMMIT.

Variants:
  correct      every child signals unconditionally; the woken parent re-verifies (children_states)
               and parks again if a child is still incomplete — impl/store/client_store.py `_after_terminal` and
               impl/store/worker_store.py `_await_children`.
  broken       a child signals only when it counts no incomplete sibling ("I am the last"). Under READ
               COMMITTED the last two children each see the other's ack uncommitted, count 1, and
               neither signals: the parent is stranded.
  no_reverify  unconditional signals, but the parent trusts its first wake-up and continues while a
               sibling is still running — the other half of the lesson ("re-verify on wake").
"""

from __future__ import annotations

from model.explorer.program import Actor, Program
from model.explorer.protocols import Db, Sql
from model.explorer.scenarios.common import assemble, awaiters_eventually_run, children_done_only_when_terminal
from model.explorer.search import Scenario

VARIANTS = ("correct", "broken", "no_reverify")
SCOPE = "belay_sig:job:P"
SIGNAL = "sig(job:P,$children)"

HYPOTHESES = {
    "correct": """Signalling `$children` unconditionally and re-verifying on wake is safe and live: every
        interleaving of the children's ack transactions ends with the parent past its await, and the
        parent never continues while a child is incomplete.""",
    "broken": """Count-gating the signal strands the parent: there is an interleaving in which the two
        last children each count the other as incomplete (its ack is not yet committed) and neither
        signals, so the parent awaits forever with every child terminal.""",
    "no_reverify": """Unconditional signals without the re-verify are unsafe: the first child's signal
        wakes the parent, which continues while a sibling is still running.""",
}


def parent(s: Sql, children: list[str], *, reverify: bool) -> Actor:
    """P, parked awaiting `$children`: claimed when woken, then (re-verifying) await-children again."""
    p = Program()
    p.label("wake")
    s.claim(p, "P")
    if reverify:  # impl/store/worker_store.py _await_children
        s.children_states(p, "P", children, if_done="done")
        s.lock_scope(p, SCOPE)
        s.clear_signal(p, SIGNAL)
        s.children_states(p, "P", children, if_done="done")
        s.signal_exists(p, SIGNAL)
        s.park_by_register(p, "P")
        p.commit(then="wake")
        p.label("done").commit()
    return p.build("P")


def child(s: Sql, name: str, children: list[str], *, gated: bool) -> Actor:
    """A child's ack transaction: the terminal write, then (maybe) `$children` to P, then COMMIT."""
    p = Program()
    s.ack_succeed(p, name)
    if gated:
        s.count_incomplete_siblings(p, "P", name, children, if_any="commit")
    s.deliver(p, SIGNAL, SCOPE, ["P"])
    p.label("commit").commit()
    return p.build(name)


def scenario(variant: str = "correct", size: int = 2) -> Scenario:
    """`size` children (2 or 3) and their parent."""
    if variant not in VARIANTS:
        raise ValueError(f"r1 variants are {VARIANTS}, not {variant!r}")
    children = [f"C{i}" for i in range(1, size + 1)]
    db = Db()
    db.job("P", "awaiting")
    for c in children:
        db.job(c, "running")
    db.signal(SIGNAL)
    db.lock(SCOPE)
    s = Sql(db)
    p = parent(s, children, reverify=variant != "no_reverify")
    kids = [child(s, c, children, gated=variant == "broken") for c in children]
    return assemble(
        name="r1",
        variant=variant,
        size=size,
        db=db,
        actors=[p, *kids],
        title="R1: last children completing concurrently, `$children` to an awaiting parent",
        hypothesis=HYPOTHESES[variant],
        invariants=[children_done_only_when_terminal(p, children)],
        liveness=[awaiters_eventually_run(p)],
        expect="valid" if variant == "correct" else "invalid",
    )
