"""The trace validation's speed and memory on finished soaks (issue 54, target 5).

    .venv/bin/python -m bench.refine_speed reports/<run> [reports/<run2> …] [--repeat 3] [--json out.json] \
        [--mode inline|ahead|both|stages]

Each run of each report folder is a fresh process (`--one`), which measures, with the process's own clocks
(CPU: resource.getrusage, user + system; wall: perf_counter):

  - `imports`: importing the validator and what it loads (soak.judges.refine, soak.judges.replay) — a fixed
    cost per process;
  - `load`: reading the run's initial and final state (history-initial.pickle, history-final.pickle) and the
    ledger (history.jsonl) — grows with the run's length, but not per transaction;
  - `validate`: `soak.judges.refine.validate` itself (decode, recover, simulate every transaction, then the
    comparison with the final snapshot) — the per-transaction cost: transactions / this CPU time is the
    rate the target counts;
  - `rss_peak_mib`: the process's VmHWM after the validation (the refine's own peak memory);
  - with `--mode ahead` the capture is decoded by a second process (soak/judges/refine/feed.py, what the CLI
    does on more than one CPU): `decoder_cpu_s` is that process's CPU, `decoder_rss_peak_mib` its peak RSS;
    the wall time then counts both processes working at once.

`--mode stages` (one process, decoding inline) splits the same validation's CPU by stage, each timed with
the process's CPU clock around the calls (a few tenths of a µs per call of its own): reading the capture
file, decoding it (pgoutput → rows), the world's upkeep and the rows' comparison with the held ones,
candidate recovery, the model's own handlers (`model.store.HANDLERS`, the executable specification),
the rest of the simulation (sub-state, the row comparison), the claim-order judge, and the final snapshot
comparison. It prints the floor the design cannot go below — reading, decoding and the model's handlers,
what any validation of the capture with model/ does once per transaction — and the rate that floor allows
on this machine's CPUs if the work were split across all of them without cost.

Every figure is printed per run; the summary takes the fastest repeat (the least disturbed by other load on
the machine) and the median. The verdict and counts of every repeat must agree (else the bench fails).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _cpu() -> float:
    import resource

    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def _vmhwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _children() -> tuple[float, float]:
    import resource

    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime, u.ru_maxrss / 1024


def _inputs(run_dir: Path) -> tuple[Any, Any, Any]:
    """The run's ledger (history.jsonl), initial state and final snapshot (on disk), as the validation takes them."""
    from soak.judges.refine import HarnessLedger
    from soak.judges.replay import load_state
    from soak.record.spill import disk_table

    initial = run_dir / "history-initial.pickle"
    final = run_dir / "history-final.pickle"
    state0 = load_state(initial) if initial.exists() else None
    state1 = load_state(final, big=disk_table) if final.exists() else None
    return HarnessLedger.load(run_dir), state0, state1


def one(run_dir: Path, mode: str) -> dict[str, Any]:
    c0, w0 = _cpu(), time.perf_counter()
    from soak.judges.refine import validate
    from soak.judges.refine.feed import decode_ahead
    from soak.record.capture import read_transactions

    c1, w1 = _cpu(), time.perf_counter()
    ledger, state0, state1 = _inputs(run_dir)
    c2, w2 = _cpu(), time.perf_counter()
    history = run_dir / "history.bin"
    feed = decode_ahead(history) if mode == "ahead" else read_transactions(history)
    r = validate(feed, ledger, state0, final_state=state1)
    c3, w3 = _cpu(), time.perf_counter()
    child_cpu, child_rss = _children()
    return {
        "run": str(run_dir),
        "mode": mode,
        "verdict": r.verdict,
        "transactions": r.transactions,
        "validated": r.validated,
        "unexplained": r.unexplained,
        "capture_gaps": r.capture_gaps,
        "matches_snapshot": r.matches_snapshot,
        "findings": len(r.findings),
        "imports_cpu_s": round(c1 - c0, 3),
        "imports_wall_s": round(w1 - w0, 3),
        "load_cpu_s": round(c2 - c1, 3),
        "load_wall_s": round(w2 - w1, 3),
        "validate_cpu_s": round(c3 - c2, 3),
        "validate_wall_s": round(w3 - w2, 3),
        "tx_per_cpu_s": round(r.transactions / (c3 - c2)) if c3 > c2 else None,
        "tx_per_wall_s": round(r.transactions / (w3 - w2)) if w3 > w2 else None,
        "rss_peak_mib": round(_vmhwm_mib(), 1),
        "decoder_cpu_s": round(child_cpu, 3),
        "decoder_rss_peak_mib": round(child_rss, 1),
    }


STAGES = ("read", "decode", "rows", "recovery", "model", "simulate_rest", "claim_order", "upkeep", "snapshot")


