"""What history capture costs the soak, and how fast the replay checks a history (issue 12).

    .venv/bin/python -m bench.history cost [--duration 40] [--rate 400] [--pairs 2] [--seed 5]
    .venv/bin/python -m bench.history replay <run-dir>     # time the replay of a soak's captured history

`cost` runs the soak with the same seed with capture off (`--no-history`, wal_level replica) and on
(wal_level logical, REPLICA IDENTITY FULL, a pgoutput slot drained every 0.5 s), alternating off/on
`--pairs` times, without faults and with an echo rate above what the workers can do, so the measured
figure is the workers' capacity: jobs finished per second during the faults phase. Prints each run and
the ratio of medians. `replay` prints the replay's time and counts for a finished run folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _children_cpu() -> float:
    import os

    t = os.times()
    return t.children_user + t.children_system


def soak_once(history: bool, duration: float, rate: float, seed: int, report: Path, drain: float = 30) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "soak.run",
        "--duration",
        str(duration),
        "--heal",
        "1",
        "--drain-timeout",
        str(drain),
        "--kill-every",
        "0",
        "--stop-every",
        "0",
        "--db-restart-every",
        "0",
        "--rate",
        str(rate),
        "--seed",
        str(seed),
        "--report",
        str(report),
        "--no-progress",
    ] + ([] if history else ["--no-history"])
    t0, cpu0 = time.monotonic(), _children_cpu()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    data = json.loads((report / "latest" / "results.json").read_text())
    hist = data.get("history") or {}
    return {
        "history": history,
        "throughput": data["meta"].get("mean_throughput_faults"),
        "wall_s": round(time.monotonic() - t0, 1),
        "exit": proc.returncode,
        "jobs": data["stats"]["jobs_checked"],
        "history_verdict": hist.get("verdict"),
        "replay_s": hist.get("seconds"),
        "replay_cpu_s": hist.get("cpu_seconds"),
        "cpu_s": round(_children_cpu() - cpu0, 1),
        "transactions": hist.get("transactions"),
    }


def cost(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="belay-bench-history-"))
    runs = []
    for i in range(args.pairs):
        for history in (False, True):
            r = soak_once(history, args.duration, args.rate, args.seed, base / f"{i}-{'on' if history else 'off'}")
            runs.append(r)
            print(json.dumps(r), flush=True)
    off = statistics.median(r["throughput"] for r in runs if not r["history"])
    on = statistics.median(r["throughput"] for r in runs if r["history"])
    print(
        f"throughput (jobs/s, median of {args.pairs}): capture off {off:.1f}, on {on:.1f} → "
        f"cost {100 * (1 - on / off):.1f} % (target ≤ 15 %)"
    )


def replay_time(args: argparse.Namespace) -> None:
    from soak.judges.replay import load_state, replay
    from soak.record.capture import read_transactions

    d = args.run_dir
    t0, c0 = time.perf_counter(), time.process_time()
    result = replay(
        read_transactions(d / "history.bin"),
        load_state(d / "history-initial.pickle"),
        load_state(d / "history-final.pickle"),
    )
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    size = (d / "history.bin").stat().st_size
    print(result.line())
    print(
        f"replay: {took:.1f} s wall, {cpu:.1f} s CPU for {result.transactions} commits, {result.transitions} "
        f"transitions ({size / 1e6:.1f} MB captured), {result.transactions / cpu:.0f} commits per CPU second; "
        f"matches final snapshot: {result.matches_snapshot}"
    )


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.history")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cost")
    c.add_argument("--duration", type=float, default=40)
    c.add_argument("--rate", type=float, default=400)
    c.add_argument("--pairs", type=int, default=2)
    c.add_argument("--seed", type=int, default=5)
    r = sub.add_parser("replay")
    r.add_argument("run_dir", type=Path)
    args = p.parse_args()
    {"cost": cost, "replay": replay_time}[args.cmd](args)


if __name__ == "__main__":
    main()
