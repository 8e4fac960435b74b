"""docs/sdk-guide.md stays true: every test it cites exists, every section cites one, and the points
it settles that no other test pinned are pinned here (§8.2 seq under the job row lock).

References in the guide are written `conformance: §N <behaviour>` (a case id of the conformance suite)
or `path::name` (a function in that file, found with `ast`, so a parametrized test or a method of the
stateful machine counts). The checker is a plain function of the guide's text, and a planted bad
reference proves it fails.
"""

from __future__ import annotations

import ast
import re
import threading
from datetime import timedelta
from pathlib import Path

import psycopg

from model import ops
from model import worker_ops as w
from properties.conformance import CASES

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "sdk-guide.md"
REFERENCE = re.compile(r"`(conformance: [^`]+|[\w./-]+\.py::\w+)`")
UNPINNED = "<!-- guide-check: unpinned -->"


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {p.splitlines()[0]: p for p in parts}


def _defined(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in ast.walk(tree))


def broken_references(text: str, root: Path = ROOT) -> list[str]:
    """Every reference in `text` that names no conformance case or no function in an existing file,
    and every section with no reference that is not marked unpinned."""
    case_ids = {c.id for c in CASES}
    problems = []
    for ref in REFERENCE.findall(text):
        if ref.startswith("conformance: "):
            if ref[len("conformance: ") :] not in case_ids:
                problems.append(f"no conformance case {ref!r}")
            continue
        path, name = ref.split("::")
        if not (root / path).is_file():
            problems.append(f"no file {path!r}")
        elif not _defined(root / path, name):
            problems.append(f"no function {name!r} in {path}")
    for title, body in sections(text).items():
        if not REFERENCE.search(body) and UNPINNED not in body:
            problems.append(f"section {title!r} cites no test")
    return problems


def test_every_reference_in_the_sdk_guide_names_an_existing_case_or_test_and_every_section_cites_one():
    text = GUIDE.read_text()
    assert len(REFERENCE.findall(text)) >= 60
    assert not broken_references(text), "\n".join(broken_references(text))


def test_a_planted_bad_reference_or_an_uncited_section_is_reported():
    text = (
        "## 1. Good\n`conformance: §7 an error on the last attempt fails the job`\n"
        "`tests/test_faults.py::test_a_pool_timeout_is_transient`\n"
        "## 2. Bad\n`conformance: §7 a case nobody wrote`\n`tests/test_faults.py::test_gone`\n"
        "`tests/no_such_file.py::test_x`\n"
        "## 3. Uncited\nprose only\n"
        f"## 4. Marked\nprose only {UNPINNED}\n"
    )
    assert broken_references(text) == [
        "no conformance case 'conformance: §7 a case nobody wrote'",
        "no function 'test_gone' in tests/test_faults.py",
        "no file 'tests/no_such_file.py'",
        "section '3. Uncited' cites no test",
    ]


# --- §8.2: seq is assigned under the job row lock ------------------------------------------------------


def _waiting_on_a_lock(conn: psycopg.Connection, pid_to_skip: int) -> bool:
    return (
        conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> %s "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            (pid_to_skip, "%FOR UPDATE%"),
        ).fetchone()[0]
        > 0
    )


def test_a_step_journaled_while_another_transaction_holds_the_job_row_takes_the_next_seq(store, db_url, now):
    (inserted,) = store.apply(ops.Enqueue(now, (ops.JobSpec("q", "w"),))).outcomes
    store.apply(w.Claim(now, "q", "n", 1))
    store.apply(w.RecordStep(now, inserted.id, "first", 1))
    result: list = []
    with psycopg.connect(db_url) as stale, psycopg.connect(db_url, autocommit=True) as observer:
        # A stale execution's journal write, mid-transaction: it holds the row and has taken seq 2.
        stale.execute("SELECT id FROM belay_jobs WHERE id = %s FOR UPDATE", (inserted.id,))
        stale.execute(
            "INSERT INTO belay_steps (job_id, seq, name, value, usd_micros, tokens, inserted_at) "
            "VALUES (%s, 2, 'stale', %s, 0, 0, %s)",
            (inserted.id, b"2", now),
        )
        writer = threading.Thread(
            target=lambda: result.append(store.apply(w.RecordStep(now + timedelta(seconds=1), inserted.id, "live", 3)))
        )
        writer.start()
        deadline = threading.Event()
        for _ in range(400):  # until the live write waits on the row lock (or finished without waiting)
            if _waiting_on_a_lock(observer, stale.info.backend_pid) or result:
                break
            deadline.wait(0.025)
        stale.commit()
        writer.join(timeout=30)
    assert result and isinstance(result[0], w.Recorded) and result[0].inserted
    seqs = {s.name: s.seq for s in store.apply(ops.ReadSteps(inserted.id))}
    assert seqs == {"first": 1, "stale": 2, "live": 3}, seqs


def test_nothing_in_the_repository_points_at_documents_outside_it():
    outside = re.compile(r"\.\./shared/|/work/shared|(?<![\w/])shared/spec/|DESIGN\.md|STYLE\.md")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted(ROOT.rglob("*"))
        if path.is_file()
        and path.suffix in {".py", ".md", ".sh", ".toml", ".txt", ".yaml", ".ipynb"}
        and not {".git", ".venv", "reports", "node_modules"} & set(path.relative_to(ROOT).parts)
        and path != Path(__file__).resolve()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert not offenders, offenders
