"""The race-analysis notebooks (notebooks/*.ipynb) execute top to bottom: each runs the explorer on its
scenario, draws the state graph and the counterexample, and forces the counterexample's schedule on a
PostgreSQL it provisions itself — and asserts what it claims. Executed with nbclient in a fresh kernel
of this interpreter; outputs are discarded (the committed notebooks keep theirs cleared)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CELL_TIMEOUT = 300  # seconds; a whole notebook takes a few seconds, most of it PostgreSQL start-up


def notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def test_there_is_a_notebook_per_scenario():
    assert {p.stem for p in notebooks()} >= {
        "r1_last_children",
        "r2_reconciler",
        "park_wake",
        "lock_order",
        "settlement",
    }


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.stem)
def test_the_notebook_is_committed_with_outputs_cleared(path):
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") and not c.get("execution_count") for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.stem)
def test_the_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()  # raises CellExecutionError (with the cell's traceback) if any cell fails
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
