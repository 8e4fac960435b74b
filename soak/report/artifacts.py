"""Soak reports: `reports/<run-id>/` with results.json, summary.md, report.html (throughput over time
with fault windows shaded, latency quantiles, as embedded PNGs), history.jsonl.gz and worker logs, and a
`latest` link to the newest run. Nothing written here contains a password (`redact`)."""

from __future__ import annotations

import base64
import html
import io
import json
import os
from array import array
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from impl.provision import redact
from model.state import State
from soak.judges.checker import CheckResult

QUANTILES = (0.5, 0.9, 0.99, 1.0)


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(int(q * (len(sorted_values) - 1) + 0.5), len(sorted_values) - 1)
    return sorted_values[i]


def figures(state: State, history: list[dict], t0: float) -> dict[str, Any]:
    """Throughput per second and latency (inserted → finished, succeeded jobs) per kind."""
    done = Counter()
    # 8 bytes a latency (array('d')), not a float object and a list slot: one per succeeded job (issue 27)
    latencies: dict[str, array[float]] = defaultdict(lambda: array("d"))
    echo_over_time: dict[int, array[float]] = defaultdict(lambda: array("d"))
    for job in state.jobs.values():
        if job.finished_at is None:
            continue
        second = int(job.finished_at.timestamp() - t0)
        done[second] += 1
        if job.state == "succeeded":
            lat = (job.finished_at - job.inserted_at).total_seconds()
            kind = (
                "cron" if job.cron_name else "child" if job.parent_id else "unique" if job.unique_key else job.worker
            )  # unique-key inserts are scheduled +20 s
            latencies[kind].append(lat)
            if kind == "echo":
                echo_over_time[second // 10 * 10].append(lat)
    quantiles = {}
    for kind, lat in sorted(latencies.items()):
        values = sorted(lat)
        quantiles[kind] = {"n": len(values), **{f"p{int(q * 100)}": round(_quantile(values, q), 4) for q in QUANTILES}}
    span = max(done, default=0)
    per_second = [done.get(s, 0) for s in range(0, span + 1)]
    return {
        "per_second": per_second,
        "latency": quantiles,
        # each 10 s bucket's echo latency p50 and p99 (the chart's two lines)
        "echo_over_time": {
            k: [_quantile(v := sorted(a), 0.5), _quantile(v, 0.99)] for k, a in sorted(echo_over_time.items())
        },
    }


def _windows(history: list[dict], t0: float) -> dict[str, list]:
    out: dict[str, list] = {"kills": [], "exits": [], "stops": [], "db": [], "phases": [], "net": [], "failover": []}
    open_stop: dict[str, float] = {}
    open_net: dict[tuple, float] = {}  # issue 13: (slot, fault) → start
    open_failover = None
    db_open = None
    for e in history:
        t = e["t"] - t0
        kind = e["type"]
        if kind == "worker_kill":
            out["kills"].append(t)
        elif kind == "worker_exit":
            out["exits"].append(t)
        elif kind == "worker_stop":
            open_stop[e["node"]] = t
        elif kind == "worker_cont" and e["node"] in open_stop:
            out["stops"].append((open_stop.pop(e["node"]), t))
        elif kind == "db_crash":
            db_open = t
        elif kind == "db_restarted" and db_open is not None:
            out["db"].append((db_open, t))
            db_open = None
        elif kind == "phase":
            out["phases"].append((t, e["phase"]))
        elif kind.startswith("net_") and kind != "net_heal":  # issue 13
            open_net[(e.get("slot"), kind[4:])] = t
        elif kind == "net_heal" and (e.get("slot"), e.get("fault")) in open_net:
            out["net"].append((open_net.pop((e.get("slot"), e.get("fault"))), t, e.get("fault")))
        elif kind == "failover_begin":
            open_failover = t
        elif kind == "standby_ready" and open_failover is not None:
            out["failover"].append((open_failover, t))
            open_failover = None
    return out


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def charts(fig_data: dict[str, Any], history: list[dict], t0: float) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w = _windows(history, t0)
    out = {}
    fig, ax = plt.subplots(figsize=(11, 3.8))
    ys = fig_data["per_second"]
    ax.plot(range(len(ys)), ys, color="#1f5f99", linewidth=0.9, label="jobs finished / s")
    for a, b in w["stops"]:
        ax.axvspan(a, b, color="orange", alpha=0.18, lw=0)
    for a, b in w["db"]:
        ax.axvspan(a, max(b, a + 0.5), color="red", alpha=0.35, lw=0)
    net_colours = {"partition": "#8a2be2", "stall": "#d4a017", "stall_conn": "#4682b4", "latency": "#999999"}
    for a, b, fault in w["net"]:  # issue 13: network fault windows, one band (row) per kind of fault
        row = list(net_colours).index(fault) if fault in net_colours else len(net_colours)
        ax.axvspan(a, b, ymin=0.04 * row, ymax=0.04 * (row + 1), color=net_colours.get(fault, "grey"), alpha=0.6, lw=0)
    for a, b in w["failover"]:
        ax.axvspan(a, max(b, a + 0.5), color="darkred", alpha=0.25, lw=0, hatch="//")
    for t in w["kills"]:
        ax.axvline(t, color="black", alpha=0.35, linewidth=0.6)
    for t in w["exits"]:
        ax.axvline(t, color="purple", alpha=0.35, linewidth=0.6, linestyle=":")
    for t, name in w["phases"]:
        ax.axvline(t, color="green", linewidth=1.2)
        ax.text(t, ax.get_ylim()[1] * 0.95, f" {name}", color="green", fontsize=8, va="top")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            Line2D([], [], color="#1f5f99", label="jobs finished / s"),
            Patch(color="orange", alpha=0.3, label="SIGSTOP window"),
            Patch(color="red", alpha=0.4, label="PostgreSQL down"),
            Line2D([], [], color="black", alpha=0.5, label="kill -9"),
            Line2D([], [], color="purple", linestyle=":", label="worker exited itself"),
        ]
        + [
            Patch(color=c, alpha=0.6, label=f"net {f.replace('_', ' ')} (bottom bands)")
            for f, c in net_colours.items()
            if any(x[2] == f for x in w["net"])
        ]
        + ([Patch(color="darkred", alpha=0.3, label="failover → standby ready")] if w["failover"] else []),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.15),
        fontsize=7,
        ncol=5,
    )
    ax.set_xlabel("seconds since run start")
    ax.set_ylabel("jobs / s")
    ax.set_title("Throughput over time (fault windows shaded)")
    out["throughput"] = _png(fig)
    plt.close(fig)

    lat = fig_data["latency"]
    if lat:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
        kinds = list(lat)
        for i, q in enumerate(("p50", "p90", "p99", "p100")):
            ax1.bar(
                [k + i * 0.2 for k in range(len(kinds))],
                [max(lat[k][q], 1e-3) for k in kinds],
                width=0.2,
                label=q if q != "p100" else "max",
            )
        ax1.set_yscale("log")
        ax1.set_xticks([k + 0.3 for k in range(len(kinds))], kinds, rotation=30, fontsize=8)
        ax1.set_ylabel("seconds (inserted → finished)")
        ax1.set_title("Latency quantiles by kind (succeeded jobs)")
        ax1.legend(fontsize=7)
        eot = fig_data["echo_over_time"]
        xs = list(eot)
        for i, (q, style) in enumerate(((0.5, "-"), (0.99, "--"))):
            ax2.plot(xs, [eot[x][i] for x in xs], style, label=f"echo p{int(q * 100)}")
        for a, b in w["db"]:
            ax2.axvspan(a, max(b, a + 0.5), color="red", alpha=0.3, lw=0)
        ax2.set_yscale("log")
        ax2.set_xlabel("seconds since run start (10 s buckets)")
        ax2.set_title("echo latency over time")
        ax2.legend(fontsize=7)
        out["latency"] = _png(fig)
        plt.close(fig)
    return out


