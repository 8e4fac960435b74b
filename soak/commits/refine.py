"""Trace validation: every committed transaction explained by the model (issue 30 item 1).

    python -m soak.commits.refine <run-dir>     # validate a soak's captured history (history.bin)

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
    transaction that left no trace) but by soak/commits/timing.py with the fault log (duty P5, issue 51);
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
import json
import math
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from model import ops
from model import store as model_store
from model import worker_ops as w
from model.envelope import decode
from model.queues import QueueOpts
from model.rows import TERMINAL, CronRow, Job, QueueRow, RateWindow, Signal, Step
from model.state import State, Tables
from soak.commits.capture import Transaction, read_transactions
from soak.commits.pgoutput import UNCHANGED, Change, Decoder, Truncate, lsn_str
from soak.commits.replay import CONVERT, TABLE_ATTR
from soak.commits.spill import HOT, SpillDict
from soak.commits.timing import ClaimOrder, Freshness, NodeFaults

# Contract §2 clock rule: "Keep worker clocks within a few seconds of true time (NTP); leases and windows
# tolerate small skew." A few seconds: a `now` may run ahead of the commit time by at most SKEW.
SKEW = timedelta(seconds=5)
# A `now` is taken before the transaction commits: a SIGSTOP, a stall or a database crash-restart between
# the two makes it older than the commit by the stall (the soak stops nodes for up to --stop-for, 15 s by
# default, and zombie stops last until a later attempt journals). Bounded generously; reported per run.
# Issue 51: where the rows name the writing node, its lag is judged per node (soak/commits/timing.py):
# beyond 5 s only that node's own faults excuse it, each by its duration; LAG stays the bound for the rest.
LAG = timedelta(seconds=300)
HARNESS_NODE = "soak-harness"  # soak/scenarios.py _finish_children_silently
FAR = datetime(9999, 1, 1, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_CANDIDATES = 8
MAX_FINDINGS = 50

JOBS, STEPS, EVENTS, SIGNALS, RATE, QUEUES, CRONS = (
    "belay_jobs",
    "belay_steps",
    "belay_events",
    "belay_signals",
    "belay_rate",
    "belay_queues",
    "belay_crons",
)
TABLES = (JOBS, STEPS, EVENTS, SIGNALS, RATE, QUEUES, CRONS)
# the row decoders and the State attribute of each table: the same as the replay's
ATTR = TABLE_ATTR


# --------------------------------------------------------------------------------------------------
# results


@dataclass
class Finding:
    """A transaction no operation explains (kind "unexplained"), or a capture problem (kind "capture")."""

    kind: str
    lsn: int
    at: datetime
    text: str
    rows: list[str] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)
    tainted: bool = False  # involves rows with a capture gap: counts towards unknown, not invalid

    def __str__(self) -> str:
        return f"LSN {lsn_str(self.lsn)} at {self.at.isoformat(timespec='milliseconds')}: {self.text}"

    def detail(self) -> str:
        lines = [str(self)]
        lines += ["  rows:"] + [f"    {r}" for r in self.rows[:30]]
        if len(self.rows) > 30:
            lines.append(f"    … {len(self.rows) - 30} more")
        lines += ["  candidates tried:"] + [f"    {t}" for t in self.tried] if self.tried else ["  no candidate"]
        return "\n".join(lines)


@dataclass
class RefinementResult:
    verdict: str  # valid | invalid | unknown
    why: str = ""
    transactions: int = 0  # transactions read
    validated: int = 0  # explained by an operation of the model
    empty: int = 0  # no change to a Belay table (e.g. belay_meta, soak tables only)
    by_kind: Counter = field(default_factory=Counter)  # explained operations by kind
    findings: list[Finding] = field(default_factory=list)
    unexplained: int = 0
    unexplained_hard: int = 0  # of which on rows without a capture gap: these make the verdict invalid
    capture_gaps: int = 0
    matches_snapshot: bool | None = None
    snapshot_diff: list[str] = field(default_factory=list)
    lag_max_s: float = 0.0  # the oldest `now` seen, relative to its commit
    ahead_max_s: float = 0.0  # the furthest-ahead `now` seen
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    # duty P11 judged from the committed claims (operations guide "Shutdown": producers stop claiming first)
    drains_judged: int = 0  # SIGTERMed nodes whose claims the history holds
    claims_after_term: list[str] = field(default_factory=list)  # one line per offending node
    admission_claims: Counter = field(default_factory=Counter)  # queue → explained claims under §6 admission
    # issue 51: judges of order and time (soak/commits/timing.py)
    stale_now: list[str] = field(default_factory=list)  # `now` freshness findings (make the verdict invalid)
    claim_order: list[str] = field(default_factory=list)  # duty P5 from the committed claims
    claimed_expired: list[tuple[int, int, float]] = field(default_factory=list)  # duty P17
    timing: dict[str, Any] = field(default_factory=dict)  # the judges' counts and measured lags

    def line(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in self.by_kind.most_common())
        s = (
            f"refinement: {self.verdict.upper()} — {self.validated} of {self.transactions} transactions explained "
            f"by the model in {self.seconds:.1f} s ({kinds})"
        )
        if self.unexplained:
            s += f"; {self.unexplained} unexplained, first: {self.findings[0]}" if self.findings else ""
        if self.why:
            s += f" ({self.why})"
        return s

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict,
            "why": self.why,
            "transactions": self.transactions,
            "validated": self.validated,
            "empty": self.empty,
            "by_kind": dict(self.by_kind),
            "unexplained": self.unexplained,
            "capture_gaps": self.capture_gaps,
            "findings": [f.detail() for f in self.findings[:10]],
            "matches_snapshot": self.matches_snapshot,
            "snapshot_diff": self.snapshot_diff[:20],
            "now_lag_max_s": round(self.lag_max_s, 3),
            "now_ahead_max_s": round(self.ahead_max_s, 3),
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "drains_judged": self.drains_judged,
            "claims_after_term": self.claims_after_term[:20],
            "admission_claims": dict(self.admission_claims),
            "stale_now": self.stale_now[:10],
            "claim_order": self.claim_order[:10],
            "claimed_expired": [list(c) for c in self.claimed_expired],
            "timing": self.timing,
        }


class Mismatch(Exception):
    """A candidate operation cannot explain the transaction (the message says why)."""


CLAIM_SETTLE = 1.5  # s: a claim in flight at a SIGTERM has committed this long after it (soak/duties.py)
NOW_SLACK = 1.0  # s: a claim's `now` this far past the SIGTERM was built after it (node clock offsets < 0.6 s)


# --------------------------------------------------------------------------------------------------
# the harness's own record (the "ledger" of harness writes)


@dataclass(frozen=True)
class HarnessLedger:
    """What the harness says it wrote: client cancels and signals by job, lost-wakeup children."""

    cancels: frozenset[int] = frozenset()
    signals: frozenset[int] = frozenset()
    silent_children: frozenset[int] = frozenset()
    strict: bool = False  # True: a client cancel/signal must be recorded here
    terms: Mapping[str, float] = field(default_factory=dict)  # node → its SIGTERM (the nemesis's drain_term)
    lease_ttl: float | None = None  # the run's BELAY_LEASE_TTL (run_start): a claim's `now` = lease_until − ttl
    faults: NodeFaults | None = None  # issue 51: the fault log per node (now freshness, claim order)

    @classmethod
    def load(cls, source: Any) -> HarnessLedger:
        if source is None:
            return cls()
        if isinstance(source, HarnessLedger):
            return source
        records: Iterable[dict]
        if isinstance(source, (str, Path)):
            from soak.history import events_path, read_events

            found = events_path(source)  # history.jsonl, or history.jsonl.gz once the run has closed it
            if found is None:
                return cls()
            records = read_events(found)
        else:
            records = source
        cancels: set[int] = set()
        signals: set[int] = set()
        silent: set[int] = set()
        terms: dict[str, float] = {}
        ttl: float | None = None
        faults = NodeFaults()
        for r in records:
            faults.feed(r)
            t = r.get("type")
            if t == "run_start" and r.get("lease_ttl") is not None:
                ttl = float(r["lease_ttl"])
            if t == "worker_drain_term" and r.get("node") is not None:
                terms.setdefault(str(r["node"]), float(r["t"]))
            # The intents precede the writes (driver.py): a write that committed as the connection broke
            # has its intent and no `cancel`/`signal` record.
            if t in ("cancel", "cancel_intent") and r.get("job_id") is not None:
                cancels.add(int(r["job_id"]))
            elif t in ("signal", "signal_intent") and r.get("job_id") is not None:
                signals.add(int(r["job_id"]))
            elif t in ("lost_wakeup", "lost_wakeup_intent"):  # the intent precedes the ack (scenarios.py)
                silent.update(int(c) for c in r.get("children", ()))
        return cls(frozenset(cancels), frozenset(signals), frozenset(silent), True, terms, ttl, faults)


# --------------------------------------------------------------------------------------------------
# the model's state, indexed for the sub-states an operation reads


class World:
    """The model state before the next transaction, with indexes to cut out what one operation reads."""

    def __init__(self, initial: State | None, hot: int = HOT) -> None:
        s = initial or State()
        # Every row the history wrote; past `hot` per map the least recently used wait on disk until read
        # again (issue 27 item 3: memory bounded by the rows in use; soak/commits/spill.py).
        self.jobs: SpillDict = SpillDict(hot=hot)
        self.steps: SpillDict = SpillDict(hot=hot, default_factory=dict)  # by job, by name
        self.events: SpillDict = SpillDict(hot=hot, default_factory=dict)  # by job, by seq
        self.signals: dict[tuple[str, str], Signal] = dict(s.signals)
        self.by_scope: dict[str, set[str]] = defaultdict(set)
        self.rate: dict[tuple[str, datetime], RateWindow] = dict(s.rate)
        self.queues: dict[str, QueueRow] = dict(s.queues)
        self.crons: dict[str, CronRow] = dict(s.crons)
        self.version, self.major = s.version, s.contract_major
        self.next_id = s.next_id
        self.by_wf: dict[str, set[int]] = defaultdict(set)
        self.by_parent: dict[int, set[int]] = defaultdict(set)
        self.by_ukey: dict[str, set[int]] = defaultdict(set)
        self.by_cron: dict[str, set[int]] = defaultdict(set)
        self.awaits: dict[tuple[str, str], set[int]] = defaultdict(set)
        self.running: dict[str, set[int]] = defaultdict(set)
        for j in s.jobs.values():
            self.set_job(j.id, j)
        for st in s.steps.values():
            self.steps[st.job_id][st.name] = st
        for e in s.events.values():
            self.events[e.job_id][e.seq] = e
        for scope, name in self.signals:
            self.by_scope[scope].add(name)

    def spill(self) -> None:
        """Between two transactions: rows not used lately go to disk."""
        for d in (self.jobs, self.steps, self.events):
            d.spill()

    def close(self) -> None:
        for d in (self.jobs, self.steps, self.events):
            d.close()

    # --- writes ------------------------------------------------------------------------------------

    @staticmethod
    def _keys(j: Job) -> list[tuple[str, Any]]:
        return [
            (idx, k)
            for idx, k in (
                ("by_wf", j.workflow_id),
                ("by_parent", j.parent_id),
                ("by_ukey", j.unique_key),
                ("by_cron", j.cron_name),
                ("awaits", (j.await_scope, j.await_name) if j.await_scope is not None else None),
                ("running", j.queue if j.state == "running" else None),
            )
            if k is not None
        ]

    def set_job(self, job_id: int, new: Job | None) -> None:
        old = self.jobs.get(job_id)
        if old is not None:
            for idx, k in self._keys(old):
                s = getattr(self, idx).get(k)
                if s is not None:
                    s.discard(job_id)
                    if not s:
                        del getattr(self, idx)[k]
        if new is None:
            self.jobs.pop(job_id, None)
            return
        self.jobs[job_id] = new
        for idx, k in self._keys(new):
            getattr(self, idx)[k].add(job_id)
        if job_id >= self.next_id:
            self.next_id = job_id + 1

    def get(self, table: str, key: Any) -> Any:
        if table == JOBS:
            return self.jobs.get(key)
        if table == STEPS:
            steps = self.steps.get(key[0])
            return steps.get(key[1]) if steps else None
        if table == EVENTS:
            events = self.events.get(key[0])
            return events.get(key[1]) if events else None
        return getattr(self, ATTR[table]).get(key)

    def put(self, table: str, key: Any, row: Any) -> None:
        if table == JOBS:
            self.set_job(key, row)
        elif table in (STEPS, EVENTS):
            by = getattr(self, ATTR[table])
            if row is None:
                d = by.get(key[0])
                if d is not None:
                    d.pop(key[1], None)
                    if not d:
                        del by[key[0]]
            else:
                by[key[0]][key[1]] = row
        elif table == SIGNALS:
            if row is None:
                self.signals.pop(key, None)
                names = self.by_scope.get(key[0])
                if names is not None:
                    names.discard(key[1])
                    if not names:
                        del self.by_scope[key[0]]
            else:
                self.signals[key] = row
                self.by_scope[key[0]].add(key[1])
        else:
            d = getattr(self, ATTR[table])
            if row is None:
                d.pop(key, None)
            else:
                d[key] = row

    # --- the part of the state one transaction's operations read --------------------------------------

    def closure(self, ids: set[int]) -> set[int]:
        """Jobs an operation on `ids` can read or write: workflow members (settlement), parents ($children
        delivery), children (their terminal check), recursively."""
        out = {i for i in ids if i in self.jobs}
        frontier = set(out)
        while frontier:
            more: set[int] = set()
            for i in frontier:
                j = self.jobs.get(i)
                if j is None:
                    continue
                if j.workflow_id is not None:
                    more |= self.by_wf.get(j.workflow_id, set())
                if j.parent_id is not None and j.parent_id in self.jobs:
                    more.add(j.parent_id)
                more |= self.by_parent.get(i, set())
            frontier = more - out
            out |= frontier
        return out

    def substate(self, job_ids: set[int], signal_keys: set[tuple[str, str]], rate_buckets: set[str]) -> Tables:
        ids = self.closure(job_ids)
        keys = set(signal_keys)
        for i in ids:
            j = self.jobs[i]
            if j.await_scope is not None and j.await_name is not None:
                keys.add((j.await_scope, j.await_name))
            for name in self.by_scope.get(f"job:{i}", ()):
                keys.add((f"job:{i}", name))
        for k in list(keys):  # every awaiter of a signal in play is woken by its delivery
            for a in self.awaits.get(k, ()):
                if a not in ids:
                    ids |= self.closure({a})
        jobs = {i: self.jobs[i] for i in ids}
        steps = {(i, n): s for i in ids for n, s in self.steps.get(i, {}).items()}
        events = {(i, q): e for i in ids for q, e in self.events.get(i, {}).items()}
        signals = {k: self.signals[k] for k in keys if k in self.signals}
        rate = {k: r for k, r in self.rate.items() if k[0] in rate_buckets} if rate_buckets else {}
        return Tables(
            jobs,
            steps,
            events,
            signals,
            rate,
            dict(self.queues),
            dict(self.crons),
            self.version,
            self.major,
            self.next_id,
        )


# --------------------------------------------------------------------------------------------------
# one transaction's changes


@dataclass
class TxRows:
    """The net effect of one transaction: per table, key → (row before, row after)."""

    lsn: int
    at: datetime
    xid: int
    rows: dict[str, dict[Any, tuple[Any, Any]]]
    gap: list[str] = field(default_factory=list)
    meta_only: bool = False

    def describe(self) -> list[str]:
        out = []
        for table in TABLES:
            for key, (b, a) in self.rows.get(table, {}).items():
                if b is None:
                    out.append(f"{table} {key!r} INSERT {_brief(a)}")
                elif a is None:
                    out.append(f"{table} {key!r} DELETE {_brief(b)}")
                else:
                    diff = _diff_columns(b, a)
                    out.append(
                        f"{table} {key!r} UPDATE "
                        + (
                            ", ".join(f"{c}: {_short(getattr(b, c))} → {_short(getattr(a, c))}" for c in diff)
                            or "(no change)"
                        )
                    )
        return out


def _short(v: Any, n: int = 80) -> str:
    if isinstance(v, datetime):
        return v.isoformat(timespec="microseconds")
    if isinstance(v, bytes):
        try:
            v = decode(v)
        except Exception:  # noqa: BLE001 - a diagnostic only
            return repr(v[:n])
    s = repr(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def _brief(row: Any) -> str:
    if isinstance(row, Job):
        return (
            f"state={row.state} attempt={row.attempt}/{row.max_attempts} worker={row.worker} queue={row.queue}"
            + (f" wf={row.workflow_id}:{row.wf_name}" if row.workflow_id else "")
            + (f" parent={row.parent_id}" if row.parent_id else "")
            + (f" key={row.unique_key}" if row.unique_key else "")
        )
    return _short(row, 160)


def _diff_columns(a: Any, b: Any) -> list[str]:
    return [f.name for f in fields(a) if not _same(f.name, getattr(a, f.name), getattr(b, f.name))]


def _same(column: str, x: Any, y: Any) -> bool:
    """Column equality, tolerant where the contract fixes a value but not its spelling: §2 envelopes
    (result, step value) compare as decoded values, error entries' `at` as instants."""
    if x == y:
        return True
    if column in ("result", "value") and isinstance(x, bytes) and isinstance(y, bytes):
        try:
            return decode(x) == decode(y)
        except Exception:  # noqa: BLE001 - undecodable: the bytes differ
            return False
    if column == "errors" and isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        return all(_same_entry(p, q) for p, q in zip(x, y, strict=True))
    return False


