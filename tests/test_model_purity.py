"""The model is pure (docs/architecture.md, "Layers"): no clock, no randomness, no I/O, no database driver.

Checked statically: every .py file under model/ is parsed and walked for imports of impure modules
and for calls that read a clock. The checker is a plain function of source text, so a planted bad
source proves it actually catches what it claims to.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MODEL = Path(__file__).resolve().parent.parent / "model"

FORBIDDEN_MODULES = frozenset(
    {"time", "random", "psycopg", "os", "threading", "subprocess", "socket", "secrets", "uuid"}
)
# Fully qualified clock reads; also matched as written when the receiver's import is not visible.
FORBIDDEN_CALLS = frozenset(
    {
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.datetime.today",
        "datetime.date.today",
        "time.time",
    }
)
UNRESOLVED_CALLS = frozenset({"datetime.now", "datetime.utcnow", "datetime.today", "date.today", "time.time"})


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of attribute accesses on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def impurities(source: str, filename: str = "<source>") -> list[str]:
    """Every impure import or clock call in `source`, as 'file:line: what' strings."""
    tree = ast.parse(source, filename=filename)
    aliases: dict[str, str] = {}  # local name -> qualified name
    found: list[str] = []

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    report(node, f"imports {alias.name}")
                top = alias.name.split(".")[0]
                aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                report(node, f"imports from {node.module}")
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name is None:
            continue
        head, _, rest = name.partition(".")
        qualified = aliases.get(head, head) + ("." + rest if rest else "")
        if qualified in FORBIDDEN_CALLS or name in UNRESOLVED_CALLS:
            report(node, f"calls {name}()")
        if qualified in ("__import__", "importlib.import_module") and node.args:
            target = node.args[0]
            if (
                isinstance(target, ast.Constant)
                and isinstance(target.value, str)
                and target.value.split(".")[0] in FORBIDDEN_MODULES
            ):
                report(node, f"imports {target.value} dynamically")
    return found


def model_files() -> list[Path]:
    return sorted(MODEL.rglob("*.py"))


def test_the_check_covers_the_whole_model_package():
    names = {p.name for p in model_files()}
    assert {"store.py", "state.py", "ops.py", "worker_ops.py", "settle.py", "admission.py"} <= names


def test_no_model_module_imports_an_impure_module_or_reads_a_clock():
    problems = [p for path in model_files() for p in impurities(path.read_text(), str(path.relative_to(MODEL.parent)))]
    assert problems == [], "the model must stay pure:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "source, what",
    [
        ("import time\n", "imports time"),
        ("import os.path\n", "imports os.path"),
        ("import random as r\n", "imports random"),
        ("from uuid import uuid4\n", "imports from uuid"),
        ("from psycopg import sql\n", "imports from psycopg"),
        ("import threading, subprocess\n", "imports threading"),
        ("import socket\n", "imports socket"),
        ("from secrets import token_hex\n", "imports from secrets"),
        ("from datetime import datetime\nx = datetime.now()\n", "calls datetime.now()"),
        ("import datetime\nx = datetime.datetime.utcnow()\n", "calls datetime.datetime.utcnow()"),
        ("from datetime import datetime as dt\nx = dt.now(tz=None)\n", "calls dt.now()"),
        ("from datetime import date\nx = date.today()\n", "calls date.today()"),
        ("def f(time):\n    return time.time()\n", "calls time.time()"),
        ("def f():\n    return datetime.now()\n", "calls datetime.now()"),
        ("m = __import__('random')\n", "imports random dynamically"),
        ("import importlib\nm = importlib.import_module('os')\n", "imports os dynamically"),
    ],
)
def test_the_checker_catches_a_planted_impurity(source, what):
    found = impurities(source, "planted.py")
    assert any(what in f for f in found), found
    assert all(f.startswith("planted.py:") for f in found)


def test_the_checker_accepts_pure_code_that_merely_looks_similar():
    source = (
        "from datetime import datetime, time, timedelta, timezone\n"
        "import json, zlib\n"
        "from .ops import now\n"
        "def f(op, t: time):\n"
        "    return op.now + timedelta(seconds=1), now(op), datetime.fromisoformat('2026-01-01')\n"
    )
    assert impurities(source) == []
