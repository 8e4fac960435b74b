"""An hour of steady load (issue 54): inserts and drains together, retention pruning on, autovacuum at its
defaults, sampled every minute from outside the worker; optionally with a transaction held open elsewhere
(the MVCC failure mode of Brandur Leach's "Postgres job queues & failure by MVCC").

    .venv/bin/python -m bench.steady [--minutes 60] [--rate-fraction 0.5] [--max-rate R] [--retention-s 300]
        [--hold-tx-at MIN --hold-tx-for MIN] [--out reports/steady-<ts>/]
    .venv/bin/python -m bench.steady --calibrate-only --out DIR     # only the max-rate drain, printed and saved
    .venv/bin/python -m bench.steady --quick --out /tmp/x           # a smoke run (tests/test_bench_steady.py)
    .venv/bin/python -m bench.steady --markdown A/steady.json       # the run's per-minute table
    .venv/bin/python -m bench.steady --overlay A/steady.json,B/steady.json --out DIR   # curves overlaid

One embedded PostgreSQL per run (impl.provision, autovacuum at PostgreSQL's defaults: nothing is set), a
fresh database (bench.peers.fresh_database), the Belay schema by its migrations. Two processes, each its
own: the reference worker (impl.runtime Worker: one queue "bench", the default kind, limit 10, notify on,
as bench.scale's Belay drain; the sweeper at its default 1 s cadence, with retention `--retention-s` for
every terminal state, so the worker's prune duty deletes succeeded jobs that old, at most 500 per sweeper
pass — model/worker_ops.py Prune.limit), and an inserter (the reference Client's enqueue_many, every 50 ms
the jobs due so far at the target rate: open loop, it never waits for the worker).

The rate: `--max-rate`, else a calibration drain first — a backlog of no-op jobs enqueued in another fresh
database, ANALYZE + CHECKPOINT, the same worker started and observed for `--calibrate-seconds`: the max
rate is the jobs finished from the first one on ÷ the time since — and the target is `--rate-fraction` of it.

Every `--sample-seconds` (60), read by the bench's own connection (never inside the worker), a sample:
  completed    succeeded rows with finished_at in the interval; insert→result p50/p99 of the same rows:
               finished_at − inserted_at (the worker's and the Client's clocks, one machine). Retention must
               exceed two intervals, so no row of the interval is pruned before it is counted.
  backlog      ready rows (and running rows)
  sizes        pg_relation_size(belay_jobs) (heap), pg_indexes_size(belay_jobs), pg_relation_size of
               belay_jobs_claim_order_idx (the claim's index)
  tuples       pg_stat_user_tables n_live_tup, n_dead_tup, n_tup_del (rows pruned, cumulative),
               autovacuum_count, autoanalyze_count
  claim        buffers per claim index scan over the interval, as bench.scale measures it (Δidx_blks of
               belay_jobs_claim_order_idx + belay_jobs_claim_idx ÷ Δidx_scan)
  xmin age     age(backend_xmin) of the oldest backend of the database (the held transaction shows here),
               and the next xid (pg_snapshot_xmax of the probe's snapshot)
  worker CPU   /proc user + system seconds of the worker process over the interval

`--hold-tx-at A --hold-tx-for B` (minutes from the start of the load): a separate connection opens a
REPEATABLE READ transaction, takes an xid (txid_current()) and a snapshot (a count of belay_jobs) and holds
it for B minutes, then commits. Recovery: minutes from the hold's end to the first sample whose backlog and
p99 are back at the pre-hold level (the 5 minutes before the hold: backlog ≤ max(1.5 × their max, their
max + 1 s of inserts), p99 ≤ max(1.5 × their max p99, their max p99 + 50 ms)); None if never within the run.

Output in --out: steady.json (arguments, calibration, every sample, the first-10 vs last-10 minutes
comparison, the hold and its recovery), worker.log / inserter.log (the processes' stderr) and the plots
throughput.png, latency.png, dead-tuples.png, sizes.png, claim-buffers.png, backlog.png (the held window
shaded). Figures, never assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import compile_sources, proc_cpu_seconds
from bench.peers import (
    POLL_S,
    belay_enqueue,
    belay_setup,
    drop_database,
    fresh_database,
    load_average,
    package_versions,
    settle,
    stop_worker,
)
from bench.scale import one, statio
from impl.provision import provision, redact

ROOT = Path(__file__).resolve().parents[1]
PRE_HOLD_MINUTES = 5.0  # the pre-hold level: the samples of the last 5 minutes before the hold
WINDOW_MINUTES = 10.0  # first-10 vs last-10

# The worker: bench.scale's Belay drain (default kind, limit 10, notify), but with the sweeper at its default
# cadence and a short retention, so that the prune duty runs.
WORKER = """
import os, time, logging
from impl.runtime import QueueConfig, Worker, WorkerConfig
from impl.worker import Registry
from model.queues import QueueOpts
logging.disable(logging.WARNING)
keep = int(os.environ["BENCH_RETENTION"])
reg = Registry()
reg.kind("noop", queue="bench")(lambda ctx, _input: None)
config = WorkerConfig(
    queues=(QueueConfig("bench", QueueOpts(10, 10)),),
    notify=True,
    retention=(("succeeded", keep), ("failed", keep), ("cancelled", keep)),
)
Worker(os.environ["BENCH_URL"], reg, config).start()
while True:  # until the bench terminates the process
    time.sleep(3600)
