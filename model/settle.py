"""Workflow settlement (contract §8.3) as a pure fixpoint function.

Over all jobs of one workflow: a held job with deps *releases* when every dep is succeeded, or is
terminal-failed/cancelled with the matching flag in its ignore list; it is *doomed* when any dep is
failed/cancelled without its flag. Iterate to a fixpoint, doomed jobs counting as cancelled for their
own dependents. A dep naming a job that does not exist (yet) is simply unmet.

The function never looks at anything but its argument, so the model, the Postgres store (which loads
the workflow's rows under the workflow advisory lock and applies the answer) and the invariant checker
all share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Member:
    """What settlement needs to know of one workflow job."""

    name: str
    state: str
    deps: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()  # subset of {"failed", "cancelled"}


@dataclass(frozen=True)
class Settlement:
    released: frozenset[str]  # held → ready
    doomed: frozenset[str]  # held → cancelled

    @property
    def empty(self) -> bool:
        return not self.released and not self.doomed


def _verdict(member: Member, states: dict[str, str]) -> str | None:
    """'release', 'doom' or None (still waiting) for one held member, given effective states."""
    satisfied = True
    for dep in member.deps:
        state = states.get(dep)
        if state == "succeeded":
            continue
        if state in ("failed", "cancelled"):
            if state in member.ignore:
                continue
            return "doom"
        satisfied = False  # pending, running, held, missing ...
    return "release" if satisfied else None


def settle(members: Iterable[Member]) -> Settlement:
    """The releases and dooms that bring a workflow to its settlement fixpoint (§8.3).

    Only held members that have deps are candidates (a held job without deps is an operator freeze,
    which settlement never touches). Releases do not cascade (a released job is not terminal);
    dooms do, because a doomed job counts as cancelled for its dependents.
    """
    members = list(members)
    states = {m.name: m.state for m in members}
    candidates = sorted((m for m in members if m.state == "held" and m.deps), key=lambda m: m.name)
    released: set[str] = set()
    doomed: set[str] = set()
    changed = True
    while changed:
        changed = False
        for m in candidates:
            if m.name in released or m.name in doomed:
                continue
            verdict = _verdict(m, states)
            if verdict == "doom":
                doomed.add(m.name)
                states[m.name] = "cancelled"
                changed = True
            elif verdict == "release":
                released.add(m.name)
                states[m.name] = "ready"
                changed = True
    return Settlement(frozenset(released), frozenset(doomed))
