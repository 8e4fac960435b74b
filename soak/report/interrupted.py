"""The report of a soak that was interrupted (SIGINT, SIGTERM, SIGHUP): what it saw, verdict unknown.

An interrupted run checked nothing, so its verdict is `unknown` (exit 2) — never valid, never invalid —
but the fault log, the worker logs and the phase it reached are kept, and `reports/latest` points at it.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from impl.provision import redact
from soak.report.artifacts import _fault_counts, point_latest

EXIT_UNKNOWN = 2


def write(run_dir: Path, history: list[dict[str, Any]], meta: dict[str, Any], reason: str) -> dict[str, Any]:
    """results.json, summary.md and report.html for an interrupted run; update `latest`."""
    phases = [e.get("phase") for e in history if e.get("type") == "phase"]
    phase = phases[-1] if phases else "setup"
    faults = _fault_counts(history)
    results = {
        "run_id": meta.get("run_id", run_dir.name),
        "verdict": "unknown",
        "exit_code": EXIT_UNKNOWN,
        "interrupted": reason,
        "phase_reached": phase,
        "faults": faults,
        "meta": meta,
        "why": "the run was interrupted before the check: nothing was verified",
    }
    (run_dir / "results.json").write_text(redact(json.dumps(results, indent=2, default=str)) + "\n")
    lines = [
        f"# Soak run {results['run_id']}: **UNKNOWN** (interrupted, exit {EXIT_UNKNOWN})",
        "",
        f"- interrupted by {reason} during the {phase} phase: nothing was checked",
        "- faults so far: " + ", ".join(f"{k} {v}" for k, v in faults.items()),
        "- the fault log is history.jsonl.gz (gzip); worker logs are in workers/",
    ]
    (run_dir / "summary.md").write_text(redact("\n".join(lines)) + "\n")
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Soak {html.escape(results['run_id'])}: "
        f"interrupted</title></head><body><h1>Soak {html.escape(results['run_id'])}: UNKNOWN (interrupted)</h1>"
        f"<p>Interrupted by {html.escape(reason)} during the {html.escape(str(phase))} phase: nothing was "
        f"checked.</p><ul>"
        + "".join(f"<li>{html.escape(k)}: {v}</li>" for k, v in faults.items())
        + "</ul><p><a href='history.jsonl.gz'>history.jsonl.gz</a> (fault log)</p></body></html>"
    )
    (run_dir / "report.html").write_text(redact(page))
    point_latest(run_dir)
    return results