"""
# The inserter: open loop at BENCH_RATE jobs/s through the reference Client, in the batches due every 50 ms.
INSERTER = """
import os, time
from impl.client import Client
from model.ops import JobSpec
rate = float(os.environ["BENCH_RATE"])
client = Client(os.environ["BENCH_URL"])
started, sent = time.monotonic(), 0
while True:  # until the bench terminates the process
    due = min(int((time.monotonic() - started) * rate) - sent, 1000)
    if due > 0:
        client.enqueue_many([JobSpec(queue="bench", worker="noop") for _ in range(due)])
        sent += due
    time.sleep(0.05)
"""
AUTOVACUUM_SETTINGS = (
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_threshold",
    "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_analyze_scale_factor",
    "autovacuum_vacuum_cost_limit",
    "autovacuum_vacuum_cost_delay",
)


def _spawn(code: str, url: str, env_extra: dict[str, str], log: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        **env_extra,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "BENCH_URL": url,
    }
    with log.open("ab") as f:  # a file, not a pipe: an hour of stderr must never block the process
        return subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.DEVNULL, stderr=f, env=env, cwd=ROOT
        )


def _alive(proc: subprocess.Popen, what: str, log: Path) -> None:
    if proc.poll() is not None:
        raise RuntimeError(f"{what} exited {proc.returncode}: {log.read_text()[-2000:]}")


def calibrate(
    admin_url: str, backlog: int, seconds: float, retention: int, out: Path, pg_defaults: bool = False
) -> dict[str, Any]:
    """The max rate: the same worker draining a backlog, observed from outside for `seconds`."""
    url = fresh_database(admin_url)
    log = out / "calibrate-worker.log"
    try:
        belay_setup(url, pg_autovacuum_defaults=pg_defaults)
        belay_enqueue(url, backlog)
        settle(url)
        done_sql = "SELECT count(*) FROM belay_jobs WHERE state = 'succeeded'"
        with psycopg.connect(url, autocommit=True) as probe:
            proc = _spawn(WORKER, url, {"BENCH_RETENTION": str(retention)}, log)
            started = time.perf_counter()
            try:
                first: tuple[float, int] | None = None
                while True:
                    done = one(probe, done_sql)[0]
                    now = time.perf_counter()
                    if first is None and done > 0:
                        first = (now, done)
                    if first and (done >= backlog or now - first[0] >= seconds):
                        break
                    if first is None and now - started > 300:
                        raise RuntimeError("the calibration worker finished no job in 300 s")
                    _alive(proc, "calibration worker", log)
                    time.sleep(POLL_S)
            finally:
                stop_worker(proc)
        assert first is not None
        rate = (done - first[1]) / (now - first[0]) if now > first[0] else float(done)
        return {"backlog": backlog, "seconds": round(now - first[0], 2), "jobs": done - first[1], "max_rate": rate}
    finally:
        drop_database(admin_url, url)


SAMPLE_SQL = """
SELECT count(*) FILTER (WHERE state = 'ready'),
       count(*) FILTER (WHERE state = 'running'),
       count(*)
