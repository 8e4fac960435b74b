"""Belay's benchmarks (python -m bench.run, python -m bench.peers, ...)."""

from __future__ import annotations

import compileall
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compile_sources() -> None:
    """Write the bytecode of the project's packages before a benchmark starts worker processes from this
    tree: a worker installed from a wheel (and every peer, installed into site-packages) imports compiled
    bytecode, while one run from the source tree with PYTHONDONTWRITEBYTECODE set — as on this machine —
    compiled its ~30 modules at every start: ~70 ms of a 20,000-job drain's ~3 s (issue 33). Idempotent:
    an up-to-date .pyc is left alone."""
    for package in ("impl", "model", "bench", "soak"):
        compileall.compile_dir(ROOT / package, quiet=1, workers=1)
