"""The soak checker (soak/judges/checker.py) on hand-built snapshots: a consistent run is valid, and each
invariant flags its own violation (and only reports `valid` when its scenario was exercised).

Pure and fast: no database. The baseline `Run` holds one job of every soak kind, a workflow, a cron,
a unique-key group and the fault log of two workers, one of which was SIGSTOPped past its lease.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from model.envelope import encode
from model.rows import Event, Job, Signal, Step
from model.state import from_rows
from soak.judges.checker import LedgerEntry, Observation, SoakLedger, UniqueAttempt, check
from tests.jobrows import EMPTY

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
E0 = T0.timestamp()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(id: int, worker: str = "echo", *, result: Any = None, **kw: Any) -> Job:
    base = dict(
        **EMPTY,
        id=id,
        queue="soak",
        worker=worker,
        input={},
        meta={},
        state="succeeded",
        priority=0,
        attempt=1,
        max_attempts=10,
        ready_at=at(0),
        inserted_at=at(0),
        started_at=at(1),
        finished_at=at(2),
    )
    base.update(kw)
    if result is None and base["state"] == "succeeded":
        result = {"echo": id, "attempt": base["attempt"]}
    base["result"] = None if result is None else encode(result)
    return Job(**base)


def step(job_id: int, seq: int, name: str, value: Any, *, usd: int = 0, t: float = 1.5) -> Step:
    return Step(job_id, seq, name, encode(value), usd, 0, at(t))


def err(attempt: int, error: str, t: float) -> dict:
    return {"attempt": attempt, "at": at(t).isoformat(), "error": error, "detail": None}


@dataclass
class Run:
    """A consistent soak run in miniature; tests break one thing and check the named invariant."""

    jobs: dict[int, Job] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)
    ledger: list[LedgerEntry] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    unique: list[UniqueAttempt] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)

    def add(self, j: Job, kind: str | None = None, expected: str = "succeeded", **detail: Any) -> None:
        self.jobs[j.id] = j
        if kind is not None:
            self.ledger.append(LedgerEntry(j.id, kind, expected, j.inserted_at, detail))

    def check(self, committed=None):
        state = from_rows(self.jobs.values(), self.steps, self.events, self.signals)
        ledger = SoakLedger(tuple(self.ledger), tuple(self.observations), tuple(self.unique))
        return check(state, ledger, self.history, committed)


def baseline() -> Run:
    r = Run()
    r.add(job(1), "echo")
    # steps: attempt 1 journaled s1, s2 then raised; attempt 2 replayed both.
    r.add(
        job(
            2,
            "steps",
            input={"n": 2, "raise_after": 2},
            attempt=2,
            errors=[err(1, "Planned", 1.8)],
            result={"tokens": ["a", "b"], "attempt": 2},
            finished_at=at(5),
        ),
        "steps",
    )
    r.steps += [step(2, 1, "s1", {"token": "a", "attempt": 1}), step(2, 2, "s2", {"token": "b", "attempt": 1})]
    # costed: budget 100, costs 60, 60, 10: crosses on c2 and fails there.
    # (attempt 1 crashed right after journaling the crossing step; attempt 2's pre-flight failed it)
    r.add(
        job(
            3,
            "costed",
            input={"costs": [60, 60, 10], "crash_at_crossing": True},
            state="failed",
            budget_usd_micros=100,
            attempt=2,
            spent_usd_micros=120,
            errors=[err(1, "lease_expired", 1.9), err(2, "budget_exceeded", 2)],
        ),
        "costed",
        "failed:budget_exceeded",
        crossing="c2",
    )
    r.steps += [
        step(3, 1, "c1", {"token": "x", "attempt": 1}, usd=60),
        step(3, 2, "c2", {"token": "y", "attempt": 1}, usd=60),
    ]
    # awaiter with a delivered signal
    # (parked once, so max_attempts 10 + 1: a wait spends no attempt, P15)
    r.add(
        job(
            4, "awaiter", input={"signal": "go"}, attempt=2, max_attempts=11, result={"payload": {"x": 1}, "attempt": 2}
        ),
        "awaiter",
    )
    r.signals.append(Signal("job:4", "go", {"x": 1}, at(1)))
    # parent with two spawned children
    r.add(
        job(
            5,
            "parent",
            input={"children": 2},
            result={"children": [6, 7], "attempt": 2},
            attempt=2,
            max_attempts=11,
            finished_at=at(9),
        ),
        "parent",
    )
    r.steps.append(Step(5, 1, "$spawn:kids", encode([6, 7]), 0, 0, at(1)))
    for i, cid in enumerate((6, 7)):
        r.add(job(cid, parent_id=5, unique_key=f"$spawn:5:kids:{i}", unique_mode="always", finished_at=at(8)))
    r.signals.append(Signal("job:5", "$children", {"children": [7]}, at(8)))
    # workflow: a fails, b (deps a) is doomed, c (deps a, ignores failed) runs
    wf = dict(workflow_id="wf1")
    r.add(job(8, "member", state="failed", wf_name="a", errors=[err(1, "Fail", 2)], **wf), "member", "failed")
    r.add(
        job(9, "member", state="cancelled", attempt=0, wf_name="b", wf_deps=("a",), wf_ignore=(), **wf),
        "member",
        "cancelled",
    )
    r.add(job(10, "member", wf_name="c", wf_deps=("a",), wf_ignore=("failed",), **wf), "member")
    # slow: attempt 1 on w1-1 was SIGSTOPped in its paid `nap` past its lease and reclaimed; attempt 2 on
    # w2-1 started its own `nap` at +22; attempt 1 came back at +25, journaled `nap` first (no spend for
    # attempt 2's duplicate write at +34) and its ack was stale
    r.add(
        job(
            11,
            "slow",
            input={"seconds": 12},
            attempt=2,
            errors=[err(1, "lease_expired", 20)],
            result={"token": "t", "node": "w2-1", "attempt": 2},
            finished_at=at(40),
            spent_usd_micros=1,
        ),
        "slow",
    )
    r.events.append(Event(11, 1, {"phase": "start", "attempt": 1, "node": "w1-1"}, at(2)))
    r.events.append(Event(11, 2, {"phase": "start", "attempt": 2, "node": "w2-1"}, at(22)))
    r.steps.append(step(11, 1, "begin", {"token": "t", "attempt": 1}))
    r.steps.append(step(11, 2, "nap", {"token": "n", "attempt": 1}, usd=1, t=25.5))
    r.observations += [
        Observation(11, 1, "w1-1", "pre_ack", {"state": "running", "attempt": 2, "leased_by": "w2-1"}, at(25.6)),
        Observation(11, 1, "w1-1", "ack", {"state": "stale"}, at(25.7)),
        Observation(11, 2, "w2-1", "pre_ack", {"state": "running", "attempt": 2, "leased_by": "w2-1"}, at(34.1)),
    ]
    # cron slots at +60, +120, +180 (registered at +1, paused at +200)
    for jid, minute in ((12, 1), (13, 2), (14, 3)):
        r.add(job(jid, cron_name="soak_cron", cron_slot=at(60 * minute), inserted_at=at(60 * minute + 1)))
    # unique group: two concurrent inserts of an incomplete key, one admitted
    r.add(job(15, unique_key="u1", unique_mode="incomplete"), "echo")
    r.unique += [
        UniqueAttempt(1, "u1", "incomplete", "inserted", 15, at(1)),
        UniqueAttempt(1, "u1", "incomplete", "duplicate", 15, at(1)),
    ]
    r.history += [
        {"t": E0 - 2, "type": "run_start", "lease_ttl": 10},
        {"t": E0 - 1, "type": "worker_start", "node": "w1-1"},
        {"t": E0 - 1, "type": "worker_start", "node": "w2-1"},
        {"t": E0 + 1, "type": "cron_registered", "name": "soak_cron"},
        {"t": E0 + 5, "type": "worker_stop", "node": "w1-1"},
        {"t": E0 + 25, "type": "worker_cont", "node": "w1-1"},
        {"t": E0 - 1, "type": "worker_start", "node": "w3-1"},
        {"t": E0 + 30, "type": "worker_kill", "node": "w3-1"},
        # the race: attempt 1 of awaiter 4 was running (lease samples at +2.8 and +3.2) when its signal
        # committed (intent +2.9, recorded +3.0) — before its park, which then parked it as ready
        {"t": E0 + 2.8, "type": "lease_sample", "at": E0 + 2.8, "rows": [[4, 1, "w2-1", E0 + 12.7, "awaiter"]]},
        {"t": E0 + 2.9, "type": "signal_intent", "job_id": 4},
        {"t": E0 + 3, "type": "signal", "job_id": 4, "when": "race", "woken": []},
        {"t": E0 + 3.2, "type": "lease_sample", "at": E0 + 3.2, "rows": [[4, 1, "w2-1", E0 + 12.7, "awaiter"]]},
        {"t": E0 + 4, "type": "signal", "job_id": 4, "when": "after", "woken": [4]},
        {"t": E0 + 5, "type": "cancel", "job_id": 9, "result": "Cancelled", "state_before": "held", "kind": "member"},
        {"t": E0 + 8, "type": "lost_wakeup", "parent": 5, "children": []},
        {"t": E0 + 200, "type": "cron_paused", "name": "soak_cron"},
        {"t": E0 + 250, "type": "drain_end", "drained": True},
        {"t": E0 + 251, "type": "snapshot"},
        {"t": E0 + 260, "type": "worker_term", "node": "w1-1"},
        {"t": E0 + 260, "type": "worker_term", "node": "w2-1"},
    ]
    return r


def verdicts(result) -> dict[str, str]:
    return {name: r.verdict for name, r in result.invariants.items()}


def assert_only(result, name: str, *, contains: str = "") -> None:
    """`name` is invalid with a counterexample mentioning `contains`; every other invariant still valid."""
    got = verdicts(result)
    assert got[name] == "invalid", (name, got, result.invariants[name].to_json())
    others = {k: v for k, v in got.items() if k != name and v != "valid"}
    assert not others, others
    assert result.verdict == "invalid" and result.exit_code == 1
    assert any(contains in c for c in result.invariants[name].counterexamples), result.invariants[name].counterexamples


# --- the baseline --------------------------------------------------------------------------------------


def test_a_consistent_run_is_valid_on_every_invariant():
    result = baseline().check()
    assert verdicts(result) == {f"I{i}": "valid" for i in range(1, 10)}, {
        k: v.to_json() for k, v in result.invariants.items() if v.verdict != "valid"
    }
    assert all(r.checks > 0 for r in result.invariants.values())
    # …but the worker duties' scenarios (SIGTERM drains, priority batches, …) did not occur: never valid overall
    assert result.verdict == "unknown" and result.exit_code == 2
    assert {r["row"] for r in result.coverage} >= {f"I{i}" for i in range(1, 10)} | {"P1", "P5", "P10"}


# --- I1 -----------------------------------------------------------------------------------------------


def test_i1_a_ledger_job_missing_from_the_database_is_lost():
    r = baseline()
    del r.jobs[1]
    assert_only(r.check(), "I1", contains="row is gone")


def test_i1_a_due_job_left_ready_after_the_drain_is_flagged():
    r = baseline()
    r.jobs[1] = replace(r.jobs[1], state="ready", result=None, finished_at=None)
    assert_only(r.check(), "I1", contains="after the drain")


def test_i1_jobs_an_unfinished_drain_left_ready_are_unknown_with_their_count():
    r = baseline()
    for jid in (1, 2, 3):
        r.jobs[jid] = replace(r.jobs[jid], state="ready", result=None, finished_at=None, errors=())
    r.history = [{**e, "drained": False} if e["type"] == "drain_end" else e for e in r.history]
    result = r.check()
    i1 = result.invariants["I1"]
    assert i1.verdict == "unknown" and i1.violations == 0 and not i1.counterexamples, i1.to_json()
    assert "the drain did not finish: 3 job(s) were left non-terminal (ready 3" in i1.why_unknown
    assert result.verdict == "unknown" and result.exit_code == 2


def test_i1_a_job_waiting_for_a_future_deadline_makes_the_verdict_unknown():
    r = baseline()
    r.jobs[1] = replace(r.jobs[1], state="ready", ready_at=at(10_000), result=None, finished_at=None)
    result = r.check()
    assert result.invariants["I1"].verdict == "unknown" and result.exit_code == 2


def test_i1_a_lease_lost_while_its_node_ran_means_no_renewal():
    r = baseline()
    # the SIGSTOP hit another node, later: w1-1 ran the whole time it held the lease
    r.history = [
        {**e, "node": "w2-1", "t": e["t"] + 45} if e["type"] in ("worker_stop", "worker_cont") else e for e in r.history
    ]
    assert_only(r.check(), "I1", contains="not renewed")


def test_i1_a_lease_lost_during_a_database_outage_is_not_blamed_on_the_worker():
    r = baseline()
    r.history = [e for e in r.history if e["type"] not in ("worker_stop", "worker_cont")]
    r.history += [{"t": E0 + 10, "type": "db_crash"}, {"t": E0 + 11, "type": "db_restarted"}]
    assert r.check().invariants["I1"].verdict == "valid"


# --- I2 -----------------------------------------------------------------------------------------------


def test_i2_a_result_from_a_stale_attempt_is_flagged():
    r = baseline()
    r.jobs[11] = replace(r.jobs[11], result=encode({"token": "t", "node": "w1-1", "attempt": 1}))
    assert_only(r.check(), "I2", contains="stale attempt's ack finished the job")


def test_i2_an_attempt_that_ended_twice_is_flagged():
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], errors=[err(1, "lease_expired", 1), err(1, "Planned", 2)])
    assert_only(r.check(), "I2", contains="ended twice")


def test_i2_an_ack_applied_after_the_row_moved_on_is_flagged():
    r = baseline()
    r.observations[1] = replace(r.observations[1], observed={"state": "succeeded"})
    assert_only(r.check(), "I2", contains="yet its ack was applied")


def test_i2_without_any_stale_ack_the_verdict_is_unknown_not_valid():
    r = baseline()
    r.observations.clear()
    result = r.check()
    assert result.invariants["I2"].verdict == "unknown"
    assert result.verdict == "unknown" and result.exit_code == 2


# --- I3 -----------------------------------------------------------------------------------------------


def test_i3_a_re_executed_journaled_step_is_flagged():
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], result=encode({"tokens": ["a", "fresh"], "attempt": 2}))
    assert_only(r.check(), "I3", contains="executed again")


def test_i3_a_step_value_that_changed_between_samples_is_flagged():
    r = baseline()
    r.history.append({"t": E0 + 3, "type": "step_sample", "rows": [[2, "s1", 1, "0" * 32]]})
    assert_only(r.check(), "I3", contains="changed after it was journaled")


def test_i3_a_sampled_step_missing_from_the_snapshot_is_flagged_unless_sampled_after_the_snapshot():
    r = baseline()
    sample = {"type": "step_sample", "rows": [[1, "x", 1, "0" * 32]]}  # job 1 (echo) has no such step
    r.history.append({"t": E0 + 3, **sample})
    assert_only(r.check(), "I3", contains="vanished")
    r = baseline()
    r.history.append({"t": E0 + 252, **sample})  # the sampler kept running after the snapshot was read
    assert r.check().invariants["I3"].verdict == "valid"


def test_i3_a_step_journaled_after_the_ack_is_flagged():
    r = baseline()
    r.steps[1] = replace(r.steps[1], inserted_at=at(6))
    assert_only(r.check(), "I3", contains="after the job finished")


def test_i3_a_result_naming_an_unjournaled_step_is_flagged():
    r = baseline()
    del r.steps[1]
    assert_only(r.check(), "I3", contains="no such row")


# --- I4 -----------------------------------------------------------------------------------------------


def test_i4_a_step_run_past_the_budget_is_flagged():
    r = baseline()
    r.steps.append(step(3, 3, "c3", {"token": "z", "attempt": 1}, usd=10))
    r.jobs[3] = replace(
        r.jobs[3],
        state="succeeded",
        errors=[err(1, "lease_expired", 1.9)],
        spent_usd_micros=130,
        result=encode({"tokens": ["x", "y", "z"], "attempt": 2}),
    )
    assert_only(r.check(), "I4", contains="crossed the budget")


def test_i4_spend_added_for_a_duplicate_paid_step_write_is_flagged():
    r = baseline()
    r.jobs[11] = replace(r.jobs[11], spent_usd_micros=2)  # attempt 2's duplicate `nap` write paid again
    assert_only(r.check(), "I4", contains="spent_usd_micros is 2")


def test_i4_a_stale_attempt_whose_successor_read_its_step_back_is_no_duplicate_write():
    r = baseline()
    # attempt 2 started after the zombie journaled `nap` and read it back at once: one write only
    r.observations[-1] = replace(r.observations[-1], at=at(26.2))
    r.events[-1] = Event(11, 2, {"phase": "start", "attempt": 2, "node": "w2-1"}, at(26))
    result = r.check()
    i4 = result.invariants["I4"]
    assert i4.verdict == "unknown" and "duplicate executions of a paid step" in i4.why_unknown
    row = next(x for x in result.coverage if x["row"] == "I4")
    assert {s["key"]: s["count"] for s in row["scenarios"]}["zombies_back"] == 0


def test_i4_a_stale_attempt_without_a_start_event_is_not_counted_as_a_duplicate_write():
    r = baseline()
    r.events = [e for e in r.events if not (e.job_id == 11 and e.seq == 1)]
    assert r.check().invariants["I4"].verdict == "unknown"


def test_i4_a_budget_failure_before_the_crossing_step_is_flagged():
    r = baseline()
    r.steps = [s for s in r.steps if not (s.job_id == 3 and s.name == "c2")]
    r.jobs[3] = replace(r.jobs[3], spent_usd_micros=60)
    assert_only(r.check(), "I4", contains="budget_exceeded")


# --- I5 -----------------------------------------------------------------------------------------------


def test_i5_a_member_that_ran_beside_a_failed_dep_is_flagged():
    r = baseline()
    r.jobs[9] = replace(r.jobs[9], state="succeeded", attempt=1, result=encode({"member": "b", "attempt": 1}))
    assert_only(r.check(), "I5", contains="not satisfied")


def test_i5_a_missed_doom_is_flagged():
    r = baseline()
    r.jobs[9] = replace(r.jobs[9], state="held", finished_at=None)
    result = r.check()
    assert result.invariants["I5"].verdict == "invalid"
    assert any("missed doom" in c for c in result.invariants["I5"].counterexamples)


def test_i5_a_doom_without_a_doomed_dep_is_flagged():
    r = baseline()
    r.jobs[8] = replace(r.jobs[8], state="succeeded", errors=[], result=encode({"member": "a", "attempt": 1}))
    r.jobs[10] = replace(r.jobs[10], wf_ignore=())
    result = r.check()
    assert result.invariants["I5"].verdict == "invalid"
    assert any("cancelled (doomed) although" in c for c in result.invariants["I5"].counterexamples)


# --- I6 -----------------------------------------------------------------------------------------------


def test_i6_a_cron_slot_inserted_twice_is_flagged():
    r = baseline()
    r.add(job(16, cron_name="soak_cron", cron_slot=at(120)))
    assert_only(r.check(), "I6", contains="inserted again")


def test_i6_a_slot_missed_while_workers_were_alive_is_flagged():
    r = baseline()
    del r.jobs[13]
    assert_only(r.check(), "I6", contains="no job holds it")


def test_i6_a_slot_with_no_live_worker_is_not_expected():
    r = baseline()
    del r.jobs[13]
    r.history += [{"t": E0 + 100, "type": "db_crash"}, {"t": E0 + 179, "type": "db_restarted"}]
    assert r.check().invariants["I6"].verdict == "valid"


# --- I7 -----------------------------------------------------------------------------------------------


def test_i7_two_live_holders_of_an_incomplete_key_are_flagged():
    r = baseline()
    r.add(job(16, state="ready", ready_at=at(10_000), unique_key="u1", unique_mode="incomplete"), "echo")
    r.jobs[15] = replace(r.jobs[15], state="ready", ready_at=at(10_000), result=None, finished_at=None)
    r.unique[1] = replace(r.unique[1], outcome="inserted", job_id=16)
    result = r.check()
    assert result.invariants["I7"].verdict == "invalid"
    assert any("second live holder" in c for c in result.invariants["I7"].counterexamples)
    assert any("admitted 2 live holders" in c for c in result.invariants["I7"].counterexamples)


def test_i7_an_always_key_admitted_twice_is_flagged():
    r = baseline()
    r.add(job(16, unique_key="k-always", unique_mode="always"), "echo")
    r.unique += [UniqueAttempt(2, "k-always", "always", "inserted", 16, at(1))]
    r.add(job(17, unique_key="k-always2", unique_mode="always"), "echo")
    # a broken store wrote the second holder under the same key: both rows claim it
    r.jobs[17] = replace(r.jobs[17], unique_key="k-always")
    r.unique += [UniqueAttempt(3, "k-always", "always", "inserted", 17, at(2))]
    result = r.check()
    assert result.invariants["I7"].verdict == "invalid"


# --- I8 -----------------------------------------------------------------------------------------------


def test_i8_an_undeclared_child_is_flagged():
    r = baseline()
    r.add(job(16, parent_id=5, unique_key="$spawn:5:kids:2", unique_mode="always"))
    assert_only(r.check(), "I8", contains="did not declare")


def test_i8_a_result_disagreeing_with_the_declared_children_is_flagged():
    r = baseline()
    r.jobs[5] = replace(r.jobs[5], result=encode({"children": [6], "attempt": 2}))
    assert_only(r.check(), "I8", contains="result lists children")


def test_i8_a_parent_finishing_before_its_children_is_flagged():
    r = baseline()
    r.jobs[7] = replace(r.jobs[7], finished_at=at(20))
    assert_only(r.check(), "I8", contains="before its children")


# --- I9 -----------------------------------------------------------------------------------------------


def test_i9_an_awaiter_parked_despite_its_delivered_signal_is_flagged():
    r = baseline()
    r.jobs[4] = replace(
        r.jobs[4], state="awaiting", await_scope="job:4", await_name="go", ready_at=None, result=None, finished_at=None
    )
    result = r.check()
    assert result.invariants["I9"].verdict == "invalid"
    assert any("lost wake-up" in c for c in result.invariants["I9"].counterexamples)


def test_i9_a_parent_stranded_on_children_is_flagged():
    r = baseline()
    r.jobs[5] = replace(
        r.jobs[5],
        state="awaiting",
        await_scope="job:5",
        await_name="$children",
        ready_at=None,
        result=None,
        finished_at=None,
    )
    r.signals = [s for s in r.signals if s.name != "$children"]
    result = r.check()
    assert result.invariants["I9"].verdict == "invalid"
    assert any("R2 backstop" in c for c in result.invariants["I9"].counterexamples)


def test_i9_an_awaiter_that_ran_with_another_payload_is_flagged():
    r = baseline()
    r.jobs[4] = replace(r.jobs[4], result=encode({"payload": {"x": 2}, "attempt": 2}))
    assert_only(r.check(), "I9", contains="delivered signal holds")


# --- the whole harness, opt-in --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("BELAY_SOAK_TESTS"), reason="set BELAY_SOAK_TESTS=1 to run a ~1 min soak")
def test_a_mini_soak_of_the_reference_worker_finds_no_violation(tmp_path: Path):
    """~30 s of faults: too short for every scenario (a cron minute, a stale ack) to be certain, so the
    verdict may be unknown — but never invalid."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "soak.run",
            "--duration",
            "30",
            "--workers",
            "3",
            "--kill-every",
            "8",
            "--stop-every",
            "10",
            "--db-restart-every",
            "15",
            "--report",
            str(tmp_path),
            "--seed",
            "7",
            "--no-progress",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode in (0, 2), out.stdout[-4000:] + out.stderr[-4000:]
    results = json.loads((tmp_path / "latest" / "results.json").read_text())
    assert not [k for k, v in results["invariants"].items() if v["verdict"] == "invalid"], results
    assert results["stats"]["jobs_checked"] > 500


