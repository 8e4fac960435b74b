"""What the checker and the duty judges read: the ledger's rows, the fault log as a timeline, the result.

Plain values built by soak/workload/ledger.py (the soak tables) and soak/record/history.py (the fault log);
`check` (soak/judges/checker.py) fills a `CheckResult`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, cast

from model import invariants as inv
from soak.judges.verdicts import InvariantResult

INVARIANTS = tuple(inv.CONTRACT)  # I1 … I9
RESULT_TOKENS = {  # kind → the step names whose tokens its result lists, in order (PROTOCOL.md §3)
    "flaky": lambda job, result: ["pre", "mid"],
    "steps": lambda job, result: [f"s{i}" for i in range(1, int(job.input.get("n", 0)) + 1)],
    "costed": lambda job, result: [f"c{i}" for i in range(1, len(job.input.get("costs", [])) + 1)],
    "sleeper": lambda job, result: ["pre", "post"],
}


# --- inputs -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerEntry:
    """One soak_ledger row: a job the driver inserted, in the same transaction as the job."""

    job_id: int
    kind: str
    expected: str  # e.g. "succeeded", "failed:budget_exceeded", "cancelled|succeeded"
    inserted_at: datetime
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    """One soak_observations row written by a worker (pre_ack: the row it saw; ack: what its ack did)."""

    job_id: int
    attempt: int
    node: str | None
    phase: str
    observed: Mapping[str, Any]
    at: datetime


@dataclass(frozen=True)
class UniqueAttempt:
    """One soak_unique row: one of several concurrent inserts of the same unique key."""

    grp: int
    key: str
    mode: str
    outcome: str  # inserted | duplicate
    job_id: int | None
    at: datetime


class LedgerRows:
    """A long run's ledger entries kept in a disk-backed table keyed by job id (soak/workload/ledger.py `read` with
    `big`): iterated, counted and tested like the tuple a short run gets, in job-id order; `table` is the
    by-id lookup itself (issue 27: 400,000 entries and their by-id dicts were ~250 MiB of the check)."""

    def __init__(self, table: Mapping[int, LedgerEntry]) -> None:
        self.table = table

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(self.table.values())

    def __len__(self) -> int:
        return len(self.table)

    def __bool__(self) -> bool:
        return len(self.table) > 0


@dataclass(frozen=True)
class SoakLedger:
    entries: tuple[LedgerEntry, ...] | LedgerRows = ()
    observations: tuple[Observation, ...] = ()
    unique: tuple[UniqueAttempt, ...] = ()

    def by_id(self) -> Mapping[int, LedgerEntry]:
        """Each entry by its job id: the disk table of a long run's ledger, else a dict built here."""
        if isinstance(self.entries, LedgerRows):
            return self.entries.table
        return {e.job_id: e for e in self.entries}


class StepsByJob(Mapping[int, Mapping[str, Any]]):
    """A job's steps by name, read from the snapshot's steps table: a dict of every job's steps for a
    table in memory, a lookup per job for a disk-backed one (issue 27: nothing per job is built for jobs
    without steps; a missing job reads as no steps, as a defaultdict would, without adding an entry)."""

    _NONE: Mapping[str, Any] = MappingProxyType({})

    def __init__(self, steps: Mapping[tuple[int, str], Any]) -> None:
        self._at = getattr(steps, "rows_at", None)  # a DiskTable: the rows whose key starts with a job id
        self._by_job: dict[int, dict[str, Any]] = {}
        if self._at is None:
            for (job_id, name), s in steps.items():
                self._by_job.setdefault(job_id, {})[name] = s

    def __getitem__(self, job_id: int) -> Mapping[str, Any]:
        if self._at is not None:
            return {k[1]: s for k, s in self._at(job_id)} or self._NONE
        return self._by_job.get(job_id, self._NONE)

    def get(self, job_id: int, default: Any = None) -> Any:
        found = self[job_id]
        return found if found else default

    def __iter__(self) -> Iterator[int]:
        raise TypeError("StepsByJob is read by job id, not iterated")

    def __len__(self) -> int:
        raise TypeError("StepsByJob is read by job id, not counted")


# --- outputs ------------------------------------------------------------------------------------------


@dataclass
class CheckResult:
    verdict: str
    invariants: dict[str, InvariantResult]
    stats: dict[str, Any]
    duties: dict[str, InvariantResult] = field(default_factory=dict)  # P1 … (soak/judges/duties/)
    coverage: list[dict[str, Any]] = field(default_factory=list)  # soak/judges/coverage.py table

    @property
    def exit_code(self) -> int:
        return {"valid": 0, "invalid": 1}.get(self.verdict, 2)

    def first_counterexamples(self) -> list[str]:
        return [c for r in (*self.invariants.values(), *self.duties.values()) for c in r.counterexamples[:1]]

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "stats": self.stats,
            "invariants": {k: v.to_json() for k, v in self.invariants.items()},
            "duties": {k: v.to_json() for k, v in self.duties.items()},
            "coverage": self.coverage,
        }


# --- the fault log as intervals -----------------------------------------------------------------------


def _ts(value: datetime | float | str) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        return datetime.fromisoformat(value).timestamp()
    return float(value)


