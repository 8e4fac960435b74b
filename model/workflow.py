"""Workflow graph checks (contract §8.3): deps must name members, and must not form a cycle.

Pure and shared by the model and the Postgres store, so both refuse the same inputs with the same
message. Uses networkx for the cycle search, imported on the first workflow checked: a worker process
that never enqueues a workflow does not pay its import (~85 ms of every `belay worker` start).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from model.ops import InvalidInput, WorkflowMember

if TYPE_CHECKING:
    import networkx as nx


def check_graph(workflow_id: str, members: Iterable[WorkflowMember], existing: Iterable[str] = ()) -> None:
    """Refuse a member set with a dangling dep, a name clash with stored members, or a cycle."""
    import networkx as nx

    members = list(members)
    existing = set(existing)
    names = [m.name for m in members]
    clash = sorted(set(names) & existing)
    if clash:
        raise InvalidInput(f"workflow {workflow_id!r} already has members named {clash}")
    known = set(names) | existing
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(names)
    for m in members:
        missing = [d for d in m.deps if d not in known]
        if missing:
            raise InvalidInput(
                f"workflow {workflow_id!r}: member {m.name!r} depends on {missing}, which name no member "
                "of this workflow"
            )
        graph.add_edges_from((dep, m.name) for dep in m.deps)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return
    path = " -> ".join([edge[0] for edge in cycle] + [cycle[0][0]])
    raise InvalidInput(f"workflow {workflow_id!r} has a dependency cycle: {path}")