def _same_entry(p: Any, q: Any) -> bool:
    if p == q:
        return True
    if not (isinstance(p, dict) and isinstance(q, dict)) or set(p) != set(q):
        return False
    for k in p:
        if p[k] != q[k]:
            if k != "at":
                return False
            try:
                if _parse_at(p[k]) != _parse_at(q[k]):
                    return False
            except (TypeError, ValueError):
                return False
    return True


def _rows_equal(a: Any, b: Any) -> bool:
    """Row `a` (the transaction's) against `b` (the model's)."""
    if a == b:
        return True
    if a is None or b is None or type(a) is not type(b):
        return False
    if isinstance(a, Signal) and a.name == "$children" and _children_hint(a, b):
        return True
    return not _diff_columns(a, b)


def _children_hint(a: Signal, b: Signal) -> bool:
    """A `$children` delivery whose payload lists, in any order, some of the children the model's lists
    (the jobs the transaction made terminal): §7 "For the job and each settlement-cancelled job with a
    parent_id: deliver the $children signal to job:<parent_id> … unconditionally", R1 "signal
    unconditionally and re-verify on wake" — the payload is a hint no reader trusts, so an SDK that
    upserts once per finished child (the last upsert wins) or lists them unsorted is as right as the
    reference's one sorted list. Judged: the shape `{"children": [ids]}` (decisions.md "Reserved names"),
    at least one id, and no id the model's delivery does not name."""
    if (a.scope, a.inserted_at) != (b.scope, b.inserted_at):
        return False
    mine, theirs = a.payload, b.payload
    if not (isinstance(mine, dict) and isinstance(theirs, dict) and set(mine) == {"children"} == set(theirs)):
        return False
    got, allowed = mine["children"], theirs["children"]
    if not (isinstance(got, list) and isinstance(allowed, list) and got):
        return False
    ids = [i for i in got if isinstance(i, int) and not isinstance(i, bool)]
    return len(ids) == len(got) == len(set(ids)) and set(ids) <= set(allowed)


