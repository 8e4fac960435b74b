"""Soak the history-only broken variants: each must pass the final-state checker and fail the history
checker with the expected rule named.

    python -m soak.broken.history_only [--duration 60] [--only stale_reclaim,...] [--report DIR]

Prints one line per variant (final-state verdict, history verdict, rules found, first finding) and writes
history_only.json in the report folder; exits 1 if a variant is not caught by the history alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# variant → (rules of which at least one must be found, extra soak options)
HISTORY_ONLY: dict[str, tuple[set[str], list[str]]] = {
    "stale_reclaim": ({"terminal_exit", "writer", "reclaim_expired", "fence"}, []),
    "ack_keeps_lease": ({"lease_cleared"}, []),
    "settle_after_commit": ({"I5"}, []),
}


def soak(variant: str, duration: float, report: Path, extra: list[str], seed: int = 11) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "soak.run",
        "--worker",
        f'"$BELAY_SOAK_PYTHON" -m soak.broken.{variant}',
        "--workers",
        "3",
        "--duration",
        str(duration),
        "--heal",
        "5",
        "--drain-timeout",
        "90",
        "--seed",
        str(seed),
        "--report",
        str(report / variant),
        "--no-progress",
        *extra,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    results = report / variant / "latest" / "results.json"
    if not results.exists():
        return {
            "final": "harness-error",
            "history": None,
            "rules": [],
            "first": proc.stderr[-800:],
            "exit": proc.returncode,
        }
    data = json.loads(results.read_text())
    hist = data.get("history") or {}
    return {
        "final": data["verdict"],
        "final_invalid": [k for k, v in data["invariants"].items() if v["verdict"] == "invalid"],
        "history": hist.get("verdict"),
        "rules": sorted(hist.get("by_rule", {})),
        "first": (hist.get("first_violations") or [None])[0],
        "exit": proc.returncode,
        "history_counts": {k: hist.get(k) for k in ("transitions", "transactions", "states", "violations")},
        # trace validation (soak/judges/refine/) on its own: the history verdict's main judge
        "refinement": (hist.get("refinement") or {}).get("verdict"),
        "refinement_first": ((hist.get("refinement") or {}).get("findings") or [None])[0],
        "report": str((report / variant / "latest").resolve()),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=60)
    p.add_argument("--only", default=None)
    p.add_argument("--report", default=None)
    args = p.parse_args()
    report = Path(args.report or tempfile.mkdtemp(prefix="belay-history-only-"))
    names = args.only.split(",") if args.only else list(HISTORY_ONLY)
    rows, ok = {}, True
    for name in names:
        want, extra = HISTORY_ONLY[name]
        r = soak(name, args.duration, report, extra)
        r["expected_rules"] = sorted(want)
        r["caught"] = r["final"] != "invalid" and r["history"] == "invalid" and bool(want & set(r["rules"]))
        r["caught_by_refinement"] = r["final"] != "invalid" and r.get("refinement") == "invalid"
        ok &= r["caught"] and r["caught_by_refinement"]
        rows[name] = r
        print(
            f"{name:20} final-state {r['final']:8} history {r['history'] or '-':8} rules={','.join(r['rules']) or '-'} "
            f"{'CAUGHT BY HISTORY ONLY' if r['caught'] else 'NOT SHOWN'}; trace validation {r.get('refinement') or '-'}"
            f"{' (caught)' if r['caught_by_refinement'] else ''}  {str(r['first'])[:160]} | "
            f"{str(r.get('refinement_first') or '').splitlines()[0][:160] if r.get('refinement_first') else ''}",
            flush=True,
        )
    (report / "history_only.json").write_text(json.dumps(rows, indent=2))
    print(f"written to {report / 'history_only.json'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
