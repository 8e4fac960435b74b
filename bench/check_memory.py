"""The end-of-run check's memory against the length of a run (issue 27, item 3), on synthetic runs.

    .venv/bin/python -m bench.check_memory [--jobs 20000 80000 320000]
    .venv/bin/python -m bench.check_memory --inputs RUN.pickle [RUN2.pickle …] [--over 10000]

Each configuration runs in a fresh process: it builds a finished run of N `echo` jobs (each in the ledger,
succeeded on attempt 1) with lease samples every 0.5 s over the run's length (20 jobs/s, as a default
soak: 30 running rows each), then runs `soak.judges.checker.check` — once with the snapshot in dicts and the
samples in the history list (the check as it was), once with the snapshot and the ledger in DiskTables
and the samples streamed (`--disk-tables-over`, what the soak does from 10,000 rows on). It prints the process's peak RSS
(VmHWM, read from /proc after the check) and the check's wall time, and the bytes per job between the
smallest and the largest run. Not a soak: only the checker's data structures are measured.

The synthetic runs end `unknown`, and cannot end `valid`: a judge is valid only when the scenarios it
names happened in the run (soak/judges/coverage.py `apply`, "never a vacuous valid": kill -9s with
lease_expired reclaims, SIGSTOPs and stale acks, PostgreSQL crash-restarts, SIGTERM drains, retried
steps, budgets, workflows, cron slots, unique-key groups, spawns, signals, cancels, sleeps, …) and the
synthetic run has `echo` jobs and lease samples only. Every judge's counting runs (checks 2,000 of I1,
P9, P16 …), but the paths a real run's evidence feeds (steps, observations, workflow links, signals,
events, fault windows) are empty there. Forging that evidence consistently would be rewriting the driver
and the worker. So `--inputs` measures the check of real soaks instead: `python -m bench.check_inputs
OUT.pickle -- <soak args>` runs a soak whose end-of-run check inputs (snapshot, ledger, history, trace
validation summary, samples) are recorded to OUT with the soak's own check result; `--inputs OUT` then
re-runs `check` on them in a fresh process — the snapshot and the ledger in DiskTables from `--over`
rows on, the samples streamed, as the soak holds them — and says whether the verdict and the whole
result (`CheckResult.to_json()`) equal the soak's. Two peaks: `load` (VmHWM once the inputs are held:
reading the recording stands for the soak's snapshot and ledger read) and `check` (VmHWM reset after
the load through /proc/self/clear_refs, read after the check: the checker's own peak).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
RATE = 20.0  # jobs per second of run
ROWS_PER_SAMPLE = 30


def synthetic(n: int) -> tuple[Any, Any, list[dict], Any]:
    """(job(i), entries(), history, samples()) of a synthetic finished run of n `echo` jobs."""
    from model.envelope import encode
    from model.rows import Job
    from soak.judges.checker import LedgerEntry

    e0 = T0.timestamp()
    empty = {
        f: None
        for f in Job.__dataclass_fields__
        if f not in ("id", "queue", "worker", "input", "meta", "state", "priority", "attempt", "max_attempts")
    }

    def job(i: int) -> Job:
        at = T0 + timedelta(seconds=i / RATE)
        return Job(
            **{
                **empty,
                "id": i,
                "queue": "soak",
                "worker": "echo",
                "input": {"v": i},
                "meta": {},
                "state": "succeeded",
                "priority": 1,
                "attempt": 1,
                "max_attempts": 10,
                "ready_at": at,
                "inserted_at": at,
                "started_at": at,
                "finished_at": at + timedelta(seconds=0.1),
                "result": encode({"echo": i, "attempt": 1}),
                "errors": [],
                "unique_mode": None,
                "spent_usd_micros": 0,
                "spent_tokens": 0,
                "cancel_requested": False,
                "wf_deps": (),
                "wf_ignore": (),
            }
        )

    duration = n / RATE

    def samples():
        k = 0
        while k * 0.5 < duration:
            t = e0 + k * 0.5
            first = int(k * 0.5 * RATE)
            rows = [[j, 1, "w1-1", t + 10, "echo"] for j in range(first + 1, first + 1 + ROWS_PER_SAMPLE)]
            yield {"t": t, "type": "lease_sample", "at": t, "rows": rows, "admission": {}, "partitions": {}}
            k += 1

    history = [
        {"t": e0 - 2, "type": "run_start", "lease_ttl": 10},
        {"t": e0 - 1, "type": "worker_start", "node": "w1-1"},
        {"t": e0 + duration + 5, "type": "drain_end", "drained": True},
        {"t": e0 + duration + 6, "type": "snapshot"},
    ]

    def entries():
        return (LedgerEntry(i, "echo", "succeeded", T0 + timedelta(seconds=i / RATE), {}) for i in range(1, n + 1))

    return job, entries, history, samples


def _one(n: int, disk: bool) -> dict:
    from model.state import from_rows
    from soak.judges.checker import LedgerRows, SoakLedger, check
    from soak.record.spill import DiskTable
    from soak.report.memory import peak_rss_bytes

    job, entries, history, samples = synthetic(n)
    if disk:  # the ledger streamed into a disk table as soak/workload/ledger.py reads a long run's (LedgerRows)
        ledger = SoakLedger(LedgerRows(DiskTable.build((e.job_id, e) for e in entries())))
        jobs = DiskTable.build((i, job(i)) for i in range(1, n + 1))
        base = from_rows((), next_id=n + 1)
        from dataclasses import replace

        state = replace(base, jobs=jobs)
        t = time.perf_counter()
        result = check(state, ledger, history, samples=samples())
    else:
        ledger = SoakLedger(tuple(entries()))
        state = from_rows((job(i) for i in range(1, n + 1)), next_id=n + 1)
        t = time.perf_counter()
        result = check(state, ledger, [*history, *samples()])
    seconds = time.perf_counter() - t
    return {
        "jobs": n,
        "disk": disk,
        "verdict": result.verdict,
        "check_seconds": round(seconds, 1),
        "peak_rss_mib": round((peak_rss_bytes() or 0) / 2**20, 1),
    }


def record_synthetic(n: int, out: Path) -> None:
    """The synthetic run of n jobs written as bench.check_inputs records a soak's (for --inputs and profiling)."""
    from dataclasses import replace

    from bench.check_inputs import write
    from model.state import from_rows
    from soak.judges.checker import LedgerRows, SoakLedger
    from soak.record.spill import DiskTable

    job, entries, history, samples = synthetic(n)
    ledger = SoakLedger(LedgerRows(DiskTable.build((e.job_id, e) for e in entries())))
    state = replace(from_rows((), next_id=n + 1), jobs=DiskTable.build((i, job(i)) for i in range(1, n + 1)))
    for _ in write(out, state, ledger, history, None, samples()):
        pass


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux ≥ 4.0)
        return True
    except OSError:
        return False


