"""Pictures of explorer results for the notebooks: the state graph, and a counterexample as a sequence
diagram. Presentation only — the layouts are pure functions of a `Result`; matplotlib is imported
inside the drawing functions, so importing the explorer never loads it, and nothing here writes a file.

    draw_state_graph(result)          # BFS layers left to right, the counterexample path in red
    draw_sequence(result.counterexample)
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from model.explorer.search import Counterexample, Result
from model.explorer.trace import sequence

KIND_COLOURS = {"write": "#1f77b4", "read": "#7f7f7f", "lock": "#9467bd", "commit": "#2ca02c", "wait": "#d62728"}


def layered_positions(result: Result) -> dict[int, tuple[float, float]]:
    """x = BFS depth (the shortest distance from the initial state), y = rank within that layer."""
    layers: dict[int, list[int]] = {}
    for k, d in enumerate(result.depths):
        layers.setdefault(d, []).append(k)
    pos = {}
    for d, nodes in layers.items():
        n = len(nodes)
        for i, k in enumerate(nodes):
            pos[k] = (float(d), (i - (n - 1) / 2) / max(n, 1))
    return pos


def draw_state_graph(result: Result, ax: Any = None, *, title: str | None = None) -> Any:
    """The state graph: every reachable state, BFS layers left to right. The initial state is green, the
    counterexample's states and edges red, its last state (the violation, or where the strand ends) a
    red square; for a liveness counterexample, every state the goal is unreachable from is orange."""
    import matplotlib.pyplot as plt
    import networkx as nx

    if ax is None:
        _, ax = plt.subplots(figsize=(12, 5))
    g = result.graph()
    pos = layered_positions(result)
    cx = result.counterexample
    path = list(cx.states) if cx is not None else []
    on_path = set(path)
    stuck = cx.stuck_states if cx is not None else frozenset()
    nx.draw_networkx_edges(g, pos, ax=ax, edge_color="#c8c8c8", arrows=False, width=0.6)
    nx.draw_networkx_nodes(
        g,
        pos,
        ax=ax,
        nodelist=[k for k in g if k not in on_path and k != 0],
        node_size=14,
        node_color=["#ff9f1c" if k in stuck else "#4c72b0" for k in g if k not in on_path and k != 0],
    )
    nx.draw_networkx_nodes(g, pos, ax=ax, nodelist=[0], node_size=60, node_color="#2ca02c")
    if path:
        nx.draw_networkx_edges(
            g, pos, ax=ax, edgelist=list(pairwise(path)), edge_color="#d62728", width=2.0, arrows=True, arrowsize=8
        )
        nx.draw_networkx_nodes(g, pos, ax=ax, nodelist=path[1:-1], node_size=24, node_color="#d62728")
        nx.draw_networkx_nodes(g, pos, ax=ax, nodelist=[path[-1]], node_size=80, node_color="#d62728", node_shape="s")
    s = result.scenario
    ax.set_title(
        title or f"{s.key} (size {s.size}): {result.states} states, {result.transitions} transitions — {result.verdict}"
    )
    ax.set_xlabel("BFS depth (statements from the initial state)")
    ax.set_yticks([])
    return ax


def draw_sequence(cx: Counterexample, ax: Any = None, *, title: str | None = None) -> Any:
    """One lane per actor, one row per statement, time flowing down. Writes blue, reads grey, locks
    purple, commits green, waits red; rows after the point of no return (liveness) are shaded."""
    import matplotlib.pyplot as plt

    lanes, messages = sequence(cx)
    if ax is None:
        _, ax = plt.subplots(figsize=(3.2 * len(lanes) + 2, 0.42 * len(messages) + 1.2))
    x = {lane: i for i, lane in enumerate(lanes)}
    rows = len(messages)
    for lane, i in x.items():
        ax.plot([i, i], [0.5, rows + 0.5], color="#bbbbbb", lw=1, zorder=0)
        ax.text(i, 0.1, lane, ha="center", va="bottom", fontsize=10, fontweight="bold")
    for m in messages:
        if m.stuck:
            ax.axhspan(m.step - 0.5, m.step + 0.5, color="#fde0dd", zorder=-1)
        colour = KIND_COLOURS[m.kind]
        ax.plot([x[m.actor]], [m.step], marker="o", color=colour, ms=7, zorder=2)
        ax.text(
            x[m.actor] + 0.06,
            m.step,
            m.label,
            va="center",
            ha="left",
            fontsize=8,
            color=colour,
            style="italic" if m.kind == "wait" else "normal",
            zorder=3,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 0.6},
        )
    ax.set_xlim(-0.3, len(lanes) - 0.1 + 1.2)
    ax.set_ylim(rows + 0.8, -0.3)
    ax.set_yticks(range(1, rows + 1))
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(title or f"{cx.kind} counterexample: {cx.invariant} ({cx.length} statements)", fontsize=10)
    return ax
