"""What the replay (soak/judges/replay/) reports and how it reads rows: a judged transition, a finding, the
history's verdict (`HistoryResult`), the column conversions from pgoutput text to the model's row types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from impl.store.pgrows import job_from_row
from model.rows import CronRow, Event, QueueRow, RateWindow, Signal, Step
from soak.record.pgoutput import lsn_str

KEEP_TRANSITIONS = 12  # per job, for "preceding transitions" and the timeline
Row = dict[str, Any]  # a decoded pgoutput row: column → value


def _pick(cls: type[Any], row: Row) -> Any:
    return cls(**{f.name: row[f.name] for f in fields(cls)})


def _step(row: Row) -> Step:
    values = {f.name: row[f.name] for f in fields(Step)}
    values["value"] = bytes(values["value"])
    return Step(**values)


# table → (the row type from a decoded row, the row's key)
CONVERT: dict[str, tuple[Callable[[Row], Any], Callable[[Any], Any]]] = {
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
    related_jobs: frozenset[int] = field(default=frozenset(), repr=False, compare=False)
    related_rows: frozenset[tuple[str, Any]] = field(default=frozenset(), repr=False, compare=False)
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
    first: dict[str, Any] | None = None  # the first violating transaction, detailed
    capture: dict[str, Any] = field(default_factory=dict)
    matches_snapshot: bool | None = None
    snapshot_diff: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the replay
    cpu_seconds: float = 0.0  # CPU time of the replay (the machine may be shared)
    timelines: dict[int, list[Transition]] = field(default_factory=dict)  # selected jobs, for the report
    tainted: list[int] = field(default_factory=list)  # jobs a capture gap touched: not judged
    suppressed: int = 0  # findings about tainted jobs (or rows related to them), not reported
    # trace validation (soak/judges/refine/), set by soak.hook.merge: the soak's verdict
    rules_verdict: str | None = None  # this replay's own verdict before the merge
    refinement: dict[str, Any] | None = None
    refinement_line: str = ""
    refinement_findings: list[str] = field(default_factory=list)
    spill: dict[str, Any] = field(default_factory=dict)  # per map: entries in memory / on disk at the end (spill.py)

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

    def to_json(self) -> dict[str, Any]:
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