# --- driver expectations and reports ---------------------------------------------------------------------


def test_workflow_expectations_follow_settlement_semantics():
    from soak.workload.driver import WORKFLOW_SHAPES, workflow_outcomes

    assert workflow_outcomes(WORKFLOW_SHAPES["chain"]) == {
        "a": "failed",
        "b": "cancelled",
        "c": "succeeded",
        "d": "succeeded",
    }
    assert workflow_outcomes(WORKFLOW_SHAPES["diamond"]) == {
        "a": "succeeded",
        "b": "succeeded",
        "c": "failed",
        "d": "succeeded",
        "e": "cancelled",
    }
    assert workflow_outcomes(WORKFLOW_SHAPES["cancel"]) == {
        "a": "succeeded",
        "b": "cancelled",
        "c": "succeeded",
        "d": "cancelled",
    }


def test_every_workflow_shape_exercises_a_doom_or_an_ignore_flag_except_the_plain_one():
    from soak.workload.driver import WORKFLOW_SHAPES, workflow_outcomes

    for name, members in WORKFLOW_SHAPES.items():
        outcomes = workflow_outcomes(members)
        assert set(outcomes) == {m["name"] for m in members}
        assert ("cancelled" in outcomes.values() or any(m["ignore"] for m in members)) == (name != "plain")


