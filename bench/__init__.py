"""Belay's benchmarks (python -m bench.run, python -m bench.peers, ...)."""

from __future__ import annotations

import compileall
import os
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


def proc_cpu_seconds(pid: int, *, reaped: bool = False) -> float | None:
    """User + system CPU seconds of one process (all its threads) from /proc/<pid>/stat, with `reaped` also
    those of the children it has waited for; None where /proc cannot show it (not Linux, no such process)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return sum(int(x) for x in fields[11 : 15 if reaped else 13]) / os.sysconf("SC_CLK_TCK")