class Timeline:
    """Who was alive and running when, and when the database was down (from the history)."""

    def __init__(self, history: Sequence[Mapping[str, Any]]) -> None:
        self.started: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.stopped: dict[str, list[list[float]]] = defaultdict(list)
        self.db_down: list[list[float]] = []
        self.slot_of: dict[str, int | None] = {}  # issue 13: network faults isolate a worker *slot* (all incarnations)
        self.isolated: dict[int | None, list[list[float]]] = defaultdict(list)
        self.slowed: dict[int | None, list[list[float]]] = defaultdict(list)  # injected latency, per slot
        self.cuts: list[list[Any]] = []
        self.end = max((float(e["t"]) for e in history), default=0.0)
        for e in sorted(history, key=lambda e: float(e["t"])):
            t, kind = float(e["t"]), e.get("type")
            node = cast("str", e.get("node"))  # every worker_* event names its node
            if kind == "worker_start":
                self.started[node] = t
                self.slot_of[node] = e.get("slot")
            elif kind in ("worker_kill", "worker_exit", "worker_term", "worker_drain_term"):
                self.ended.setdefault(node, t)
            elif kind == "worker_stop":
                self.stopped[node].append([t, float("inf")])
            elif kind == "worker_cont" and self.stopped[node]:
                self.stopped[node][-1][1] = t
            elif kind == "db_crash":
                self.db_down.append([t, float("inf")])
            elif kind == "db_restarted" and self.db_down:
                self.db_down[-1][1] = t
            # --- issue 13: partitions / stalls of a worker's route; failovers (soak/faults/netfaults.py) ---
            elif kind in ("net_partition", "net_stall"):
                self.isolated[e["slot"]].append([t, float("inf")])
            elif kind == "net_heal" and e.get("fault") in ("partition", "stall") and self.isolated[e["slot"]]:
                self.isolated[e["slot"]][-1][1] = t
            elif kind == "net_latency":
                self.slowed[e["slot"]].append([t, float("inf")])
            elif kind == "net_heal" and e.get("fault") == "latency" and self.slowed[e["slot"]]:
                self.slowed[e["slot"]][-1][1] = t
            elif kind == "failover_begin":
                self.db_down.append([t, float("inf")])
            elif kind == "standby_ready" and self.db_down and self.db_down[-1][1] == float("inf"):
                self.db_down[-1][1] = t
            elif kind == "cut_start":  # a network cut of one node (node) or of all (node None)
                self.cuts.append([e.get("node"), t, float("inf")])
            elif kind == "cut_end":
                for c in reversed(self.cuts):
                    if c[0] == e.get("node") and c[2] == float("inf"):
                        c[2] = t
                        break

    def node_ran(self, node: str, t0: float, t1: float) -> bool:
        """Node was started before t0, not dead before t1, never SIGSTOPped during [t0, t1]."""
        if node not in self.started or self.started[node] > t0 or self.ended.get(node, float("inf")) < t1:
            return False
        if any(a <= t1 and b >= t0 for a, b in self.isolated.get(self.slot_of.get(node), ())):
            return False  # issue 13: its route was partitioned or stalled
        return not any(a <= t1 and b >= t0 for a, b in self.stopped.get(node, ()))

    def frozen_in_flight(self, since: float, t0: float, t1: float) -> bool:
        """A transaction begun after `since` may have held its row locks over [t0, t1] because of a fault,
        not of its own making: a node SIGSTOPped, or its route partitioned or stalled, after `since` and
        until t0 or later (its open transaction keeps what it locked before), or a route slowed by
        injected latency at any time from `since` to t1 (every statement of its transactions waits)."""
        frozen = [w for ws in self.stopped.values() for w in ws] + [w for ws in self.isolated.values() for w in ws]
        if any(since <= a <= t1 and b >= t0 for a, b in frozen):
            return True
        return any(a <= t1 and b >= since for ws in self.slowed.values() for a, b in ws)

    def db_down_during(self, t0: float, t1: float) -> bool:
        return any(a <= t1 and b >= t0 for a, b in self.db_down)

    def cut_during(self, node: str, t0: float, t1: float) -> bool:
        """A network cut of `node` (or of every node) overlapped [t0, t1] (history cut_start / cut_end)."""
        if any(a <= t1 and b >= t0 for a, b in self.isolated.get(self.slot_of.get(node), ())):
            return True  # issue 13's proxy partitioned or stalled this node's slot
        return any((n is None or n == node) and a <= t1 and b >= t0 for n, a, b in self.cuts)

    def route_held(self, node: str, t: float, now: float, settle: float) -> bool:
        """Could a fault of `node`'s route — a cut, a partition or stall, injected latency — have held, from
        before `t` until `now`, a claim decided before `t`? A fault window overlapping [t, now] that lasted
        until `settle` seconds before `now` or later (a claim the route let through reads its clock then)."""
        return any(a <= now and b >= t and b >= now - settle for a, b in self.route_windows(node))

    def route_windows(self, node: str) -> list[Sequence[float]]:
        """The faults of `node`'s route: its slot's partitions, stalls and injected latency, and the cuts
        of it or of every node."""
        slot = self.slot_of.get(node)
        return [
            *self.isolated.get(slot, ()),
            *self.slowed.get(slot, ()),
            *((a, b) for n, a, b in self.cuts if n is None or n == node),
        ]

    def covered(self, t0: float, t1: float, step: float = 0.5) -> float:
        """Seconds of [t0, t1] during which some worker was alive and running and the database up."""
        total, t = 0.0, t0
        while t < t1:
            if not self.db_down_during(t, t) and any(self.node_ran(n, t, t) for n in self.started):
                total += step
            t += step
        return total
