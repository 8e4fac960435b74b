"""The soak checker: a pure function of the database snapshot, the ledger and the fault log.

    result = check(state, ledger, history)      # state: model.state.State (impl.snapshot.snapshot)
    result.verdict in ("valid", "invalid", "unknown"); result.exit_code in (0, 1, 2)

Inputs (all plain values, nothing is read here):
  * `state` — one REPEATABLE READ snapshot of the Belay tables after the drain;
  * `ledger` — what the driver wrote in the same transactions as its enqueues (`soak_ledger`,
    `soak_unique`) and what workers observed (`soak_observations`), see PROTOCOL.md §4;
  * `history` — the harness's event log (JSON objects with an epoch-seconds `t` and a `type`):
    faults with their times (worker start/kill/exit/stop/cont, database crash/restart), phases, cron
    registration, signals and cancels the driver sent, periodic step-journal samples, the drain end.

Each §11 invariant is checked with the model's predicates (model/invariants.py) where they fit, plus
soak-specific rules that turn the soak kinds' evidence (results that embed their attempt and the step
values they saw, pre-ack observations, lease events) into checks from data. Every invariant ends
`valid` (checked, held, and the scenario that could break it happened), `invalid` (counterexamples,
first ones named) or `unknown` (not decidable, or not exercised in this run) — never a vacuous valid.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from model import invariants as inv
from model.rows import Job
from model.state import State, in_key_order
from soak.verdicts import InvariantResult, _digest, _last_error, _matches, _result, _value

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
    """A long run's ledger entries kept in a disk-backed table keyed by job id (soak/ledger.py `read` with
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
    duties: dict[str, InvariantResult] = field(default_factory=dict)  # P1 … (soak/duties.py)
    coverage: list[dict[str, Any]] = field(default_factory=list)  # soak/coverage.py table

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
        self.slot_of: dict[str, int] = {}  # issue 13: network faults isolate a worker *slot* (all incarnations)
        self.isolated: dict[int, list[list[float]]] = defaultdict(list)
        self.slowed: dict[int, list[list[float]]] = defaultdict(list)  # injected latency, per slot
        self.cuts: list[list[Any]] = []
        self.end = max((float(e["t"]) for e in history), default=0.0)
        for e in sorted(history, key=lambda e: float(e["t"])):
            t, kind, node = float(e["t"]), e.get("type"), e.get("node")
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
            # --- issue 13: partitions / stalls of a worker's route; failovers (soak/netfaults.py) ---
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

    def covered(self, t0: float, t1: float, step: float = 0.5) -> float:
        """Seconds of [t0, t1] during which some worker was alive and running and the database up."""
        total, t = 0.0, t0
        while t < t1:
            if not self.db_down_during(t, t) and any(self.node_ran(n, t, t) for n in self.started):
                total += step
            t += step
        return total


# --- helpers ------------------------------------------------------------------------------------------


# --- the check ----------------------------------------------------------------------------------------


def check(
    state: State,
    ledger: SoakLedger,
    history: Sequence[Mapping[str, Any]],
    committed: Mapping[str, Any] | None = None,
    samples: Iterable[Mapping[str, Any]] = (),
) -> CheckResult:
    """Every §11 invariant over one post-drain snapshot, the ledger and the fault log.

    `committed`: what the trace validation of the committed history found for the duties it judges
    (soak/commits/refine.py: `drains_judged`, `claims_after_term` for P11), None without a history.
    `samples`: the lease and priority samples when `history` leaves them out (a stream: the soak reads
    them from history.jsonl once, into disk-backed series — issue 27)."""
    from soak import duties as d

    ev = d.Evidence(history, _ttl(history), samples)
    try:
        return _check(state, ledger, history, committed, ev)
    finally:
        ev.close()


def _ttl(history: Sequence[Mapping[str, Any]]) -> float:
    run = next((e for e in history if e.get("type") == "run_start"), {})
    return float(run.get("lease_ttl", 10))


