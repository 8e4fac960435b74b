"""What the dashboard pages show, computed from rows: value previews, steps with running cost totals
against the budget (§8.2), the timeline of attempts, and the workflow DAG laid out in layers (§8.3).

Pure functions of their arguments (the caller passes `now`); the templates render the results with
autoescaping, so nothing computed here is ever trusted as HTML.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import networkx as nx

from model.envelope import EnvelopeError, decode
from model.rows import Job, Step
from model.settle import Member, settle
from model.store import over_budget

PREVIEW_CHARS = 400


def pretty(value: Any, limit: int = 20_000) -> str:
    """JSON text of a value (indented), cut at `limit` characters."""
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def preview_envelope(data: bytes | None, limit: int = PREVIEW_CHARS) -> str:
    """A one-line preview of a §2 envelope (JSON or ETF), or why it cannot be decoded."""
    if data is None:
        return "—"
    try:
        value = decode(data)
    except EnvelopeError as exc:
        return f"(undecodable: {exc})"
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def usd(micros: int | None) -> str:
    if micros is None:
        return "no cap"
    return f"${micros / 1_000_000:,.6f}".rstrip("0").rstrip(".") if micros else "$0"


@dataclass(frozen=True)
class StepRow:
    seq: int
    name: str
    preview: str
    usd_micros: int
    tokens: int
    total_usd_micros: int  # running totals, in journal order
    total_tokens: int
    over_budget: bool  # the running total exceeds a budget column here (§8.2: strictly greater)
    inserted_at: datetime


def step_rows(job: Job, steps: tuple[Step, ...]) -> list[StepRow]:
    rows, usd_total, tokens_total = [], 0, 0
    for s in sorted(steps, key=lambda s: s.seq):
        usd_total += s.usd_micros
        tokens_total += s.tokens
        rows.append(
            StepRow(
                s.seq,
                s.name,
                preview_envelope(s.value),
                s.usd_micros,
                s.tokens,
                usd_total,
                tokens_total,
                over_budget(usd_total, tokens_total, job.budget_usd_micros, job.budget_tokens),
                s.inserted_at,
            )
        )
    return rows


@dataclass(frozen=True)
class Mark:
    """One point of a job's timeline."""

    at: datetime
    label: str
    kind: str  # inserted | started | error | finished | now
    x: float = 0.0  # 0..1 position on the drawn axis


def timeline(job: Job, now: datetime) -> list[Mark]:
    """Inserted, the first start (started_at is set once, at the first claim), each failed attempt
    (belay_jobs.errors), and the finish — or now, for a job still in flight."""
    marks = [Mark(job.inserted_at, "inserted", "inserted")]
    for e in job.errors or []:
        if isinstance(e, dict) and e.get("at"):
            try:
                at = datetime.fromisoformat(str(e["at"]))
            except ValueError:
                continue
            marks.append(Mark(at, f"attempt {e.get('attempt', '?')}: {e.get('error', '')}", "error"))
    if job.started_at is not None:
        marks.append(Mark(job.started_at, "first attempt started", "started"))
    if job.finished_at is not None:
        marks.append(Mark(job.finished_at, job.state, "finished"))
    else:
        marks.append(Mark(max(now, job.inserted_at), f"now ({job.state})", "now"))
    order = {"inserted": 0, "started": 1, "error": 2, "finished": 3, "now": 4}
    marks.sort(key=lambda m: (m.at, order[m.kind]))
    t0, t1 = marks[0].at, marks[-1].at
    span = (t1 - t0).total_seconds() or 1.0
    return [Mark(m.at, m.label, m.kind, (m.at - t0).total_seconds() / span) for m in marks]


# --- workflow DAG ------------------------------------------------------------------------------

STATE_COLOURS = {
    "ready": "#3b82f6",
    "running": "#f59e0b",
    "awaiting": "#a855f7",
    "held": "#9ca3af",
    "paused": "#64748b",
    "succeeded": "#16a34a",
    "failed": "#dc2626",
    "cancelled": "#78350f",
    "missing": "#ffffff",
}
NODE_W, NODE_H, COL_GAP, ROW_GAP, MARGIN = 170, 54, 70, 22, 20


@dataclass(frozen=True)
class Node:
    name: str
    job_id: int | None  # None: a dep naming no stored member
    state: str
    ignore: tuple[str, ...]
    doomed: bool  # held and settlement would cancel it, or already cancelled because of a dep
    x: float
    y: float
    colour: str


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    ignored: bool  # the dep's outcome is one the target ignores (the edge is tolerated)
    path: str  # SVG path data


