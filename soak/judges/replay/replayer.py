"""The replayer (soak/judges/replay/__init__.py has the rules): each committed transaction applied to the
model's `State`, every belay_jobs row change judged by model/transitions.py, the §11 state predicates
evaluated on the rows it touched, old rows compared with the replayed ones, gaps turned into taints.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any, cast

from model import invariants as inv
from model import transitions as tr
from model.rows import CronRow, Job, QueueRow, RateWindow, Signal
from model.state import State, from_rows
from soak.judges.replay.findings import (
    CONVERT,
    GAP_JOB_TABLES,
    KEEP_TRANSITIONS,
    TABLE_ATTR,
    Finding,
    HistoryResult,
    Transition,
)
from soak.record.capture import Transaction
from soak.record.pgoutput import UNCHANGED, Change, Decoder, Truncate, lsn_str
from soak.record.spill import HOT, SpillDict


class Replayer:
    """The replayed database plus the indexes the per-commit predicates need."""

    def __init__(self, initial: State | None = None, keep_all_timelines: bool = False, hot: int = HOT) -> None:
        s = initial or State()
        # Every row the history wrote, the least recently used on disk past `hot` per map (issue 27 item 3:
        # memory bounded by the rows in use, not by the run's length; soak/record/spill.py).
        self.jobs: SpillDict = SpillDict(s.jobs.items(), hot=hot)
        self.steps: SpillDict = SpillDict(s.steps.items(), hot=hot)
        self.events: SpillDict = SpillDict(s.events.items(), hot=hot)
        self.signals: dict[tuple[str, str], Signal] = dict(s.signals)
        self.rate: dict[tuple[str, datetime], RateWindow] = dict(s.rate)
        self.queues: dict[str, QueueRow] = dict(s.queues)
        self.crons: dict[str, CronRow] = dict(s.crons)
        self.meta = (s.version, s.contract_major)
        self.decoder = Decoder(lazy_old=True)
        self.raw: SpillDict = SpillDict(hot=hot)  # (table, key) → the TupleData of the row's last version
        self.steps_by_job: SpillDict = SpillDict(hot=hot, default_factory=dict)  # job → name → Step
        for (j, n), st in self.steps.items():
            self.steps_by_job[j][n] = st
        self.wf: dict[str, set[int]] = defaultdict(set)
        self.ukey: dict[str, set[int]] = defaultdict(set)
        self.cron: dict[tuple[str, datetime | None], set[int]] = defaultdict(set)
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
        self.first_candidates: list[tuple[list[Finding], dict[str, Any]]] = []
        self.result = HistoryResult("valid")

    # --- indexes -------------------------------------------------------------------------------

    def _index(self, j: Job, add: bool) -> None:
        keys: list[tuple[dict[Any, set[int]], Any]] = []
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
                inserted = cast("dict[str, Any]", c.new)  # an insert carries its new row
                u, t = costs.get(inserted["job_id"], (0, 0))
                costs[inserted["job_id"]] = (u + inserted["usd_micros"], t + inserted["tokens"])
            elif c.table == "belay_jobs" and c.kind == "delete":
                deleted.add(cast("dict[str, Any]", c.old)["id"])  # REPLICA IDENTITY FULL: a delete carries its old row
        ctx = tr.TxContext(at, costs, frozenset(deleted))
        touched_jobs: set[int] = set()
        touched_signals: set[tuple[str, str]] = set()
        changed_rows: list[Transition | tuple[str, Any, str]] = []
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
            table: dict[Any, Any] = getattr(self, TABLE_ATTR[c.table])
            newrow = c.new
            if newrow is not None and c.unchanged:  # unchanged TOAST values
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
                transition = Transition(
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
                self.history[job_id].append(transition)
                if not self.keep_all and len(self.history[job_id]) > 4 * KEEP_TRANSITIONS:
                    del self.history[job_id][:-KEEP_TRANSITIONS]
                changed_rows.append(transition)
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
                            cast("str", j.rule),  # an illegal judgement names its rule
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
                            cast("str", j.rule),  # an illegal judgement names its rule
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

    def _report(
        self, tx: Transaction, findings: list[Finding], changed_rows: list[Transition | tuple[str, Any, str]]
    ) -> None:
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

    def _neighbourhood(self, touched: set[int], signals: set[tuple[str, str]]) -> tuple[set[int], set[tuple[str, Any]]]:
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
