"""R2 — the await-children protocol and its reconciler backstop (contract §8.4, §8.7, §11 race R2).

A running parent P awaits its children C1…Cn (§8.4): re-verify, clear the stale `$children` signal,
re-verify once more, then park by §7's rule (under the scope lock, park ready if the signal row is
present). Each child acks success and delivers `$children` in the same transaction. Meanwhile the
retention sweeper's signal-TTL prune (§8.7) deletes the signal row once, at any moment — an ordering
the wake protocol does not see (an operator's ClearSignal does the same).

Variants:
  broken       an SDK following §8.4 step by step as the contract text lists them — re-verify, clear and
               re-verify as statements of their own, then the §7 park transaction — and no reconciler.
               A child can complete and signal between the last re-verify and the park, and the prune can
               delete that signal before the park looks for it: the parent parks, stranded, every child
               terminal.
  correct      the same protocol with the §8.4 reconciler backstop (`reconcile_children`, a sweeper
               looping forever): the strand costs latency, not liveness.
  impl_order   no reconciler, but one transaction that takes the scope lock before the clear, as
               impl/store/worker_store.py `_await_children` does: no child's ack can commit between the
               re-verify and the park, so this ordering cannot strand even without the backstop.
  text_one_tx  §8.4's steps in the text's order inside the park transaction (no reconciler needed to
               show it): the DELETE of the stale signal takes the signal row's lock *before* the scope
               lock, the reverse of delivery's order (scope lock → signal row) — with two children, a
               deadlock.
"""

from __future__ import annotations

from model.explorer.program import Actor, Program
from model.explorer.protocols import Db, Sql
from model.explorer.scenarios.common import assemble, awaiters_eventually_run, children_done_only_when_terminal
from model.explorer.search import Scenario

VARIANTS = ("correct", "broken", "impl_order", "text_one_tx")
SCOPE = "belay_sig:job:P"
SIGNAL = "sig(job:P,$children)"

HYPOTHESES = {
    "correct": """With the reconciler backstop, every interleaving of the parent's await, the children's
        acks and a signal prune still lets the parent run: a stranded parent is found and woken.""",
    "broken": """Without the reconciler, the await-children protocol as the contract orders it can strand
        the parent: a child signals between the parent's last re-verify and its park, the prune deletes
        that signal, and the parent parks awaiting with every child terminal.""",
    "impl_order": """Taking the scope lock before the clear and the re-verify (impl/store/worker_store.py) closes
        the window: no child's ack can commit between the re-verify and the park, so the parent cannot
        be stranded even without the backstop.""",
    "text_one_tx": """Running the clear before the scope lock inside the park transaction inverts the
        delivery's lock order on the signal row: a child holding the scope lock waits for the parent's
        DELETE, the parent waits for the scope lock — a deadlock.""",
}


def parent(s: Sql, children: list[str], *, variant: str) -> Actor:
    """P: await-children (§8.4), parked until woken and claimed, then await-children again."""
    p = Program()
    p.label("await")
    if variant == "impl_order":  # impl/store/worker_store.py _await_children: one transaction, scope lock first
        s.children_states(p, "P", children, if_done="done")
        s.lock_scope(p, SCOPE)
        s.clear_signal(p, SIGNAL)
        s.children_states(p, "P", children, if_done="done")
    elif variant == "text_one_tx":  # the text's order, inside the park transaction
        s.children_states(p, "P", children, if_done="done")
        s.clear_signal(p, SIGNAL)
        s.children_states(p, "P", children, if_done="done")
    else:  # the text's steps as statements of their own (autocommit), then the park transaction
        s.children_states(p, "P", children, if_done="end")
        s.clear_signal(p, SIGNAL, autocommit=True)
        s.children_states(p, "P", children, if_done="end")
    s.park(p, "P", SIGNAL, SCOPE)  # §7: lock_scope (re-entrant if taken above) → signal_exists → park
    p.commit()
    s.claim(p, "P", then="await")
    p.label("done").commit()
    return p.build("P")


def child(s: Sql, name: str) -> Actor:
    p = Program()
    s.ack_succeed(p, name)
    s.deliver(p, SIGNAL, SCOPE, ["P"])
    p.commit()
    return p.build(name)


def pruner(s: Sql) -> Actor:
    """The §8.7 retention sweep deleting signals past their TTL — once, at any moment."""
    p = Program()
    s.clear_signal(p, SIGNAL, query="prune_signals")
    p.commit()
    return p.build("prune")


def reconciler(s: Sql, children: list[str]) -> Actor:
    """The §8.4 backstop: a sweeper running reconcile_children forever."""
    p = Program()
    s.reconcile_children(p, "P", children)
    p.commit(then="start")
    return p.build("reconcile", daemon=True)


def scenario(variant: str = "correct", size: int = 1) -> Scenario:
    """`size` children (1 or 2), the parent, the prune and (correct) the reconciler."""
    if variant not in VARIANTS:
        raise ValueError(f"r2 variants are {VARIANTS}, not {variant!r}")
    children = [f"C{i}" for i in range(1, size + 1)]
    db = Db()
    db.job("P", "running")
    for c in children:
        db.job(c, "running")
    db.signal(SIGNAL)
    db.lock(SCOPE)
    s = Sql(db)
    p = parent(s, children, variant=variant)
    actors = [p, *(child(s, c) for c in children), pruner(s)]
    if variant == "correct":
        actors.append(reconciler(s, children))
    return assemble(
        name="r2",
        variant=variant,
        size=size,
        db=db,
        actors=actors,
        title="R2: await-children against a vanishing signal, with and without the reconciler",
        hypothesis=HYPOTHESES[variant],
        invariants=[children_done_only_when_terminal(p, children)],
        liveness=[awaiters_eventually_run(p)],
        expect="invalid" if variant in ("broken", "text_one_tx") else "valid",
    )