def _fault_counts(history: list[dict]) -> dict[str, int]:
    c = Counter(e["type"] for e in history)
    return {
        "kill -9": c["worker_kill"],
        "SIGSTOP": c["worker_stop"],
        "worker exited itself": c["worker_exit"],
        "PostgreSQL crash-restart": c["db_restarted"],
        "nemesis errors": c["nemesis_error"],
        **{
            k: c[t]
            for k, t in (
                ("partition", "net_partition"),
                ("stall", "net_stall"),  # issue 13
                ("connection stall", "net_stall_conn"),
                ("latency", "net_latency"),
                ("failover", "failover_end"),
            )
            if c[t]
        },
    }


FAULT_NAMES = {
    "kill": "kill -9",
    "stop": "SIGSTOP",
    "db": "PostgreSQL crash-restart",
    "term": "SIGTERM drain",
    "partition": "partition",
    "stall": "stall",
    "stall_conn": "connection stall",
    "latency": "latency",
    "failover": "failover",
}


def fault_rates(history: list[dict]) -> dict[str, dict[str, Any]]:
    """Requested vs injected per fault kind over the fault phase (the nemeses' `fault_rates` events):
    requested = phase seconds / every; injected = faults that happened (not the ones that found no target)."""
    out: dict[str, dict[str, Any]] = {}
    for e in history:
        if e.get("type") == "fault_rates":
            for kind, v in (e.get("kinds") or {}).items():
                out[FAULT_NAMES.get(kind, kind)] = dict(v)
    return out


