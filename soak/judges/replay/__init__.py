"""Replay a captured history transaction by transaction and check every committed state.

    python -m soak.judges.replay <run-dir>      # re-check a soak's captured history (history.bin)

For each committed transaction, in commit order:
  1. each row change is decoded to the model's row types and its old row (REPLICA IDENTITY FULL) is
     compared with the replayed row — a mismatch means the capture missed a change, and the verdict is
     unknown, never valid;
  2. each belay_jobs change is judged by `model.transitions.judge_job` (steps, events, signals and
     rate windows by their own judges): an illegal change is a violation naming the rule, the LSN, the
     node and attempt that wrote it;
  3. the §11 state predicates of `model.invariants` (I3's per-state rules, I4–I9; I9 not quiescent) run
     on the part of the state the transaction touched: its jobs closed under workflow, unique key, cron
     slot, spawn family and awaited signal, with their steps. Every predicate is local to such a group,
     so this evaluates every committed state in time linear in the history. I5 gets the exact set of
     operator-retried ids from the history itself.
At the end the replayed state must equal the final snapshot (`matches_snapshot`).

Capture gaps never produce findings (issue 27). A committed change the capture missed shows, with
REPLICA IDENTITY FULL, either as a later change whose old row differs from the replayed one, or as a
row whose final state differs from the replay (a change undone inside the gap leaves the replay right
afterwards). Every such row taints its job (steps and events: their job; a signal: it and its
awaiters); findings are held until the end and each one whose job — or a job related to it when it was
found: workflow, unique key, cron slot, spawn parent and children, awaited signal — is tainted is
suppressed (counted, never reported). One kind is kept: an illegal belay_jobs change judged from the
server's own old row (REPLICA IDENTITY FULL) is what the server wrote in one commit, whatever the
capture missed around it. Findings about untouched jobs still make the verdict invalid; a
gap with no such finding makes it unknown and names the tainted jobs. Lost ranges the capture itself
noticed (`capture["lost_ranges"]`) and a torn file tail make it unknown too.

The first violating transaction is reported with its LSN, commit time, the rows it changed and the
preceding transitions of the rows involved.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from model.state import State
from soak.judges.replay.findings import CONVERT as CONVERT
from soak.judges.replay.findings import TABLE_ATTR as TABLE_ATTR
from soak.judges.replay.findings import Finding as Finding
from soak.judges.replay.findings import HistoryResult as HistoryResult
from soak.judges.replay.findings import Transition as Transition
from soak.judges.replay.replayer import Replayer as Replayer
from soak.judges.replay.state_file import STATE_FORMAT as STATE_FORMAT
from soak.judges.replay.state_file import load_state as load_state
from soak.judges.replay.state_file import save_state as save_state
from soak.record.capture import Transaction, read_transactions
from soak.record.spill import HOT, disk_table


def replay(
    transactions: Iterable[Transaction],
    initial: State | None = None,
    final: State | None = None,
    capture_stats: dict[str, Any] | None = None,
    timeline_jobs: int = 8,
    hot: int = HOT,
) -> HistoryResult:
    """Check a whole captured history; `final` (the snapshot taken after the capture stopped) is compared
    with the replayed end state."""
    rp = Replayer(initial, hot=hot)
    try:
        return _replay(rp, transactions, final, capture_stats, timeline_jobs)
    finally:
        rp.close()


def _replay(
    rp: Replayer,
    transactions: Iterable[Transaction],
    final: State | None,
    capture_stats: dict[str, Any] | None,
    timeline_jobs: int,
) -> HistoryResult:
    t0, c0 = time.perf_counter(), time.process_time()
    r = rp.result
    r.capture = dict(capture_stats or {})
    for tx in transactions:
        rp.apply(tx)
    if getattr(transactions, "truncated", False):  # a TransactionReader whose file ends mid-frame
        r.capture["truncated"] = True
    if final is not None:
        diffs = rp.differences(final)
        r.snapshot_diff = [text for _, _, text in diffs]
        r.matches_snapshot = not diffs
        for table, key, _ in diffs:
            if table in CONVERT:
                rp.taint(table, key)
    # a gap never makes a finding: drop every one about a tainted job or a row related to one
    kept = [f for f in r.findings if not rp.suppressed(f)]
    r.suppressed = len(r.findings) - len(kept) + rp.suppressed_now
    r.findings = kept
    r.by_rule = {}
    for f in kept:
        r.by_rule[f.rule] = r.by_rule.get(f.rule, 0) + 1
    r.first = next(
        (
            dict(detail, violations=[str(f) for f in found if not rp.suppressed(f)])
            for found, detail in rp.first_candidates
            if any(not rp.suppressed(f) for f in found)
        ),
        None,
    )
    r.tainted = sorted(rp.tainted)
    gaps = r.capture.get("gap_count", 0)
    lost = r.capture.get("lost_ranges") or []
    incomplete = (
        gaps
        or lost
        or r.matches_snapshot is False
        or r.capture.get("errors")
        or r.capture.get("truncated")
        or rp.tainted
        or rp.tainted_rows
    )
    if r.findings:
        r.verdict = "invalid"
        r.why = f"{len(r.findings)} violation(s) in the committed history"
        if incomplete:
            r.why += f" about jobs no capture gap touched ({_gap_text(r, rp)})"
    elif incomplete:
        r.verdict = "unknown"
        r.why = f"the capture is incomplete: {_gap_text(r, rp)}"
    else:
        r.verdict = "valid"
        if r.matches_snapshot:
            r.why = "the replay ends in the final snapshot"
    r.timelines = select_timelines(rp, r, timeline_jobs)
    r.spill = rp.spill_stats()
    r.seconds = time.perf_counter() - t0
    r.cpu_seconds = time.process_time() - c0
    return r


def _gap_text(r: HistoryResult, rp: Replayer) -> str:
    parts = [f"{r.capture.get('gap_count', 0)} gap(s)", f"{len(r.snapshot_diff)} difference(s) from the final snapshot"]
    lost = r.capture.get("lost_ranges") or []
    if lost:
        parts.append("the slot passed " + ", ".join(f"{a}..{b or 'the end'}" for a, b in lost[:3]) + " without us")
    if r.capture.get("errors"):
        parts.append(f"{r.capture['errors']} capture error(s)")
    if r.capture.get("truncated"):
        parts.append("the history file ends mid-frame")
    ids = ", ".join(str(j) for j in r.tainted[:10]) + (" …" if len(r.tainted) > 10 else "")
    text = "; ".join(parts) + f"; {len(r.tainted)} job(s) tainted" + (f" ({ids})" if r.tainted else "")
    if rp.tainted_rows:
        text += f" and {len(rp.tainted_rows)} other row(s)"
    text += f", {r.suppressed} finding(s) about them suppressed; every other job judged"
    return text


def select_timelines(rp: Replayer, r: HistoryResult, n: int) -> dict[int, list[Transition]]:
    """Jobs worth a picture: those with findings first, then the ones whose attempts crossed most nodes."""
    chosen: list[int] = []
    for f in r.findings:
        if f.job_id is not None and f.job_id not in chosen and f.job_id in rp.history:
            chosen.append(f.job_id)
    if len(chosen) < n:

        def interest(item: tuple[int, list[Transition]]) -> tuple[int, int]:
            _job_id, ts = item
            return (len({t.node for t in ts if t.node}), len(ts))

        # streamed: the top few, not every job's transitions in one list
        for job_id, _ in heapq.nlargest(n + len(chosen), rp.history.items(), key=interest):
            if len(chosen) >= n:
                break
            if job_id not in chosen:
                chosen.append(job_id)
    return {j: list(rp.history[j]) for j in chosen[:n]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m soak.judges.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, help="a soak report folder holding history.bin (and history-initial.pickle)")
    args = p.parse_args(argv)
    initial = args.run_dir / "history-initial.pickle"
    final = args.run_dir / "history-final.pickle"
    result = replay(
        read_transactions(args.run_dir / "history.bin"),
        load_state(initial) if initial.exists() else None,
        load_state(final, big=disk_table) if final.exists() else None,
    )
    print(result.line())
    print(f"replayed in {result.seconds:.1f} s ({result.cpu_seconds:.1f} s CPU)")
    if result.first:
        print(json.dumps(result.first, indent=2))
    sys.exit({"valid": 0, "invalid": 1}.get(result.verdict, 2))