def _one_inputs(path: Path, over: int) -> dict:
    from bench.check_inputs import load, recorded_result
    from soak.judges.checker import check
    from soak.report.memory import peak_rss_bytes, rss_bytes

    state, ledger, history, committed, samples = load(path, over)
    load_peak = (peak_rss_bytes() or 0) / 2**20
    held = (rss_bytes() or 0) / 2**20
    reset = _reset_peak()
    t = time.perf_counter()
    result = check(state, ledger, history, committed, samples=samples)
    seconds = time.perf_counter() - t
    check_peak = (peak_rss_bytes() or 0) / 2**20
    soak = recorded_result(path)
    same = (
        None
        if soak is None
        else json.dumps(result.to_json(), sort_keys=True, default=str) == json.dumps(soak, sort_keys=True, default=str)
    )
    return {
        "inputs": str(path),
        "over": over,
        "jobs": len(state.jobs),
        "ledger": len(ledger.entries),
        "steps": len(state.steps),
        "events": len(state.events),
        "history_events": len(history),
        "p14_intervals_judged": result.duties["P14"].checks if "P14" in result.duties else None,
        "verdict": result.verdict,
        "soak_verdict": None if soak is None else soak["verdict"],
        "same_result_as_soak": same,
        "check_seconds": round(seconds, 1),
        "load_peak_rss_mib": round(load_peak, 1),
        "rss_after_load_mib": round(held, 1),
        "check_peak_rss_mib": round(check_peak, 1) if reset else None,
    }


