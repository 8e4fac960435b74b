"""Soak every broken variant and check that the checker catches it with the right invariant named.

    python -m tests.soak_fixtures.matrix [--duration 45] [--only unfenced_ack,...] [--report DIR]

Prints a table (variant → verdict → invariants found invalid → first counterexample) and writes it as
matrix.json in the report folder; exits 1 if a variant is not caught (verdict not invalid, or its
expected invariant not among the invalid ones). Takes ~2 minutes per variant.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# variant → (the invariant it must be caught by, extra soak options that give its scenario room)
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "unfenced_ack": ("I2", ["--stop-every", "12"]),
    "no_renewal": ("I1", []),
    "reexecute_steps": ("I3", []),
    "ignore_budget": ("I4", []),
    "count_gated_children": ("I9", []),
    "ack_before_journal": ("I3", []),
}


def soak(variant: str, duration: float, report: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "soak.run", "--worker", f'"$BELAY_SOAK_PYTHON" -m tests.soak_fixtures.{variant}',
           "--workers", "3", "--duration", str(duration), "--kill-every", "15", "--stop-every", "20",
           "--db-restart-every", "30", "--drain-timeout", "60", "--heal", "5", "--seed", "11",
           "--report", str(report / variant), "--no-progress", *extra]
    # later options win in argparse, so a variant's extra options override the defaults above
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    results = report / variant / "latest" / "results.json"
    if not results.exists():
        return {"verdict": "harness-error", "exit": proc.returncode, "invalid": [], "first": proc.stderr[-500:]}
    data = json.loads(results.read_text())
    invalid = [k for k, v in data["invariants"].items() if v["verdict"] == "invalid"]
    firsts = {k: data["invariants"][k]["first_counterexample"] for k in invalid}
    return {"verdict": data["verdict"], "exit": proc.returncode, "invalid": invalid, "first": firsts,
            "report": str((report / variant / "latest").resolve())}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=45)
    p.add_argument("--only", default=None)
    p.add_argument("--report", default=None)
    args = p.parse_args()
    report = Path(args.report or tempfile.mkdtemp(prefix="belay-soak-matrix-"))
    names = args.only.split(",") if args.only else list(VARIANTS)
    rows, ok = {}, True
    for name in names:
        want, extra = VARIANTS[name]
        r = soak(name, args.duration, report, extra)
        r["expected"] = want
        r["caught"] = r["verdict"] == "invalid" and want in r["invalid"]
        ok &= r["caught"]
        rows[name] = r
        first = r["first"].get(want) if isinstance(r["first"], dict) else r["first"]
        print(f"{name:22} {r['verdict']:8} invalid={','.join(r['invalid']) or '-':12} expected={want} "
              f"{'CAUGHT' if r['caught'] else 'MISSED'}  {str(first)[:160]}", flush=True)
    (report / "matrix.json").write_text(json.dumps(rows, indent=2))
    print(f"matrix written to {report / 'matrix.json'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