def _check(state, ledger, history, committed, ev) -> CheckResult:
    results = {name: InvariantResult(name) for name in INVARIANTS}
    timeline = Timeline(history)
    drain = next((e for e in reversed(history) if e.get("type") == "drain_end"), None)
    drained = bool(drain and drain.get("drained"))
    snapshot_t = next((float(e["t"]) for e in reversed(history) if e.get("type") == "snapshot"), timeline.end)
    ttl = ev.ttl
    by_id = ledger.by_id()
    steps = StepsByJob(state.steps)

    _i1(results["I1"], state, ledger, by_id, steps, timeline, drained, snapshot_t, ttl, history, ev)
    _i2(results["I2"], state, ledger)
    _i3(results["I3"], state, history, steps)
    _i4(results["I4"], state, by_id, steps)
    _i5(results["I5"], state, by_id)
    _i6(results["I6"], state, history, timeline)
    _i7(results["I7"], state, ledger)
    skew = max([0.0] + [float(e.get("seconds") or 0) for e in history if e.get("type") == "clock_skew"])
    _i8(results["I8"], state, by_id, steps, skew)
    _i9(results["I9"], state, by_id, drained)
    from soak.failover import check_durability  # issue 13: D1, committed work survives failover (if any ran)

    durability = check_durability(state, history)
    if durability is not None:
        results[durability.name] = durability
    duties, coverage = _duties_and_coverage(results, state, ledger, ev, timeline, by_id, steps, committed)

    for r in (*results.values(), *duties.values()):
        r.finish()
    from soak import coverage as cov

    cov.finish_table(coverage, {**results, **duties})
    verdicts = {r.verdict for r in (*results.values(), *duties.values())}
    verdict = "invalid" if "invalid" in verdicts else "unknown" if "unknown" in verdicts else "valid"
    kinds = defaultdict(int)
    for e in ledger.entries:
        kinds[e.kind] += 1
    mismatched = [
        e.job_id
        for e in ledger.entries
        if e.job_id in state.jobs and state.jobs[e.job_id].terminal and not _matches(e.expected, state.jobs[e.job_id])
    ]
    stats = {
        "jobs_in_database": len(state.jobs),
        "ledger_jobs": len(ledger.entries),
        "ledger_by_kind": dict(kinds),
        "jobs_checked": len(state.jobs),
        "steps": len(state.steps),
        "signals": len(state.signals),
        "drained": drained,
        "observations": len(ledger.observations),
        "unique_attempts": len(ledger.unique),
        "outcome_mismatches": len(mismatched),
        "worker_exits": _exits(ledger, history),
        "outcome_mismatch_examples": [
            f"job {i} ({by_id[i].kind}) expected {by_id[i].expected}, ended {state.jobs[i].state}"
            f"{' ' + str(_last_error(state.jobs[i])) if state.jobs[i].errors else ''}"
            for i in mismatched[:5]
        ],
    }
    return CheckResult(verdict, results, stats, duties, coverage)