def test_reports_never_contain_a_password(tmp_path: Path):
    from soak.report import artifacts as report

    r = baseline()
    result = r.check()
    state = from_rows(r.jobs.values(), r.steps, r.events, r.signals)
    url = "postgresql://soak:s3cret-pw@127.0.0.1:5432/belay_soak"
    meta = {
        "run_id": "r1",
        "worker": "soak/reference-worker",
        "workers": 2,
        "lease_ttl": 10,
        "seed": 1,
        "duration": 60,
        "heal": 10,
        "database": f"external server {url}",
        "db_faults": "skipped",
        "url": url,
    }
    run_dir = tmp_path / "r1"
    (run_dir / "workers").mkdir(parents=True)
    (run_dir / "history.jsonl").write_text("")
    report.write(run_dir, result, state, r.history, meta)
    for name in ("results.json", "summary.md", "report.html"):
        text = (run_dir / name).read_text()
        assert "s3cret-pw" not in text and "soak:***@" in text, name
    assert (tmp_path / "latest").resolve() == run_dir.resolve()
    assert "data:image/png;base64," in (run_dir / "report.html").read_text()


def test_the_reference_worker_with_a_swapped_store_keeps_the_per_call_deadline(db_url):
    # issue 27: build(store_class=…) made a store without call_timeout — a broken variant's (or a test's)
    # patched store then had no client-side deadline, unlike the honest worker it is compared with
    from impl.store import PgStore
    from soak import reference_worker

    class Patched(PgStore):
        pass

    env = {"BELAY_DATABASE_URL": db_url, "BELAY_NODE": "n1", "BELAY_LEASE_TTL": "10"}
    honest = reference_worker.build(env)
    patched = reference_worker.build(env, store_class=Patched)
    try:
        assert isinstance(patched.store, Patched)
        assert honest.store.call_timeout == patched.store.call_timeout == 2.5
        assert type(patched.store.pool) is type(honest.store.pool)  # the guarded pool, with its watchdog
    finally:
        honest.store.close()
        patched.store.close()