def _parse_at(s: Any) -> datetime:
    if isinstance(s, datetime):
        return s
    text = str(s)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    at = datetime.fromisoformat(text)
    if at.tzinfo is None:
        raise ValueError(f"error entry time {s!r} has no zone")
    return at.astimezone(UTC)


# --------------------------------------------------------------------------------------------------
# candidates


@dataclass
class Candidate:
    label: str
    ops: list[Any]  # model operations, or (callable, description) harness writes, applied in order
    kinds: list[str]
    mask: dict[str, set] = field(default_factory=dict)  # table → keys the operation must not take
    mask_for: dict[int, str] = field(default_factory=dict)  # op index → what masking applies ("claim" …)


def _claims(cand: Candidate) -> Iterable[w.Claim]:
    """The claims among a candidate's operations (an op may be wrapped as (directive, …, op))."""
    for op in cand.ops:
        inner = op[-1] if isinstance(op, tuple) else op
        if isinstance(inner, w.Claim):
            yield inner


class ObservedRetry:
    """A reclaim's backoff as the rows show it: the SDK's choice (§6 leaves backoff and jitter to it).
    `retry_at(now, attempt)` answers, per attempt number in id order, the ready_at the transaction wrote."""

    def __init__(self, by_attempt: dict[int, list[datetime]]) -> None:
        self.by_attempt = {a: list(v) for a, v in by_attempt.items()}

    def retry_at(self, now: datetime, attempt: int) -> datetime:
        q = self.by_attempt.get(attempt)
        if q:
            return q.pop(0)
        return now  # the transaction retried no row of this attempt: any answer differs from it


def _is_running(j: Job | None) -> bool:
    return j is not None and j.state == "running"


def _spec_of(j: Job, now: datetime) -> ops.JobSpec:
    """The JobSpec whose §5.1 insert at `now` gives row `j` (inverse of model.store._new_row)."""
    key, mode, window = j.unique_key, j.unique_mode, None
    if mode == "window" and key is not None and "@" in key:
        base, _, bucket_s = key.rpartition("@")
        bucket = int(bucket_s) if bucket_s.isdigit() else 0
        secs = (now - EPOCH) // timedelta(seconds=1)
        if bucket > 0:
            guess = secs // bucket
            for cand in (guess, guess - 1, guess + 1, guess + 2):
                if cand >= 1 and ops.window_bucket(now, cand) == bucket:
                    window = cand
                    break
        key = base
    if mode == "window" and window is None:
        window = 1  # no window length reproduces the key: the insert cannot be explained
    return ops.JobSpec(
        j.queue,
        j.worker,
        j.input,
        j.meta if isinstance(j.meta, dict) else {},
        j.priority,
        j.max_attempts,
        None if j.ready_at == now else j.ready_at,
        key,
        mode,
        window if mode == "window" else None,
        j.cron_name,
        j.cron_slot,
        j.budget_usd_micros,
        j.budget_tokens,
        j.parent_id,
    )


def _child_spec(j: Job, now: datetime) -> ops.JobSpec:
    return ops.JobSpec(
        j.queue,
        j.worker,
        j.input,
        j.meta if isinstance(j.meta, dict) else {},
        j.priority,
        j.max_attempts,
        None if j.ready_at == now else j.ready_at,
        budget_usd_micros=j.budget_usd_micros,
        budget_tokens=j.budget_tokens,
    )


