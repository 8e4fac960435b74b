"""`python -m soak.broken [--only a,b] [--report DIR] [--jobs 2] [--reference]` — soak every broken variant.

Prints one row per variant (verdict, invalid rows, expected rows, CAUGHT/MISSED, first counterexample)
and writes matrix.json into the report folder; exits 1 when a variant is not caught (a VALID is a
harness failure; UNKNOWN counts as missed unless the variant's entry states why it cannot be observed).
`--reference` adds the reference worker as a control row (it must not be invalid).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from soak.broken import DEFAULTS, VARIANTS

ROOT = Path(__file__).resolve().parents[2]


def soak(name: str, report: Path, extra: tuple[str, ...] = (), timeout: float = 900) -> dict:
    worker = "soak/reference-worker" if name == "reference" else f'"$BELAY_SOAK_PYTHON" -m soak.broken.{name}'
    cmd = [sys.executable, "-m", "soak.run", "--worker", worker, "--report", str(report / name), *DEFAULTS, *extra]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    seconds = round(time.monotonic() - t0, 1)
    results = report / name / "latest" / "results.json"
    if not results.exists():
        return {
            "verdict": "harness-error",
            "exit": proc.returncode,
            "invalid": [],
            "first": {},
            "seconds": seconds,
            "error": (proc.stdout + proc.stderr)[-800:],
        }
    data = json.loads(results.read_text())
    rows = {**data["invariants"], **data.get("duties", {})}
    # trace validation (soak/judges/refine/) is the row `refine` of docs/certification.md
    refinement = (data.get("history") or {}).get("refinement") or {}
    if refinement:
        # an unexplained transaction first, else the timing judges' findings (stale `now`, claim order), else why
        why = [refinement.get("why")]
        first = (refinement.get("findings") or refinement.get("stale_now") or refinement.get("claim_order") or why)[0]
        rows["refine"] = {"verdict": refinement.get("verdict"), "first_counterexample": first, "why_unknown": None}
        if refinement.get("verdict") == "invalid":  # the soak's own exit folds the history in (combine_exit)
            data["verdict"] = "invalid"
    invalid = [k for k, v in rows.items() if v["verdict"] == "invalid"]
    return {
        "verdict": data["verdict"],
        "exit": proc.returncode,
        "invalid": invalid,
        "variant_error": variant_error(report / name / "latest"),
        "seconds": seconds,
        "first": {k: rows[k]["first_counterexample"] for k in invalid},
        "unknown": {k: v["why_unknown"] for k, v in rows.items() if v["verdict"] == "unknown"},
        "report": str((report / name / "latest").resolve()),
    }


# Errors a variant's own code raises when it has drifted from impl/ (a query's parameters changed, a
# method renamed): the variant then fails for that reason, not for its bug, and proves nothing.
DRIFT = re.compile(r"\b(ProgrammingError|TypeError|AttributeError|NameError|ImportError)\b[^\n]*")


def variant_error(run_dir: Path) -> str | None:
    """The first programming error in the run's worker logs, if any."""
    for log in sorted((run_dir / "workers").glob("*.log")):
        m = DRIFT.search(log.read_text(errors="replace"))
        if m:
            return f"{log.name}: {m.group(0)[:200]}"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m soak.broken", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=None, help="comma-separated variant names")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every variant of the catalogue (the default without --only)")
    which.add_argument("--fast", action="store_true", help="only the CI subset")
    p.add_argument("--reference", action="store_true", help="also soak the reference worker as a control")
    p.add_argument("--jobs", type=int, default=1, help="variants soaked at once (default 1)")
    p.add_argument("--report", default=None)
    args = p.parse_args(argv)
    if args.all and args.only:
        p.error("--all and --only exclude each other")
    report = Path(args.report or tempfile.mkdtemp(prefix="belay-broken-"))
    names = args.only.split(",") if args.only else [n for n, v in VARIANTS.items() if v.fast or not args.fast]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        p.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    if args.reference:
        names = ["reference", *names]
    rows: dict[str, dict] = {}
    ok = True

    def one(name: str) -> tuple[str, dict]:
        extra = () if name == "reference" else VARIANTS[name].options
        return name, soak(name, report, extra)

    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        for name, r in pool.map(one, names):
            if name == "reference":
                r["caught"] = None
                good = r["verdict"] in ("valid", "unknown")
                ok &= good
                print(
                    f"{'reference (control)':26} {r['verdict']:8} invalid={','.join(r['invalid']) or '-':10} "
                    f"{'OK' if good else 'HARNESS FAILURE'} {r['seconds']}s",
                    flush=True,
                )
            else:
                want = VARIANTS[name].expects
                hit = [k for k in want if k in r["invalid"]]
                r.update(
                    expected=list(want),
                    caught=r["verdict"] == "invalid" and bool(hit) and not r.get("variant_error"),
                )
                ok &= r["caught"]
                first = (
                    r["first"].get(hit[0])
                    if hit
                    else (next(iter(r["first"].values()), None) or r.get("error") or r.get("unknown"))
                )
                print(
                    f"{name:26} {r['verdict']:8} invalid={','.join(r['invalid']) or '-':10} "
                    f"expected={'|'.join(want):7} "
                    f"{'CAUGHT' if r['caught'] else 'VARIANT BROKEN' if r.get('variant_error') else 'MISSED'} "
                    f"{r['seconds']}s  {r.get('variant_error') or ''}"
                    f"{str(first)[:220]}",
                    flush=True,
                )
            rows[name] = r
    (report / "matrix.json").write_text(json.dumps(rows, indent=2, default=str))
    print(f"matrix written to {report / 'matrix.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
