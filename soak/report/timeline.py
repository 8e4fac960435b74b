"""Per-job timelines for report.html and the history section of a soak report.

One panel per selected job (jobs with findings first): each attempt is a lane, drawn from its claim to
the transition that ended it and coloured by the node that held it; every transition is a marker
labelled with its writer, illegal ones in red, and a red line marks each commit after which a §11
predicate broke; the fault windows of the run (SIGSTOP, PostgreSQL
crash-restart, kill -9) are shaded across all panels. This is the picture an SDK author reads first
when the history verdict is INVALID.

`add_to_report` adds the history verdict to results.json, summary.md and report.html after
soak/report/artifacts.py wrote them (kept here so the report module stays untouched).
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from soak.judges.replay import HistoryResult, Transition


def _faults(history: list[dict]) -> dict[str, list]:
    out: dict[str, list] = {"kill": [], "stop": [], "db": []}
    stops: dict[str, float] = {}
    db = None
    for e in history:
        t = e.get("t")
        kind = e.get("type")
        if kind == "worker_kill":
            out["kill"].append((t, e.get("node")))
        elif kind == "worker_stop":
            stops[e.get("node")] = t
        elif kind == "worker_cont" and e.get("node") in stops:
            out["stop"].append((stops.pop(e.get("node")), t, e.get("node")))
        elif kind == "db_crash":
            db = t
        elif kind == "db_restarted" and db is not None:
            out["db"].append((db, t))
            db = None
    return out


def picture(timelines: dict[int, list[Transition]], history: list[dict], findings=()) -> str | None:
    """A PNG (base64) of the selected jobs' attempt lanes, or None when there is nothing to draw."""
    if not timelines:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    faults = _faults(history)
    jobs = list(timelines.items())
    t_all = [t.at.timestamp() for _, ts in jobs for t in ts]
    t0 = min(t_all)
    fig, axes = plt.subplots(len(jobs), 1, figsize=(12, 1.2 + 1.0 * len(jobs)), squeeze=False, sharex=False)
    nodes = sorted({t.node for _, ts in jobs for t in ts if t.node})
    cmap = plt.get_cmap("tab20")
    colour = {n: cmap(i % 20) for i, n in enumerate(nodes)}
    for ax, (job_id, ts) in zip(axes[:, 0], jobs, strict=False):
        lo = min(t.at.timestamp() for t in ts) - t0
        hi = max(t.at.timestamp() for t in ts) - t0
        pad = max((hi - lo) * 0.05, 0.5)
        for a, b, _node in faults["stop"]:
            ax.axvspan(a - t0, b - t0, color="orange", alpha=0.15, lw=0)
        for a, b in faults["db"]:
            ax.axvspan(a - t0, b - t0, color="red", alpha=0.15, lw=0)
        for t, _node in faults["kill"]:
            ax.axvline(t - t0, color="black", alpha=0.3, lw=0.8, ls=":")
        open_lane: dict[int, tuple[float, str | None]] = {}
        max_attempt = max((t.attempt or 0) for t in ts) or 1
        for t in ts:
            x = t.at.timestamp() - t0
            lane = t.attempt or 0
            if t.writer == "claim" or (t.to_state == "running" and t.from_state != "running"):
                open_lane[lane] = (x, t.node)
            elif t.from_state == "running" and t.to_state != "running" and lane in open_lane:
                start, node = open_lane.pop(lane)
                ax.plot([start, x], [lane, lane], lw=6, color=colour.get(node, "grey"), solid_capstyle="butt")
            bad = t.rule is not None
            ax.plot([x], [lane], marker="X" if bad else "|", ms=12 if bad else 9, color="red" if bad else "black")
            if not bad and t.writer in ("renew", "spend", "noop", "cancel_request"):
                continue  # drawn as ticks on the lane, unlabelled (there are many)
            label = (t.writer or f"ILLEGAL {t.rule}") + (f"→{t.to_state}" if t.to_state else "")
            ax.annotate(
                label,
                (x, lane),
                textcoords="offset points",
                xytext=(2, 6),
                fontsize=7,
                color="red" if bad else "black",
                rotation=20,
            )
        for lane, (start, node) in open_lane.items():
            ax.plot([start, hi + pad], [lane, lane], lw=6, color=colour.get(node, "grey"), alpha=0.5)
        for f in findings:
            if f.job_id == job_id:
                x = f.at.timestamp() - t0
                ax.axvline(x, color="red", lw=1.2)
                ax.annotate(
                    f"{f.rule}",
                    (x, max_attempt + 0.5),
                    fontsize=7,
                    color="red",
                    xytext=(3, 0),
                    textcoords="offset points",
                )
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_ylim(-0.7, max_attempt + 0.9)
        ax.set_yticks(range(0, max_attempt + 1))
        ax.set_ylabel(f"job {job_id}\nattempt", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[-1, 0].set_xlabel(
        "seconds since the first transition shown (orange: SIGSTOP, red: PostgreSQL down, dotted: kill -9)"
    )
    from matplotlib.patches import Patch

    handles = [Patch(color=colour[n], label=n) for n in nodes]
    if handles:
        axes[0, 0].legend(
            handles=handles,
            title="lease holder",
            fontsize=7,
            title_fontsize=7,
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
        )
    import warnings

    with warnings.catch_warnings():  # many annotated panels: tight_layout may give up, bbox_inches still fits
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def add_to_report(run_dir: Path, result: HistoryResult, history: list[dict]) -> None:
    """Put the history verdict into results.json, summary.md and report.html (written before)."""
    results_path = run_dir / "results.json"
    if results_path.exists():
        data = json.loads(results_path.read_text())
        data["history"] = result.to_json()
        results_path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    summary = run_dir / "summary.md"
    lines = ["", "## Committed history", "", f"- {result.line()}"]
    if result.refinement_line:
        lines += [f"- {result.refinement_line}"]
        lines += ["  - " + d.replace("\n", "\n    ") for d in result.refinement_findings[:3]]
    if result.first:
        lines += [f"- first violating transaction: LSN {result.first['lsn']} at {result.first['commit_time']}"]
        lines += [f"  - {v}" for v in result.first["violations"][:5]]
    if summary.exists():
        summary.write_text(summary.read_text() + "\n".join(lines) + "\n")
    page_path = run_dir / "report.html"
    if not page_path.exists():
        return
    try:
        png = picture(result.timelines, history, result.findings)
    except Exception as exc:  # noqa: BLE001 - a report without the picture is still a report
        png = None
        lines.append(f"(timeline picture failed: {exc})")
    colour = {"valid": "green", "invalid": "#b00", "unknown": "#a60", "skipped": "#a60"}[result.verdict]
    parts = [f"<h2>Committed history</h2><p style='color:{colour};font-weight:bold'>{html.escape(result.line())}</p>"]
    if result.refinement_line:
        parts.append(f"<p>{html.escape(result.refinement_line)}</p>")
        parts += [f"<pre>{html.escape(d)}</pre>" for d in result.refinement_findings[:3]]
    if result.first:
        parts.append(
            f"<h3>First violating transaction: LSN {html.escape(result.first['lsn'])} at "
            f"{html.escape(result.first['commit_time'])}</h3><ul>"
            + "".join(f"<li>{html.escape(v)}</li>" for v in result.first["violations"][:10])
            + "</ul>"
            "<p>Rows it changed:</p><pre>" + html.escape("\n".join(result.first["rows_changed"])) + "</pre>"
            "<p>Preceding transitions of the rows involved:</p><pre>"
            + html.escape(
                "\n".join(f"job {j}:\n  " + "\n  ".join(ts) for j, ts in result.first["preceding_transitions"].items())
            )
            + "</pre>"
        )
    if png:
        parts.append(
            "<h3>Per-job timelines (attempts as lanes, coloured by node; faults shaded)</h3>"
            f"<img alt='history timelines' src='data:image/png;base64,{png}'/>"
        )
    stats = {k: v for k, v in result.to_json().items() if k in ("capture", "matches_snapshot", "seconds", "by_rule")}
    parts.append("<pre>" + html.escape(json.dumps(stats, indent=1, default=str)) + "</pre>")
    page = page_path.read_text()
    marker = "<h2>Artifacts</h2>"
    block = "".join(parts)
    page = page.replace(marker, block + marker, 1) if marker in page else page.replace("</body>", block + "</body>")
    page_path.write_text(page)


def summarize(result: HistoryResult) -> dict[str, Any]:
    return result.to_json()
