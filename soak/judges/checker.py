"""The soak checker: a pure function of the database snapshot, the ledger and the fault log.

    result = check(state, ledger, history)      # state: model.state.State (impl.store.snapshot.snapshot)
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

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from model.state import State
from soak.judges.duties.evidence import Evidence
from soak.judges.inputs import INVARIANTS as INVARIANTS
from soak.judges.inputs import RESULT_TOKENS as RESULT_TOKENS
from soak.judges.inputs import CheckResult as CheckResult
from soak.judges.inputs import LedgerEntry as LedgerEntry
from soak.judges.inputs import LedgerRows as LedgerRows
from soak.judges.inputs import Observation as Observation
from soak.judges.inputs import SoakLedger as SoakLedger
from soak.judges.inputs import StepsByJob as StepsByJob
from soak.judges.inputs import Timeline as Timeline
from soak.judges.inputs import UniqueAttempt as UniqueAttempt
from soak.judges.inputs import _ts as _ts
from soak.judges.invariants_jobs import IDLE_S as IDLE_S
from soak.judges.invariants_jobs import _i1, _i2, _i3, _i4
from soak.judges.invariants_jobs import _idle_end_of_drain as _idle_end_of_drain
from soak.judges.invariants_links import _i5, _i6, _i7, _i8, _i9
from soak.judges.invariants_links import expected_cron_slots as expected_cron_slots
from soak.judges.verdicts import InvariantResult, _last_error, _matches

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
    (soak/judges/refine/: `drains_judged`, `claims_after_term` for P11), None without a history.
    `samples`: the lease and priority samples when `history` leaves them out (a stream: the soak reads
    them from history.jsonl once, into disk-backed series — issue 27)."""
    from soak.judges import duties as d

    ev = d.Evidence(history, _ttl(history), samples)
    try:
        return _check(state, ledger, history, committed, ev)
    finally:
        ev.close()


def _ttl(history: Sequence[Mapping[str, Any]]) -> float:
    run = next((e for e in history if e.get("type") == "run_start"), {})
    return float(run.get("lease_ttl", 10))


def _check(
    state: State,
    ledger: SoakLedger,
    history: Sequence[Mapping[str, Any]],
    committed: Mapping[str, Any] | None,
    ev: Evidence,
) -> CheckResult:
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
    # a node's clock may run ahead or behind (BELAY_CLOCK_OFFSET is any float): either way its stamps are off by
    # up to |offset|, which I8 allows between a parent's and its children's finish
    skew = max([0.0] + [abs(float(e.get("seconds") or 0)) for e in history if e.get("type") == "clock_skew"])
    _i8(results["I8"], state, by_id, steps, skew)
    _i9(results["I9"], state, by_id, drained)
    from soak.judges.durability import check_durability  # issue 13: D1, committed work survives failover (if any ran)

    durability = check_durability(state, history)
    if durability is not None:
        results[durability.name] = durability
    duties, coverage = _duties_and_coverage(results, state, ledger, ev, timeline, by_id, steps, committed)

    for r in (*results.values(), *duties.values()):
        r.finish()
    from soak.judges import coverage as cov

    cov.finish_table(coverage, {**results, **duties})
    verdicts = {r.verdict for r in (*results.values(), *duties.values())}
    verdict = "invalid" if "invalid" in verdicts else "unknown" if "unknown" in verdicts else "valid"
    kinds: defaultdict[str, int] = defaultdict(int)
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


def _duties_and_coverage(
    results: dict[str, InvariantResult],
    state: State,
    ledger: SoakLedger,
    ev: Evidence,
    timeline: Timeline,
    by_id: Mapping[int, LedgerEntry],
    steps: StepsByJob,
    committed: Mapping[str, Any] | None = None,
) -> tuple[dict[str, InvariantResult], list[dict[str, Any]]]:
    """The worker duties (soak/judges/duties/) and the scenario coverage (soak/judges/coverage.py) of every row."""
    from soak.judges import coverage as cov
    from soak.judges import duties as d

    duties = {name: InvariantResult(name, contract=text) for name, text in d.DUTIES.items()}
    d.p1_stays_up(duties["P1"], ledger, ev, timeline)
    d.p2_renews_leases(duties["P2"], state, ev, timeline)
    d.p3_cancel_at_park(duties["P3"], state, ev)
    d.p4_drains(duties["P4"], state, ev, timeline, ledger, steps)
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
        # issue 51: claim order within a priority, judged from the committed claims (soak/judges/timing/);
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
