"""Counterexamples as text a person can follow, and as data a sequence diagram is drawn from.

    print(format_trace(result.counterexample))

     #  actor  statement        what it saw / did                      effect
     1  C1     ack_succeed      1 row                                  C1 locks row C1 · C1 writes C1=succeeded
     2  C1     count_siblings   count = 1 → not the last: no signal
     …
     5  C1     commit                                                  C1 commits C1: running→succeeded · …

Each line shows what changed in the step: rows whose committed value changed (the commit that made
them visible), uncommitted writes appearing, and locks taken or released. Liveness counterexamples mark
the first step after which the goal can no longer be reached with `✗`; a deadlock ends with the
statements left waiting, marked `⏸`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from model.explorer.search import Counterexample, Result, TraceStep


def _effects(before: TraceStep | None, step: TraceStep, initial: dict[str, Any] | None = None) -> list[str]:
    prev_rows = dict(before.committed) if before else (initial or {})
    prev_locks = dict(before.locks) if before else {}
    prev_pending = {r: (w, v) for r, w, v in before.uncommitted} if before else {}
    out = []
    changed = [f"{r}: {prev_rows.get(r)}→{v}" for r, v in step.committed if prev_rows.get(r, v) != v]
    if changed:
        out.append("visible " + ", ".join(changed))
    for r, w, v in step.uncommitted:
        if prev_pending.get(r) != (w, v):
            out.append(f"writes {r}={v} (uncommitted)")
    locks = dict(step.locks)
    taken = [k for k in locks if k not in prev_locks]
    released = [k for k in prev_locks if k not in locks]
    if taken:
        out.append("takes " + ", ".join(taken))
    if released:
        out.append("releases " + ", ".join(released))
    return out


def format_trace(cx: Counterexample, initial: dict[str, Any] | None = None) -> str:
    """The counterexample as a numbered table, one statement a line, then the violated property."""
    if cx is None:
        return "no counterexample"
    rows = [("#", "actor", "statement", "what it saw / did", "effect")]
    before = None
    for i, step in enumerate(cx.trace, 1):
        mark = "✗" if cx.stuck_from is not None and i - 1 == cx.stuck_from else ""
        rows.append((f"{mark}{i}", step.actor, step.statement, step.note, " · ".join(_effects(before, step, initial))))
        before = step
    for actor, statement, holder, lock in cx.blocked:
        rows.append(("⏸", actor, statement, f"waits for {holder}", f"on {lock}"))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    lines = ["  ".join(r[c].ljust(widths[c]) if c < 4 else r[c] for c in range(5)).rstrip() for r in rows]
    lines.append("")
    lines.append(f"{cx.kind} violation of {cx.invariant}: {cx.message}")
    if cx.stuck_from is not None:
        lines.append(
            f"(✗ marks step {cx.stuck_from + 1}: from there on the goal is unreachable; "
            f"{len(cx.trace) - cx.stuck_from - 1} more steps show where it ends)"
        )
    return "\n".join(lines)


def format_result(result: Result) -> str:
    """The summary line, the hypothesis and (if any) the trace."""
    s = result.scenario
    parts = [result.summary(), f"hypothesis: {s.hypothesis}"]
    if result.counterexample is not None:
        initial = dict(zip(s.layout.rows, s.initial[s.layout.row0 : s.layout.own0], strict=True))
        parts.append(format_trace(result.counterexample, initial))
    return "\n".join(parts)


@dataclass(frozen=True)
class Message:
    """One row of a sequence diagram: `actor` does `label` at `step`; `kind` says how to draw it."""

    step: int
    actor: str
    label: str
    kind: str  # "write" | "read" | "lock" | "commit" | "wait"
    stuck: bool


def sequence(cx: Counterexample) -> tuple[list[str], list[Message]]:
    """Lanes (actors, in order of first appearance) and one message per trace step."""
    lanes: list[str] = []
    messages = []
    for i, step in enumerate(cx.trace, 1):
        if step.actor not in lanes:
            lanes.append(step.actor)
        name = step.statement
        kind = (
            "commit"
            if name == "commit"
            else "lock"
            if name.startswith("lock_")
            else "read"
            if name in ("children_states", "signal_exists", "count_siblings", "workflow_members", "job_header")
            else "write"
        )
        label = f"{name}: {step.note}" if step.note else name
        messages.append(Message(i, step.actor, label, kind, cx.stuck_from is not None and i - 1 >= cx.stuck_from))
    for j, (actor, statement, holder, lock) in enumerate(cx.blocked, len(cx.trace) + 1):
        messages.append(Message(j, actor, f"{statement}: waits for {holder} ({lock})", "wait", True))
    return lanes, messages
