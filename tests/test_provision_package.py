"""impl/provision/ stays a package of small rooms (issue 18; docs/architecture.md "Provisioning").

Each module holds one responsibility and at most 600 lines, and
`impl.provision` keeps answering every name the repository imports from it, so callers never need to
know which module a name lives in.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import impl.provision

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "impl" / "provision"
MAX_LINES = 600
# Where the repository's code lives (the places that import impl.provision).
SOURCE_FOLDERS = ("impl", "model", "properties", "soak", "bench", "tests", "notebooks", "scripts")


def module_sizes(package: Path = PACKAGE) -> dict[str, int]:
    """{file name: line count} for every module of *package*."""
    return {path.name: len(path.read_text().splitlines()) for path in sorted(package.glob("*.py"))}


def oversized(sizes: dict[str, int], limit: int = MAX_LINES) -> dict[str, int]:
    return {name: n for name, n in sizes.items() if n > limit}


def names_imported_from(module: str, source: str) -> set[str]:
    """Names `from <module> import ...` brings in anywhere in *source*, including inside functions and
    in Python code held in string literals (the scripts tests run in a subprocess)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == module and node.level == 0:
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and f"from {module} import" in node.value:
            try:
                names |= names_imported_from(module, textwrap.dedent(node.value))
            except SyntaxError:
                pass  # prose that mentions the import, not code
    return names


def repository_imports(module: str) -> dict[str, set[str]]:
    """{name: files importing it from *module*} over the repository's Python files and conftest."""
    files = [ROOT / "conftest.py"]
    for folder in SOURCE_FOLDERS:
        if (ROOT / folder).is_dir():
            files += sorted((ROOT / folder).rglob("*.py"))
    found: dict[str, set[str]] = {}
    for path in files:
        text = path.read_text()
        if path == Path(__file__).resolve() or f"from {module} import" not in text:
            continue  # this file's own examples of imports; files that import nothing from it
        for name in names_imported_from(module, text):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_provisioning_is_a_package_whose_modules_each_have_at_most_600_lines():
    assert not (ROOT / "impl" / "provision.py").exists(), "impl/provision.py is back beside the package"
    sizes = module_sizes()
    assert len(sizes) >= 4, f"impl/provision/ should hold its modules: {sizes}"
    assert not oversized(sizes), f"modules of impl/provision/ over {MAX_LINES} lines: {oversized(sizes)}"


def test_the_size_rule_names_a_module_that_grew_too_long(tmp_path):
    (tmp_path / "__init__.py").write_text('"""tiny"""\n')
    (tmp_path / "small.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "grown.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert oversized(module_sizes(tmp_path)) == {"grown.py": MAX_LINES + 1}


def test_every_name_the_repository_imports_from_impl_provision_is_still_there():
    imported = repository_imports("impl.provision")
    # the callers this must cover (a scan that found nothing would prove nothing)
    assert {"provision", "redact", "EmbeddedCluster", "ClusterConfig", "_LIVE"} <= set(imported)
    missing = {name: sorted(files) for name, files in imported.items() if not hasattr(impl.provision, name)}
    assert not missing, f"names imported from impl.provision that it no longer has: {missing}"
    for name in impl.provision.__all__:
        assert hasattr(impl.provision, name), name


def test_the_import_scan_sees_imports_inside_functions_and_in_subprocess_scripts():
    source = (
        "def f():\n"
        "    from impl.provision import Inner\n"
        "SCRIPT = '''\n"
        "    from impl.provision import InScript\n"
        "'''\n"
        "NOTE = 'call from impl.provision import nothing here'\n"
        "from impl.provision.cluster import NotThePackage\n"
    )
    assert names_imported_from("impl.provision", source) == {"Inner", "InScript"}