FROM belay_jobs
"""
DONE_SQL = """
SELECT count(*),
       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - inserted_at))
FROM belay_jobs WHERE state = 'succeeded' AND finished_at >= %(t0)s AND finished_at < %(t1)s
"""
STATS_SQL = """
SELECT pg_relation_size('belay_jobs'), pg_indexes_size('belay_jobs'),
       pg_relation_size('belay_jobs_claim_order_idx'),
       n_live_tup, n_dead_tup, n_tup_del, autovacuum_count, autoanalyze_count, vacuum_count
FROM pg_stat_user_tables WHERE relname = 'belay_jobs'
"""
XMIN_SQL = """
SELECT coalesce(max(age(backend_xmin)), 0), pg_snapshot_xmax(pg_current_snapshot())::text::bigint
FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def sample(probe: psycopg.Connection, t0: datetime, t1: datetime, minute: float, prev: dict | None, cpu: float | None):
    """One sample of the interval [t0, t1), observed by the bench's own connection."""
    ready, running, rows = one(probe, SAMPLE_SQL)
    done, pct = one(probe, DONE_SQL, {"t0": t0, "t1": t1})
    probe.execute("SELECT pg_stat_clear_snapshot()")
    heap, idx, claim_idx, live, dead, deleted, av, aa, manual = one(probe, STATS_SQL)
    io = statio(probe, "belay_jobs")
    xmin_age, next_xid = one(probe, XMIN_SQL)
    seconds = (t1 - t0).total_seconds()
    s: dict[str, Any] = {
        "minute": round(minute, 3),
        "at": t1.isoformat(timespec="seconds"),
        "completed": done,
        "throughput_per_s": round(done / seconds, 1) if seconds > 0 else None,
        "p50_s": None if pct is None else round(pct[0], 4),
        "p99_s": None if pct is None else round(pct[1], 4),
        "backlog_ready": ready,
        "running": running,
        "rows": rows,
        "heap_bytes": heap,
        "indexes_bytes": idx,
        "claim_index_bytes": claim_idx,
        "n_live_tup": live,
        "n_dead_tup": dead,
        "pruned_total": deleted,
        "autovacuum_count": av,
        "autoanalyze_count": aa,
        "vacuum_count": manual,
        "oldest_xmin_age": xmin_age,
        "next_xid": next_xid,
        "claim_blks": io["claim_blks"],
        "claim_scans": io["claim_scans"],
        "buffers_per_claim_scan": None,
        "worker_cpu_s": cpu,
        "worker_cpu_share": None,
        "load_average": load_average()[0],
    }
    if prev is not None:
        scans = s["claim_scans"] - prev["claim_scans"]
        if scans > 0:
            s["buffers_per_claim_scan"] = round((s["claim_blks"] - prev["claim_blks"]) / scans, 1)
        if cpu is not None and prev["worker_cpu_s"] is not None and seconds > 0:
            s["worker_cpu_share"] = round((cpu - prev["worker_cpu_s"]) / seconds, 3)
    return s


# --- the summaries (pure functions of the samples) --------------------------------------------------------


