"""No import cycle among the project's modules (issue 18; docs/architecture.md "Layers"), impl/'s layers
(issue 55: docs/architecture.md "Layout of impl/"), and no module over 600 lines.

The graph is built from source text with `ast` (every import statement anywhere in a module: top
level, inside functions and under `if TYPE_CHECKING:` all count, so a cycle cannot hide behind a
deferred import) and checked with networkx. `from pkg import name` points at `pkg.name` when that
is a module of ours, else at `pkg`. The builder is a plain function of a {module: source} mapping,
so a planted cycle proves it catches what it claims to.

impl/ is a stack of layers (`IMPL_LAYERS`, bottom to top): a module imports its own layer and the
layers below it, never one above. The same stack is the diagram of docs/architecture.md, and the
entries of impl/ (its packages and top-level modules) are exactly the diagram's. Each check is a function
of data (a graph, a {path: lines} mapping, a folder, a document), and the planted cases below prove each
one fails on what it claims to catch.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("model", "impl", "properties", "soak", "bench", "tests")
MAX_LINES = 600
# The packages whose every module has at most MAX_LINES lines (issue 55).
SIZE_CHECKED = ("impl", "soak")
# impl/'s layers, bottom to top, each with its entries in impl/ (a package `name/` or a module `name.py`).
IMPL_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("provision", ("provision/",)),
    ("store", ("store/",)),
    ("sdk", ("client.py", "worker.py", "flag.py")),
    ("telemetry", ("telemetry/",)),
    ("runtime", ("runtime/",)),
    ("http", ("http/",)),
    ("ops", ("ops/",)),
    ("testing", ("testing.py",)),
)
# soak/'s parts, bottom to top (docs/architecture.md "soak/ by part"): the history recorder, the judges, the
# fault injectors, the workload (driver, scenarios), the report, then the entry points at the top.
SOAK_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("record", ("record/",)),
    ("judges", ("judges/",)),
    ("faults", ("faults/",)),
    ("workload", ("workload/",)),
    ("report", ("report/",)),
    ("top", ("run.py", "hook.py", "reference_worker.py", "refine_planted.py", "broken/")),
)
ARCHITECTURE = ROOT / "docs" / "architecture.md"


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


# --- no module over MAX_LINES lines -------------------------------------------------------------------


def module_sizes(root: Path = ROOT, packages: tuple[str, ...] = SIZE_CHECKED) -> dict[str, int]:
    """{path relative to root: line count} for every .py file under the given packages."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text().splitlines())
        for package in packages
        for path in sorted((root / package).rglob("*.py"))
    }


def oversized(sizes: dict[str, int], limit: int = MAX_LINES) -> dict[str, int]:
    return {name: n for name, n in sizes.items() if n > limit}


def test_no_module_of_the_checked_packages_exceeds_600_lines():
    sizes = module_sizes()
    assert len(sizes) > 50, f"the scan found too few modules to prove anything: {len(sizes)}"
    assert not oversized(sizes), f"modules over {MAX_LINES} lines: {oversized(sizes)}"


