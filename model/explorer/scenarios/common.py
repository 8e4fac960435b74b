"""Shared pieces of the scenarios: assembling a `Scenario`, and the named properties several share."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from model.explorer.db import View
from model.explorer.program import Actor
from model.explorer.protocols import PRESENT, Db
from model.explorer.search import Invariant, Liveness, Scenario
from model.rows import TERMINAL


def assemble(
    *,
    name: str,
    variant: str,
    title: str,
    hypothesis: str,
    db: Db,
    actors: Sequence[Actor],
    invariants: Sequence[Invariant] = (),
    liveness: Sequence[Liveness] = (),
    expect: str,
    size: int,
) -> Scenario:
    layout = db.layout(a.name for a in actors)
    return Scenario(
        name,
        variant,
        title,
        " ".join(hypothesis.split()),
        layout,
        db.world(layout),
        tuple(actors),
        tuple(invariants),
        tuple(liveness),
        expect,
        size,
    )


def finished(actor: Actor) -> Callable[[View], bool]:
    """Has `actor` run its program to the end?"""
    name, end = actor.name, actor.end
    return lambda view: view.pc(name) == end


def children_done_only_when_terminal(parent: Actor, children: Sequence[str]) -> Invariant:
    """The parent passes its await-children only once every child is terminal (§8.4 re-verify)."""
    done = finished(parent)

    def check(view: View) -> str | None:
        if done(view):
            incomplete = [f"{c}={view.row(c)}" for c in children if view.row(c) not in TERMINAL]
            if incomplete:
                return f"{parent.name} went past its await while {', '.join(incomplete)}"
        return None

    return Invariant(
        "children_done_only_when_terminal",
        "§8.4: await-children re-verifies: a parent continues only when all its children are terminal",
        check,
    )


def no_lost_wakeup(waiters: Sequence[str], signal: str) -> Invariant:
    """I9's first rule: never a job awaiting a signal whose row is present (committed data)."""

    def check(view: View) -> str | None:
        if view.row(signal) == PRESENT:
            lost = [w for w in waiters if view.row(w) == "awaiting"]
            if lost:
                return f"{', '.join(lost)} awaiting although signal {signal} is present (a lost wake-up)"
        return None

    return Invariant(
        "i9_no_lost_wakeup",
        "§11.9: Awaiting jobs with a delivered signal eventually run — never awaiting while the "
        "signal row exists (lock-serialized wake + persistent signals)",
        check,
    )


def awaiters_eventually_run(*awaiters: Actor) -> Liveness:
    """I9 over the graph: from every reachable state, every awaiter can still get to run."""
    done = [finished(a) for a in awaiters]
    names = ", ".join(a.name for a in awaiters)
    return Liveness(
        "i9_awaiters_eventually_run",
        f"§11.9: Awaiting jobs with a delivered signal eventually run ({names})",
        lambda view: all(d(view) for d in done),
    )
