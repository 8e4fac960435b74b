"""What trace validation (soak/judges/refine/) reports — a finding, the run's `RefinementResult` — and the
bounds it judges with (the §2 clock rule's SKEW and LAG, the candidate and finding caps).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from soak.judges.replay import TABLE_ATTR
from soak.record.pgoutput import lsn_str

# Contract §2 clock rule: "Keep worker clocks within a few seconds of true time (NTP); leases and windows
# tolerate small skew." A few seconds: a `now` may run ahead of the commit time by at most SKEW.
SKEW = timedelta(seconds=5)
# A `now` is taken before the transaction commits: a SIGSTOP, a stall or a database crash-restart between
# the two makes it older than the commit by the stall (the soak stops nodes for up to --stop-for, 15 s by
# default, and zombie stops last until a later attempt journals). Bounded generously; reported per run.
# Issue 51: where the rows name the writing node, its lag is judged per node (soak/judges/timing/):
# beyond 5 s only that node's own faults excuse it, each by its duration; LAG stays the bound for the rest.
LAG = timedelta(seconds=300)
HARNESS_NODE = "soak-harness"  # soak/workload/scenarios.py _finish_children_silently
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
    by_kind: Counter[str] = field(default_factory=Counter)  # explained operations by kind
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
    admission_claims: Counter[str] = field(default_factory=Counter)  # queue → explained claims under §6 admission
    # issue 51: judges of order and time (soak/judges/timing/)
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

    def to_json(self) -> dict[str, Any]:
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


CLAIM_SETTLE = 1.5  # s: a claim in flight at a SIGTERM has committed this long after it (soak/judges/duties/)
NOW_SLACK = 1.0  # s: a claim's `now` this far past the SIGTERM was built after it (node clock offsets < 0.6 s)