@dataclass(frozen=True)
class Dag:
    nodes: list[Node]
    edges: list[Edge]
    width: float
    height: float


def _doomed(members: list[Job]) -> set[str]:
    """Held members settlement would cancel now, plus cancelled members that never ran whose dep ended
    failed/cancelled without the matching ignore flag (settlement cancelled them: §8.3 "doomed")."""
    states = {m.wf_name: m.state for m in members}
    pending = settle(
        Member(m.wf_name, m.state, tuple(m.wf_deps or ()), tuple(m.wf_ignore or ()))
        for m in members
        if m.wf_name is not None  # every member of a workflow has a name (§8.3)
    ).doomed
    out = set(pending)
    for m in members:
        if m.state == "cancelled" and m.attempt == 0:
            for dep in m.wf_deps or ():
                if states.get(dep) in ("failed", "cancelled") and states[dep] not in (m.wf_ignore or ()):
                    out.add(m.wf_name or "")
    return out


def workflow_dag(members: list[Job]) -> Dag:
    """Layers from networkx's topological generations (a cycle, which §8.3 cannot settle, falls back
    to one layer); within a layer members are ordered by name."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    by_name: dict[str, Job] = {m.wf_name: m for m in members if m.wf_name is not None}  # members are named
    for name, member in by_name.items():
        graph.add_node(name)
        for dep in member.wf_deps or ():
            graph.add_edge(dep, name)
    try:
        layers = [sorted(layer) for layer in nx.topological_generations(graph)]
    except nx.NetworkXUnfeasible:
        layers = [sorted(graph.nodes)]
    doomed = _doomed(members)
    pos: dict[str, tuple[float, float]] = {}
    for col, layer in enumerate(layers):
        for row, name in enumerate(layer):
            pos[name] = (MARGIN + col * (NODE_W + COL_GAP), MARGIN + row * (NODE_H + ROW_GAP))
    nodes = []
    for name in graph.nodes:
        m = by_name.get(name)
        state = m.state if m else "missing"
        x, y = pos[name]
        nodes.append(
            Node(
                name,
                m.id if m else None,
                state,
                tuple(m.wf_ignore or ()) if m else (),
                name in doomed,
                x,
                y,
                STATE_COLOURS.get(state, "#ffffff"),
            )
        )
    edges = []
    for source, target in graph.edges:
        (x0, y0), (x1, y1) = pos[source], pos[target]
        sx, sy, tx, ty = x0 + NODE_W, y0 + NODE_H / 2, x1, y1 + NODE_H / 2
        mid = (sx + tx) / 2
        source_state = by_name[source].state if source in by_name else "missing"
        ignored = source_state in (by_name[target].wf_ignore or ())
        edges.append(
            Edge(
                source,
                target,
                ignored,
                f"M{sx:.0f},{sy:.0f} C{mid:.0f},{sy:.0f} {mid:.0f},{ty:.0f} {tx - 6:.0f},{ty:.0f}",
            )
        )
    width = MARGIN * 2 + max(len(layers), 1) * (NODE_W + COL_GAP) - COL_GAP
    height = MARGIN * 2 + max((len(layer) for layer in layers), default=1) * (NODE_H + ROW_GAP) - ROW_GAP
    return Dag(sorted(nodes, key=lambda n: (n.x, n.y)), edges, width, height)


# --- the queues page at many queues (issue 53) ------------------------------------------------------

from impl.ops.shapes import shown_name  # noqa: E402 - one rule for the CLI's tables and the dashboard

__all__ = ["shown_name"]
BACKLOG_STATES = ("ready", "awaiting", "held", "paused")  # unfinished and not running: work waiting
QUEUE_SORTS = ("name", "backlog", "failures")
QUEUE_VIEWS = ("auto", "tiles", "table")
TABLE_FROM = 13  # `auto` shows the compact table from this many queues on


def backlog(counts: dict[str, int]) -> int:
    return sum(counts.get(s, 0) for s in BACKLOG_STATES)


def queue_listing(tiles: list[Any], sort: str, text: str) -> list[Any]:
    """The tiles the filter keeps (case-insensitive substring of the name), in the chosen order: name;
    backlog (most first, then name); failures (most failed jobs first, then name)."""
    needle = text.casefold()
    kept = [t for t in tiles if needle in t.queue.casefold()]
    if sort == "backlog":
        return sorted(kept, key=lambda t: (-backlog(t.counts), t.queue))
    if sort == "failures":
        return sorted(kept, key=lambda t: (-t.counts.get("failed", 0), t.queue))
    return sorted(kept, key=lambda t: t.queue)