def _mean(values: list[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.mean(vals), 4) if vals else None


def window(samples: list[dict], lo: float, hi: float) -> dict[str, Any]:
    """Means over the samples whose interval ends in (lo, hi] minutes, and the sizes at its last one."""
    sel = [s for s in samples if lo < s["minute"] <= hi]
    out: dict[str, Any] = {"from_minute": lo, "to_minute": hi, "samples": len(sel)}
    for key in ("throughput_per_s", "p50_s", "p99_s", "backlog_ready", "n_dead_tup", "buffers_per_claim_scan"):
        out[key] = _mean([s[key] for s in sel])
    out["p99_s_max"] = max((s["p99_s"] for s in sel if s["p99_s"] is not None), default=None)
    for key in ("heap_bytes", "indexes_bytes", "claim_index_bytes", "rows"):
        out[key + "_at_end"] = sel[-1][key] if sel else None
    return out


def first_last(samples: list[dict], minutes: float) -> dict[str, Any]:
    span = min(WINDOW_MINUTES, minutes / 2)
    first, last = window(samples, 0.0, span + 0.5), window(samples, minutes - span + 0.5, minutes + 1)
    ratio = {}
    for key in ("throughput_per_s", "p50_s", "p99_s", "n_dead_tup", "buffers_per_claim_scan"):
        a, b = first[key], last[key]
        ratio[key] = round(b / a, 3) if a and b is not None else None
    for key in ("heap_bytes", "indexes_bytes", "claim_index_bytes"):
        a, b = first[key + "_at_end"], last[key + "_at_end"]
        ratio[key] = round(b / a, 3) if a and b is not None else None
    return {"window_minutes": span, "first": first, "last": last, "last_over_first": ratio}


def recovery(samples: list[dict], began: float, ended: float, rate: float) -> dict[str, Any]:
    """The pre-hold level, the worst during and after the hold, and the minutes from the hold's end to the
    first sample back at the level (backlog and p99 both)."""
    pre = [s for s in samples if began - PRE_HOLD_MINUTES <= s["minute"] <= began]
    pre_backlog = max((s["backlog_ready"] for s in pre), default=0)
    pre_p99 = max((s["p99_s"] for s in pre if s["p99_s"] is not None), default=None)
    backlog_level = max(1.5 * pre_backlog, pre_backlog + rate)
    p99_level = None if pre_p99 is None else max(1.5 * pre_p99, pre_p99 + 0.05)
    after = [s for s in samples if s["minute"] > began]

    def at_level(s: dict) -> bool:
        return s["backlog_ready"] <= backlog_level and (
            p99_level is None or (s["p99_s"] is not None and s["p99_s"] <= p99_level)
        )

    back = next((s for s in after if s["minute"] >= ended and at_level(s)), None)
    worst_backlog = max(after, key=lambda s: s["backlog_ready"], default=None)
    worst_p99 = max((s for s in after if s["p99_s"] is not None), key=lambda s: s["p99_s"], default=None)
    return {
        "pre_hold": {
            "samples": len(pre),
            "backlog_max": pre_backlog,
            "p99_s_max": pre_p99,
            "throughput_per_s": _mean([s["throughput_per_s"] for s in pre]),
        },
        "level": {
            "backlog_ready": round(backlog_level, 1),
            "p99_s": None if p99_level is None else round(p99_level, 4),
        },
        "worst_backlog": None if worst_backlog is None else [worst_backlog["minute"], worst_backlog["backlog_ready"]],
        "worst_p99_s": None if worst_p99 is None else [worst_p99["minute"], worst_p99["p99_s"]],
        "back_at_minute": None if back is None else back["minute"],
        "recovery_minutes": None if back is None else round(back["minute"] - ended, 3),
    }


# --- plots --------------------------------------------------------------------------------------------


def plots(result: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples, hold = result["samples"], result["hold"]
    x = [s["minute"] for s in samples]
    title = f"{result['rate']:.0f} jobs/s offered" + (
        f", tx held {hold['began_minute']:.1f}–{hold['ended_minute']:.1f} min" if hold else ""
    )
    charts = (
        ("throughput.png", "jobs/s", [("completed/s", "throughput_per_s")], False, result["rate"]),
        ("latency.png", "insert → result (s)", [("p50", "p50_s"), ("p99", "p99_s")], True, None),
        ("dead-tuples.png", "tuples", [("n_dead_tup", "n_dead_tup"), ("n_live_tup", "n_live_tup")], False, None),
        (
            "sizes.png",
            "MB",
            [("heap", "heap_bytes"), ("all indexes", "indexes_bytes"), ("claim index", "claim_index_bytes")],
            False,
            None,
        ),
        (
            "claim-buffers.png",
            "buffers per claim index scan",
            [("buffers/claim", "buffers_per_claim_scan")],
            False,
            None,
        ),
        ("backlog.png", "ready jobs", [("backlog", "backlog_ready")], False, None),
    )
    written = []
    for name, ylabel, series, logy, hline in charts:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        positive = False
        for label, key in series:
            pts = [(xi, s[key]) for xi, s in zip(x, samples, strict=True) if s[key] is not None]
            scale = 1e6 if key.endswith("_bytes") else 1
            ax.plot([p[0] for p in pts], [p[1] / scale for p in pts], marker=".", label=label)
            positive = positive or any(p[1] > 0 for p in pts)
        if hline is not None:
            ax.axhline(hline, color="grey", linestyle="--", linewidth=1, label="offered rate")
        if hold:
            ax.axvspan(hold["began_minute"], hold["ended_minute"], color="red", alpha=0.12, label="tx held")
        if logy and positive:
            ax.set_yscale("log")
        ax.set_xlabel("minutes of steady load")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / name, dpi=70)
        plt.close(fig)
        written.append(name)
    return written


# --- the run ------------------------------------------------------------------------------------------


def steady(admin_url: str, args: argparse.Namespace, rate: float, out: Path) -> dict[str, Any]:
    url = fresh_database(admin_url)
    hold: dict[str, Any] | None = None
    held: psycopg.Connection | None = None
    samples: list[dict] = []
    try:
        belay_setup(url, pg_autovacuum_defaults=args.pg_autovacuum_defaults)
        settle(url)
        worker_log, inserter_log = out / "worker.log", out / "inserter.log"
        with psycopg.connect(url, autocommit=True) as probe:
            started = time.monotonic()
            t_prev = datetime.now(UTC)
            worker = _spawn(WORKER, url, {"BENCH_RETENTION": str(args.retention_s)}, worker_log)
            inserter = _spawn(INSERTER, url, {"BENCH_RATE": str(rate)}, inserter_log)
            hold_at = None if args.hold_tx_at is None else args.hold_tx_at * 60
            hold_end = None if hold_at is None else hold_at + args.hold_tx_for * 60
            next_sample = args.sample_seconds
            prev: dict | None = None
            try:
                while True:
                    elapsed = time.monotonic() - started
                    if hold_at is not None and held is None and hold is None and elapsed >= hold_at:
                        held = psycopg.connect(url)
                        held.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                        xid, count = one(held, "SELECT txid_current(), count(*) FROM belay_jobs")  # xid + snapshot
                        hold = {"began_minute": round(elapsed / 60, 3), "began_at": datetime.now(UTC).isoformat()}
                        hold.update(xid=int(xid), rows_seen=count, planned_minutes=args.hold_tx_for)
                        print(f"[{elapsed / 60:.1f} min] transaction {xid} held open (REPEATABLE READ)", flush=True)
                    if held is not None and hold is not None and hold_end is not None and elapsed >= hold_end:
                        held.commit()
                        held.close()
                        held = None
                        hold.update(ended_minute=round(elapsed / 60, 3), ended_at=datetime.now(UTC).isoformat())
                        print(f"[{elapsed / 60:.1f} min] held transaction committed", flush=True)
                    if elapsed >= next_sample:
                        t_now = datetime.now(UTC)
                        s = sample(probe, t_prev, t_now, elapsed / 60, prev, proc_cpu_seconds(worker.pid))
                        samples.append(s)
                        prev, t_prev = s, t_now
                        next_sample += args.sample_seconds
                        print(
                            f"[{s['minute']:5.1f} min] {s['throughput_per_s']}/s p50 {s['p50_s']} p99 {s['p99_s']} "
                            f"backlog {s['backlog_ready']} rows {s['rows']} dead {s['n_dead_tup']} "
                            f"heap {s['heap_bytes'] / 1e6:.1f} MB idx {s['indexes_bytes'] / 1e6:.1f} MB "
                            f"buf/claim {s['buffers_per_claim_scan']} av {s['autovacuum_count']} "
                            f"xmin age {s['oldest_xmin_age']} load {s['load_average']}",
                            flush=True,
                        )
                        if elapsed >= args.minutes * 60:
                            break
                    _alive(worker, "worker", worker_log)
                    _alive(inserter, "inserter", inserter_log)
                    time.sleep(0.2)
            finally:
                if held is not None:
                    held.close()
                for p in (inserter, worker):
                    stop_worker(p)
    finally:
        drop_database(admin_url, url)
    result: dict[str, Any] = {"samples": samples, "hold": hold}
    result["first_vs_last"] = first_last(samples, args.minutes)
    if hold is not None and "ended_minute" in hold:
        hold["recovery"] = recovery(samples, hold["began_minute"], hold["ended_minute"], rate)
    return result


def overlay(files: list[Path], out: Path) -> list[str]:
    """Runs' curves on one chart each (e.g. without and with the held transaction), the holds shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(f.parent.name if f.name == "steady.json" else f.stem, json.loads(f.read_text())) for f in files]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, ylabel, logy in (
        ("throughput_per_s", "completed jobs/s", False),
        ("p99_s", "insert → result p99 (s)", True),
        ("backlog_ready", "ready jobs", False),
        ("buffers_per_claim_scan", "buffers per claim index scan", False),
        ("n_dead_tup", "n_dead_tup", False),
        ("heap_bytes", "belay_jobs heap (MB)", False),
    ):
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for name, run in runs:
            pts = [(s["minute"], s[key]) for s in run["samples"] if s[key] is not None]
            ax.plot([p[0] for p in pts], [p[1] / (1e6 if key == "heap_bytes" else 1) for p in pts], label=name)
            if run["hold"]:
                ax.axvspan(run["hold"]["began_minute"], run["hold"]["ended_minute"], color="red", alpha=0.1)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("minutes of steady load (shaded: transaction held)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        name = f"overlay-{key.replace('_', '-')}.png"
        fig.savefig(out / name, dpi=70)
        plt.close(fig)
        written.append(name)
    return written


def markdown(files: list[Path]) -> str:
    """The per-minute table of one or more runs side by side (docs/benchmarks.md, "Steady state")."""
    runs = [json.loads(f.read_text()) for f in files]
    cols = ("jobs/s", "p50 s", "p99 s", "backlog", "dead tup", "heap MB", "idx MB", "buf/claim", "xmin age")
    keys = ("throughput_per_s", "p50_s", "p99_s", "backlog_ready", "n_dead_tup", "heap_bytes", "indexes_bytes")
    keys += ("buffers_per_claim_scan", "oldest_xmin_age")
    head = "| min | " + " | ".join(f"{c} ({chr(65 + i)})" for i in range(len(runs)) for c in cols) + " |"
    lines = [head, "|" + "---:|" * (1 + len(cols) * len(runs))]
    by_minute = [{round(s["minute"]): s for s in r["samples"]} for r in runs]
    for minute in sorted(set().union(*by_minute)):
        cells = []
        for run in by_minute:
            s = run.get(minute)
            for key in keys:
                v = None if s is None else s[key]
                if v is None:
                    cells.append("—")
                elif key.endswith("_bytes"):
                    cells.append(f"{v / 1e6:.0f}")
                elif isinstance(v, float) and key.endswith("_s"):
                    cells.append(f"{v:.3f}" if v < 10 else f"{v:.1f}")
                else:
                    cells.append(f"{v:,.0f}" if isinstance(v, int) or v >= 100 else f"{v:.1f}")
        lines.append(f"| {minute} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.steady", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--rate-fraction", type=float, default=0.5)
    p.add_argument("--max-rate", type=float, default=None, help="jobs/s; skips the calibration drain")
    p.add_argument("--calibrate-backlog", type=int, default=400000)
    p.add_argument("--calibrate-seconds", type=float, default=60.0)
    p.add_argument("--calibrate-only", action="store_true")
    p.add_argument("--retention-s", type=int, default=300, help="retention of every terminal state (seconds)")
    p.add_argument("--sample-seconds", type=float, default=60.0)
    p.add_argument("--hold-tx-at", type=float, default=None, help="minutes from the start")
    p.add_argument("--hold-tx-for", type=float, default=10.0, help="minutes")
    p.add_argument("--max-quick-rate", type=float, default=40.0, help=argparse.SUPPRESS)
    p.add_argument(
        "--pg-autovacuum-defaults",
        action="store_true",
        help="reset belay_jobs' autovacuum parameters that migrate sets (the runs of 2026-12-06 had none)",
    )
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--quick", action="store_true", help="smoke: 2 minutes, 15 s samples, small rate and backlog")
    p.add_argument("--overlay", default="", help="comma list of steady.json files: their curves overlaid in --out")
    p.add_argument("--markdown", default="", help="comma list of steady.json files: print their per-minute table")
    args = p.parse_args(argv)
    if args.overlay:
        if args.out is None:
            p.error("--overlay needs --out")
        print(overlay([Path(x) for x in args.overlay.split(",") if x.strip()], args.out))
        return 0
    if args.markdown:
        print(markdown([Path(x) for x in args.markdown.split(",") if x.strip()]))
        return 0
    if args.quick:
        args.minutes, args.sample_seconds, args.retention_s = 2.0, 15.0, 40
        args.calibrate_backlog, args.calibrate_seconds = 2000, 10.0
    if args.retention_s < 2 * args.sample_seconds:
        p.error("--retention-s must be at least two sample intervals (rows must not be pruned before they are counted)")
    out = args.out or ROOT / "reports" / f"steady-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    compile_sources()
    load_before = load_average()
    db = provision()
    try:
        with psycopg.connect(db.url, autocommit=True) as c:
            server = one(c, "SHOW server_version")[0]
            settings = {name: one(c, f"SHOW {name}")[0] for name in AUTOVACUUM_SETTINGS}
        print(f"database: {db.kind} PostgreSQL {server} {redact(db.url)}; load {load_before}; {settings}", flush=True)
        calibration = None
        max_rate = args.max_rate
        if max_rate is None:
            calibration = calibrate(
                db.url,
                args.calibrate_backlog,
                args.calibrate_seconds,
                args.retention_s,
                out,
                args.pg_autovacuum_defaults,
            )
            max_rate = calibration["max_rate"]
            print(f"calibration: {calibration}", flush=True)
        rate = max_rate * args.rate_fraction
        if args.quick:
            rate = min(rate, args.max_quick_rate)
        result: dict[str, Any] = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}",
            "postgresql": server,
            "autovacuum_settings": settings,
            "versions": package_versions(),
            "args": {k: None if v is None else str(v) for k, v in vars(args).items()},
            "calibration": calibration,
            "max_rate": max_rate,
            "rate": rate,
            "load_average_before": load_before,
        }
        if args.calibrate_only:
            (out / "calibration.json").write_text(json.dumps(result, indent=1) + "\n")
            print(f"max rate {max_rate:.0f} jobs/s; written {out / 'calibration.json'}")
            return 0
        print(f"offering {rate:.1f} jobs/s for {args.minutes} min; retention {args.retention_s} s", flush=True)
        result.update(steady(db.url, args, rate, out))
    finally:
        db.close()
    result["load_average_after"] = load_average()
    result["plots"] = plots(result, out)
    (out / "steady.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"first_vs_last": result["first_vs_last"], "hold": result["hold"]}, indent=1))
    print(f"written {out / 'steady.json'} and {', '.join(result['plots'])}")
    return 0 if result["samples"] else 1


if __name__ == "__main__":
    sys.exit(main())