def main_inputs(paths: list[str], over: int, out: str | None) -> None:
    rows = []
    for p in paths:
        res = subprocess.run(
            [sys.executable, "-m", "bench.check_memory", "--one-inputs", p, str(over)],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(res.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(
            f"{row['jobs']:>8} jobs {row['ledger']:>8} ledger {row['steps']:>7} steps  load peak"
            f" {row['load_peak_rss_mib']:6.1f} MiB (held {row['rss_after_load_mib']:6.1f})  check peak"
            f" {row['check_peak_rss_mib']:6.1f} MiB  check {row['check_seconds']:6.1f} s  {row['verdict']}"
            f" (soak: {row['soak_verdict']}, same result: {row['same_result_as_soak']})  {p}",
            flush=True,
        )
    if len(rows) > 1:
        a, b = min(rows, key=lambda r: r["jobs"]), max(rows, key=lambda r: r["jobs"])
        if b["jobs"] > a["jobs"]:
            for k in ("load_peak_rss_mib", "check_peak_rss_mib"):
                per = (b[k] - a[k]) * 2**20 / (b["jobs"] - a["jobs"])
                print(f"{k}: {per:.0f} bytes per job between {a['jobs']} and {b['jobs']} jobs")
    if out:
        Path(out).write_text(json.dumps({"recorded_soaks": rows}, indent=2) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.check_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, nargs="+", default=[20_000, 80_000, 320_000])
    p.add_argument("--json", help="also write every configuration's figures to this file")
    p.add_argument("--inputs", nargs="+", help="recorded soak check inputs (bench.check_inputs) to check instead")
    p.add_argument("--over", type=int, default=10_000, help="with --inputs: tables of this many rows on disk")
    p.add_argument("--record-synthetic", nargs=2, metavar=("JOBS", "OUT"), help="write a synthetic run's inputs")
    p.add_argument("--one", nargs=2, metavar=("JOBS", "DISK"), help=argparse.SUPPRESS)
    p.add_argument("--one-inputs", nargs=2, metavar=("PATH", "OVER"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one_inputs:
        print(json.dumps(_one_inputs(Path(args.one_inputs[0]), int(args.one_inputs[1]))))
        return
    if args.record_synthetic:
        record_synthetic(int(args.record_synthetic[0]), Path(args.record_synthetic[1]))
        return
    if args.inputs:
        main_inputs(args.inputs, args.over, args.json)
        return
    if args.one:
        print(json.dumps(_one(int(args.one[0]), args.one[1] == "1")))
        return
    rows = []
    for n in args.jobs:
        for disk in (False, True):
            out = subprocess.run(
                [sys.executable, "-m", "bench.check_memory", "--one", str(n), "1" if disk else "0"],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(
                f"{n:>8} jobs  {'disk tables, samples streamed' if disk else 'dicts, samples in the list':32s}"
                f" peak RSS {row['peak_rss_mib']:7.1f} MiB  check {row['check_seconds']:6.1f} s  ({row['verdict']})",
                flush=True,
            )
    lo, hi = min(args.jobs), max(args.jobs)
    slopes = {}
    for disk in (False, True):
        a = next(r for r in rows if r["jobs"] == lo and r["disk"] == disk)
        b = next(r for r in rows if r["jobs"] == hi and r["disk"] == disk)
        per_job = (b["peak_rss_mib"] - a["peak_rss_mib"]) * 2**20 / (hi - lo) if hi > lo else 0.0
        slopes["disk" if disk else "dicts"] = round(per_job)
        print(f"{'disk' if disk else 'dicts'}: {per_job:.0f} bytes of peak RSS per job between {lo} and {hi} jobs")
    if args.json:
        Path(args.json).write_text(json.dumps({"configurations": rows, "bytes_per_job": slopes}, indent=2) + "\n")


if __name__ == "__main__":
    main()