def exits(stats: dict[str, Any]) -> dict[str, int]:
    """Worker self-exits: the deliberate ones (a job kind asked, PROTOCOL.md; recorded `exit` observations)
    apart from the others. Neither is an injected fault."""
    e = stats.get("worker_exits") or {}
    return {"deliberate": int(e.get("deliberate", 0)), "other": int(e.get("other", 0))}


def describe_faults(rates: dict[str, dict[str, Any]], ex: dict[str, int]) -> str:
    """One line: injected (requested) per kind, the injected total, and the exits apart."""
    parts = [f"{k} {v['injected']} of {v['requested']:g} requested" for k, v in rates.items()]
    total = sum(v["injected"] for v in rates.values())
    return (
        f"injected faults {total} ({', '.join(parts) or 'none requested'}); "
        f"not faults: deliberate exits (a job kind asked) {ex['deliberate']}, other self-exits {ex['other']}"
    )


def write(
    run_dir: Path,
    result: CheckResult,
    state: State,
    history: list[dict],
    meta: dict[str, Any],
    final: tuple[str, int] | None = None,
) -> dict:
    """Write results.json, summary.md and report.html into run_dir; update the `latest` link.

    `final`: the run's (verdict, exit code) when something beyond `result` decides it — the committed
    history (soak.hook.final_verdict); every file then states that pair, the exit code's
    (issue 51: the report said VALID of a run the history made INVALID)."""
    verdict, exit_code = final if final is not None else (result.verdict, result.exit_code)
    decided = (
        f" — the checks said {result.verdict.upper()}; the committed history decided {verdict.upper()}"
        if verdict != result.verdict
        else ""
    )
    t0 = next((e["t"] for e in history if e["type"] == "run_start"), history[0]["t"] if history else 0.0)
    fig_data = figures(state, history, t0)
    faults = _fault_counts(history)
    results = {
        "run_id": meta["run_id"],
        "verdict": verdict,
        "exit_code": exit_code,
        "checks_verdict": result.verdict,  # the invariants', duties' and coverage's own, before the history
        "invariants": {k: v.to_json() for k, v in result.invariants.items()},
        "duties": {k: v.to_json() for k, v in result.duties.items()},  # issue 11: worker duties P1 …
        "coverage": result.coverage,  # issue 11: duty · scenarios · count · verdict
        "stats": result.stats,
        "faults": faults,
        "fault_rates": fault_rates(history),  # issue 27: requested vs injected per kind
        "exits": exits(result.stats),  # deliberate exits apart from the injected faults
        "meta": meta,
        "throughput": {
            "peak_per_s": max(fig_data["per_second"], default=0),
            "mean_per_s_during_faults": meta.get("mean_throughput_faults"),
        },
        "latency_seconds": fig_data["latency"],
    }
    text = redact(json.dumps(results, indent=2, default=str))
    (run_dir / "results.json").write_text(text + "\n")

    lines = [
        f"# Soak run {meta['run_id']}: **{verdict.upper()}** (exit {exit_code}){decided}",
        "",
        f"- worker: `{meta['worker']}` × {meta['workers']}; lease ttl {meta['lease_ttl']} s; seed {meta['seed']}",
        f"- phases: faults {meta['duration']} s, heal {meta['heal']} s, drain {meta.get('drain_seconds')} s "
        f"(drained: {result.stats['drained']})",
        f"- database: {meta['database']}; database faults: {meta['db_faults']}",
        f"- jobs checked: {result.stats['jobs_checked']} ({result.stats['ledger_jobs']} in the ledger); "
        f"steps {result.stats['steps']}; signals {result.stats['signals']}",
        "- faults: " + describe_faults(results["fault_rates"], results["exits"]),
        "- fault log counts: " + ", ".join(f"{k} {v}" for k, v in faults.items()),
        "",
        "| invariant | verdict | checks | violations | first counterexample / why |",
        "|---|---|---|---|---|",
    ]
    for name, r in {**result.invariants, **result.duties}.items():
        why = r.counterexamples[0] if r.counterexamples else (r.why_unknown or "; ".join(r.notes[:1]))
        lines.append(f"| {name} | {r.verdict} | {r.checks} | {r.violations} | {why.replace('|', '/')} |")
    from soak.judges import coverage as cov

    lines += cov.markdown(result.coverage)
    lines += [
        "",
        "Latency (seconds, inserted → finished, succeeded jobs):",
        "",
        "| kind | n | p50 | p90 | p99 | max |",
        "|---|---|---|---|---|---|",
    ]
    for kind, q in fig_data["latency"].items():
        lines.append(f"| {kind} | {q['n']} | {q['p50']} | {q['p90']} | {q['p99']} | {q['p100']} |")
    if result.stats.get("outcome_mismatch_examples"):
        lines += [
            "",
            f"Outcome mismatches vs. the ledger (informational, explained by faults): "
            f"{result.stats['outcome_mismatches']}",
        ]
        lines += [f"- {x}" for x in result.stats["outcome_mismatch_examples"]]
    lines += ["", "Notes:"] + [f"- {n}: {note}" for n, r in result.invariants.items() for note in r.notes]
    summary = redact("\n".join(lines) + "\n")
    (run_dir / "summary.md").write_text(summary)

    try:
        images = charts(fig_data, history, t0)
    except Exception as exc:  # noqa: BLE001 - a report without pictures is still a report
        images = {}
        meta.setdefault("report_errors", []).append(f"charts: {exc}")
    rows = "".join(
        f"<tr class='{r.verdict}'><td>{n}</td><td>{r.verdict}</td><td>{r.checks}</td><td>{r.violations}</td>"
        f"<td>{html.escape(r.counterexamples[0] if r.counterexamples else (r.why_unknown or ''))}</td>"
        f"<td>{html.escape(' '.join(r.notes))}</td></tr>"
        for n, r in {**result.invariants, **result.duties}.items()
    )
    coverage_rows = "".join(
        f"<tr class='{row['verdict']}'><td>{row['row']}</td><td>{row['verdict']}</td><td>"
        + "<br>".join(html.escape(f"{s['scenario']}: {s['count']}") for s in row["scenarios"])
        + "</td></tr>"
        for row in result.coverage
    )
    imgs = "".join(f"<h2>{k}</h2><img alt='{k}' src='data:image/png;base64,{v}'/>" for k, v in images.items())
    logs = "".join(
        f"<li><a href='workers/{p.name}'>{p.name}</a></li>" for p in sorted((run_dir / "workers").glob("*.log"))
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Belay soak {meta["run_id"]}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto}} td,th{{border:1px solid #ccc;padding:4px;
font-size:13px;vertical-align:top}} table{{border-collapse:collapse}} .valid td:nth-child(2){{color:green}}
.invalid td:nth-child(2){{color:#b00;font-weight:bold}} .unknown td:nth-child(2){{color:#a60}} img{{max-width:100%}}
</style></head><body><h1>Belay soak {meta["run_id"]}: {verdict.upper()} (exit {exit_code})</h1>
<pre>{html.escape(summary.split("| invariant")[0])}</pre>
<table><tr><th>invariant</th><th>verdict</th><th>checks</th><th>violations</th>
<th>first counterexample / why unknown</th>
<th>notes</th></tr>{rows}</table>
<h2>Scenario coverage</h2><table><tr><th>row</th><th>verdict</th><th>scenarios: count</th></tr>{coverage_rows}</table>
{imgs}
<h2>Artifacts</h2><ul><li><a href="results.json">results.json</a></li><li><a href="summary.md">summary.md</a></li>
<li><a href="history.jsonl.gz">history.jsonl.gz</a> (fault log and driver actions, gzip)</li>{logs}</ul></body></html>"""
    (run_dir / "report.html").write_text(redact(page))
    point_latest(run_dir)
    return results


def point_latest(run_dir: Path) -> None:
    """`<reports>/latest` → this run (a relative link; a filesystem without links keeps the old one)."""
    latest = run_dir.parent / "latest"
    try:
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        os.symlink(run_dir.name, latest)
    except OSError:
        pass