class Validator:
    def __init__(
        self,
        initial: State | None,
        ledger: HarnessLedger,
        taint: set[int] | None = None,
        keep_going: bool = True,
        hot: int = HOT,
    ) -> None:
        self.world = World(initial, hot=hot)
        self.decoder = Decoder(lazy_old=True)
        self.raw: SpillDict = SpillDict(hot=hot)  # (table, key) → the TupleData of the row's last version
        self.ledger = ledger
        self.taint: set[int] = set(taint or ())
        self.result = RefinementResult("valid")
        self.keep_going = keep_going
        self._late_claims: dict[str, int] = {}  # P11: node → rows claimed after its SIGTERM
        self._late_first: dict[str, tuple[float, int]] = {}
        self.fresh = Freshness(ledger.faults)  # issue 51: `now` freshness per node
        self.order = ClaimOrder(ledger.faults)  # issue 51: claim order (duty P5)
        self._lsn = ""
        self._last_at: datetime | None = None

    # --- decoding ----------------------------------------------------------------------------------

    def rows_of(self, tx: Transaction) -> TxRows:
        out = TxRows(tx.commit_lsn, tx.commit_time, tx.xid, {})
        pending: dict[tuple[str, Any], Any] = {}  # the row as this transaction left it so far
        meta = False
        for m in tx.messages:
            c = self.decoder.decode(m)
            if isinstance(c, Truncate):
                out.gap.append(f"TRUNCATE of {', '.join(r.name for r in c.relations)}")
                continue
            if not isinstance(c, Change):
                continue
            table = c.table
            if table == "belay_meta":
                if c.new is not None:
                    self.world.version = c.new.get("version", self.world.version)
                    self.world.major = c.new.get("contract_major", self.world.major)
                meta = True
                continue
            conv = CONVERT.get(table)
            if conv is None:
                continue
            make, key_of = conv
            newrow = c.new
            if newrow is not None and any(v is UNCHANGED for v in newrow.values()):
                oldrow = c.old or (self.decoder.load(c.old_raw, c.relation) if c.old_raw is not None else None)
                if oldrow is None:
                    out.gap.append(f"{table}: an update with unchanged TOAST values and no old row")
                    continue
                newrow = {k: (oldrow[k] if v is UNCHANGED else v) for k, v in newrow.items()}
            new = make(newrow) if newrow is not None else None
            old = make(c.old) if c.old is not None else None
            key = key_of(new if new is not None else old)
            rk = (table, key)
            table_rows = out.rows.setdefault(table, {})
            current = pending[rk] if rk in pending else self.world.get(table, key)
            if c.kind == "insert":
                if current is not None:
                    out.gap.append(f"{table} {key!r} inserted but already held")
            elif current is None:
                out.gap.append(f"{table} {key!r} {c.kind}d but not held")
                if old is None and c.old_raw is not None:
                    old = make(self.decoder.load(c.old_raw, c.relation))
                current = old
                if key not in table_rows:
                    table_rows[key] = (old, None)
            elif c.old_raw is not None and self.raw.get(rk) != c.old_raw:
                old = old if old is not None else make(self.decoder.load(c.old_raw, c.relation))
                if old != current:
                    out.gap.append(
                        f"{table} {key!r}: the old row differs from the held one in {_diff_columns(current, old)}"
                    )
                    current = old
                    if key in table_rows:
                        table_rows[key] = (old, table_rows[key][1])
            if key not in table_rows:
                table_rows[key] = (current if c.kind != "insert" else None, None)
            table_rows[key] = (table_rows[key][0], new)
            pending[rk] = new
            if c.new_raw is not None:
                self.raw[rk] = c.new_raw
            else:
                self.raw.pop(rk, None)
        # a row inserted and deleted in one transaction, or updated back to itself, still counts as written
        out.meta_only = meta and not any(out.rows.values())
        return out

    # --- recovery of the candidate operations ----------------------------------------------------------

    def now_ok(self, now: datetime, at: datetime, what: str, node: str | None = None) -> None:
        """§2 clock rule: `now` within SKEW ahead of the commit and LAG behind it (the blanket bound); with
        the writer `node` known, its lag is judged against the node's own faults (soak/commits/timing.py)."""
        if node is not None:
            self.fresh.judge(node, now, at, what, self._lsn)
        if now > at + SKEW:
            raise Mismatch(
                f"{what}: now {now.isoformat()} is {(now - at).total_seconds():.3f} s after the commit (> {SKEW.total_seconds():g} s skew)"
            )
        if now < at - LAG:
            raise Mismatch(
                f"{what}: now {now.isoformat()} is {(at - now).total_seconds():.1f} s before the commit (> {LAG.total_seconds():g} s)"
            )
        d = (now - at).total_seconds()
        if d > self.result.ahead_max_s:
            self.result.ahead_max_s = d
        if -d > self.result.lag_max_s:
            self.result.lag_max_s = -d

    def candidates(self, tx: TxRows) -> list[Candidate]:
        """The operation lists that could have written these rows (most specific first)."""
        R = tx.rows
        at = tx.at
        J = R.get(JOBS, {})
        S = R.get(STEPS, {})
        E = R.get(EVENTS, {})
        G = R.get(SIGNALS, {})
        head: list[tuple[str, Any]] = []  # (kind, op) applied first: config, inserts, journal, signals
        tail: list[tuple[str, Any]] = []
        choices: list[list[list[tuple[str, Any]]]] = []  # alternatives, one list chosen from each
        claimed: dict[tuple, list[Job]] = defaultdict(list)
        renewed: dict[tuple, list[int]] = defaultdict(list)
        reclaimed: list[tuple[Job, Job]] = []
        acks: list[tuple[Job, Job]] = []
        parks: list[tuple[Job, Job]] = []
        harness_acks: list[tuple[Job, Job]] = []
        cancels: list[tuple[Job, Job]] = []
        maybe_derived_cancel: list[tuple[Job, Job]] = []
        retries: list[tuple[Job, Job]] = []
        woken: list[tuple[Job, Job]] = []
        deleted_jobs: list[Job] = []
        inserted: list[Job] = []
        for job_id, (b, a) in J.items():
            if b is None and a is not None:
                inserted.append(a)
            elif a is None and b is not None:
                deleted_jobs.append(b)
            elif b is not None and a is not None:
                if b.state in ("ready", "awaiting", "held") and a.state == "running":
                    # (held: released by this transaction's settlement, then claimed by its refill)
                    claimed[(a.leased_by, a.lease_until, a.queue)].append(a)
                elif b.state == "running" and a.state == "running" and a.attempt == b.attempt + 1:
                    # an ack's retry (or a reclaim) and a claim of the same row in one transaction (the
                    # runtime's AckClaim group commit refills the slot it freed): the ack's row between the
                    # two is not in the capture — it is the retried row, not yet leased again
                    mid = replace(a, state="ready", attempt=b.attempt, lease_until=None, leased_by=None)
                    mid = replace(mid, started_at=b.started_at)
                    grew = len(a.errors) == len(b.errors) + 1
                    if grew and isinstance(a.errors[-1], dict) and a.errors[-1].get("error") == "lease_expired":
                        reclaimed.append((b, mid))
                    else:
                        acks.append((b, mid))
                    claimed[(a.leased_by, a.lease_until, a.queue)].append(a)
                elif b.state == "running" and a.state == "running":
                    if a.cancel_requested and not b.cancel_requested:
                        cancels.append((b, a))
                    elif a.lease_until != b.lease_until or a == b:
                        renewed[(b.leased_by, a.lease_until)].append(job_id)
                    # a spend update follows a step insert (RecordStep): derived
                elif b.state == "running":
                    grew = len(a.errors) == len(b.errors) + 1
                    if b.leased_by == HARNESS_NODE:
                        harness_acks.append((b, a))
                    elif grew and isinstance(a.errors[-1], dict) and a.errors[-1].get("error") == "lease_expired":
                        reclaimed.append((b, a))
                    elif a.state == "awaiting":
                        parks.append((b, a))
                    else:
                        acks.append((b, a))
                elif b.state in ("failed", "cancelled") and a.state in ("ready", "held"):
                    retries.append((b, a))
                elif a.state == "cancelled" and b.state not in TERMINAL:
                    if b.await_scope is not None or job_id in self.ledger.cancels:
                        cancels.append((b, a))
                    else:
                        maybe_derived_cancel.append((b, a))
                elif b.state == "awaiting" and a.state == "ready":
                    woken.append((b, a))
                # held → ready (release), spend updates, no-op updates: derived from the operations
        # --- inserts: enqueue, workflows, crons, spawned children
        spawned_keys: dict[int, dict[str, list[Job]]] = defaultdict(lambda: defaultdict(list))
        plain: list[Job] = []
        wf: dict[str, list[Job]] = defaultdict(list)
        cron: list[Job] = []
        for j in sorted(inserted, key=lambda r: r.id):
            if j.unique_key and j.unique_key.startswith("$spawn:") and j.parent_id is not None:
                parts = j.unique_key.split(":")
                name = ":".join(parts[2:-1])
                spawned_keys[j.parent_id][name].append(j)
            elif j.workflow_id is not None:
                wf[j.workflow_id].append(j)
            elif j.cron_name is not None and j.cron_name in self.world.crons:
                cron.append(j)
            else:
                plain.append(j)
        for name in ("queues", "crons"):
            for key, (_b, a) in R.get(QUEUES if name == "queues" else CRONS, {}).items():
                if a is None:
                    raise Mismatch(f"belay_{name} {key!r} deleted: no model operation deletes it")
                if name == "queues":
                    self.now_ok(a.updated_at, at, "PutQueue")
                    head.append(("put_queue", ops.PutQueue(a.updated_at, a.name, a.opts)))
                else:
                    self.now_ok(a.updated_at, at, "PutCron")
                    head.append(
                        (
                            "put_cron",
                            ops.PutCron(a.updated_at, a.name, a.expression, a.worker, a.input, a.opts, a.paused),
                        )
                    )
        for j in plain:
            self.now_ok(j.inserted_at, at, f"enqueue of job {j.id}")
            head.append(("enqueue", ("next_id", j.id, ops.Enqueue(j.inserted_at, (_spec_of(j, j.inserted_at),)))))
        for wf_id, members in wf.items():
            now = members[0].inserted_at
            self.now_ok(now, at, f"workflow {wf_id} enqueue")
            ms = tuple(
                ops.WorkflowMember(
                    m.wf_name or "",
                    _spec_of(replace(m, state="ready"), now),
                    tuple(m.wf_deps or ()),
                    tuple(m.wf_ignore or ()),
                )
                for m in members
            )
            head.append(("enqueue_workflow", ("next_id", members[0].id, ops.EnqueueWorkflow(now, wf_id, ms))))
        if cron:
            now = cron[0].inserted_at
            self.now_ok(now, at, "cron fire")
            since = min(j.cron_slot for j in cron if j.cron_slot is not None) - timedelta(minutes=1)
            names = {j.cron_name for j in cron}
            # the slots this transaction inserted, a subset of the due plan: §8.5 "For each due minute slot
            # …, insert" — one transaction per slot, or per cron, is as legal as one for the sweep; a due
            # slot no transaction inserts is I6's ("was due but no job holds it")
            slots = frozenset((j.cron_name, j.cron_slot) for j in cron if j.cron_name and j.cron_slot is not None)
            head.append(("fire_crons", ("crons", names, cron[0].id, w.FireCrons(now, since, slots=slots))))
        # --- steps: journal writes, sleeps, spawns
        sleeps: dict[int, Step] = {}
        for (job_id, name), (b, a) in sorted(S.items(), key=lambda kv: (kv[0][0], (kv[1][1] or kv[1][0]).seq)):
            if a is None:
                continue  # deletes: prune (checked with the jobs it deletes)
            if b is not None:
                raise Mismatch(f"belay_steps {(job_id, name)!r} updated: steps are immutable (§8.2)")
            self.now_ok(a.inserted_at, at, f"step {name!r} of job {job_id}", self._holder(job_id, J))
            if name.startswith("$sleep:"):
                sleeps[job_id] = a
            elif name.startswith("$spawn:"):
                spawn_name = name[len("$spawn:") :]
                kids = {k.unique_key: k for k in spawned_keys.get(job_id, {}).get(spawn_name, [])}
                try:
                    declared = decode(a.value)
                except Exception as exc:  # noqa: BLE001
                    raise Mismatch(f"$spawn step of job {job_id}: undecodable value ({exc})") from None
                listed = w.child_id_list(declared)
                if listed is None:
                    raise Mismatch(f"$spawn step of job {job_id}: value {declared!r} is not a list of child ids")
                ids = listed
                specs = []
                for i in range(len(ids)):
                    k = model_store.spawn_key(job_id, spawn_name, i)
                    row = kids.get(k)
                    if row is None:
                        # already held: inserted by an earlier transaction — a split spawn (§8.4: "the id
                        # list is rebuilt by fetching those keys") or an earlier attempt. Found by its key,
                        # never by the id the list names; the insert skips it, so its spec is irrelevant.
                        row = self._key_holder(k)
                    if row is None:
                        raise Mismatch(f"$spawn step of job {job_id}: child {i} (key {k!r}) neither inserted nor held")
                    specs.append(_child_spec(row, a.inserted_at))
                self._no_undeclared_child(job_id, spawn_name, len(ids))
                first = min((k.id for k in kids.values()), default=self.world.next_id)
                spelled = None if listed == declared else tuple(declared)  # ids spelled as strings
                spawn = w.Spawn(a.inserted_at, job_id, spawn_name, tuple(specs), spelled)
                taken = [
                    (i, kids[k].id)
                    for i in range(len(ids))
                    if (k := model_store.spawn_key(job_id, spawn_name, i)) in kids
                ]
                if all(got == first + i for i, got in taken):
                    head.append(("spawn", ("next_id", first, spawn)))
                else:  # a concurrent insert took ids between the children's (seed 2032's two-hour soak)
                    by_index = dict(taken)
                    supply = [by_index.get(i, -1 - i) for i in range(len(ids))]  # a held child's id: unused
                    head.append(("spawn", ("ids", supply, spawn)))
                spawned_keys.get(job_id, {}).pop(spawn_name, None)
            else:
                try:
                    value = decode(a.value)
                except Exception as exc:  # noqa: BLE001
                    raise Mismatch(f"step {name!r} of job {job_id}: undecodable value ({exc})") from None
                head.append(("record_step", w.RecordStep(a.inserted_at, job_id, name, value, a.usd_micros, a.tokens)))
        # children inserted with their keys and no `$spawn:<name>` journal in this transaction: the insert
        # half of a split spawn (§8.4 rebuilds the list from the keys; §11.8 "regardless of crashes between
        # insert and journal"), judged as SpawnChildren — the journal comes later (or never: I8 allows it)
        for parent, by_name in spawned_keys.items():
            for name, left in by_name.items():
                if not left:
                    continue
                now = left[0].inserted_at
                self.now_ok(now, at, f"spawn children of job {parent}")
                pairs = []
                for j in left:  # in id order: the order the sequence handed the ids out
                    index = (j.unique_key or "").rpartition(":")[2]
                    if not index.isdigit():
                        raise Mismatch(f"job {j.id}: spawn key {j.unique_key!r} has no child index")
                    pairs.append((int(index), _child_spec(j, now)))
                try:
                    insert = w.SpawnChildren(now, parent, name, tuple(pairs))
                except ops.InvalidInput as exc:
                    raise Mismatch(f"children of job {parent} ({name}): {exc}") from None
                got = [j.id for j in left]
                if got == list(range(got[0], got[0] + len(got))):
                    head.append(("spawn_children", ("next_id", got[0], insert)))
                else:  # a concurrent insert took ids between them
                    head.append(("spawn_children", ("ids", got, insert)))
        # --- events
        for (job_id, seq), (b, a) in sorted(E.items()):
            if a is None:
                continue
            if b is not None:
                raise Mismatch(f"belay_events {(job_id, seq)!r} updated: the event stream is append-only")
            self.now_ok(a.inserted_at, at, f"event {seq} of job {job_id}", self._holder(job_id, J))
            head.append(("emit_event", w.EmitEvent(a.inserted_at, job_id, a.payload, seq)))
        # --- signals
        children_written = [a for (_s, n), (_b, a) in G.items() if n == "$children" and a is not None]
        for (scope, name), (_b, a) in sorted(G.items()):
            if a is not None and name != "$children":
                self.now_ok(a.inserted_at, at, f"signal {scope}/{name}")
                attested = True
                if self.ledger.strict and scope.startswith("job:") and scope[4:].isdigit():
                    attested = int(scope[4:]) in self.ledger.signals
                if not attested:
                    raise Mismatch(f"signal {scope}/{name} written, but the harness recorded no signal for it")
                head.append(("deliver_signal", ops.DeliverSignal(a.inserted_at, scope, name, a.payload)))
        signal_deletes = [k for k, (b, a) in G.items() if a is None]
        # --- claims
        for (node, lease_until, queue), rows in claimed.items():
            first_claims = {r.started_at for r in rows if J[r.id][0].started_at is None}
            if len(first_claims) > 1:
                raise Mismatch(
                    f"claim by {node}: first claims started at {len(first_claims)} different times in one claim"
                )
            # the claim leaves ready_at as it found it (a wake earlier in the transaction may have set it)
            due = [r.ready_at for r in rows if r.ready_at is not None]
            if lease_until is None or node is None:
                raise Mismatch(f"claim by {node}: lease_until {lease_until} / leased_by {node} unset")
            if first_claims:
                now = next(iter(first_claims)) or at
            else:
                # `now` is not written (started_at kept): any instant the tolerance allows at which every
                # taken row is due and the lease still ahead — the commit time, moved into that interval
                lo = max([at - LAG, *due])
                hi = min(at + SKEW, lease_until - timedelta(microseconds=1))
                now = min(max(at, lo), hi)
                # With the run's lease ttl the worker's own `now` is in the row: lease_until − ttl. It
                # matters for admission — a node whose clock runs ahead sees leases expire (global
                # limit, partitions) and windows turn (rate) before the commit time does.
                if self.ledger.lease_ttl is not None:
                    stamped = lease_until - timedelta(seconds=self.ledger.lease_ttl)
                    if lo <= stamped <= hi:
                        now = stamped
            self.now_ok(now, at, f"claim of job(s) {sorted(r.id for r in rows)[:5]} by {node}", node)
            if lease_until <= now:
                raise Mismatch(
                    f"claim by {node}: lease_until {lease_until.isoformat()} not after now {now.isoformat()}"
                )
            qrow = self.world.queues.get(queue)
            try:
                qopts = QueueOpts.parse(qrow.opts) if qrow is not None else QueueOpts()
            except ops.InvalidInput:
                qopts = QueueOpts()
            claim = w.Claim(now, queue, node, len(rows), lease_until - now, qopts)
            tail.append(("claim", ("mask_claim", {r.id for r in rows}, claim)))
        # --- renewals
        for (node, lease_until), ids in renewed.items():
            if node is None or lease_until is None:
                raise Mismatch(f"renewal of {ids}: no lease holder / lease time")
            tail.append(("renew", w.Renew(at, node, tuple(sorted(ids)), lease_until)))
        # --- client cancels and retries
        for b, a in cancels:
            if self.ledger.strict and a.id not in self.ledger.cancels:
                raise Mismatch(
                    f"job {a.id} cancelled ({b.state} → {a.state}), but the harness recorded no cancel of it"
                )
            now = a.finished_at if a.state == "cancelled" and a.finished_at is not None else at
            self.now_ok(now, at, f"cancel of job {a.id}")
            tail.append(("cancel", ops.Cancel(now, a.id)))
        if maybe_derived_cancel:
            alt_cancel: list[tuple[str, Any]] = []
            for b, a in maybe_derived_cancel:
                now = a.finished_at or at
                self.now_ok(now, at, f"cancel of job {a.id}")
                if self.ledger.strict:  # not recorded (recorded cancels are taken above)
                    why = f"job {a.id} cancelled ({b.state} → {a.state}), but the harness recorded no cancel of it"
                    alt_cancel.append(("cancel", ("refuse", why)))
                else:
                    alt_cancel.append(("cancel", ops.Cancel(now, a.id)))
            choices.append([[], alt_cancel])  # doomed by settlement (derived) or a client cancel
        for b, a in retries:
            if self.ledger.strict:
                raise Mismatch(f"job {a.id} retried ({b.state} → {a.state}), but the harness retries no job")
            self.now_ok(a.ready_at or at, at, f"retry of job {a.id}")
            tail.append(("retry", ops.Retry(a.ready_at or at, a.id)))
        # --- reclaim
        if reclaimed:
            nows = {_parse_at(a.errors[-1]["at"]) for _, a in reclaimed}
            for now in sorted(nows):  # several sweeps' worth in one transaction: one Reclaim per `now`
                swept = [(b, a) for b, a in reclaimed if _parse_at(a.errors[-1]["at"]) == now]
                self.now_ok(now, at, "reclaim")
                by_attempt: dict[int, list[datetime]] = defaultdict(list)
                for b, a in sorted(swept, key=lambda ba: ba[0].id):
                    if a.state == "ready":
                        if a.ready_at is None or a.ready_at < now:
                            raise Mismatch(
                                f"reclaim retries job {a.id} at {a.ready_at}, before its now {now.isoformat()}"
                            )
                        by_attempt[b.attempt].append(a.ready_at)
                sweep = w.Reclaim(now, ObservedRetry(by_attempt), limit=len(swept))  # type: ignore[arg-type]
                tail.append(("reclaim", ("mask_reclaim", {b.id for b, _ in swept}, sweep)))
        # --- acks (one AckMany when several rows in one transaction)
        ack_ops: list[w.Ack] = []
        sleep_ops: list[tuple[str, Any]] = []
        for b, a in sorted(acks, key=lambda ba: ba[0].id):
            ack = self._ack_of(b, a, at, sleeps)
            if isinstance(ack, w.Sleep):
                sleep_ops.append(("sleep", ack))
            else:
                ack_ops.append(ack)
        for job_id in sleeps:
            if not any(isinstance(op, w.Sleep) and op.job_id == job_id for _, op in sleep_ops):
                raise Mismatch(f"$sleep step of job {job_id} journaled but the job did not go to sleep")
        if len(ack_ops) == 1:
            tail.append(("ack", ack_ops[0]))
        elif ack_ops:
            # after-terminal time: what the transaction wrote for it, else the latest ack's
            ats = [s.inserted_at for s in children_written]
            ats += [a.finished_at for b, a in maybe_derived_cancel if a.finished_at is not None]
            now = ats[0] if ats else max(x.now for x in ack_ops)
            self.now_ok(now, at, f"ack batch of jobs {[b.id for b, _a in acks][:5]}", acks[0][0].leased_by)
            tail.append(("ack_many", w.AckMany(now, tuple(ack_ops))))
        tail.extend(sleep_ops)
        for b, a in parks:
            now = at
            alts: list[list[tuple[str, Any]]] = []
            if a.await_name == "$children" and a.await_scope == f"job:{a.id}":
                alts.append([("await_children", w.AwaitChildren(now, a.id, b.attempt, a.ready_at))])
            if a.await_scope is None or a.await_name is None:
                raise Mismatch(f"job {a.id} awaiting with no await scope/name")
            alts.append([("park_await", w.ParkAwait(now, a.id, b.attempt, a.await_scope, a.await_name, a.ready_at))])
            choices.append(alts)
        for b, a in harness_acks:
            if self.ledger.strict and a.id not in self.ledger.silent_children:
                raise Mismatch(f"job {a.id} acked by {HARNESS_NODE}, but the harness recorded no such finish")
            tail.append(("harness_finish", ("harness_ack", self._ack_of(b, a, at, {}))))
        # --- awaiting → ready with no signal write: the R2 backstop
        if woken and not [k for k, (b, a) in G.items() if a is not None]:
            if all(b.await_name == "$children" for b, _ in woken):
                now = woken[0][1].ready_at or at
                self.now_ok(now, at, "reconcile")
                tail.append(("reconcile", ("mask_reconcile", {b.id for b, _ in woken}, w.Reconcile(now))))
        # --- signal deletes: await_children's clear, a client clear, or prune
        for scope, name in signal_deletes:
            if deleted_jobs:
                continue  # prune's signal ttl
            if name == "$children" and scope.startswith("job:") and any(a.id == int(scope[4:]) for _, a in parks):
                continue  # the await_children candidate clears it
            if name == "$children" and scope[4:].isdigit():
                job = self.world.jobs.get(int(scope[4:]))
                if job is not None and job.state == "running":
                    choices.append(
                        [
                            [("await_children", w.AwaitChildren(at, job.id, job.attempt))],
                            [("clear_signal", ops.ClearSignal(scope, name))],
                        ]
                    )
                    continue
            head.append(("clear_signal", ops.ClearSignal(scope, name)))
        # --- prune
        if deleted_jobs or (R.get(RATE) and any(a is None for b, a in R[RATE].values())):
            tail.append(
                (
                    "prune",
                    ("mask_prune", {j.id for j in deleted_jobs}, self._prune_of(tx, deleted_jobs, signal_deletes)),
                )
            )
        base = head + tail
        out = []
        combos: list[list[tuple[str, Any]]] = [[]]
        for alts in choices:
            combos = [c + alt for c in combos for alt in alts][:MAX_CANDIDATES]
        for extra in combos:
            seq = self._order(base + extra)
            kinds = [k for k, _ in seq]
            out.append(Candidate(" + ".join(kinds) or "no operation", [op for _, op in seq], kinds))
            if "claim" in kinds and {"ack", "ack_many", "reclaim"} & set(kinds):
                # a claim after the acks of the same transaction (a chunk refilling the slots it freed)
                late = sorted(seq, key=lambda kv: 9.5 if kv[0] == "claim" else self.ORDER.get(kv[0], 5))
                lk = [k for k, _ in late]
                out.append(Candidate(" + ".join(lk) + " (claim last)", [op for _, op in late], lk))
        return out

    ORDER: ClassVar[dict[str, int]] = {
        "put_queue": 0,
        "put_cron": 0,
        "enqueue": 1,
        "enqueue_workflow": 1,
        "fire_crons": 1,
        "spawn_children": 2,
        "spawn": 2,
        "record_step": 2,
        "emit_event": 3,
        "deliver_signal": 4,
        "clear_signal": 4,
        "claim": 5,
        "renew": 6,
        "cancel": 7,
        "retry": 7,
        "reclaim": 8,
        "ack": 9,
        "ack_many": 9,
        "sleep": 9,
        "park_await": 9,
        "await_children": 9,
        "harness_finish": 9,
        "reconcile": 10,
        "prune": 11,
    }

    def _holder(self, job_id: int, J: Mapping[int, tuple[Any, Any]]) -> str | None:
        """The node writing a running job's step or event: its lease holder (issue 51, `now` freshness)."""
        b = J[job_id][0] if job_id in J else self.world.jobs.get(job_id)
        return b.leased_by if b is not None and b.state == "running" else None

    def _order(self, seq: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        return sorted(seq, key=lambda kv: self.ORDER.get(kv[0], 5))

    def _ack_of(self, b: Job, a: Job, at: datetime, sleeps: dict[int, Step]) -> Any:
        """The §7 ack (or durable sleep) that takes running row `b` to `a`."""
        grew = len(a.errors) == len(b.errors) + 1 and a.errors[: len(b.errors)] == b.errors
        if a.state == "succeeded":
            try:
                value = decode(a.result)
            except Exception as exc:  # noqa: BLE001
                raise Mismatch(f"job {a.id}: undecodable result ({exc})") from None
            now = a.finished_at or at
            self.now_ok(now, at, f"ack of job {a.id} attempt {b.attempt}", b.leased_by)
            return w.Ack(now, a.id, b.attempt, w.Succeed(value))
        if a.state == "cancelled":
            now = a.finished_at or at
            self.now_ok(now, at, f"ack of job {a.id} attempt {b.attempt}", b.leased_by)
            return w.Ack(now, a.id, b.attempt, w.CancelSelf())
        if grew and a.state in ("failed", "ready"):
            e = a.errors[-1]
            if not isinstance(e, dict) or "error" not in e or "at" not in e:
                raise Mismatch(f"job {a.id}: error entry {e!r} is not {{attempt, at, error, detail}}")
            try:
                now = _parse_at(e["at"])
            except (TypeError, ValueError) as exc:
                raise Mismatch(f"job {a.id}: error entry time {e.get('at')!r}: {exc}") from None
            self.now_ok(now, at, f"ack of job {a.id} attempt {b.attempt}", b.leased_by)
            try:
                if a.state == "failed":
                    fail = w.Fail(e["error"], e.get("detail"), None)
                else:
                    if a.ready_at is None:
                        raise Mismatch(f"job {a.id}: retried with no ready_at")
                    fail = w.Fail(e["error"], e.get("detail"), a.ready_at)
            except ops.InvalidInput as exc:
                raise Mismatch(f"job {a.id}: error entry not a valid failure: {exc}") from None
            return w.Ack(now, a.id, b.attempt, fail)
        if a.state == "ready" and not grew:
            step = sleeps.get(a.id)
            if step is not None:
                # The wake time in the SDK's own ISO-8601 spelling (decisions.md: "an ISO-8601 string"; §2:
                # "never interpret a foreign SDK's reserved values" — the spelling is not judged). Judged:
                # the value is such a string, and the job is ready at the instant it denotes ("ready_at =
                # until", decisions.md §7 table).
                try:
                    text = decode(step.value)
                    until = w.wake_time(text)
                    return w.Sleep(step.inserted_at, a.id, b.attempt, step.name[len("$sleep:") :], until, text)
                except Exception as exc:  # noqa: BLE001
                    raise Mismatch(f"job {a.id}: $sleep value is no ISO-8601 wake time ({exc})") from None
            if a.ready_at is None:
                raise Mismatch(f"job {a.id}: ready again with no ready_at")
            # snooze (or a durable sleep on its journaled time, or a park on a signal already present: the
            # same row, ready at a time with one attempt credited)
            return w.Ack(at, a.id, b.attempt, w.Snooze(a.ready_at))
        raise Mismatch(
            f"job {a.id}: running → {a.state} matches no §7 outcome (errors {len(b.errors)} → {len(a.errors)})"
        )

    def _key_holder(self, key: str) -> Job | None:
        """The row holding a spawn child's `always` key (§5.2: "dedupes forever"), if any."""
        for i in sorted(self.world.by_ukey.get(key, ())):
            j = self.world.jobs.get(i)
            if j is not None and j.unique_mode in ("window", "always"):
                return j
        return None

    def _no_undeclared_child(self, parent: int, name: str, declared: int) -> None:
        """A `$spawn:<name>` journal of n ids while a child with key index ≥ n is already held: the
        journal does not list every child its keys hold (§8.4 "the id list is rebuilt by fetching those
        keys"; I8 "a parent has exactly the children its spawn declared")."""
        prefix = f"$spawn:{parent}:{name}:"
        for i in sorted(self.world.by_parent.get(parent, ())):
            j = self.world.jobs.get(i)
            key = j.unique_key if j is not None else None
            if key is not None and key.startswith(prefix):
                index = key[len(prefix) :]
                if index.isdigit() and int(index) >= declared:
                    raise Mismatch(
                        f"$spawn:{name} of job {parent} journals {declared} child id(s), but job {i} already holds "
                        f"key {key!r}: the list is not the one its keys rebuild (§8.4)"
                    )

    def _prune_of(self, tx: TxRows, deleted: list[Job], signal_deletes: list[tuple[str, str]]) -> w.Prune:
        now = tx.at
        retention: dict[str, int | None] = {"succeeded": None, "failed": None, "cancelled": None}
        for state in retention:
            fin = [j.finished_at for j in deleted if j.state == state and j.finished_at is not None]
            if fin:
                delta = (now - max(fin)).total_seconds()
                retention[state] = max(0, math.ceil(delta) - 1)
        ttl = None
        if signal_deletes:
            youngest = max(self.world.signals[k].inserted_at for k in signal_deletes if k in self.world.signals)
            ttl = max(0, math.ceil((now - youngest).total_seconds()) - 1)
        try:
            return w.Prune(now, retention, ttl, limit=max(1, len(deleted)))
        except ops.InvalidInput as exc:
            raise Mismatch(f"prune: {exc}") from None

    # --- applying a candidate ------------------------------------------------------------------------------

    def _apply(self, t: Tables, op: Any) -> None:
        if isinstance(op, tuple):
            tag = op[0]
            if tag == "next_id":
                _, first, inner = op
                t.next_id = first
                model_store.HANDLERS[type(inner)](t, inner)
                return
            if tag == "ids":  # the ids the sequence gave the rows, one per row in order
                _, supply, inner = op
                t.id_supply = iter(supply)
                try:
                    model_store.HANDLERS[type(inner)](t, inner)
                finally:
                    t.id_supply = None
                return
            if tag == "crons":
                _, names, first, inner = op
                t.next_id = first
                t.crons = {n: c for n, c in t.crons.items() if n in names}
                model_store.HANDLERS[type(inner)](t, inner)
                return
            if tag == "refuse":
                raise Mismatch(op[1])
            if tag == "harness_ack":
                # the lost-wakeup scenario's ack: the model's fenced row write, without its after-terminal steps
                inner = op[1]
                res = model_store._ack_row(t, inner)
                if not isinstance(res, w.Acked):
                    raise Mismatch(f"harness ack of job {inner.job_id}: {res}")
                return
            if tag.startswith("mask_"):
                _, ids, inner = op
                self._masked(t, tag[5:], ids, inner)
                return
            raise AssertionError(tag)
        model_store.HANDLERS[type(op)](t, op)

    def _masked(self, t: Tables, what: str, ids: set[int], op: Any) -> None:
        """Apply `op` with the rows a SKIP LOCKED (or limited) statement did not take hidden from it."""
        hidden: dict[int, tuple[Job, Job]] = {}
        for i, j in list(t.jobs.items()):
            if i in ids:
                continue
            m = None
            if what == "claim" and j.queue == op.queue and model_store.claimable(j, op.now):
                m = replace(j, ready_at=FAR)
            elif what == "reclaim" and j.state == "running" and j.lease_until is not None and j.lease_until <= op.now:
                m = replace(j, lease_until=FAR)
            elif what == "prune" and j.state in TERMINAL:
                m = replace(j, finished_at=FAR)
            elif what == "reconcile" and j.state == "awaiting" and j.await_name == "$children":
                m = replace(j, await_name="$masked")
            if m is not None:
                hidden[i] = (j, m)
                t.jobs[i] = m
        if what == "claim":  # each taken row must be claimable under the model's own predicate
            for i in ids:
                taken = t.jobs.get(i)
                if taken is None or not model_store.claimable(taken, op.now):
                    raise Mismatch(
                        f"claim of job {i}: not claimable at {op.now.isoformat()} "
                        f"(state {taken.state if taken else None}, "
                        f"ready_at {taken.ready_at.isoformat() if taken and taken.ready_at else None})"
                    )
        model_store.HANDLERS[type(op)](t, op)
        for i, (orig, m) in hidden.items():
            if t.jobs.get(i) is m:
                t.jobs[i] = orig

    def simulate(self, tx: TxRows, cand: Candidate) -> str | None:
        """None when the model, applied from the state before, writes exactly the transaction's rows;
        else the first difference."""
        R = tx.rows
        job_ids = set(R.get(JOBS, {}))
        for table in (STEPS, EVENTS):
            job_ids |= {k[0] for k in R.get(table, {})}
        signal_keys = set(R.get(SIGNALS, {}))
        buckets = {k[0] for k in R.get(RATE, {})}
        for op in cand.ops:
            inner = op[-1] if isinstance(op, tuple) else op
            if isinstance(inner, (ops.DeliverSignal, w.ParkAwait)):
                signal_keys.add((inner.scope, inner.name))
            elif isinstance(inner, w.Claim):
                job_ids |= self.world.running.get(inner.queue, set())
                if inner.opts.rate is not None:
                    buckets.add(inner.opts.rate.bucket(inner.queue))
            elif isinstance(inner, (ops.Enqueue, w.Spawn, ops.EnqueueWorkflow)):
                specs = (
                    inner.jobs
                    if isinstance(inner, ops.Enqueue)
                    else [m.job for m in inner.members]
                    if isinstance(inner, ops.EnqueueWorkflow)
                    else []
                )
                for s in specs:
                    if s.unique_key is not None:
                        for k in self.world.by_ukey.keys() if s.unique_mode == "window" else (s.unique_key,):
                            if k == s.unique_key or k.startswith(s.unique_key + "@"):
                                job_ids |= self.world.by_ukey.get(k, set())
                    if s.cron_name is not None:
                        job_ids |= self.world.by_cron.get(s.cron_name, set())
                if isinstance(inner, ops.EnqueueWorkflow):
                    job_ids |= self.world.by_wf.get(inner.workflow_id, set())
                if isinstance(inner, w.Spawn):
                    for i in range(len(inner.children)):
                        job_ids |= self.world.by_ukey.get(model_store.spawn_key(inner.job_id, inner.name, i), set())
            elif isinstance(inner, w.SpawnChildren):
                job_ids.add(inner.job_id)  # the parent and its steps (a journaled spawn is memoized)
                for i, _spec in inner.children:
                    job_ids |= self.world.by_ukey.get(model_store.spawn_key(inner.job_id, inner.name, i), set())
            elif isinstance(inner, w.FireCrons):
                for n in op[1]:
                    job_ids |= self.world.by_cron.get(n, set())
        t = self.world.substate(job_ids, signal_keys, buckets)
        before = {table: dict(getattr(t, ATTR[table])) for table in TABLES}
        try:
            for op in cand.ops:
                self._apply(t, op)
        except Mismatch:
            raise
        except (ops.InvalidInput, OverflowError, ValueError, TypeError, KeyError, AssertionError) as exc:
            raise Mismatch(f"the model refuses the operation: {type(exc).__name__}: {exc}") from None
        for table in TABLES:
            model_rows = getattr(t, ATTR[table])
            was = before[table]
            written = R.get(table, {})
            keys = set(written)
            for k, v in model_rows.items():
                if was.get(k) is not v:
                    keys.add(k)
            keys |= was.keys() - model_rows.keys()
            for k in sorted(keys, key=repr):
                expected = written[k][1] if k in written else was.get(k)
                got = model_rows.get(k)
                if _rows_equal(expected, got):
                    continue
                if got is None:
                    verb = "writes" if k in written else "leaves"
                    return f"{table} {k!r}: the transaction {verb} {_brief(expected)}, the model deletes it / never writes it"
                if expected is None:
                    return f"{table} {k!r}: the model writes {_brief(got)}, the transaction {'deletes it' if k in written else 'does not'}"
                col = _diff_columns(expected, got)[0]
                return (
                    f"{table} {k!r}.{col}: transaction {_short(getattr(expected, col))}, model {_short(getattr(got, col))}"
                    + ("" if k in written else " (a row the transaction did not touch)")
                )
        return None

    # --- one transaction -----------------------------------------------------------------------------------

    def step(self, tx: Transaction) -> None:
        r = self.result
        r.transactions += 1
        rows = self.rows_of(tx)
        self._lsn, self._last_at = lsn_str(rows.lsn), rows.at
        if rows.gap:
            r.capture_gaps += len(rows.gap)
            for k in rows.rows.get(JOBS, {}):
                self.taint.add(k)
            for table in (STEPS, EVENTS):
                for k in rows.rows.get(table, {}):
                    self.taint.add(k[0])
            for key, (b, _a) in rows.rows.get(JOBS, {}).items():  # resync to the server's old rows
                if b is not None and self.world.jobs.get(key) != b:
                    self.world.set_job(key, b)
        if not any(rows.rows.values()):
            r.empty += 1
            return
        tried: list[str] = []
        explained: Candidate | None = None
        try:
            cands = self.candidates(rows)
        except Mismatch as exc:
            cands = []
            tried.append(f"(recovery) {exc}")
        for cand in cands:
            try:
                why = self.simulate(rows, cand)
            except Mismatch as exc:
                why = str(exc)
            if why is None:
                explained = cand
                break
            tried.append(f"{cand.label}: {why}")
        if explained is not None:
            r.validated += 1
            for k in explained.kinds:
                r.by_kind[k] += 1
            for claim in _claims(explained):
                if self.ledger.terms:
                    self._claim_after_term(rows, claim)
                if claim.opts.needs_admission_lock:
                    r.admission_claims[claim.queue] += 1
        else:
            r.unexplained += 1
            involved = set(rows.rows.get(JOBS, {})) | {k[0] for t in (STEPS, EVENTS) for k in rows.rows.get(t, {})}
            tainted = bool(involved & self.taint) or bool(rows.gap)
            if not tainted:
                r.unexplained_hard += 1
            if len(r.findings) < MAX_FINDINGS:
                r.findings.append(
                    Finding(
                        "unexplained",
                        rows.lsn,
                        rows.at,
                        f"transaction xid {rows.xid} ({sum(len(v) for v in rows.rows.values())} rows) explained by "
                        f"no operation of the model" + (" — rows with a capture gap" if tainted else ""),
                        rows.describe(),
                        tried,
                        tainted,
                    )
                )
        # issue 51: claim order, judged on the rows before this transaction (soak/commits/timing.py)
        self.order.observe(
            rows.rows.get(JOBS, {}),
            rows.at,
            self._lsn,
            [(c.node, c.queue, c.now, c.opts.needs_admission_lock) for c in _claims(explained)]
            if explained is not None
            else (),
        )
        # the transaction's rows become the state (on a match they equal the model's)
        for table, changed in rows.rows.items():
            for key, (_b, a) in changed.items():
                self.world.put(table, key, a)
        self.world.spill()
        self.raw.spill()

    def close(self) -> None:
        """Remove the scratch files of the spilled maps."""
        self.world.close()
        self.raw.close()

    def _claim_after_term(self, tx: TxRows, claim: w.Claim) -> None:
        """P11: a claim by a node after its own SIGTERM. Both clocks must say so: the commit (the server's
        clock, the harness's machine) more than CLAIM_SETTLE after the signal — a claim in flight at the
        signal has committed by then unless the database stalled — and the claim's own `now` (its lease
        less its ttl) more than NOW_SLACK after it, beyond any clock offset the harness gives a node: a claim
        built before the signal and held up by a stall is not one made after it."""
        t = self.ledger.terms.get(claim.node)
        if t is None:
            return
        at, now = tx.at.timestamp(), claim.now.timestamp()
        if at > t + CLAIM_SETTLE and now > t + NOW_SLACK:
            self._late_claims[claim.node] = self._late_claims.get(claim.node, 0) + claim.demand
            self._late_first.setdefault(claim.node, (at - t, tx.lsn))

    def finish_duties(self) -> None:
        r = self.result
        # issue 51: the judges of order and time (soak/commits/timing.py)
        self.order.finish(self._last_at)
        r.stale_now = self.fresh.lines()
        r.claim_order = [] if r.capture_gaps else self.order.lines()  # a gap may hide the lock holder
        r.claimed_expired = self.order.claimed_expired
        lags = sorted(self.fresh.lags)
        r.timing = {
            "now_judged": self.fresh.judged,
            "now_stale": self.fresh.count,
            "now_fault_free_lag_max_s": round(self.fresh.free_lag_max, 3),
            "now_lags_under_half_s": self.fresh.small,
            "now_fault_free_lags_over_half_s": len(lags),
            "now_excused_lag_max_s": round(self.fresh.excused_lag_max, 3),
            "now_fault_free_lag_p99_s": lags[int(0.99 * (len(lags) - 1))] if lags else 0.0,
            "claims_order_judged": self.order.judged,
            "claims_with_choice": self.order.choices,
            "claims_admission_not_judged": self.order.skipped_admission,
            "passed_over_pairs": self.order.inversions,
            "passed_over_written_concurrently": self.order.excused_written,
            "passed_over_around_a_fault": self.order.excused_fault,
            "passed_over_proven_rows": self.order.proven_rows,
            "passed_over_again_rows": self.order.repeat_rows,
            "claims_over_capacity": len(self.order.over_capacity),
            "passed_over_untraced_rows": self.order.untraced_rows,
            "untraced_transactions_needed": self.order.aborts_needed,
            "claim_hold_s": round(self.order.hold, 3),
            "fault_events": self.fresh.faults.events,
        }
        r.drains_judged = 0 if r.capture_gaps else len(self.ledger.terms)  # a gap may hide a claim
        for node, n in sorted(self._late_claims.items()):
            after, lsn = self._late_first[node]
            r.claims_after_term.append(
                f"P11 node {node} committed claims (up to {n} row(s)) after its own SIGTERM: the first "
                f"{after:.1f} s after the signal (LSN {lsn_str(lsn)}) — on SIGTERM producers stop claiming first "
                "(operations guide, PROTOCOL §1)"
            )

    def compare(self, final: State) -> list[str]:
        """Streamed both ways (no set of every key): each row held against the snapshot's, then each
        snapshot row the validation does not hold."""
        w = self.world

        def by_job(d: SpillDict) -> Iterable[tuple[Any, Any]]:
            return (((j, n), row) for j, by in d.items() for n, row in by.items())

        def held(attr: str, k: Any) -> bool:
            if attr in ("steps", "events"):
                return k[1] in getattr(w, attr).get(k[0], {})
            return k in getattr(w, attr)

        mine: dict[str, Iterable[tuple[Any, Any]]] = {
            "jobs": w.jobs.items(),
            "steps": by_job(w.steps),
            "events": by_job(w.events),
            "signals": w.signals.items(),
            "rate": w.rate.items(),
            "queues": w.queues.items(),
            "crons": w.crons.items(),
        }
        diff = []
        for attr, have in mine.items():
            theirs = getattr(final, attr)
            for k, row in have:
                if not _rows_equal(row, theirs.get(k)):
                    diff.append(f"{attr} {k!r}")
            diff += [f"{attr} {k!r}" for k in theirs if not held(attr, k)]
        return sorted(diff)


def validate(
    transactions: Iterable[Transaction],
    ledger_path_or_obj: Any = None,
    initial_state: State | None = None,
    taint: set[int] | frozenset[int] = frozenset(),
    final_state: State | None = None,
    hot: int = HOT,
) -> RefinementResult:
    """Validate a captured history against the model; see the module docstring."""
    t0, c0 = time.perf_counter(), time.process_time()
    v = Validator(initial_state, HarnessLedger.load(ledger_path_or_obj), set(taint), hot=hot)
    try:
        for tx in transactions:
            v.step(tx)
        v.finish_duties()
        r = v.result
        if final_state is not None:
            r.snapshot_diff = v.compare(final_state)
            r.matches_snapshot = not r.snapshot_diff
    finally:
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


def validate_run_dir(run_dir: Path, ledger: bool = True) -> RefinementResult:
    """Trace validation of a soak's report folder: history.bin from history-initial.pickle, ended in
    history-final.pickle, harness writes attested by history.jsonl (what the soak hook can call)."""
    from soak.commits.replay import load_state
    from soak.commits.spill import disk_table

    run_dir = Path(run_dir)
    initial = run_dir / "history-initial.pickle"
    final = run_dir / "history-final.pickle"
    return validate(
        read_transactions(run_dir / "history.bin"),
        run_dir if ledger else None,
        load_state(initial) if initial.exists() else None,
        final_state=load_state(final, big=disk_table) if final.exists() else None,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m soak.commits.refine", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, help="a soak report folder holding history.bin")
    p.add_argument("--no-ledger", action="store_true", help="do not require client cancels/signals to be recorded")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    result = validate_run_dir(args.run_dir, ledger=not args.no_ledger)
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


if __name__ == "__main__":
    main()