def stages(run_dir: Path) -> dict[str, Any]:
    """The CPU of one inline validation, by stage (see the module docstring)."""
    import os

    from soak.judges.refine import validate
    from soak.judges.refine.feed import RowDecoder
    from soak.judges.refine.validator import Validator
    from soak.judges.timing import ClaimOrder
    from soak.record.capture import read_transactions

    clock = time.process_time
    spent = dict.fromkeys(STAGES, 0.0)
    history = run_dir / "history.bin"
    c = clock()
    txs = list(read_transactions(history))
    spent["read"] = clock() - c
    ledger, state0, state1 = _inputs(run_dir)

    timed = [  # (class, method, stage), each method's CPU added to its stage
        (RowDecoder, "decode", "decode"),
        (Validator, "rows_from", "rows"),
        (Validator, "candidates", "recovery"),
        (Validator, "_apply", "model"),
        (Validator, "simulate", "simulate_rest"),  # less the model's handlers inside it, below
        (ClaimOrder, "observe", "claim_order"),
        (Validator, "compare", "snapshot"),
    ]
    # None: inherited (Validator.candidates is Recovery's), removed again rather than set
    saved = {(cls, name): cls.__dict__.get(name) for cls, name, _ in timed}

    def wrap(inner: Any, stage: str) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            c0 = clock()
            try:
                return inner(*a, **k)
            finally:
                spent[stage] += clock() - c0

        return wrapper

    for cls, name, stage in timed:
        setattr(cls, name, wrap(getattr(cls, name), stage))
    try:
        c = clock()
        r = validate(txs, ledger, state0, final_state=state1)
        total = clock() - c
    finally:
        for (cls, n), f in saved.items():
            if f is None:
                delattr(cls, n)
            else:
                setattr(cls, n, f)
    spent["simulate_rest"] -= spent["model"]
    spent["upkeep"] = total - sum(spent[s] for s in STAGES if s not in ("read", "upkeep"))
    count = r.transactions
    us = {s: round(spent[s] / count * 1e6, 1) for s in STAGES}
    floor = us["read"] + us["decode"] + us["model"]
    cpus = os.cpu_count() or 1
    return {
        "run": str(run_dir),
        "verdict": r.verdict,
        "transactions": count,
        "cpu_s": round(total + spent["read"], 3),
        "us_per_tx": us,
        "us_per_tx_total": round(sum(us.values()), 1),
        "floor_us_per_tx": round(floor, 1),
        "cpus": cpus,
        "floor_tx_per_s_on_all_cpus": round(cpus * 1e6 / floor) if floor else None,
        "total_tx_per_s_on_all_cpus": round(cpus * 1e6 / sum(us.values())),
    }


def _fresh(run: Path, mode: str) -> dict[str, Any]:
    """One measurement in a fresh process (`--one`): its JSON line."""
    got = subprocess.run(
        [sys.executable, "-m", "bench.refine_speed", "--one", "--mode", mode, str(run)],
        check=True,
        capture_output=True,
        text=True,
    )
    row: dict[str, Any] = json.loads(got.stdout.strip().splitlines()[-1])
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.refine_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="soak report folders (history.bin …)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path, help="write every measurement here")
    p.add_argument("--mode", choices=("inline", "ahead", "both", "stages"), default="both")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(stages(args.runs[0]) if args.mode == "stages" else one(args.runs[0], args.mode)))
        return
    if args.mode == "stages":
        staged = []
        for run in args.runs:
            for _ in range(args.repeat):
                staged.append(_fresh(run, "stages"))
                print(json.dumps(staged[-1]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(staged, indent=2) + "\n")
        return
    out: list[dict[str, Any]] = []
    modes = ("inline", "ahead") if args.mode == "both" else (args.mode,)
    for run, mode in [(r, m) for r in args.runs for m in modes]:
        rows = []
        for _ in range(args.repeat):
            row = _fresh(run, mode)
            rows.append(row)
            print(json.dumps(row), flush=True)
        keys = ("verdict", "transactions", "validated", "unexplained", "capture_gaps", "matches_snapshot")
        if len({tuple(r[k] for k in keys) for r in rows}) != 1:
            raise SystemExit(f"{run}: the repeats disagree: {rows}")
        best = min(rows, key=lambda r: r["validate_cpu_s"])
        summary = {
            "run": str(run),
            "mode": mode,
            "verdict": best["verdict"],
            "transactions": best["transactions"],
            "repeats": len(rows),
            "imports_cpu_s_min": min(r["imports_cpu_s"] for r in rows),
            "load_cpu_s_min": min(r["load_cpu_s"] for r in rows),
            "validate_cpu_s_min": best["validate_cpu_s"],
            "validate_cpu_s_median": statistics.median(r["validate_cpu_s"] for r in rows),
            "validate_wall_s_min": min(r["validate_wall_s"] for r in rows),
            "tx_per_cpu_s_best": best["tx_per_cpu_s"],
            "tx_per_cpu_s_median": round(best["transactions"] / statistics.median(r["validate_cpu_s"] for r in rows)),
            "tx_per_wall_s_best": max(r["tx_per_wall_s"] or 0 for r in rows),
            "rss_peak_mib_max": max(r["rss_peak_mib"] for r in rows),
            "decoder_cpu_s_min": min(r["decoder_cpu_s"] for r in rows),
        }
        out.append({"summary": summary, "repeats": rows})
        print("summary " + json.dumps(summary), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
