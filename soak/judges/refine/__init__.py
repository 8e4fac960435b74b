"""Trace validation: every committed transaction explained by the model (issue 30 item 1).

    python -m soak.judges.refine <run-dir>     # validate a soak's captured history (history.bin)
    python -m soak.judges.refine <run-dir> --inline   # … decoding in this process (default: a second one)

A refinement check in the sense of TLA+ trace validation (Cirstea, Kuppe, Merz et al., 2024): the
captured history must be a behaviour of the specification. For each committed transaction, in commit
order:

  1. its row changes (old and new images: REPLICA IDENTITY FULL) are decoded; each old image must equal
     the row the validation holds — a difference is a capture gap (the verdict can then be unknown at
     best, never valid for the rows involved);
  2. from the rows it wrote, the candidate operation(s) of model/ are recovered — kind and parameters (the
     claimed ids and node, the ack outcome and its value, the step name/value/cost, the signal, the
     renewal's lease_until, the enqueued specs …), `now` from the timestamps it wrote, which must lie
     within the contract's clock tolerance of the commit time (`now_window`);
  3. each candidate is applied with the model's own handlers (model.store.HANDLERS — the same `apply`
     the stateful tests use) to the model state before the transaction, restricted to the rows the
     operation can read (`World.substate`), and the model's resulting rows must equal the rows after the
     transaction on every table (jobs, steps, events, signals, rate windows, queues, crons) — both ways:
     a row the transaction changed that the model did not, and a row the model changed that the
     transaction did not, are differences.
  4. the first candidate that matches explains the transaction; none matching is a finding naming the
     transaction (LSN, commit time, rows) and every candidate tried with its first differing column.

Where the contract leaves a choice the candidate is built from the choice the rows show (the accepted
set, never one fixed answer): a SKIP LOCKED claim or reclaim or prune may pass over rows (`masked`: the
rows the transaction did not take are hidden from the operation, each taken row must still be
claimable / expired / past retention under the model's own predicate), the retry time of a failure or a
reclaim is the SDK's (bounded below by `now`), batching groups acks as the rows show (one AckMany per
transaction), the lease ttl and the claim's `now` are free within the tolerance.

The contract's allowed set, not the reference's shapes (issue 51; docs/certification.md "Allowed
alternatives" lists each point with its sentence): a spawn's children inserted apart from, and before,
its `$spawn:<name>` journal (`SpawnChildren`, then `Spawn` with the children held — found by their keys),
in any id order and by any attempt; a `$sleep` wake time in any ISO-8601 spelling (judged: the ready_at
is its instant); ids of a spawn list as decimal strings; each cron slot in its own transaction
(`FireCrons.slots`); a `$children` payload naming any of the children the transaction finished, in any
order; an event seq of the SDK's numbering above the job's earlier ones. Per-row reclaims, a separate
`$children` clear, per-queue renewals and one-row claims were already operations of the model.

Harness writes are operations too: the driver's enqueues, cancels and signals are model operations;
with a ledger (the run's history.jsonl) a client cancel or signal must be one the harness recorded,
and the lost-wakeup scenario's deliberate ack without `$children` (leased to `soak-harness`) is the
model's fenced row write without its after-terminal steps.

What is judged and what is accepted without judgement (honest limits):
  - claim order under SKIP LOCKED is not judged here (a passed-over row may have been locked by a
    transaction that left no trace) but by soak/judges/timing/ with the fault log (duty P5, issue 51);
    each taken row must be claimable, and admission (global_limit, rate, partition) is the model's —
    with the options of the queue's belay_queues row: static queue options of a worker are invisible to a
    history, so a queue without a row is judged with the defaults;
  - backoff and jitter are free: a retry's or a reclaim's ready_at only has to be ≥ its `now`;
  - retention and signal TTL of a prune are recovered from the rows it deleted (the SDK's settings);
  - cron jobs of a cron without a belay_crons row (static config) are judged as plain enqueues;
  - spawned children take the ids the transaction shows: consecutive in the model's own run, but a
    concurrent insert can take ids between them (seed 2032's two-hour soak: 164682 and 164686);
  - deletes of belay_queues / belay_crons rows and TRUNCATE have no model operation: unexplained / a gap.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from model.state import State
from soak.judges.refine.feed import Decoded
from soak.judges.refine.results import HARNESS_NODE as HARNESS_NODE
from soak.judges.refine.results import LAG as LAG
from soak.judges.refine.results import MAX_CANDIDATES as MAX_CANDIDATES
from soak.judges.refine.results import MAX_FINDINGS as MAX_FINDINGS
from soak.judges.refine.results import SKEW as SKEW
from soak.judges.refine.results import Finding as Finding
from soak.judges.refine.results import Mismatch as Mismatch
from soak.judges.refine.results import RefinementResult as RefinementResult
from soak.judges.refine.validator import Validator as Validator
from soak.judges.refine.world import Candidate as Candidate
from soak.judges.refine.world import HarnessLedger as HarnessLedger
from soak.judges.refine.world import TxRows as TxRows
from soak.judges.refine.world import World as World
from soak.record.capture import Transaction, read_transactions
from soak.record.spill import HOT

GC_THRESHOLD = 50_000  # allocations between two first-generation collections during a validation


def validate(
    transactions: Iterable[Transaction | Decoded],
    ledger_path_or_obj: Any = None,
    initial_state: State | None = None,
    taint: set[int] | frozenset[int] = frozenset(),
    final_state: State | None = None,
    hot: int = HOT,
) -> RefinementResult:
    """Validate a captured history against the model; see the module docstring."""
    t0, c0 = time.perf_counter(), time.process_time()
    v = Validator(initial_state, HarnessLedger.load(ledger_path_or_obj), set(taint), hot=hot)
    # The validation allocates a few short-lived rows per transaction and keeps few: the cyclic collector's
    # default first-generation threshold (700 allocations) runs it thousands of times over the held state
    # for nothing it can free. A larger threshold for the loop only (~8 % of its CPU; issue 54 target 5).
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], GC_THRESHOLD), *thresholds[1:])
    try:
        for tx in transactions:
            v.step(tx)
        v.finish_duties()
        r = v.result
        if final_state is not None:
            r.snapshot_diff = v.compare(final_state)
            r.matches_snapshot = not r.snapshot_diff
    finally:
        gc.set_threshold(*thresholds)
        v.close()
    if r.unexplained_hard:
        r.verdict = "invalid"
        r.why = f"{r.unexplained} transaction(s) no operation of the model explains"
    elif r.stale_now:  # issue 51: a write's `now` older than its commit beyond its node's own faults
        r.verdict = "invalid"
        r.why = r.stale_now[0]
    elif r.unexplained or r.capture_gaps or r.matches_snapshot is False:
        r.verdict = "unknown"
        r.why = (
            f"{r.capture_gaps} capture gap(s), {r.unexplained} unexplained transaction(s) on rows with gaps, "
            f"{len(r.snapshot_diff)} difference(s) from the final snapshot"
        )
    else:
        r.verdict = "valid"
        r.why = "every transaction explained" + (
            ", the replay ends in the final snapshot" if r.matches_snapshot else ""
        )
    r.seconds = time.perf_counter() - t0
    r.cpu_seconds = time.process_time() - c0
    return r


def validate_run_dir(run_dir: Path, ledger: bool = True, decode_ahead: bool = False) -> RefinementResult:
    """Trace validation of a soak's report folder: history.bin from history-initial.pickle, ended in
    history-final.pickle, harness writes attested by history.jsonl (what the soak hook can call).
    `decode_ahead`: decode the capture in a second process (feed.py) while this one validates."""
    from soak.judges.refine import feed
    from soak.judges.replay import load_state
    from soak.record.spill import disk_table

    run_dir = Path(run_dir)
    initial = run_dir / "history-initial.pickle"
    final = run_dir / "history-final.pickle"
    history = run_dir / "history.bin"
    return validate(
        feed.decode_ahead(history) if decode_ahead else read_transactions(history),
        run_dir if ledger else None,
        load_state(initial) if initial.exists() else None,
        final_state=load_state(final, big=disk_table) if final.exists() else None,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m soak.judges.refine", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, help="a soak report folder holding history.bin")
    p.add_argument("--no-ledger", action="store_true", help="do not require client cancels/signals to be recorded")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--inline",
        action="store_true",
        help="decode the capture in this process (default with more than one CPU: a second process decodes "
        "ahead of the validation; the result is the same)",
    )
    args = p.parse_args(argv)
    ahead = not args.inline and (os.cpu_count() or 1) > 1
    result = validate_run_dir(args.run_dir, ledger=not args.no_ledger, decode_ahead=ahead)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result.line())
        print(
            f"{result.transactions} transactions, {result.validated} explained, {result.empty} without Belay rows, "
            f"{result.unexplained} unexplained; {result.seconds:.1f} s ({result.cpu_seconds:.1f} s CPU); "
            f"now: up to {result.ahead_max_s:.3f} s ahead of / {result.lag_max_s:.3f} s behind its commit"
        )
        if result.matches_snapshot is not None:
            print(
                f"final snapshot: {'matches' if result.matches_snapshot else 'differs: ' + ', '.join(result.snapshot_diff[:10])}"
            )
        for f in result.findings[:5]:
            print(f.detail())
    sys.exit({"valid": 0, "invalid": 1}.get(result.verdict, 2))