def _exits(ledger: SoakLedger, history: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Worker self-exits (history `worker_exit`): deliberate — its node recorded an `exit` observation (a job
    kind asked it to exit, PROTOCOL.md) — or other. Neither kind is an injected fault."""
    asked = {o.node for o in ledger.observations if o.phase == "exit"}
    deliberate = other = 0
    for e in history:
        if e.get("type") == "worker_exit":
            if e.get("node") in asked:
                deliberate += 1
            else:
                other += 1
    return {"deliberate": deliberate, "other": other}


def _duties_and_coverage(results, state, ledger, ev, timeline, by_id, steps, committed=None):
    """The worker duties (soak/duties.py) and the scenario coverage (soak/coverage.py) of every row."""
    from soak import coverage as cov
    from soak import duties as d

    duties = {name: InvariantResult(name, contract=text) for name, text in d.DUTIES.items()}
    d.p1_stays_up(duties["P1"], ledger, ev, timeline)
    d.p2_renews_leases(duties["P2"], state, ev, timeline)
    d.p3_cancel_at_park(duties["P3"], state, ev)
    d.p4_drains(duties["P4"], state, ev, timeline, ledger)
    extra = {
        "priority_contention": d.p5_priority(duties["P5"], ev, timeline),
        "cron_jobs": d.p6_crons(duties["P6"], state),
        "sleeps_resumed": d.p7_sleeps(duties["P7"], state, by_id, steps),
    }
    d.p8_attempts(duties["P8"], state, by_id)
    d.p9_outcomes(duties["P9"], state, ledger)
    extra["crossings_acked"] = d.p19_crossing_fails(duties["P19"], state, steps)  # issue 51
    extra["slow_attempts"] = d.p20_evidence(duties["P20"], state, ledger, steps)  # issue 51
    extra["parents_parked"] = d.p10_children_signal(duties["P10"], state, ev, timeline)
    extra.update(d.later_duties(duties, state, ledger, ev, timeline, steps, committed))  # P11–P17 (issue 30)
    if committed:  # P11 from the committed claims: every SIGTERMed node, however fast its drain
        # issue 51: a capture gap may hide a claim — a claim after a SIGTERM, a claim past an admission
        # limit — so a history with gaps exercises none of the duties it feeds (P11, P18): their findings
        # stand, their scenario counts do not (refine.py says so too; this does not rely on it)
        gaps = int(committed.get("capture_gaps") or 0)
        judged = 0 if gaps else int(committed.get("drains_judged") or 0)
        duties["P11"].checks += judged
        extra["drains_sampled"] = extra.get("drains_sampled", 0) + judged
        for line in committed.get("claims_after_term") or ():
            duties["P11"].add([line])
        # issue 51: claim order within a priority, judged from the committed claims (soak/commits/timing.py);
        # a history with capture gaps judges no claim order (its findings stand, its count does not)
        timing = committed.get("timing") or {}
        duties["P5"].checks += 0 if gaps else int(timing.get("claims_order_judged") or 0)
        extra["claim_choice"] = 0 if gaps else int(timing.get("claims_with_choice") or 0)
        for line in committed.get("claim_order") or ():
            duties["P5"].add([line])
        admitted = {} if gaps else (committed.get("admission_claims") or {})
        if "P18" in duties:
            duties["P18"].checks += sum(admitted.values())
        extra["admission_claims"] = sum(admitted.values())
        if gaps:
            for name in ("P11", "P18"):
                if name in duties:
                    duties[name].notes.append(
                        f"the committed history has {gaps} capture gap(s): its claims exercise nothing here"
                    )
    for r in results.values():
        extra.update(r.scenario)
    for r in duties.values():
        r.exercised = True  # then unknown unless coverage.apply finds every scenario
    counts = cov.scenario_counts(state, ledger, ev, extra)
    table = cov.apply({**results, **duties}, counts)
    return duties, table


# --- I1 -------------------------------------------------------------------------------------------------


IDLE_S = 10.0  # the reference's idle poll ceiling is 0.5 s (§9.1): twenty of them without a claim


def _idle_end_of_drain(history, timeline, ev=None) -> tuple[float, list[str]] | None:
    """(window start, nodes that ran) when the drain ended unfinished and every lease sample of its last
    IDLE_S seconds (at least 5 of them) saw no running row, with a worker running and the database up."""
    drain = next((e for e in reversed(history) if e.get("type") == "drain_end"), None)
    if drain is None or drain.get("drained"):
        return None
    t1 = float(drain["t"])
    t0 = t1 - IDLE_S
    if ev is not None:  # the run's samples on disk: IDLE_S of them, a few dozen
        samples = [e for _at, e in ev.series["lease_sample"].between(t0, t1)]
    else:
        samples = [e for e in history if e.get("type") == "lease_sample" and t0 <= float(e.get("at", e["t"])) <= t1]
    if len(samples) < 5 or any(e.get("rows") for e in samples) or timeline.db_down_during(t0, t1):
        return None
    ran = sorted(n for n in timeline.started if timeline.node_ran(n, t0, t1))
    return (t0, ran) if ran else None


def _i1(r, state, ledger, by_id, steps, timeline, drained, snapshot_t, ttl, history=(), ev=None) -> None:
    expected = set(by_id)
    declared = set()
    for (_, name), s in state.steps.items():
        if name.startswith(inv.SPAWN_STEP):
            ids = _value(s)
            if isinstance(ids, list):
                declared.update(i for i in ids if isinstance(i, int))
    crons = {j.id for j in state.jobs.values() if j.cron_name is not None}
    expected |= declared | crons
    r.checks += len(expected)
    r.add(inv.i1_no_job_lost(state, expected, drained=False))
    stuck, pending = [], []
    for job_id in sorted(expected):
        job = state.jobs.get(job_id)
        if job is None or job.terminal:
            continue
        due = lambda t: t is None or t.timestamp() <= snapshot_t  # noqa: E731
        if (
            (job.state == "ready" and not due(job.ready_at))
            or (job.state == "running" and not due(job.lease_until))
            or (job.state == "awaiting" and job.ready_at is not None and not due(job.ready_at))
        ):
            pending.append(job_id)
        else:
            stuck.append(job)
    # An unfinished drain (timed out, or cut short) left these jobs behind: their end was not observed, so
    # they are unknown, not violations — only after a drain that completed is a job stuck (issue 27).
    left = [] if drained else stuck
    stuck = stuck if drained else []
    # An unfinished drain whose last IDLE_S seconds every lease sample saw no running row at all, while a
    # worker ran and the database was up: a ready job due through that window was not claimed by anyone —
    # no overload explains it (nothing ran); the polling floor did not fire (§9). A violation, not unknown.
    idle = _idle_end_of_drain(history, timeline, ev)
    if idle is not None:
        for job in list(left):
            due_t = (job.ready_at or job.inserted_at).timestamp() if (job.ready_at or job.inserted_at) else 0.0
            if job.state == "ready" and due_t <= idle[0]:
                left.remove(job)
                r.add(
                    [
                        inv.Violation(
                            "I1",
                            job.id,
                            f"is ready and due (ready_at {job.ready_at}) yet unclaimed through the last "
                            f"{IDLE_S:.0f} s of the drain, while node(s) {', '.join(idle[1])} ran and held no lease "
                            "at all (lease samples): nothing polled for it (§9: polling is the correctness floor)",
                        )
                    ]
                )
    for job in stuck:
        r.add(
            [
                inv.Violation(
                    "I1",
                    job.id,
                    f"is {job.state} (ready_at {job.ready_at}, lease_until {job.lease_until}) "
                    "after the drain although nothing it waits for is pending: it was never run to the end",
                )
            ]
        )
    unknown = []
    if left:
        states = defaultdict(int)
        for job in left:
            states[job.state] += 1
        unknown.append(
            f"the drain did not finish: {len(left)} job(s) were left non-terminal "
            f"({', '.join(f'{k} {v}' for k, v in sorted(states.items()))}; e.g. {[j.id for j in left[:5]]})"
        )
    if pending:
        unknown.append(
            f"{len(pending)} job(s) were still waiting for a future deadline or a live lease when the "
            f"drain ended (e.g. {pending[:5]})"
        )
    if unknown:
        r.why_unknown = "; ".join(unknown) + ": their end was not observed"
        r.notes.append(r.why_unknown)
    elif not drained and not stuck:
        r.notes.append("the drain did not report completion, but every expected job is terminal in the snapshot")
    # Lease renewal (§6): a `slow` attempt must not lose its lease while its node was alive, running and the
    # database up — otherwise live work is taken away and, attempts exhausted, lost.
    for (job_id, _seq), ev in state.events.items():
        p = ev.payload
        if not (isinstance(p, Mapping) and p.get("phase") == "start"):
            continue
        job = state.jobs.get(job_id)
        if job is None:
            continue
        t0 = ev.inserted_at.timestamp()
        for e in job.errors:
            if isinstance(e, Mapping) and e.get("error") == "lease_expired" and e.get("attempt") == p.get("attempt"):
                t1 = _ts(e["at"])
                r.checks += 1
                node = p.get("node")
                # blamed only when the node held the attempt for at least half a ttl (a renewal was due)
                if (
                    node
                    and t1 - t0 >= ttl / 2
                    and timeline.node_ran(node, t0, t1)
                    and not timeline.db_down_during(t0 - 1, t1)
                ):
                    r.add(
                        [
                            inv.Violation(
                                "I1",
                                job_id,
                                (
                                    f"attempt {p.get('attempt')} lost its lease (lease_expired at {e['at']}) while node {node} "
                                    f"was alive, not stopped, and the database up for the whole {t1 - t0:.1f}s since the attempt "
                                    f"started (lease ttl {ttl}s): its leases were not renewed"
                                ),
                            )
                        ]
                    )
    r.exercised = bool(expected) and (drained or not pending) and not left
    if not ledger.entries:
        r.why_unknown = "the ledger is empty"


# --- I2 -------------------------------------------------------------------------------------------------


def _i2(r, state, ledger) -> None:
    missing_attempt = 0
    for job in in_key_order(state.jobs):
        attempts = [e.get("attempt") for e in job.errors if isinstance(e, Mapping)]
        r.checks += 1
        for a, b in itertools.pairwise(attempts):
            if not (isinstance(a, int) and isinstance(b, int) and b > a):
                r.add(
                    [
                        inv.Violation(
                            "I2",
                            job.id,
                            f"attempt {b} ended twice (errors {attempts}): an ack of an attempt "
                            "that had already ended (reclaimed) mutated the row",
                        )
                    ]
                )
                break
        if job.state != "succeeded":
            continue
        result = _result(job)
        if not (isinstance(result, Mapping) and isinstance(result.get("attempt"), int)):
            missing_attempt += 1
            continue
        if result["attempt"] != job.attempt:
            r.add(
                [
                    inv.Violation(
                        "I2",
                        job.id,
                        (
                            f"succeeded with the result of attempt {result['attempt']} while the row is at attempt {job.attempt}: "
                            "a stale attempt's ack finished the job"
                        ),
                    )
                ]
            )
        elif attempts and isinstance(attempts[-1], int) and attempts[-1] >= job.attempt:
            r.add(
                [
                    inv.Violation(
                        "I2",
                        job.id,
                        f"succeeded by attempt {job.attempt}, which had already ended with "
                        f"{job.errors[-1].get('error')!r}: a stale ack mutated the row",
                    )
                ]
            )
    pre = {(o.job_id, o.attempt): o for o in ledger.observations if o.phase == "pre_ack"}
    acks = {(o.job_id, o.attempt): o for o in ledger.observations if o.phase == "ack"}
    stale_seen = sum(1 for o in acks.values() if o.observed.get("state") == "stale")
    moved_on = 0
    for key, o in sorted(pre.items()):
        seen = o.observed
        if seen.get("state") == "running" and seen.get("attempt") == o.attempt:
            continue
        moved_on += 1
        ack = acks.get(key)
        r.checks += 1
        if ack is not None and ack.observed.get("state") != "stale":
            r.add(
                [
                    inv.Violation(
                        "I2",
                        o.job_id,
                        (
                            f"attempt {o.attempt} on node {o.node} saw the row already {seen.get('state')} at attempt "
                            f"{seen.get('attempt')} (leased by {seen.get('leased_by')}), yet its ack was applied "
                            f"(→ {ack.observed.get('state')}) instead of being stale"
                        ),
                    )
                ]
            )
    r.notes.append(
        f"{stale_seen} stale ack(s) observed by workers; {moved_on} attempt(s) came back after their job had moved on"
    )
    if missing_attempt:
        r.notes.append(
            f"{missing_attempt} succeeded job(s) carry no 'attempt' in their result (PROTOCOL.md §2): "
            "their final ack could not be attributed"
        )
    r.scenario["stale_acks"] = stale_seen + moved_on
    r.exercised = stale_seen + moved_on > 0
    if not r.exercised:
        r.why_unknown = "no stale ack happened (no attempt came back after its lease was reclaimed)"


# --- I3 -------------------------------------------------------------------------------------------------


def _i3(r, state, history, steps) -> None:
    r.add(inv.i3_one_row_per_step(state.steps.values()))
    r.add(inv.i3_steps_immutable([state]))
    r.checks += len(state.steps)
    # Immutability over time: periodic samples of (seq, md5(value)) against later samples and the end.
    first: dict[tuple[int, str], tuple[int, str]] = {}
    samples = 0
    # a sample taken after the snapshot (the driver's sampler still runs) may see steps the snapshot predates
    taken = min((float(e["t"]) for e in history if e.get("type") == "snapshot"), default=float("inf"))
    for e in history:
        if e.get("type") != "step_sample" or float(e.get("t", 0)) > taken:
            continue
        samples += 1
        for job_id, name, seq, digest in e.get("rows", ()):
            key = (int(job_id), name)
            if key in first and first[key] != (seq, digest):
                r.add(
                    [
                        inv.Violation(
                            "I3",
                            key[0],
                            f"step {name!r} changed after it was journaled (seq/md5 {first[key]} → {(seq, digest)})",
                        )
                    ]
                )
            first.setdefault(key, (seq, digest))
    for key, (seq, digest) in first.items():
        s = state.steps.get(key)
        if s is None:
            if key[0] in state.jobs:
                r.add([inv.Violation("I3", key[0], f"step {key[1]!r} vanished while its job still exists")])
        elif (s.seq, _digest(s.value)) != (seq, digest):
            r.add([inv.Violation("I3", key[0], f"step {key[1]!r} changed after it was journaled")])
    r.checks += len(first)
    # Results consistent with the journal: every token a result lists is the journaled one, journaled
    # no later than the ack that finished the job.
    replayed = 0
    for job in in_key_order(state.jobs):
        if job.state != "succeeded":
            continue
        result = _result(job)
        if not isinstance(result, Mapping):
            continue
        if job.worker in RESULT_TOKENS and isinstance(result.get("tokens"), list):
            names = RESULT_TOKENS[job.worker](job, result)
            pairs = list(zip(names, result["tokens"], strict=False))
            if len(result["tokens"]) != len(names):
                r.add(
                    [
                        inv.Violation(
                            "I3",
                            job.id,
                            f"result lists {len(result['tokens'])} step values, its input declares {len(names)}",
                        )
                    ]
                )
        elif job.worker == "slow" and "token" in result:
            pairs = [("begin", result["token"])]
        else:
            continue
        job_replayed = False
        for name, tok in pairs:
            r.checks += 1
            s = steps[job.id].get(name)
            if s is None:
                r.add(
                    [
                        inv.Violation(
                            "I3",
                            job.id,
                            f"result names step {name!r} = {tok!r} but the journal has no such "
                            "row: the job was acked before its step was journaled",
                        )
                    ]
                )
                continue
            value = _value(s)
            stored = value.get("token") if isinstance(value, Mapping) else value
            if stored != tok:
                r.add(
                    [
                        inv.Violation(
                            "I3",
                            job.id,
                            f"result saw {tok!r} for step {name!r} but the journal holds "
                            f"{stored!r}: a journaled step was executed again",
                        )
                    ]
                )
            elif job.finished_at is not None and s.inserted_at > job.finished_at:
                r.add(
                    [
                        inv.Violation(
                            "I3",
                            job.id,
                            (
                                f"step {name!r} was journaled at {s.inserted_at.isoformat()}, after the job finished at "
                                f"{job.finished_at.isoformat()}: the ack did not wait for the step journal to commit"
                            ),
                        )
                    ]
                )
            if isinstance(value, Mapping) and isinstance(value.get("attempt"), int) and value["attempt"] < job.attempt:
                job_replayed = True
        replayed += job_replayed
    r.notes.append(
        f"{replayed} succeeded job(s) replayed journaled steps from an earlier attempt; "
        f"{samples} journal sample(s) compared over time"
    )
    r.scenario["replays"] = replayed
    r.exercised = replayed > 0
    if not r.exercised:
        r.why_unknown = "no job replayed a journaled step (no multi-step job was retried after journaling)"


# --- I4 -------------------------------------------------------------------------------------------------


def _i4(r, state, by_id, steps) -> None:
    r.add(inv.i4_budget_fails_on_crossing_step(state))
    crossed = 0
    for job in state.jobs.values():
        r.checks += 1
        entry = by_id.get(job.id)
        if entry is None or entry.kind != "costed":
            continue
        want = entry.detail.get("crossing")
        names = [s.name for s in sorted(steps[job.id].values(), key=lambda s: s.seq)]
        if want is not None and job.state == "failed" and _last_error(job) == "budget_exceeded":
            crossed += 1
            if names and names[-1] != want:
                r.add(
                    [
                        inv.Violation(
                            "I4",
                            job.id,
                            f"failed with budget_exceeded after step {names[-1]!r}; its costs "
                            f"cross the budget on step {want!r}",
                        )
                    ]
                )
        if want is None and job.state == "failed" and _last_error(job) == "budget_exceeded":
            r.add(
                [inv.Violation("I4", job.id, "failed with budget_exceeded although its costs never cross its budget")]
            )
    r.notes.append(f"{crossed} costed job(s) failed with budget_exceeded on their crossing step")
    r.scenario["crossings"] = crossed
    r.exercised = crossed > 0


# --- I5 -------------------------------------------------------------------------------------------------


def _i5(r, state, by_id) -> None:
    r.add(inv.i5_settlement_consistent(state, retried=frozenset()))
    workflows: dict[str, dict[str, Job]] = defaultdict(dict)
    for job in state.jobs.values():
        if job.workflow_id is not None and job.wf_name is not None:
            workflows[job.workflow_id][job.wf_name] = job
    dooms = releases_ignoring = 0
    for wf, members in sorted(workflows.items()):
        for name, job in sorted(members.items()):
            if not job.wf_deps:
                continue
            r.checks += 1
            deps = [members.get(d) for d in job.wf_deps]
            if any(d is None or not d.terminal for d in deps):
                continue
            ignore = set(job.wf_ignore or ())
            satisfied = all(d.state == "succeeded" or d.state in ignore for d in deps)
            driver_cancelled = bool(by_id.get(job.id) and by_id[job.id].detail.get("cancel"))
            if job.attempt > 0 and not satisfied:
                bad = [f"{d.wf_name}={d.state}" for d in deps if d.state != "succeeded" and d.state not in ignore]
                r.add(
                    [
                        inv.Violation(
                            "I5",
                            job.id,
                            f"member {name!r} of {wf!r} ran (attempt {job.attempt}) although "
                            f"its deps {bad} are not satisfied (ignore {sorted(ignore)})",
                        )
                    ]
                )
            if job.state == "cancelled" and job.attempt == 0 and not driver_cancelled:
                if satisfied:
                    r.add(
                        [
                            inv.Violation(
                                "I5",
                                job.id,
                                f"member {name!r} of {wf!r} was cancelled (doomed) although "
                                "every dep is satisfied and nobody cancelled it",
                            )
                        ]
                    )
                else:
                    dooms += 1
            if satisfied and ignore & {d.state for d in deps} and job.attempt > 0:
                releases_ignoring += 1
    r.notes.append(f"{dooms} doomed member(s) and {releases_ignoring} release(s) through an ignore flag checked")
    r.scenario.update(dooms=dooms, ignore_releases=releases_ignoring)
    r.exercised = dooms > 0 and releases_ignoring > 0


# --- I6 -------------------------------------------------------------------------------------------------


def expected_cron_slots(
    history: Sequence[Mapping[str, Any]], timeline: Timeline, min_cover: float = 5.0
) -> set[tuple[str, datetime]]:
    """Every-minute slots that were due while the cron was registered, not paused, and some worker was
    alive and running with the database up for at least `min_cover` seconds of the slot's minute."""

    registered: dict[str, float] = {}
    paused: dict[str, float] = {}
    for e in history:
        if e.get("type") == "cron_registered":
            registered[e["name"]] = float(e["t"])
        elif e.get("type") == "cron_paused":
            paused[e["name"]] = float(e["t"])
    slots = set()
    for name, t0 in registered.items():
        t_end = paused.get(name, timeline.end)
        s = (int(t0) // 60 + 1) * 60
        while s + 10 <= t_end:
            if timeline.covered(s, min(s + 60, t_end)) >= min_cover:
                slots.add((name, datetime.fromtimestamp(s, UTC)))
            s += 60
    return slots


def _i6(r, state, history, timeline) -> None:
    slots = expected_cron_slots(history, timeline)
    r.add(inv.i6_cron_slots_once(state, slots))
    r.checks += len(slots) + sum(1 for j in state.jobs.values() if j.cron_name is not None)
    r.notes.append(f"{len(slots)} cron slot(s) were due while a worker was alive")
    r.scenario["cron_slots"] = len(slots)
    r.exercised = bool(slots)


# --- I7 -------------------------------------------------------------------------------------------------


def _i7(r, state, ledger) -> None:
    r.add(inv.i7_unique_keys(state))
    groups: dict[int, list[UniqueAttempt]] = defaultdict(list)
    ever: dict[tuple[str, str], list[int]] = defaultdict(list)
    for a in ledger.unique:
        groups[a.grp].append(a)
        if a.outcome == "inserted" and a.job_id is not None and a.mode in ("always", "window"):
            job = state.jobs.get(a.job_id)
            ever[(a.mode, job.unique_key if job else a.key)].append(a.job_id)
    concurrent = 0
    for grp, attempts in sorted(groups.items()):
        r.checks += 1
        concurrent += len(attempts) > 1
        inserted = [a.job_id for a in attempts if a.outcome == "inserted"]
        if attempts[0].mode == "incomplete" and len(inserted) > 1:
            r.add(
                [
                    inv.Violation(
                        "I7",
                        inserted[1],
                        f"concurrent inserts of incomplete-mode key {attempts[0].key!r} "
                        f"(group {grp}) admitted {len(inserted)} live holders: {inserted}",
                    )
                ]
            )
    for (mode, key), ids in sorted(ever.items()):
        if len(ids) > 1:
            r.add([inv.Violation("I7", ids[1], f"{mode}-mode key {key!r} was admitted {len(ids)} times: {ids}")])
    r.checks += len(ever)
    r.notes.append(f"{len(groups)} unique-key insert group(s), {concurrent} with concurrent inserts")
    r.scenario["unique_groups"] = concurrent
    r.exercised = concurrent > 0


# --- I8 -------------------------------------------------------------------------------------------------


def _i8(r, state, by_id, steps, skew: float = 0.0) -> None:
    r.add(inv.i8_children_as_declared(state))
    kids: dict[int, list[Job]] = defaultdict(list)
    for j in state.jobs.values():
        if j.parent_id is not None:
            kids[j.parent_id].append(j)
    parents = 0
    for job in in_key_order(state.jobs):
        entry = by_id.get(job.id)
        if entry is None or entry.kind != "parent":
            continue
        spawn = steps[job.id].get(f"{inv.SPAWN_STEP}kids")
        r.checks += 1
        if spawn is None:
            if job.state == "succeeded":
                r.add([inv.Violation("I8", job.id, "succeeded without a journaled $spawn:kids step")])
            continue
        parents += 1
        declared = _value(spawn)
        want = int(job.input.get("children", 0))
        if not isinstance(declared, list) or len(declared) != want:
            r.add([inv.Violation("I8", job.id, f"spawn declared {declared!r}, the parent asked for {want} children")])
            continue
        actual = sorted(c.id for c in kids[job.id])
        if actual != sorted(declared):
            r.add([inv.Violation("I8", job.id, f"has children {actual} but its spawn declared {declared}")])
        if job.state == "succeeded":
            result = _result(job)
            if isinstance(result, Mapping) and result.get("children") != declared:
                r.add(
                    [
                        inv.Violation(
                            "I8",
                            job.id,
                            f"result lists children {result.get('children')}, the journal declares {declared}",
                        )
                    ]
                )
            # finished_at comes from the finishing node's clock: allow the run's configured clock skew
            late = [
                c.id
                for c in kids[job.id]
                if not c.terminal
                or (
                    c.finished_at and job.finished_at and c.finished_at.timestamp() > job.finished_at.timestamp() + skew
                )
            ]
            if late:
                r.add([inv.Violation("I8", job.id, f"finished before its children {late} were terminal")])
    r.notes.append(f"{parents} parent(s) with a journaled spawn checked")
    r.scenario["spawns"] = parents
    r.exercised = parents > 0


# --- I9 -------------------------------------------------------------------------------------------------


def _i9(r, state, by_id, drained) -> None:
    r.add(inv.i9_awaiters_eventually_run(state, quiescent=True))
    r.checks += sum(1 for j in state.jobs.values() if j.state == "awaiting") + len(state.signals)
    ran = 0
    for job in in_key_order(state.jobs):
        entry = by_id.get(job.id)
        if entry is None or entry.kind != "awaiter":
            continue
        signal = state.signals.get((f"job:{job.id}", job.input.get("signal")))
        r.checks += 1
        if signal is None:
            continue
        if job.state == "succeeded":
            result = _result(job)
            if isinstance(result, Mapping) and result.get("payload") != signal.payload:
                r.add(
                    [
                        inv.Violation(
                            "I9",
                            job.id,
                            f"ran with payload {result.get('payload')!r}, the delivered signal "
                            f"holds {signal.payload!r}",
                        )
                    ]
                )
            else:
                ran += 1
        elif job.state == "cancelled" and (entry.detail.get("cancel") or entry.expected == "cancelled"):
            continue  # cancelled on purpose (e.g. a cancel requested before its signal was sent)
        elif not (job.state == "failed" and _last_error(job) == "lease_expired"):
            r.add(
                [
                    inv.Violation(
                        "I9",
                        job.id,
                        f"is {job.state} although its signal {signal.name!r} was delivered at "
                        f"{signal.inserted_at.isoformat()}: the awaiter never ran to completion",
                    )
                ]
            )
    r.notes.append(f"{ran} awaiter(s) with a delivered signal ran with its payload")
    r.exercised = ran > 0


__all__ = [
    "INVARIANTS",
    "CheckResult",
    "InvariantResult",
    "LedgerEntry",
    "Observation",
    "SoakLedger",
    "Timeline",
    "UniqueAttempt",
    "check",
    "expected_cron_slots",
]
