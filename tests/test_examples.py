"""The examples run as the README tells a newcomer to run them (issue 55, item 4): each is one command,
`python -m examples.<name>`, in a process of its own from the repository root, against
$BELAY_DATABASE_URL (here a fresh test database) or, with no URL, an embedded PostgreSQL it starts itself.
Each prints its result, exits 0 and leaves no schema behind. The README's hello-world block is the
example's own code, so the front page never shows code that was not run."""

from __future__ import annotations

import ast
import builtins
import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = {
    "hello": "{'greeting': 'hello, Belay'}",
    "workflow": "{'workflow': {'fetch': 'the protocol is the schema', 'count': 5, "
    "'shout': 'THE PROTOCOL IS THE SCHEMA'}, 'sum of squares': 30}",
}


def _run(name: str, database_url: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "BELAY_DATABASE_URL"}
    if database_url is not None:
        env["BELAY_DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-m", f"examples.{name}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as c:
        return {r[0] for r in c.execute("SELECT nspname FROM pg_namespace")}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_against_the_database_url_and_leaves_no_schema(name, blank_db_url):
    before = _schemas(blank_db_url)
    done = _run(name, blank_db_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == EXPECTED[name], done.stdout + done.stderr
    assert "throwaway schema belay_" in done.stdout, done.stdout
    assert _schemas(blank_db_url) == before, "the example left its throwaway schema behind"


def test_hello_runs_on_an_embedded_postgresql_with_no_url():
    """The fresh-machine path: no BELAY_DATABASE_URL, so the example starts its own PostgreSQL."""
    done = _run("hello", None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hello: PostgreSQL embedded" in done.stdout, done.stdout
    assert done.stdout.strip().splitlines()[-1] == EXPECTED["hello"], done.stdout


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.S)


def test_the_readme_hello_world_is_the_example_code():
    """The README's Python block is examples/hello.py minus its docstring and `__main__` part, verbatim."""
    blocks = [b for b in _python_blocks((ROOT / "README.md").read_text()) if "registry.kind" in b]
    assert len(blocks) == 1, f"expected one hello-world block in README.md, found {len(blocks)}"
    source = (ROOT / "examples" / "hello.py").read_text()
    assert blocks[0].strip() in source, "README.md's hello-world block differs from examples/hello.py"


def test_readme_python_blocks_define_every_name_they_use():
    """No README code uses a name it never defines or imports (the old front page used `url`, `orders`, `llm`)."""
    for block in _python_blocks((ROOT / "README.md").read_text()):
        tree = ast.parse(block)
        defined = set(dir(builtins))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ClassDef):
                defined.add(node.name)
            elif isinstance(node, ast.FunctionDef):
                defined |= {node.name, *(a.arg for a in (*node.args.args, *node.args.kwonlyargs))}
            elif isinstance(node, ast.Lambda):
                defined |= {a.arg for a in node.args.args}
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
                defined.add(node.optional_vars.id)
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert not used - defined, f"README code uses undefined names {sorted(used - defined)}:\n{block}"