def test_the_size_rule_names_a_module_of_601_lines(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "small.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "pkg" / "sub" / "grown.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert oversized(module_sizes(tmp_path, ("pkg",))) == {"pkg/sub/grown.py": MAX_LINES + 1}


# --- impl/'s layers: imports point down -----------------------------------------------------------------


def module_prefix(entry: str, package: str = "impl") -> str:
    """The dotted module (or package) an entry of impl/ names: `store/` -> impl.store, `client.py` -> impl.client."""
    return f"{package}." + entry.removesuffix("/").removesuffix(".py")


def layer_of(
    module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = IMPL_LAYERS, package: str = "impl"
) -> int | None:
    """The index (0 = bottom) of the layer holding `module`, None when no layer does."""
    for i, (_, entries) in enumerate(layers):
        for entry in entries:
            prefix = module_prefix(entry, package)
            if module == prefix or module.startswith(prefix + "."):
                return i
    return None


def upward_imports(
    graph: nx.DiGraph, layers: tuple[tuple[str, tuple[str, ...]], ...] = IMPL_LAYERS, package: str = "impl"
) -> list[tuple[str, str]]:
    """Every import edge between a package's layers that points up (from a lower layer to a higher one)."""
    out = []
    for a, b in graph.edges:
        la, lb = layer_of(a, layers, package), layer_of(b, layers, package)
        if la is not None and lb is not None and lb > la:
            out.append((a, b))
    return sorted(out)


def unlayered(
    modules, layers: tuple[tuple[str, tuple[str, ...]], ...] = IMPL_LAYERS, package: str = "impl"
) -> list[str]:
    """The modules of a package (other than the package itself) that belong to no layer."""
    return sorted(m for m in modules if m.startswith(package + ".") and layer_of(m, layers, package) is None)


def test_imports_between_soak_parts_point_one_way():
    """soak/ by part (issue 55): record → judges → faults → workload → report → entry points; a judge never
    imports the harness that drives or faults the run (Jepsen's checker is separate from its nemesis)."""
    graph = project_graph()
    assert not unlayered(graph.nodes, SOAK_LAYERS, "soak"), unlayered(graph.nodes, SOAK_LAYERS, "soak")
    up = upward_imports(graph, SOAK_LAYERS, "soak")
    assert not up, "imports pointing up soak/'s parts:\n" + "\n".join(f"{a} -> {b}" for a, b in up)
    assert graph.has_edge("soak.run", "soak.hook") and {layer_of(m, SOAK_LAYERS, "soak") for m in graph.nodes} >= set(
        range(len(SOAK_LAYERS))
    )


def test_a_judge_importing_a_fault_injector_is_named():
    sources = {
        "soak": "",
        "soak.judges": "",
        "soak.judges.checker": "def f():\n    from soak.faults.proxy import Proxy\n",
        "soak.faults": "",
        "soak.faults.proxy": "class Proxy: ...\n",
    }
    graph = import_graph(sources)
    assert upward_imports(graph, SOAK_LAYERS, "soak") == [("soak.judges.checker", "soak.faults.proxy")]
    assert unlayered(["soak.extra.x"], SOAK_LAYERS, "soak") == ["soak.extra.x"]


def test_imports_between_impl_layers_point_down():
    graph = project_graph()
    assert not unlayered(graph.nodes), f"impl modules in no layer of IMPL_LAYERS: {unlayered(graph.nodes)}"
    assert not upward_imports(graph), "imports pointing up impl/'s layers:\n" + "\n".join(
        f"{a} ({IMPL_LAYERS[layer_of(a) or 0][0]}) -> {b} ({IMPL_LAYERS[layer_of(b) or 0][0]})"
        for a, b in upward_imports(graph)
    )
    # the layers are really used: the top imports the bottom, and every layer has a module in the graph
    assert graph.has_edge("impl.ops.cli", "impl.runtime") and graph.has_edge("impl.client", "impl.store")
    assert {layer_of(m) for m in graph.nodes} >= set(range(len(IMPL_LAYERS)))


def test_a_planted_upward_import_is_found_even_inside_a_function():
    sources = {
        "impl": "",
        "impl.store": "",
        "impl.store.rows": "def f():\n    from impl.runtime.node import Worker\n    return Worker\n",
        "impl.runtime": "",
        "impl.runtime.node": "from impl.store import rows\n",
        "impl.client": "import impl.store.rows\n",
        "impl.stray": "",
    }
    graph = import_graph(sources)
    assert upward_imports(graph) == [("impl.store.rows", "impl.runtime.node")]
    assert unlayered(graph.nodes) == ["impl.stray"]
    # one layer: the same imports are sideways, not up
    flat = (("all", ("store/", "runtime/", "client.py", "stray.py")),)
    assert upward_imports(graph, flat) == [] and unlayered(graph.nodes, flat) == []


# --- the diagram of docs/architecture.md is the folder list of impl/ ---------------------------------------


def impl_entries(impl: Path = ROOT / "impl") -> set[str]:
    """impl/'s packages (`name/`, a folder with an __init__.py) and top-level modules (`name.py`)."""
    out = {p.name + "/" for p in impl.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    out |= {p.name for p in impl.glob("*.py") if p.name != "__init__.py"}
    stray = {p.name + "/" for p in impl.iterdir() if p.is_dir() and p.name != "__pycache__"} - out
    return out | {f"{name} (no __init__.py)" for name in stray}


DIAGRAM_ROW = re.compile(r"^\s*([a-z_]+)\s+│\s*([^│]+?)\s*│")


def documented_layers(markdown: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The layer diagram of the "## Layout of impl/" section (its first fenced block): rows
    `layer │ entries │ what they hold`, top to bottom; returned bottom to top like IMPL_LAYERS."""
    section = markdown.split("## Layout of impl/", 1)[1]
    block = section.split("```", 2)[1]
    rows = []
    for line in block.splitlines():
        m = DIAGRAM_ROW.match(line)
        if m and m.group(1) != "layer":
            rows.append((m.group(1), tuple(m.group(2).split())))
    return tuple(reversed(rows))


def diagram_mismatch(
    documented: tuple[tuple[str, tuple[str, ...]], ...],
    declared: tuple[tuple[str, tuple[str, ...]], ...],
    entries: set[str],
) -> list[str]:
    """What differs between the documented diagram, the declared layers and impl/'s entries."""
    problems = []
    if documented != declared:
        problems.append(f"the diagram's layers {documented} are not IMPL_LAYERS {declared}")
    named = {e for _, es in documented for e in es}
    problems += [f"{e} is in impl/ but not in the diagram" for e in sorted(entries - named)]
    problems += [f"{e} is in the diagram but not in impl/" for e in sorted(named - entries)]
    return problems


def test_the_layer_diagram_of_the_architecture_document_is_impl_s_folder_list():
    documented = documented_layers(ARCHITECTURE.read_text())
    assert len(documented) == len(IMPL_LAYERS), documented
    assert not diagram_mismatch(documented, IMPL_LAYERS, impl_entries())


def test_an_undocumented_folder_or_a_reordered_diagram_is_named(tmp_path):
    impl = tmp_path / "impl"
    for name in ("store", "runtime", "extra"):
        (impl / name).mkdir(parents=True)
        (impl / name / "__init__.py").write_text("")
    (impl / "loose").mkdir()  # a folder that is no package
    (impl / "client.py").write_text("")
    (impl / "__init__.py").write_text("")
    declared = (("store", ("store/",)), ("sdk", ("client.py",)), ("runtime", ("runtime/",)))
    doc = (
        "# x\n\n## Layout of impl/\n\n```\nlayer   │ entries   │ holds\n"
        "runtime │ runtime/  │ the runtime\nsdk     │ client.py │ the SDK\nstore   │ store/    │ the store\n```\n"
    )
    documented = documented_layers(doc)
    assert documented == declared
    assert diagram_mismatch(documented, declared, impl_entries(impl)) == [
        "extra/ is in impl/ but not in the diagram",
        "loose/ (no __init__.py) is in impl/ but not in the diagram",
    ]
    reordered = doc.replace("runtime │ runtime/  │", "TOP").replace("store   │ store/    │", "runtime │ runtime/  │")
    reordered = documented_layers(reordered.replace("TOP", "store   │ store/    │"))
    assert [name for name, _ in reordered] == ["runtime", "sdk", "store"]
    assert diagram_mismatch(reordered, declared, {"store/", "client.py", "runtime/"}) == [
        f"the diagram's layers {reordered} are not IMPL_LAYERS {declared}"
    ]
