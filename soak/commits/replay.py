"""Replay a captured history transaction by transaction and check every committed state.

    python -m soak.commits.replay <run-dir>      # re-check a soak's captured history (history.bin)

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
import contextlib
import gzip
import heapq
import itertools
import json
import pickle
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from impl.store.pgrows import job_from_row
from model import invariants as inv
from model import transitions as tr
from model.rows import CronRow, Event, Job, QueueRow, RateWindow, Signal, Step
from model.state import State, from_rows
from soak.commits.capture import Transaction, read_transactions
from soak.commits.pgoutput import UNCHANGED, Change, Decoder, Truncate, lsn_str
from soak.commits.spill import HOT, SpillDict, disk_table

KEEP_TRANSITIONS = 12  # per job, for "preceding transitions" and the timeline


def _pick(cls, row: dict) -> Any:
    return cls(**{f.name: row[f.name] for f in fields(cls)})


def _step(row: dict) -> Step:
    values = {f.name: row[f.name] for f in fields(Step)}
    values["value"] = bytes(values["value"])
    return Step(**values)


CONVERT = {
    "belay_jobs": (job_from_row, lambda r: r.id),
    "belay_steps": (_step, lambda r: (r.job_id, r.name)),
    "belay_events": (lambda r: _pick(Event, r), lambda r: (r.job_id, r.seq)),
    "belay_signals": (lambda r: _pick(Signal, r), lambda r: (r.scope, r.name)),
    "belay_rate": (lambda r: _pick(RateWindow, r), lambda r: (r.bucket, r.window_start)),
    "belay_queues": (lambda r: _pick(QueueRow, r), lambda r: r.name),
    "belay_crons": (lambda r: _pick(CronRow, r), lambda r: r.name),
}
TABLE_ATTR = {
    "belay_jobs": "jobs",
    "belay_steps": "steps",
    "belay_events": "events",
    "belay_signals": "signals",
    "belay_rate": "rate",
    "belay_queues": "queues",
    "belay_crons": "crons",
}


@dataclass(frozen=True)
class Transition:
    """One judged belay_jobs change, kept per job for reports and timelines."""

    lsn: int
    at: datetime
    job_id: int
    writer: str | None
    from_state: str | None
    to_state: str | None
    node: str | None
    attempt: int | None
    rule: str | None = None
    why: str = ""

    def __str__(self) -> str:
        who = (
            f" by {self.node} attempt {self.attempt}"
            if self.node
            else f" attempt {self.attempt}"
            if self.attempt
            else ""
        )
        what = self.writer or f"ILLEGAL[{self.rule}]"
        return (
            f"{lsn_str(self.lsn)} {self.at.isoformat(timespec='milliseconds')} job {self.job_id} "
            f"{self.from_state or '∅'}→{self.to_state or '∅'} {what}{who}" + (f": {self.why}" if self.why else "")
        )


@dataclass
class Finding:
    """A violation found in the history: an illegal transition or a §11 predicate broken after a commit."""

    kind: str  # transition | invariant | capture
    lsn: int
    at: datetime
    rule: str  # the transition rule or the invariant name (I4 …)
    job_id: int | None
    text: str
    node: str | None = None
    attempt: int | None = None
    # jobs and non-job rows related to the finding when it was found (gap suppression)
    related_jobs: frozenset = field(default=frozenset(), repr=False, compare=False)
    related_rows: frozenset = field(default=frozenset(), repr=False, compare=False)
    # a belay_jobs change judged from the server's own old row (or an insert): exactly what the server
    # wrote in one committed change, whatever the replay missed around it — never suppressed
    self_contained: bool = field(default=False, repr=False, compare=False)

    def __str__(self) -> str:
        # attribution from the rows: the lease holder and attempt of the row when it was written (a stale,
        # unfenced writer is another node — the row cannot say which)
        who = (
            f" (row leased by {self.node}, attempt {self.attempt})"
            if self.node
            else f" (row at attempt {self.attempt})"
            if self.attempt is not None
            else ""
        )
        return f"LSN {lsn_str(self.lsn)} at {self.at.isoformat(timespec='milliseconds')}: {self.text}{who}"


@dataclass
class HistoryResult:
    verdict: str  # valid | invalid | unknown | skipped
    why: str = ""
    transactions: int = 0  # commits replayed
    changes: int = 0  # row changes applied
    transitions: int = 0  # belay_jobs changes judged
    states: int = 0  # committed states the §11 predicates ran on
    findings: list[Finding] = field(default_factory=list)
    by_rule: dict[str, int] = field(default_factory=dict)
    first: dict | None = None  # the first violating transaction, detailed
    capture: dict = field(default_factory=dict)
    matches_snapshot: bool | None = None
    snapshot_diff: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the replay
    cpu_seconds: float = 0.0  # CPU time of the replay (the machine may be shared)
    timelines: dict[int, list[Transition]] = field(default_factory=dict)  # selected jobs, for the report
    tainted: list[int] = field(default_factory=list)  # jobs a capture gap touched: not judged
    suppressed: int = 0  # findings about tainted jobs (or rows related to them), not reported
    # trace validation (soak/commits/refine.py), set by soak.commits.hook.merge: the soak's verdict
    rules_verdict: str | None = None  # this replay's own verdict before the merge
    refinement: dict | None = None
    refinement_line: str = ""
    refinement_findings: list[str] = field(default_factory=list)
    spill: dict = field(default_factory=dict)  # per map: entries in memory / on disk at the end (spill.py)

    def line(self) -> str:
        base = (
            f"history: {self.verdict.upper()} — {self.transitions} transitions checked, {self.transactions} "
            f"commits replayed, {self.states} states evaluated"
        )
        if self.verdict == "skipped":
            return f"history: SKIPPED — {self.why}"
        if self.refinement is not None:
            r = self.refinement
            base = (
                f"history: {self.verdict.upper()} — trace validation {r['verdict']}: {r['validated']} of "
                f"{r['transactions']} transactions explained by the model in {r['seconds']:.1f} s"
                + (f", {r['unexplained']} unexplained" if r["unexplained"] else "")
                + f"; rule replay {self.rules_verdict}: {self.transitions} transitions, {self.states} states"
            )
        if self.findings:
            base += f", {len(self.findings)} violation(s): {self.findings[0]}"
        elif self.why:
            base += f" ({self.why})"
        return base

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict,
            "why": self.why,
            "transactions": self.transactions,
            "changes": self.changes,
            "transitions": self.transitions,
            "states": self.states,
            "violations": len(self.findings),
            "by_rule": self.by_rule,
            "first_violations": [str(f) for f in self.findings[:20]],
            "first": self.first,
            "capture": self.capture,
            "matches_snapshot": self.matches_snapshot,
            "snapshot_diff": self.snapshot_diff[:20],
            "tainted_jobs": self.tainted[:200],
            "tainted_count": len(self.tainted),
            "suppressed_findings": self.suppressed,
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "rules_verdict": self.rules_verdict,
            "refinement": self.refinement,
            "spill": self.spill,
        }


GAP_JOB_TABLES = ("belay_steps", "belay_events")  # tables whose key starts with the job id


class Replayer:
    """The replayed database plus the indexes the per-commit predicates need."""

    def __init__(self, initial: State | None = None, keep_all_timelines: bool = False, hot: int = HOT) -> None:
        s = initial or State()
        # Every row the history wrote, the least recently used on disk past `hot` per map (issue 27 item 3:
        # memory bounded by the rows in use, not by the run's length; soak/commits/spill.py).
        self.jobs: SpillDict = SpillDict(s.jobs.items(), hot=hot)
        self.steps: SpillDict = SpillDict(s.steps.items(), hot=hot)
        self.events: SpillDict = SpillDict(s.events.items(), hot=hot)
        self.signals: dict[tuple[str, str], Signal] = dict(s.signals)
        self.rate: dict = dict(s.rate)
        self.queues: dict = dict(s.queues)
        self.crons: dict = dict(s.crons)
        self.meta = (s.version, s.contract_major)
        self.decoder = Decoder(lazy_old=True)
        self.raw: SpillDict = SpillDict(hot=hot)  # (table, key) → the TupleData of the row's last version
        self.steps_by_job: SpillDict = SpillDict(hot=hot, default_factory=dict)  # job → name → Step
        for (j, n), st in self.steps.items():
            self.steps_by_job[j][n] = st
        self.wf: dict[str, set[int]] = defaultdict(set)
        self.ukey: dict[str, set[int]] = defaultdict(set)
        self.cron: dict[tuple, set[int]] = defaultdict(set)
        self.spawn: dict[int, set[int]] = defaultdict(set)  # parent → keyed children
        self.awaits: dict[tuple[str, str], set[int]] = defaultdict(set)
        for j in self.jobs.values():
            self._index(j, add=True)
        self.retried: set[int] = set()
        self.pruned: set[int] = set()
        self.history: SpillDict = SpillDict(hot=hot, default_factory=list)  # job → its latest transitions
        self.keep_all = keep_all_timelines
        self.reported: set[str] = set()
        # Jobs with a capture gap: a committed change of theirs never reached the capture (the server's own
        # old row disagreed with the replay). Their later transitions are judged from that old row — the
        # server's truth — and the state predicates skip them: what was not seen cannot be checked.
        self.tainted: set[int] = set()
        self.tainted_rows: set[tuple[str, Any]] = set()  # non-job rows (signals, rate windows, queues, crons)
        self.suppressed_now = 0
        self.first_candidates: list[tuple[list[Finding], dict]] = []
        self.result = HistoryResult("valid")

    # --- indexes -------------------------------------------------------------------------------

    def _index(self, j: Job, add: bool) -> None:
        keys = []
        if j.workflow_id is not None:
            keys.append((self.wf, j.workflow_id))
        if j.unique_key is not None:
            keys.append((self.ukey, j.unique_key))
        if j.cron_name is not None:
            keys.append((self.cron, (j.cron_name, j.cron_slot)))
        spawn = inv.parse_spawn_key(j.unique_key)
        if spawn is not None:
            keys.append((self.spawn, spawn[0]))
        if j.await_scope is not None:
            keys.append((self.awaits, (j.await_scope, j.await_name)))
        for index, key in keys:
            if add:
                index[key].add(j.id)
            else:
                index[key].discard(j.id)
                if not index[key]:
                    del index[key]

    # --- one transaction ---------------------------------------------------------------------------

    def _decode(self, tx: Transaction) -> list[Change | Truncate]:
        """The row changes and truncates of one transaction (a TRUNCATE of a Belay table is judged too)."""
        changes: list[Change | Truncate] = []
        for m in tx.messages:
            msg = self.decoder.decode(m)
            if isinstance(msg, (Change, Truncate)):
                changes.append(msg)
        return changes

    def _capture_gap(self, tx: Transaction, text: str) -> None:
        self.result.capture.setdefault("gaps", [])
        if len(self.result.capture["gaps"]) < 20:
            self.result.capture["gaps"].append(f"LSN {lsn_str(tx.commit_lsn)}: {text}")
        self.result.capture["gap_count"] = self.result.capture.get("gap_count", 0) + 1

    def apply(self, tx: Transaction) -> None:
        r = self.result
        at = tx.commit_time
        changes = self._decode(tx)
        r.transactions += 1
        # first pass: steps journaled and jobs deleted in this transaction (the transition context)
        costs: dict[int, tuple[int, int]] = {}
        deleted: set[int] = set()
        for c in changes:
            if isinstance(c, Truncate):
                continue
            if c.table == "belay_steps" and c.kind == "insert":
                u, t = costs.get(c.new["job_id"], (0, 0))
                costs[c.new["job_id"]] = (u + c.new["usd_micros"], t + c.new["tokens"])
            elif c.table == "belay_jobs" and c.kind == "delete":
                deleted.add(c.old["id"])
        ctx = tr.TxContext(at, costs, frozenset(deleted))
        touched_jobs: set[int] = set()
        touched_signals: set[tuple[str, str]] = set()
        changed_rows: list[str] = []
        new_findings: list[Finding] = []
        for c in changes:
            if isinstance(c, Truncate):
                self._capture_gap(tx, f"TRUNCATE of {', '.join(x.name for x in c.relations)} (not replayed)")
                continue
            r.changes += 1
            if c.table == "belay_meta":
                if c.new is not None:
                    self.meta = (c.new.get("version", self.meta[0]), c.new.get("contract_major", self.meta[1]))
                continue
            conv = CONVERT.get(c.table)
            if conv is None:
                continue
            make, key_of = conv
            table: dict = getattr(self, TABLE_ATTR[c.table])
            newrow = c.new
            if newrow is not None and any(v is UNCHANGED for v in newrow.values()):  # unchanged TOAST values
                oldrow = c.old or (self.decoder.load(c.old_raw, c.relation) if c.old_raw is not None else None)
                if oldrow is None:
                    self._capture_gap(tx, f"{c.table}: an update with unchanged TOAST values and no old row")
                    continue
                newrow = {k: (oldrow[k] if v is UNCHANGED else v) for k, v in newrow.items()}
            new = make(newrow) if newrow is not None else None
            old = make(c.old) if c.old is not None else None
            key = key_of(new if new is not None else old)
            current = table.get(key)
            raw_key = (c.table, key)
            gap = False
            if c.kind == "insert":
                if current is not None:
                    gap = True
                    self._capture_gap(tx, f"{c.table} {key} inserted but the replay already holds it")
            elif current is None:
                gap = True
                self._capture_gap(tx, f"{c.table} {key} {c.kind}d but the replay does not hold it")
            elif c.old_raw is not None and self.raw.get(raw_key) != c.old_raw:
                # bytes differ (or the previous version is unknown): compare the loaded rows
                old = old if old is not None else make(self.decoder.load(c.old_raw, c.relation))
                if old != current:
                    gap = True
                    diff = ", ".join(sorted(tr.changed_columns(current, old)))
                    self._capture_gap(tx, f"{c.table} {key}: the old row differs from the replayed one in {diff}")
            if gap:
                self.taint(c.table, key)
                if c.kind != "insert":  # judge this change from the row the server replaced, not the stale one
                    if old is None and c.old_raw is not None:
                        old = make(self.decoder.load(c.old_raw, c.relation))
                    if c.table == "belay_jobs" and old is not None:
                        if current is not None:
                            self._index(current, add=False)
                        self._index(old, add=True)
                    current = old
            if c.new_raw is not None:
                self.raw[raw_key] = c.new_raw
            else:
                self.raw.pop(raw_key, None)
            before = current if c.kind != "insert" else None
            if c.table == "belay_jobs":
                r.transitions += 1
                j = tr.judge_job(before, new, ctx)
                job_id = key
                touched_jobs.add(job_id)
                t = Transition(
                    tx.commit_lsn,
                    at,
                    job_id,
                    j.writer,
                    before.state if before else None,
                    new.state if new else None,
                    j.node,
                    j.attempt,
                    j.rule,
                    j.why if not j.legal else "",
                )
                self.history[job_id].append(t)
                if not self.keep_all and len(self.history[job_id]) > 4 * KEEP_TRANSITIONS:
                    del self.history[job_id][:-KEEP_TRANSITIONS]
                changed_rows.append(t)
                if j.writer == "retry":
                    self.retried.add(job_id)
                if c.kind == "delete":
                    self.pruned.add(job_id)
                if not j.legal:
                    new_findings.append(
                        Finding(
                            "transition",
                            tx.commit_lsn,
                            at,
                            j.rule,
                            job_id,
                            f"job {job_id}: illegal transition [{j.rule}] {j.why}",
                            j.node,
                            j.attempt,
                            self_contained=c.kind == "insert" or c.old_raw is not None,
                        )
                    )
                if before is not None:
                    self._index(before, add=False)
                if new is not None:
                    self._index(new, add=True)
            else:
                if c.table == "belay_steps":
                    seqs = self.steps_by_job.get(key[0], {})
                    last = max((s.seq for s in seqs.values()), default=0) if new is not None and before is None else 0
                    j = tr.judge_step(before, new, ctx, last)
                    if new is not None:
                        self.steps_by_job[key[0]][key[1]] = new
                    else:
                        self.steps_by_job.get(key[0], {}).pop(key[1], None)
                        if key[0] in self.steps_by_job and not self.steps_by_job[key[0]]:
                            del self.steps_by_job[key[0]]
                    touched_jobs.add(key[0])
                elif c.table == "belay_events":
                    j = tr.judge_event(before, new, ctx)
                elif c.table == "belay_signals":
                    j = tr.judge_signal(before, new, ctx)
                    touched_signals.add(key)
                elif c.table == "belay_rate":
                    j = tr.judge_rate(before, new, ctx)
                else:
                    j = tr.Judgement("crud")
                changed_rows.append((c.table, key, c.kind))
                if not j.legal:
                    job = key[0] if c.table in ("belay_steps", "belay_events") else None
                    if c.table == "belay_signals" and str(key[0]).startswith("job:") and key[0][4:].isdigit():
                        job = int(key[0][4:])
                    new_findings.append(
                        Finding(
                            "transition",
                            tx.commit_lsn,
                            at,
                            j.rule,
                            job,
                            f"{c.table} {key}: illegal change [{j.rule}] {j.why}",
                            related_rows=frozenset({(c.table, key)}),
                        )
                    )
            if new is None:
                table.pop(key, None)
            else:
                table[key] = new
        if touched_jobs or touched_signals:
            r.states += 1
            for v in self._predicates(touched_jobs, touched_signals):
                if v.job_id in self.tainted:  # its history has a gap: unknown, not a finding
                    self.suppressed_now += 1
                    continue
                text = str(v)
                if text in self.reported:
                    continue
                self.reported.add(text)
                new_findings.append(
                    Finding("invariant", tx.commit_lsn, at, v.invariant, v.job_id, f"after this commit {text}")
                )
        if new_findings:
            for f in new_findings:
                self._relate(f)
            self._report(tx, new_findings, changed_rows)
        self.spill()

    SPILLED = ("jobs", "steps", "events", "raw", "steps_by_job", "history")  # the SpillDict maps

    def spill(self) -> None:
        """Between two transactions: the rows not used lately go to disk (references held inside a
        transaction stay valid: nothing spills while one is applied)."""
        for n in self.SPILLED:
            getattr(self, n).spill()

    def spill_stats(self) -> dict[str, dict[str, int]]:
        return {n: getattr(self, n).stats() for n in self.SPILLED}

    def close(self) -> None:
        for n in self.SPILLED:
            getattr(self, n).close()

    # --- capture gaps ------------------------------------------------------------------------------

    def taint(self, table: str, key: Any) -> None:
        """A change of this row is missing from the capture: its job (or row) is not judged."""
        if table == "belay_jobs":
            self.tainted.add(key)
        elif table in GAP_JOB_TABLES:
            self.tainted.add(key[0])
        else:
            self.tainted_rows.add((table, key))
            if table == "belay_signals":
                self.tainted |= self.awaits.get(key, set())
                if str(key[0]).startswith("job:") and key[0][4:].isdigit():
                    self.tainted.add(int(key[0][4:]))
        self.result.capture["gap_jobs"] = len(self.tainted)

    def _relate(self, f: Finding) -> None:
        """Record what the finding depends on, as the replay sees it now (its neighbourhood)."""
        if f.job_id is None:
            return
        ids, keys = self._neighbourhood({f.job_id}, set())
        f.related_jobs = frozenset(ids | {f.job_id})
        f.related_rows = frozenset(("belay_signals", k) for k in keys)

    def suppressed(self, f: Finding) -> bool:
        if f.self_contained:
            return False
        if f.job_id is not None and f.job_id in self.tainted:
            return True
        return bool(f.related_jobs & self.tainted) or bool(f.related_rows & self.tainted_rows)

    def _report(self, tx: Transaction, findings: list[Finding], changed_rows: list) -> None:
        r = self.result
        r.findings.extend(findings)
        if len(self.first_candidates) < 50:
            involved = sorted({f.job_id for f in findings if f.job_id is not None})
            preceding = {}
            for job_id in involved[:8]:
                hist = self.history.get(job_id, [])
                preceding[str(job_id)] = [str(t) for t in hist[-KEEP_TRANSITIONS:]]
            self.first_candidates.append(
                (
                    findings,
                    {
                        "lsn": lsn_str(tx.commit_lsn),
                        "commit_time": tx.commit_time.isoformat(),
                        "xid": tx.xid,
                        "violations": [str(f) for f in findings],
                        "rows_changed": [
                            str(x) if isinstance(x, Transition) else f"{x[0]} {x[1]!r} {x[2]}"
                            for x in changed_rows[:40]
                        ],
                        "preceding_transitions": preceding,
                    },
                )
            )

    # --- per-commit predicates ------------------------------------------------------------------------

    def _neighbourhood(self, touched: set[int], signals: set[tuple[str, str]]) -> tuple[set[int], set]:
        ids = {j for j in touched if j in self.jobs}
        for key in signals:
            ids |= self.awaits.get(key, set())
        frontier = set(ids)
        while frontier:
            more: set[int] = set()
            for job_id in frontier:
                job = self.jobs.get(job_id)
                if job is None:
                    continue
                if job.workflow_id is not None:
                    more |= self.wf.get(job.workflow_id, set())
                if job.unique_key is not None:
                    more |= self.ukey.get(job.unique_key, set())
                if job.cron_name is not None:
                    more |= self.cron.get((job.cron_name, job.cron_slot), set())
                spawn = inv.parse_spawn_key(job.unique_key)
                if spawn is not None and spawn[0] in self.jobs:
                    more.add(spawn[0])
                if job_id in self.spawn:
                    more |= self.spawn[job_id]
            frontier = more - ids
            ids |= more
        keys = set(signals)
        for job_id in ids:
            job = self.jobs[job_id]
            if job.await_scope is not None:
                keys.add((job.await_scope, job.await_name))
        return ids, keys

    def _predicates(self, touched: set[int], signals: set[tuple[str, str]]) -> list[inv.Violation]:
        ids, keys = self._neighbourhood(touched, signals)
        jobs = [self.jobs[i] for i in ids]
        steps = [s for i in ids for s in self.steps_by_job.get(i, {}).values()]
        # steps of touched jobs whose row is gone (pruned) still count for I3's per-state rule
        steps += [s for i in touched - ids for s in self.steps_by_job.get(i, {}).values()]
        sigs = [self.signals[k] for k in keys if k in self.signals]
        sub = from_rows(jobs, steps, (), sigs)
        out: list[inv.Violation] = []
        out += inv.i3_steps_immutable([sub])
        out += inv.i4_budget_fails_on_crossing_step(sub)
        out += inv.i5_settlement_consistent(sub, retried=self.retried)
        out += inv.i6_cron_slots_once(sub)
        out += inv.i7_unique_keys(sub)
        out += inv.i8_children_as_declared(sub, pruned=self.pruned)
        out += inv.i9_awaiters_eventually_run(sub, quiescent=False)
        return out

    # --- the end ---------------------------------------------------------------------------------------

    def state(self) -> State:
        return from_rows(
            self.jobs.values(),
            self.steps.values(),
            self.events.values(),
            self.signals.values(),
            self.rate.values(),
            self.queues.values(),
            self.crons.values(),
            version=self.meta[0],
            contract_major=self.meta[1],
        )

    def compare(self, final: State) -> list[str]:
        return [text for _, _, text in self.differences(final)]

    def differences(self, final: State) -> list[tuple[str, Any, str]]:
        """(table, key, text) of every row whose replayed state differs from the final snapshot."""
        diff = []
        table_of = {v: k for k, v in TABLE_ATTR.items()}
        for attr in ("jobs", "steps", "events", "signals", "rate", "queues", "crons"):
            # streamed both ways (no set of every key): the replay's rows against the snapshot's, then the
            # snapshot's rows the replay does not hold
            mine, theirs = getattr(self, attr), getattr(final, attr)
            found = []
            for k, a in mine.items():
                b = theirs.get(k)
                if a != b:
                    if b is None:
                        text = f"{attr} {k!r}: not in the snapshot"
                    else:
                        text = f"{attr} {k!r}: differs in {', '.join(sorted(tr.changed_columns(a, b)))}"
                    found.append((k, text))
            for k in theirs:
                if k not in mine:
                    found.append((k, f"{attr} {k!r}: missing from the replay"))
            diff += [(table_of[attr], k, text) for k, text in sorted(found, key=lambda x: repr(x[0]))]
        return diff


def replay(
    transactions: Iterable[Transaction],
    initial: State | None = None,
    final: State | None = None,
    capture_stats: dict | None = None,
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
    capture_stats: dict | None,
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

        def interest(item):
            _job_id, ts = item
            return (len({t.node for t in ts if t.node}), len(ts))

        # streamed: the top few, not every job's transitions in one list
        for job_id, _ in heapq.nlargest(n + len(chosen), rp.history.items(), key=interest):
            if len(chosen) >= n:
                break
            if job_id not in chosen:
                chosen.append(job_id)
    return {j: list(rp.history[j]) for j in chosen[:n]}


# --- persistence of the initial state (a State holds read-only mappings, which do not pickle) -------------


STATE_FORMAT = 2  # a stream of pickles: header, then ("table", rows) chunks, then None
STATE_TABLES = ("jobs", "steps", "events", "signals", "rate", "queues", "crons")


def save_state(state: State, path: Path) -> None:
    """A gzip-compressed stream of pickles, written table by table in chunks of rows (a long run's state
    is never one list in memory). gzip level 3: a two-hour soak's final state (381k jobs) is 124 MB as a
    plain pickle, 18 MB so (4 s)."""
    tmp = path.with_name(path.name + ".part")
    with gzip.open(tmp, "wb", compresslevel=3) as f:

        def dump(obj: Any) -> None:  # one pickle per frame (its own memo): read back with pickle.load
            f.write(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

        rows = {attr: len(getattr(state, attr)) for attr in STATE_TABLES}  # load_state's choice, without a list
        dump({"format": STATE_FORMAT, "meta": (state.version, state.contract_major, state.next_id), "rows": rows})
        for attr in STATE_TABLES:
            chunk: list[Any] = []
            for row in getattr(state, attr).values():
                chunk.append(row)
                if len(chunk) >= 2000:
                    dump((attr, chunk))
                    chunk = []
            if chunk:
                dump((attr, chunk))
        dump(None)
    tmp.replace(path)


def load_state(path: Path, big: Any = None, big_over: int = 10_000) -> State:
    """The state save_state wrote (or an older run's single pickle, gzip or plain). With `big` (a
    DiskTable builder), jobs, steps and events past `big_over` rows are streamed into it, not into dicts."""
    with open(path, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        with gzip.open(raw, "rb") if compressed else contextlib.nullcontext(raw) as f:
            head = pickle.load(f)
            if not (isinstance(head, dict) and head.get("format") == STATE_FORMAT):  # older runs: one dict
                v, c, n = head.pop("meta")
                return from_rows(*(head[a] for a in STATE_TABLES), version=v, contract_major=c, next_id=n)
            v, c, n = head["meta"]
            frames = _Frames(f)
            lists: dict[str, list[Any]] = {}
            mapped: dict[str, Any] = {}
            for attr in STATE_TABLES:  # save_state wrote the tables in this order
                rows = frames.rows_of(attr)
                if big is None or attr not in KEY_OF:
                    lists[attr] = list(rows)
                    continue
                key = KEY_OF[attr]
                if attr in head.get("rows", {}):  # counted when saved: no list of the first big_over rows
                    if head["rows"][attr] < big_over:
                        lists[attr] = list(rows)
                    else:
                        mapped[attr] = big((key(r), r) for r in rows)
                    continue
                first = list(itertools.islice(rows, big_over))  # a file saved before the counts
                if len(first) < big_over:
                    lists[attr] = first
                else:
                    mapped[attr] = big((key(r), r) for r in itertools.chain(first, rows))
    small = from_rows(*(lists.get(a, ()) for a in STATE_TABLES), version=v, contract_major=c, next_id=n)
    return replace(small, **mapped)  # the big tables as built, the rest as from_rows made them


class _Frames:
    """save_state's ("table", rows) frames, read one at a time."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.head: tuple[str, list[Any]] | None = pickle.load(f)

    def rows_of(self, attr: str) -> Iterator[Any]:
        while self.head is not None and self.head[0] == attr:
            rows = self.head[1]
            self.head = pickle.load(self.f)
            yield from rows


KEY_OF = {TABLE_ATTR[t]: CONVERT[t][1] for t in ("belay_jobs", "belay_steps", "belay_events")}  # the big ones


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m soak.commits.replay", description=__doc__.split("\n\n")[0])
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


if __name__ == "__main__":
    main()
