"""No import cycle among the project's modules (issue 18; docs/architecture.md "Layers").

The graph is built from source text with `ast` (every import statement anywhere in a module: top
level, inside functions and under `if TYPE_CHECKING:` all count, so a cycle cannot hide behind a
deferred import) and checked with networkx. `from pkg import name` points at `pkg.name` when that
is a module of ours, else at `pkg`. The builder is a plain function of a {module: source} mapping,
so a planted cycle proves it catches what it claims to.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("model", "impl", "properties", "soak", "bench", "tests")


def project_sources(root: Path = ROOT) -> dict[str, str]:
    """{dotted module name: source} for every .py file of the project's packages (+ conftest)."""
    out: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path.read_text()
    out["conftest"] = (root / "conftest.py").read_text()
    return out


def import_graph(sources: dict[str, str]) -> nx.DiGraph:
    """module -> module it imports, restricted to the modules in `sources`."""
    graph = nx.DiGraph()
    graph.add_nodes_from(sources)
    for module, source in sources.items():
        is_package = any(other.startswith(module + ".") for other in sources)  # an __init__
        tree = ast.parse(source, filename=module)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in sources else base)
            for target in targets:
                # `import a.b.c` loads a.b.c; point at the deepest module of ours on that path
                parts = target.split(".")
                while parts and ".".join(parts) not in sources:
                    parts.pop()
                if parts and ".".join(parts) != module:
                    graph.add_edge(module, ".".join(parts))
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """Every strongly connected component with more than one module (each holds a cycle)."""
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


@cache
def project_graph() -> nx.DiGraph:
    return import_graph(project_sources())


def test_the_project_has_no_import_cycle():
    graph = project_graph()
    found = cycles(graph)
    detail = []
    for component in found:
        cycle = nx.find_cycle(graph.subgraph(component))
        detail.append(" -> ".join([a for a, _ in cycle] + [cycle[0][0]]))
    assert not found, "import cycles:\n" + "\n".join(detail)


def test_the_graph_sees_the_modules_and_the_layering():
    graph = project_graph()
    assert graph.has_edge("impl.store.client_store", "impl.store.worker_store")
    assert graph.has_edge("impl.store.client_store", "model.ops")  # `from model import ops`
    assert graph.has_edge("model.ops", "model.validate")
    # the layers: nothing in model/ imports impl/, properties/, soak/ or bench/
    upward = [(a, b) for a, b in graph.edges if a.startswith("model") and not b.startswith("model")]
    assert not upward, upward


def test_a_planted_cycle_is_found_even_behind_a_function_level_import():
    sources = {
        "pkg": "",
        "pkg.a": "from pkg.b import thing\n",
        "pkg.b": "def thing():\n    from pkg import a\n    return a\n",
        "pkg.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n",
        "pkg.d": "import pkg.c\n",
    }
    assert cycles(import_graph(sources)) == [["pkg.a", "pkg.b"]]
    sources["pkg.a"] += "import pkg.d\n"
    sources["pkg.c"] = sources["pkg.c"]  # c -> a (relative, under TYPE_CHECKING), a -> d -> c
    assert cycles(import_graph(sources)) == [["pkg.a", "pkg.b", "pkg.c", "pkg.d"]]
