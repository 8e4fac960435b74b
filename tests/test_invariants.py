"""The §11 invariant predicates (model/invariants.py).

For each invariant: it holds on states produced by driving the model with real operations, and it
fails — naming the job and the rule — on a hand-built state that breaks it. A Hypothesis state machine
drives random operation sequences through the model, acting as a conformant worker (§7, §8.2, §8.6),
and checks every invariant after every step, the history-based ones (I2, I3) over the whole run, and
I1's "all reach a terminal state" after draining.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import model.invariants as inv
from model import ops
from model import worker_ops as w
from model.invariants import (
    CONTRACT,
    Ledger,
    StaleAck,
    Violation,
    check_all,
    i1_no_job_lost,
    i2_stale_acks_change_nothing,
    i3_one_row_per_step,
    i3_steps_immutable,
    i4_budget_fails_on_crossing_step,
    i5_settlement_consistent,
    i6_cron_slots_once,
    i7_unique_keys,
    i8_children_as_declared,
    i9_awaiters_eventually_run,
    ledger_from_history,
    replay,
    stale_acks_from_history,
)
from model.ops import Enqueue, EnqueueWorkflow, JobSpec, WorkflowMember
from model.rows import INCOMPLETE, Signal, Step
from model.state import State, from_rows
from model.store import ModelStore, spawn_key

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=30)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def spec(**kw) -> JobSpec:
    return JobSpec("q", "w", **kw)


def enqueue(store: ModelStore, *specs: JobSpec, now: datetime = T0) -> list[int]:
    return list(store.apply(Enqueue(now, specs)).ids)


def claim(store: ModelStore, now: datetime = T0, demand: int = 1):
    return list(store.apply(w.Claim(now, "q", "n1", demand, lease_ttl=TTL)).jobs)


def ack(store: ModelStore, job, outcome, now: datetime = T0):
    return store.apply(w.Ack(now, job.id, job.attempt, outcome))


def work_step(store: ModelStore, job, name: str, usd: int = 0, tokens: int = 0, now: datetime = T0) -> str:
    """A conformant worker's step (§8.2): a hit is skipped; a miss is pre-flighted, run and journaled;
    a crossed budget fails the job with budget_exceeded."""
    if isinstance(store.apply(w.ReadStep(job.id, name)), w.StepHit):
        return "hit"
    if isinstance(store.apply(w.Preflight(job.id)), w.OverBudget):
        ack(store, job, w.Fail("budget_exceeded"), now)
        return "failed"
    recorded = store.apply(w.RecordStep(now, job.id, name, {"step": name}, usd, tokens))
    if recorded.over_budget:
        ack(store, job, w.Fail("budget_exceeded"), now)
        return "failed"
    return "recorded"


def states_of(store: ModelStore) -> list[State]:
    """Every state the store passed through (the model is deterministic, so replaying rebuilds them)."""
    trace = replay(op for op, _ in store.history)
    return [State()] + [after for *_, after in trace]


def rows(snapshot: State, **changes) -> dict:
    """The rows of a snapshot as from_rows arguments, with whole tables replaced by `changes`."""
    tables = {
        "jobs": list(snapshot.jobs.values()),
        "steps": list(snapshot.steps.values()),
        "signals": list(snapshot.signals.values()),
    }
    tables.update(changes)
    return tables


def with_job(snapshot: State, job_id: int, **changes) -> State:
    """The snapshot with one job row edited (what a buggy implementation might have written)."""
    jobs = [replace(j, **changes) if j.id == job_id else j for j in snapshot.jobs.values()]
    return from_rows(**rows(snapshot, jobs=jobs))


def messages(violations: list[Violation]) -> list[str]:
    return [str(v) for v in violations]


# ---------------------------------------------------------------------------------------------------
# the module itself


INVARIANTS = {
    "I1": inv.i1_no_job_lost,
    "I2": inv.i2_stale_acks_change_nothing,
    "I3": inv.i3_steps_immutable,
    "I4": inv.i4_budget_fails_on_crossing_step,
    "I5": inv.i5_settlement_consistent,
    "I6": inv.i6_cron_slots_once,
    "I7": inv.i7_unique_keys,
    "I8": inv.i8_children_as_declared,
    "I9": inv.i9_awaiters_eventually_run,
}


@pytest.mark.parametrize("name", sorted(INVARIANTS))
def test_each_invariant_quotes_its_contract_sentence_on_its_first_docstring_line(name):
    assert CONTRACT[name] in INVARIANTS[name].__doc__.splitlines()[0]


def test_the_module_docstring_lists_all_nine_invariants_with_their_sentences():
    text = " ".join(inv.__doc__.split())
    for name, sentence in CONTRACT.items():
        assert f'{name} "{sentence}"' in text


def test_the_contract_sentences_are_the_ones_in_section_11():
    spec_text = Path(__file__).resolve().parent.parent / "docs" / "spec" / "belay-wire-contract.txt"
    section = " ".join(spec_text.read_text().split("11. Invariants")[1].split("Race lessons")[0].split())
    for sentence in CONTRACT.values():
        assert sentence in section


def test_the_invariants_module_imports_only_the_model_and_the_standard_library():
    tree = ast.parse(Path(inv.__file__).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0])
    assert roots - {"model", "__future__"} <= set(sys.stdlib_module_names)


def test_a_violation_reads_as_invariant_job_and_rule():
    assert str(Violation("I2", 17, "a stale ack (attempt 1) changed the row: state running→succeeded")) == (
        "I2 job 17: a stale ack (attempt 1) changed the row: state running→succeeded"
    )
    assert str(Violation("I6", None, "cron 'x' slot s was due but no job holds it")) == (
        "I6: cron 'x' slot s was due but no job holds it"
    )
    assert Violation("I7", 1, "r").contract == CONTRACT["I7"]
    grouped = inv.by_invariant([Violation("I7", 1, "r")])
    assert sorted(grouped) == sorted(CONTRACT) and len(grouped["I7"]) == 1 and grouped["I1"] == []


# ---------------------------------------------------------------------------------------------------
# I1


def test_every_inserted_job_is_present_and_terminal_once_the_workers_drain():
    store = ModelStore()
    enqueue(store, spec(), spec(), spec(max_attempts=1))
    a, b, c = claim(store, demand=3)
    ack(store, a, w.Succeed(1))
    ack(store, b, w.CancelSelf())
    ack(store, c, w.Fail("boom"))
    ledger = ledger_from_history(store.history)
    assert ledger.inserted == {1, 2, 3}
    assert i1_no_job_lost(store.state, ledger.inserted, drained=True) == []


def test_jobs_still_waiting_for_a_worker_are_not_lost_before_the_drain():
    store = ModelStore()
    ids = enqueue(store, spec(), spec(scheduled_at=at(3600)))
    claim(store)
    assert i1_no_job_lost(store.state, ids, drained=False) == []


def test_a_job_whose_row_vanished_without_retention_is_reported_lost():
    store = ModelStore()
    enqueue(store, spec(), spec(), spec())
    gone = from_rows(**rows(store.state, jobs=[j for j in store.state.jobs.values() if j.id != 2]))
    assert messages(i1_no_job_lost(gone, [1, 2, 3], drained=False)) == [
        "I1 job 2: was inserted but its row is gone and retention did not prune it"
    ]


def test_a_job_retention_pruned_is_not_lost():
    store = ModelStore()
    enqueue(store, spec(), spec())
    (job,) = claim(store)
    ack(store, job, w.Succeed())
    store.apply(w.Prune(at(7200), {"succeeded": 60}))
    ledger = ledger_from_history(store.history)
    assert 1 not in store.state.jobs and ledger.pruned == {1}
    assert i1_no_job_lost(store.state, ledger.inserted, drained=False, pruned=ledger.pruned) == []


def test_a_job_left_running_after_the_drain_is_reported():
    store = ModelStore()
    enqueue(store, spec(), spec())
    a, _ = claim(store, demand=2)
    ack(store, a, w.Succeed())
    assert messages(i1_no_job_lost(store.state, [1, 2], drained=True)) == [
        "I1 job 2: is running, not terminal, after the workers drained all work"
    ]


# ---------------------------------------------------------------------------------------------------
# I2


def reclaimed_job(store: ModelStore):
    """Job 1 claimed (attempt 1), its lease expired and reclaimed, then claimed again (attempt 2)."""
    enqueue(store, spec(max_attempts=3))
    (first,) = claim(store)
    store.apply(w.Reclaim(at(60)))
    (second,) = claim(store, at(120))
    assert (first.attempt, second.attempt) == (1, 2)
    return first, second


def test_stale_fenced_writes_after_a_reclaim_change_nothing():
    store = ModelStore()
    _, second = reclaimed_job(store)
    stale = [
        w.Ack(at(130), 1, 1, w.Succeed("late")),
        w.ParkAwait(at(130), 1, 1, "s", "go"),
        w.Sleep(at(130), 1, 1, "nap", at(500)),
        w.AwaitChildren(at(130), 1, 1),
    ]
    for op in stale:
        assert isinstance(store.apply(op), w.Stale)
    observed = stale_acks_from_history(replay(op for op, _ in store.history))
    assert [(o.kind, o.attempt) for o in observed] == [
        ("ack", 1),
        ("await park", 1),
        ("sleep", 1),
        ("await-children", 1),
    ]
    assert i2_stale_acks_change_nothing(observed) == []
    assert store.state.jobs[1] == second


def test_a_stale_member_of_a_batched_ack_changes_nothing_while_the_rest_of_the_batch_applies():
    store = ModelStore()
    reclaimed_job(store)
    enqueue(store, spec(), now=at(120))
    (other,) = claim(store, at(121))
    batch = w.AckMany(
        at(130), (w.Ack(at(130), 1, 1, w.Succeed("late")), w.Ack(at(130), other.id, other.attempt, w.Succeed()))
    )
    assert [type(r) for r in store.apply(batch).results] == [w.Stale, w.Acked]
    (observed,) = stale_acks_from_history(replay(op for op, _ in store.history))
    assert (observed.job_id, observed.kind) == (1, "batched ack")
    assert i2_stale_acks_change_nothing([observed]) == []
    assert messages(i2_stale_acks_change_nothing([replace(observed, after=replace(observed.after, result=b"1"))])) == [
        "I2 job 1: a stale batched ack (attempt 1) changed the row: result NULL→b'1'"
    ]


def test_a_stale_ack_that_changed_the_row_is_reported():
    store = ModelStore()
    _, second = reclaimed_job(store)
    observed = StaleAck(1, 1, before=second, after=replace(second, state="succeeded"))
    assert messages(i2_stale_acks_change_nothing([observed])) == [
        "I2 job 1: a stale ack (attempt 1) changed the row: state running→succeeded"
    ]


def test_a_stale_sleep_that_journaled_a_step_is_reported():
    store = ModelStore()
    _, second = reclaimed_job(store)
    nap = Step(1, 1, "$sleep:nap", b'"2026-11-30T12:08:20+00:00"', 0, 0, at(130))
    observed = StaleAck(1, 1, second, second, "sleep", steps_before=(), steps_after=(nap,))
    assert messages(i2_stale_acks_change_nothing([observed])) == [
        "I2 job 1: a stale sleep (attempt 1) changed its steps: '$sleep:nap'"
    ]


def test_history_extraction_catches_a_stale_write_that_touched_another_table():
    store = ModelStore()
    reclaimed_job(store)
    op = w.AwaitChildren(at(130), 1, 1)
    before = store.state
    buggy_after = from_rows(**rows(before, signals=[Signal("job:1", "$children", None, T0)]))
    (observed,) = stale_acks_from_history([(op, w.Stale(1, 1), before, buggy_after)])
    assert messages(i2_stale_acks_change_nothing([observed])) == [
        "I2 job 1: a stale await-children (attempt 1) changed belay_signals"
    ]


# ---------------------------------------------------------------------------------------------------
# I3


def journaled_twice(store: ModelStore):
    """Job 1 journals 'a', is reclaimed, re-runs (hit on 'a', journals 'b'); a duplicate execution of
    'a' with another value loses the race."""
    enqueue(store, spec(max_attempts=3))
    claim(store)
    store.apply(w.RecordStep(at(1), 1, "a", 1, 10, 1))
    store.apply(w.Reclaim(at(60)))
    (second,) = claim(store, at(120))
    assert isinstance(store.apply(w.ReadStep(1, "a")), w.StepHit)
    store.apply(w.RecordStep(at(121), 1, "b", 2))
    late = store.apply(w.RecordStep(at(122), 1, "a", 99, 10, 1))
    assert (late.inserted, late.value) == (False, b"1")
    return second


def test_journaled_steps_stay_identical_and_unique_across_re_execution():
    store = ModelStore()
    journaled_twice(store)
    ledger = ledger_from_history(store.history)
    assert len(ledger.journal) == 4
    assert i3_steps_immutable(states_of(store), journal=ledger.journal) == []
    assert i3_one_row_per_step(store.state.steps.values()) == []
    assert store.state.jobs[1].spent_usd_micros == 10  # the losing duplicate's cost was not added


def test_a_step_value_rewritten_after_journaling_is_reported():
    store = ModelStore()
    journaled_twice(store)
    earlier = store.state
    step = earlier.steps[(1, "a")]
    later = from_rows(**rows(earlier, steps=[replace(step, value=b"2"), earlier.steps[(1, "b")]]))
    assert messages(i3_steps_immutable([earlier, later])) == [
        "I3 job 1: step 'a' changed after it was journaled: value b'1'→b'2'"
    ]


def test_a_step_that_vanished_while_its_job_remains_is_reported_but_not_one_pruned_with_its_job():
    store = ModelStore()
    journaled_twice(store)
    earlier = store.state
    later = from_rows(**rows(earlier, steps=[earlier.steps[(1, "b")]]))
    assert messages(i3_steps_immutable([earlier, later])) == [
        "I3 job 1: step 'a' vanished while its job row still exists"
    ]
    assert i3_steps_immutable([earlier, from_rows()]) == []


def test_duplicate_step_rows_in_a_database_snapshot_are_reported():
    store = ModelStore()
    journaled_twice(store)
    a = store.state.steps[(1, "a")]
    assert messages(i3_one_row_per_step([a, replace(a, seq=3, value=b"2")])) == [
        "I3 job 1: has 2 rows for step 'a'; (job, name) admits exactly one"
    ]


def test_two_steps_sharing_a_seq_are_reported():
    store = ModelStore()
    journaled_twice(store)
    broken = from_rows(
        **rows(store.state, steps=[store.state.steps[(1, "a")], replace(store.state.steps[(1, "b")], seq=1)])
    )
    assert messages(i3_steps_immutable([broken])) == [
        "I3 job 1: steps 'a', 'b' share seq 1; seq is the per-job insertion order"
    ]


def test_a_step_journaled_with_a_seq_before_existing_ones_is_reported():
    store = ModelStore()
    journaled_twice(store)
    earlier = store.state
    late = Step(1, 1, "c", b"3", 0, 0, at(200))
    broken = from_rows(**rows(earlier, steps=[*earlier.steps.values(), late]))
    assert (
        "I3 job 1: step 'c' was journaled with seq 1, not after the existing seq 2"
        in messages(i3_steps_immutable([earlier, broken]))[-1]
    )


def test_a_value_handed_to_a_worker_that_differs_from_the_journal_is_reported():
    store = ModelStore()
    journaled_twice(store)
    assert messages(i3_steps_immutable([store.state], journal=[((1, "a"), b"1"), ((1, "a"), b"99")])) == [
        "I3 job 1: a worker was handed b'99' for step 'a' but the journal holds b'1'"
    ]
    assert messages(i3_steps_immutable([store.state], journal={(1, "zz"): b"1"})) == [
        "I3 job 1: a worker was handed step 'zz' as journaled, but no such row exists"
    ]


# ---------------------------------------------------------------------------------------------------
# I4


def crossed_budget(store: ModelStore):
    """Job 1 (budget 100 µ$) journals 60 then 50: the second step crosses and the worker fails it."""
    enqueue(store, spec(budget_usd_micros=100, max_attempts=3))
    (job,) = claim(store)
    assert work_step(store, job, "a", usd=60) == "recorded"
    assert work_step(store, job, "b", usd=50) == "failed"
    assert store.state.jobs[1].state == "failed"
    return job


def test_a_job_fails_with_budget_exceeded_on_the_step_that_crosses_its_budget():
    store = ModelStore()
    crossed_budget(store)
    assert i4_budget_fails_on_crossing_step(store.state) == []
    # An operator retry re-runs it: the pre-flight check on the next missed step fails it again.
    store.apply(ops.Retry(at(10), 1))
    (job,) = claim(store, at(11))
    assert [work_step(store, job, n, usd=5, now=at(12)) for n in ("a", "b", "c")] == ["hit", "hit", "failed"]
    assert i4_budget_fails_on_crossing_step(store.state) == []


def test_a_job_whose_worker_died_after_the_crossing_step_with_no_attempt_left_may_fail_by_lease_expiry():
    store = ModelStore()
    enqueue(store, spec(budget_tokens=5, max_attempts=1))
    claim(store)
    store.apply(w.RecordStep(T0, 1, "a", "x", 0, 6))
    store.apply(w.Reclaim(at(60)))
    assert (store.state.jobs[1].state, store.state.jobs[1].errors[-1]["error"]) == ("failed", "lease_expired")
    assert i4_budget_fails_on_crossing_step(store.state) == []


def test_a_re_run_that_only_hits_the_journal_and_succeeds_after_a_crossing_is_reported():
    """The §8.2/§11.4 gap: the crossing step was the last one and the worker died before failing the job;
    the next attempt replays it as a hit (no pre-flight on a hit) and, unless the SDK checks spend before
    acking success, succeeds."""
    store = ModelStore()
    enqueue(store, spec(budget_usd_micros=100, max_attempts=3))
    claim(store)
    assert store.apply(w.RecordStep(T0, 1, "only", "x", 120)).over_budget  # then the worker dies
    store.apply(w.Reclaim(at(60)))
    (job,) = claim(store, at(120))
    assert work_step(store, job, "only", usd=120, now=at(121)) == "hit"
    ack(store, job, w.Succeed(), at(122))
    assert messages(i4_budget_fails_on_crossing_step(store.state)) == [
        "I4 job 1: succeeded although step 'only' (seq 1) crossed the budget (usd 120 > budget 100); "
        "it must fail with budget_exceeded"
    ]


def test_a_step_journaled_after_the_crossing_step_is_reported():
    store = ModelStore()
    crossed_budget(store)
    s = store.state
    extra = Step(1, 3, "c", b"3", 0, 0, at(5))
    broken = from_rows(**rows(s, steps=[*s.steps.values(), extra]))
    assert messages(i4_budget_fails_on_crossing_step(broken)) == [
        "I4 job 1: step 'c' (seq 3) was journaled after step 'b' (seq 2) crossed the budget "
        "(usd 110 > budget 100); the job must fail on the crossing step"
    ]


def test_a_job_that_succeeded_after_crossing_its_budget_is_reported():
    store = ModelStore()
    crossed_budget(store)
    broken = with_job(store.state, 1, state="succeeded", errors=[])
    assert messages(i4_budget_fails_on_crossing_step(broken)) == [
        "I4 job 1: succeeded although step 'b' (seq 2) crossed the budget (usd 110 > budget 100); "
        "it must fail with budget_exceeded"
    ]


def test_a_crossed_job_failed_with_another_error_is_reported():
    store = ModelStore()
    crossed_budget(store)
    errors = [*store.state.jobs[1].errors[:-1], w.error_entry(1, T0, "boom", None)]
    assert messages(i4_budget_fails_on_crossing_step(with_job(store.state, 1, errors=errors))) == [
        "I4 job 1: failed with last error 'boom', not budget_exceeded, although step 'b' (seq 2) crossed "
        "the budget (usd 110 > budget 100)"
    ]


def test_a_budget_failure_without_a_crossing_step_is_reported():
    store = ModelStore()
    enqueue(store, spec(budget_usd_micros=100))
    (job,) = claim(store)
    work_step(store, job, "a", usd=100)  # exactly at the cap: not crossed (strictly greater crosses)
    ack(store, job, w.Fail("budget_exceeded"))
    assert messages(i4_budget_fails_on_crossing_step(store.state)) == [
        "I4 job 1: has a budget_exceeded error although no step crossed a budget "
        "(spent usd 100 of 100, tokens 0 of NULL)"
    ]


def test_spend_that_disagrees_with_the_journaled_step_costs_is_reported():
    store = ModelStore()
    crossed_budget(store)
    assert messages(
        i4_budget_fails_on_crossing_step(with_job(store.state, 1, spent_usd_micros=170, spent_tokens=2))
    ) == [
        "I4 job 1: spent_usd_micros is 170 but its 2 journaled steps cost 110",
        "I4 job 1: spent_tokens is 2 but its 2 journaled steps cost 0",
    ]


# ---------------------------------------------------------------------------------------------------
# I5


def member(name: str, *deps: str, ignore: tuple[str, ...] = ()) -> WorkflowMember:
    return WorkflowMember(name, spec(max_attempts=1), deps=deps, ignore=ignore)


def workflow(store: ModelStore, *members: WorkflowMember) -> dict[str, int]:
    return dict(store.apply(EnqueueWorkflow(T0, "wf", members)).ids)


def names(store: ModelStore) -> dict[str, str]:
    return {j.wf_name: j.state for j in store.state.jobs.values()}


def test_settlement_releases_and_dooms_members_only_through_their_deps():
    store = ModelStore()
    ids = workflow(store, member("a"), member("b", "a"), member("c", "a", ignore=("failed",)), member("d", "c"))
    assert i5_settlement_consistent(store.state) == []
    (a,) = claim(store)
    ack(store, a, w.Fail("boom"))
    assert names(store) == {"a": "failed", "b": "cancelled", "c": "ready", "d": "held"}
    (c,) = claim(store, at(1))
    ack(store, c, w.Succeed(), at(2))
    assert names(store)["d"] == "ready"
    assert i5_settlement_consistent(store.state) == []
    assert i5_settlement_consistent(store.state, retried=ledger_from_history(store.history).retried) == []
    assert ids["d"] == 4


def test_a_dep_retried_after_it_released_an_ignoring_member_is_excused_only_when_retries_allow_it():
    store = ModelStore()
    workflow(store, member("a"), member("c", "a", ignore=("failed",)))
    (a,) = claim(store)
    ack(store, a, w.Fail("boom"))
    store.apply(ops.Retry(at(5), 1))
    assert names(store) == {"a": "ready", "c": "ready"}
    ledger = ledger_from_history(store.history)
    assert i5_settlement_consistent(store.state) == []
    assert i5_settlement_consistent(store.state, retried=ledger.retried) == []
    assert messages(i5_settlement_consistent(store.state, retried=())) == [
        "I5 job 2: member 'c' of workflow 'wf' was released (it is ready) although dep 'a' (job 1) is ready"
    ]


def test_a_held_member_whose_deps_all_succeeded_is_a_missed_release():
    store = ModelStore()
    workflow(store, member("a"), member("b", "a"))
    (a,) = claim(store)
    ack(store, a, w.Succeed())
    broken = with_job(store.state, 2, state="held")
    assert messages(i5_settlement_consistent(broken)) == [
        "I5 job 2: settlement is not a fixpoint: held member 'b' of workflow 'wf' has every dep satisfied "
        "but was not released (missed release)"
    ]


def test_a_held_member_with_a_failed_dep_is_a_missed_doom():
    store = ModelStore()
    workflow(store, member("a"), member("b", "a"), member("c", "b"))
    broken = with_job(store.state, 1, state="failed")
    assert messages(i5_settlement_consistent(broken)) == [
        "I5 job 2: settlement is not a fixpoint: held member 'b' of workflow 'wf' has a dep failed/cancelled "
        "without its ignore flag (directly or through a doomed dep) but was not doomed (missed doom)",
        "I5 job 3: settlement is not a fixpoint: held member 'c' of workflow 'wf' has a dep failed/cancelled "
        "without its ignore flag (directly or through a doomed dep) but was not doomed (missed doom)",
    ]


def test_a_member_released_beside_a_failed_dep_it_does_not_ignore_is_reported():
    store = ModelStore()
    workflow(store, member("a"), member("b", "a", ignore=("cancelled",)))
    (a,) = claim(store)
    ack(store, a, w.Fail("boom"))
    assert names(store) == {"a": "failed", "b": "cancelled"}
    broken = with_job(store.state, 2, state="running", attempt=1)
    assert messages(i5_settlement_consistent(broken, retried=())) == [
        "I5 job 2: member 'b' of workflow 'wf' was released (it is running) although dep 'a' (job 1) is failed "
        "and member 'b' does not ignore failed"
    ]


def test_a_member_released_while_a_dep_is_still_running_is_reported_without_any_ledger():
    store = ModelStore()
    workflow(store, member("a"), member("b", "a"))
    claim(store)
    broken = with_job(store.state, 2, state="ready")
    assert messages(i5_settlement_consistent(broken)) == [
        "I5 job 2: member 'b' of workflow 'wf' was released (it is ready) although dep 'a' (job 1) is running"
    ]


# ---------------------------------------------------------------------------------------------------
# I6


TICK = w.CronDef("tick", "* * * * *", "w", queue="q")


def fired_crons(store: ModelStore) -> Ledger:
    """Two nodes fire the every-minute cron over overlapping windows."""
    store.apply(w.FireCrons(at(180), T0, (TICK,)))
    store.apply(w.FireCrons(at(200), at(60), (TICK,)))
    return ledger_from_history(store.history)


def test_overlapping_cron_firings_insert_each_slot_exactly_once():
    store = ModelStore()
    ledger = fired_crons(store)
    assert sorted(slot for _, slot in ledger.cron_slots) == [at(60), at(120), at(180)]
    assert len(store.state.jobs) == 3
    assert i6_cron_slots_once(store.state, ledger.cron_slots) == []


def test_a_cron_slot_inserted_twice_is_reported():
    store = ModelStore()
    fired_crons(store)
    broken = with_job(store.state, 2, cron_slot=at(60))
    assert messages(i6_cron_slots_once(broken)) == [
        "I6 job 2: cron 'tick' slot 2026-11-30T12:01:00+00:00 was inserted again (job 1 already holds it)"
    ]


def test_a_due_cron_slot_without_a_job_is_reported():
    store = ModelStore()
    ledger = fired_crons(store)
    missing = from_rows(**rows(store.state, jobs=[j for j in store.state.jobs.values() if j.id != 2]))
    assert messages(i6_cron_slots_once(missing, ledger.cron_slots)) == [
        "I6: cron 'tick' slot 2026-11-30T12:02:00+00:00 was due but no job holds it"
    ]


def test_a_cron_slot_that_is_not_a_whole_minute_is_reported():
    store = ModelStore()
    fired_crons(store)
    assert messages(i6_cron_slots_once(with_job(store.state, 3, cron_slot=at(190)))) == [
        "I6 job 3: cron 'tick' slot 2026-11-30T12:03:10+00:00 is not a whole UTC minute"
    ]


# ---------------------------------------------------------------------------------------------------
# I7


def test_unique_keys_admit_one_live_holder_and_one_row_ever():
    store = ModelStore()
    enqueue(store, spec(unique_key="k"), spec(unique_key="k"))  # the second is a duplicate
    enqueue(
        store,
        spec(unique_key="once", unique_mode="always"),
        spec(unique_key="w", unique_mode="window", unique_window=60),
    )
    enqueue(
        store,
        spec(unique_key="once", unique_mode="always"),
        spec(unique_key="w", unique_mode="window", unique_window=60),
        now=at(30),
    )
    (job,) = claim(store)
    ack(store, job, w.Succeed())
    enqueue(store, spec(unique_key="k"), now=at(40))  # the first holder is terminal: a new one is admitted
    enqueue(store, spec(unique_key="w", unique_mode="window", unique_window=60), now=at(70))  # the next bucket
    buckets = [ops.window_key("w", T0, 60), ops.window_key("w", at(70), 60)]
    assert sorted(j.unique_key for j in store.state.jobs.values()) == ["k", "k", "once", *buckets]
    assert i7_unique_keys(store.state) == []


def test_a_second_live_holder_of_an_incomplete_key_is_reported():
    store = ModelStore()
    enqueue(store, spec(unique_key="k"))
    (job,) = claim(store)
    ack(store, job, w.Succeed())
    enqueue(store, spec(unique_key="k"))
    broken = with_job(store.state, 1, state="ready")
    assert messages(i7_unique_keys(broken)) == [
        "I7 job 2: is a second live holder of incomplete-mode key 'k' (job 1 holds it)"
    ]


def test_a_second_row_for_an_always_key_is_reported_even_when_both_are_terminal():
    store = ModelStore()
    enqueue(store, spec(unique_key="once", unique_mode="always"), spec())
    broken = with_job(store.state, 2, unique_key="once", unique_mode="always", state="succeeded")
    broken = with_job(broken, 1, state="cancelled")
    assert messages(i7_unique_keys(broken)) == [
        "I7 job 2: is a second row for window/always key 'once' (job 1 has it; such keys admit one row ever)"
    ]


def test_a_window_key_without_its_bucket_is_reported():
    store = ModelStore()
    enqueue(store, spec(unique_key="w", unique_mode="window", unique_window=60))
    assert messages(i7_unique_keys(with_job(store.state, 1, unique_key="w"))) == [
        "I7 job 1: window-mode key 'w' does not embed its bucket (<key>@<n>)"
    ]


# ---------------------------------------------------------------------------------------------------
# I8


def children(n: int) -> tuple[JobSpec, ...]:
    return tuple(JobSpec("q", "child") for _ in range(n))


def spawned(store: ModelStore) -> tuple[int, ...]:
    enqueue(store, spec())
    claim(store)
    first = store.apply(w.Spawn(T0, 1, "fan", children(3)))
    again = store.apply(w.Spawn(at(1), 1, "fan", children(3)))
    assert (again.child_ids, again.memoized) == (first.child_ids, True)
    return first.child_ids


def test_a_spawn_declares_exactly_its_keyed_children_even_when_it_runs_again():
    store = ModelStore()
    assert spawned(store) == (2, 3, 4)
    assert i8_children_as_declared(store.state) == []


def test_children_inserted_before_a_crash_are_adopted_when_the_spawn_runs_again():
    store = ModelStore()
    enqueue(store, spec())
    claim(store)
    # The insert half of a spawn whose journal write never happened (the worker crashed in between).
    enqueue(store, *(spec(unique_key=spawn_key(1, "fan", i), unique_mode="always", parent_id=1) for i in range(2)))
    assert i8_children_as_declared(store.state) == []  # undeclared, but no spawn step exists yet
    result = store.apply(w.Spawn(at(5), 1, "fan", children(3)))
    assert result.child_ids == (2, 3, 6)  # the re-inserted 0 and 1 were skipped (consuming ids 4, 5)
    assert i8_children_as_declared(store.state) == []


def test_a_pruned_child_declared_by_its_spawn_is_not_missing():
    store = ModelStore()
    spawned(store)
    (child,) = [j for j in claim(store, demand=5) if j.id == 2]
    ack(store, child, w.Succeed())
    store.apply(w.Prune(at(7200), {"succeeded": 60}))
    ledger = ledger_from_history(store.history)
    assert 2 not in store.state.jobs
    assert i8_children_as_declared(store.state, pruned=ledger.pruned) == []
    assert messages(i8_children_as_declared(store.state)) == [
        "I8 job 1: spawn 'fan' declares child 2 at index 0 but key '$spawn:1:fan:0' is held by no job"
    ]


def test_a_declared_child_whose_key_another_job_holds_is_reported():
    store = ModelStore()
    spawned(store)
    step = store.state.steps[(1, "$spawn:fan")]
    broken = from_rows(**rows(store.state, steps=[replace(step, value=b"[2,4,3]")]))
    assert messages(i8_children_as_declared(broken)) == [
        "I8 job 1: spawn 'fan' declares child 4 at index 1 but key '$spawn:1:fan:1' is held by job(s) 3",
        "I8 job 1: spawn 'fan' declares child 3 at index 2 but key '$spawn:1:fan:2' is held by job(s) 4",
    ]


def test_a_keyed_child_beyond_the_declared_list_is_reported():
    store = ModelStore()
    spawned(store)
    enqueue(store, spec(unique_key=spawn_key(1, "fan", 3), unique_mode="always", parent_id=1))
    assert messages(i8_children_as_declared(store.state)) == [
        "I8 job 1: has child 5 (key '$spawn:1:fan:3') that spawn 'fan' did not declare (it declared 3)"
    ]


def test_a_child_whose_spawn_key_names_another_parent_or_mode_is_reported():
    store = ModelStore()
    spawned(store)
    broken = with_job(store.state, 3, parent_id=None, unique_mode="incomplete")
    assert messages(i8_children_as_declared(broken)) == [
        "I8 job 3: carries spawn key '$spawn:1:fan:1' of parent 1 but its parent_id is NULL",
        "I8 job 3: carries spawn key '$spawn:1:fan:1' with unique_mode incomplete, not 'always'",
    ]


def test_a_spawn_step_that_is_not_a_list_of_ids_is_reported():
    store = ModelStore()
    spawned(store)
    step = store.state.steps[(1, "$spawn:fan")]
    broken = from_rows(**rows(store.state, steps=[replace(step, value=b'{"ids": 1}')]))
    assert messages(i8_children_as_declared(broken)) == [
        "I8 job 1: spawn step '$spawn:fan' holds b'{\"ids\": 1}', not a list of child ids"
    ]


def test_spawn_keys_split_on_the_first_and_last_colon():
    assert inv.parse_spawn_key("$spawn:12:a:b:3") == (12, "a:b", 3)
    assert inv.parse_spawn_key("$spawn:x:a:3") is None
    assert inv.parse_spawn_key("plain") is None


# ---------------------------------------------------------------------------------------------------
# I9


def test_delivered_signals_and_finished_children_leave_no_job_awaiting():
    store = ModelStore()
    enqueue(store, spec(), spec())
    a, b = claim(store, demand=2)
    store.apply(w.ParkAwait(T0, a.id, a.attempt, "s", "go"))
    assert i9_awaiters_eventually_run(store.state, quiescent=False) == []
    store.apply(ops.DeliverSignal(at(1), "s", "go", {"x": 1}))
    assert store.state.jobs[a.id].state == "ready"
    store.apply(w.Spawn(at(1), b.id, "fan", children(2)))
    assert isinstance(store.apply(w.AwaitChildren(at(2), b.id, b.attempt)), w.Parked)
    assert i9_awaiters_eventually_run(store.state, quiescent=True) == []
    for child in [j for j in claim(store, at(3), demand=5) if j.parent_id == b.id]:
        ack(store, child, w.Succeed(), at(4))
    store.apply(w.Reconcile(at(5)))
    assert store.state.jobs[b.id].state == "ready"
    assert i9_awaiters_eventually_run(store.state, quiescent=True) == []


def test_a_job_awaiting_a_signal_that_was_delivered_is_a_lost_wake_up():
    store = ModelStore()
    enqueue(store, spec())
    (job,) = claim(store)
    store.apply(w.ParkAwait(T0, job.id, job.attempt, "s", "go"))
    lost = from_rows(**rows(store.state, signals=[Signal("s", "go", None, at(1))]))
    assert messages(i9_awaiters_eventually_run(lost, quiescent=False)) == [
        "I9 job 1: is awaiting (s, go) although that signal was delivered at 2026-11-30T12:00:01+00:00 (a lost wake-up)"
    ]


def test_a_parent_awaiting_children_that_all_finished_is_reported_only_once_quiescent():
    store = ModelStore()
    enqueue(store, spec())
    (parent,) = claim(store)
    store.apply(w.Spawn(T0, 1, "fan", children(2)))
    store.apply(w.AwaitChildren(at(1), 1, parent.attempt))
    broken = with_job(with_job(store.state, 2, state="succeeded"), 3, state="failed")
    assert i9_awaiters_eventually_run(broken, quiescent=False) == []
    assert messages(i9_awaiters_eventually_run(broken, quiescent=True)) == [
        "I9 job 1: awaits $children but all its 2 children (2, 3) are terminal after a reconcile pass "
        "(the R2 backstop missed it)"
    ]


def test_an_awaiting_job_with_neither_a_wake_key_nor_a_deadline_is_reported():
    store = ModelStore()
    enqueue(store, spec())
    (job,) = claim(store)
    store.apply(w.ParkAwait(T0, job.id, job.attempt, "s", "go"))
    broken = with_job(store.state, 1, await_scope=None, await_name=None, ready_at=None)
    assert messages(i9_awaiters_eventually_run(broken, quiescent=False)) == [
        "I9 job 1: is awaiting with no await_scope/await_name and no deadline: nothing can wake it"
    ]


# ---------------------------------------------------------------------------------------------------
# check_all


def test_check_all_runs_every_invariant_one_snapshot_can_decide():
    store = ModelStore()
    crossed_budget(store)  # job 1
    workflow(store, member("a"), member("b", "a"))  # jobs 2, 3
    store.apply(w.FireCrons(at(120), at(50), (TICK,)))  # jobs 4, 5
    enqueue(store, spec(unique_key="k"))  # job 6
    enqueue(store, spec())  # job 7: parent
    (parent,) = [j for j in claim(store, at(130), demand=9) if j.id == 7]
    store.apply(w.Spawn(at(130), 7, "fan", children(1)))  # job 8
    store.apply(w.ParkAwait(at(130), 7, parent.attempt, "s", "go"))
    assert check_all(store.state, ledger=ledger_from_history(store.history)) == []
    s = with_job(store.state, 1, state="succeeded")
    s = with_job(s, 3, state="ready")
    s = with_job(s, 5, cron_slot=at(60))
    s = with_job(s, 2, unique_key="k", unique_mode="incomplete")
    s = with_job(s, 8, parent_id=None)
    s = from_rows(**rows(s, signals=[Signal("s", "go", None, at(140))]))
    found = {v.invariant for v in check_all(s)}
    assert found == {"I4", "I5", "I6", "I7", "I8", "I9"}
    without_rows = from_rows(**rows(s, jobs=[j for j in s.jobs.values() if j.id != 6]))
    assert "I1 job 6: was inserted but its row is gone and retention did not prune it" in messages(
        check_all(without_rows, ledger=ledger_from_history(store.history))
    )


def test_retention_never_strands_a_held_workflow_member():
    """Contract gap closed by a decision (docs/decisions.md): retention skips members of a workflow still settling."""
    store = ModelStore()
    workflow(store, member("a"), member("b"), member("c", "a", "b"))
    a, b = claim(store, demand=2)
    ack(store, a, w.Succeed(), at(1))
    store.apply(w.Prune(at(600), {"succeeded": 60}))  # a is pruned while c still waits on b
    ack(store, b, w.Succeed(), at(601))
    for job in claim(store, at(602), demand=5):
        ack(store, job, w.Succeed(), at(603))
    ledger = ledger_from_history(store.history)
    found = i1_no_job_lost(store.state, ledger.inserted, drained=True, pruned=ledger.pruned)
    assert found == [], messages(found)


def test_retrying_a_member_whose_dep_was_pruned_is_refused_not_stranded():
    store = ModelStore()
    workflow(store, member("a"), member("b", "a"))
    (a,) = claim(store, demand=1)
    ack(store, a, w.Fail("boom"), at(1))  # a fails; b is doomed; the workflow is finished
    store.apply(w.Prune(at(600), {"failed": 60, "cancelled": 60}, limit=1))  # only a goes
    b = next(j for j in store.state.jobs.values() if j.wf_name == "b")
    assert store.apply(ops.Retry(at(601), b.id)) == ops.DepsGone(b.id, ("a",))
    assert store.state.jobs[b.id].state == "cancelled"


# ---------------------------------------------------------------------------------------------------
# Hypothesis: random operation sequences keep every invariant


QUEUE = "q"
KIDS = "kids"  # spawned children run here, so parents see them finish within a run
PICK = st.integers(0, 10**6)
SCOPES = ("s:a", "s:b")
SIGNALS = ("go", "stop")
SHAPES = (
    (("a", (), ()), ("b", ("a",), ())),
    (("a", (), ()), ("b", ("a",), ("failed",)), ("c", ("a", "b"), ("cancelled",))),
    (("a", (), ()), ("b", (), ()), ("c", ("a", "b"), ("failed", "cancelled")), ("d", ("c",), ())),
)
RETENTION = {"succeeded": 120, "failed": 120, "cancelled": 120}


class ModelRun(RuleBasedStateMachine):
    """Drives the model as clients, an operator and conformant workers would (one live execution per job;
    stale executions only issue fenced writes — see I4's caveat on unfenced stale steps)."""

    def __init__(self) -> None:
        super().__init__()
        self.store = ModelStore()
        self.now = T0
        self.trace: list[tuple] = []  # (op, result, state_before, state_after)
        self.running: dict[int, int] = {}  # job id -> the claimed attempt of its live execution
        self.stale: list[tuple[int, int]] = []  # (job id, attempt) executions that lost their lease
        self.workflows = 0
        self.fired_until = T0

    # --- plumbing ---------------------------------------------------------------------------------

    def apply(self, op):
        before = self.store.state
        result = self.store.apply(op)
        after = self.store.state
        self.trace.append((op, result, before, after))
        for job_id, attempt in list(self.running.items()):
            job = after.jobs.get(job_id)
            if job is None or job.state != "running" or job.attempt != attempt:
                del self.running[job_id]
                self.stale.append((job_id, attempt))
        if isinstance(result, w.Claimed):
            self.running.update({j.id: j.attempt for j in result.jobs})
        return result

    def live(self, pick: int) -> tuple[int, int] | None:
        ids = sorted(self.running)
        return (ids[pick % len(ids)], self.running[ids[pick % len(ids)]]) if ids else None

    def any_job(self, pick: int) -> int | None:
        ids = sorted(self.store.state.jobs)
        return ids[pick % len(ids)] if ids else None

    def boundary(self, job_id: int, attempt: int) -> bool:
        """A step boundary (§8.2, §8.6): honour a cancel request, refuse to run past a crossed budget."""
        if self.store.state.jobs[job_id].cancel_requested:
            self.apply(w.Ack(self.now, job_id, attempt, w.CancelSelf()))
            return False
        if isinstance(self.apply(w.Preflight(job_id)), w.OverBudget):
            self.apply(w.Ack(self.now, job_id, attempt, w.Fail("budget_exceeded")))
            return False
        return True

    def finish(self, job_id: int, attempt: int, outcome) -> None:
        """Ack like a conformant SDK: a job whose durable spend crossed its budget fails with budget_exceeded
        (checking before any ack closes the gap of test_a_re_run_that_only_hits_the_journal_...)."""
        if isinstance(self.apply(w.Preflight(job_id)), w.OverBudget):
            outcome = w.Fail("budget_exceeded")
        assert isinstance(self.apply(w.Ack(self.now, job_id, attempt, outcome)), w.Acked)

    # --- time, clients, operator ------------------------------------------------------------------

    @rule(seconds=st.integers(0, 90))
    def advance(self, seconds):
        self.now += timedelta(seconds=seconds)

    @rule(
        key=st.sampled_from([None, "k1", "k2"]),
        mode=st.sampled_from(["incomplete", "window", "always"]),
        usd=st.sampled_from([None, 0, 30, 60]),
        tokens=st.sampled_from([None, 3]),
        attempts=st.integers(1, 3),
        delay=st.sampled_from([None, 0, 30]),
    )
    def enqueue(self, key, mode, usd, tokens, attempts, delay):
        self.apply(
            Enqueue(
                self.now,
                (
                    JobSpec(
                        QUEUE,
                        "w",
                        max_attempts=attempts,
                        unique_key=key,
                        unique_mode=mode if key else None,
                        unique_window=60 if key and mode == "window" else None,
                        budget_usd_micros=usd,
                        budget_tokens=tokens,
                        scheduled_at=None if delay is None else self.now + timedelta(seconds=delay),
                    ),
                ),
            )
        )

    @rule(shape=st.sampled_from(SHAPES))
    def enqueue_workflow(self, shape):
        self.workflows += 1
        members = tuple(WorkflowMember(n, JobSpec(QUEUE, "w", max_attempts=2), deps=d, ignore=i) for n, d, i in shape)
        self.apply(EnqueueWorkflow(self.now, f"wf{self.workflows}", members))

    @rule()
    def fire_crons(self):
        # Overlapping windows: another node fires the last two minutes again.
        self.apply(w.FireCrons(self.now, self.fired_until - timedelta(minutes=2), (TICK,)))
        self.fired_until = self.now

    @rule(
        kind=st.sampled_from(["deliver", "steer", "clear"]),
        scope=st.sampled_from((*SCOPES, "job")),
        name=st.sampled_from((*SIGNALS, "$children")),
        pick=PICK,
    )
    def client_signal(self, kind, scope, name, pick):
        """Deliver a signal, steer a job (`$steer` to job:<id>), or clear a signal (even a `$children`)."""
        job_id = self.any_job(pick) or 1
        scope = f"job:{job_id}" if scope == "job" else scope
        if kind == "steer":
            self.apply(ops.Steer(self.now, job_id, {"hint": pick % 7}))
        elif kind == "clear":
            self.apply(ops.ClearSignal(scope, name))
        elif name != "$children":  # `$children` is delivered by the system only
            self.apply(ops.DeliverSignal(self.now, scope, name, {"at": self.now.isoformat()}))

    def jobs_in(self, states) -> list[int]:
        return sorted(j.id for j in self.store.state.jobs.values() if j.state in states)

    @precondition(lambda self: bool(self.jobs_in(INCOMPLETE)))
    @rule(pick=PICK)
    def cancel(self, pick):
        live = self.jobs_in(INCOMPLETE)
        self.apply(ops.Cancel(self.now, live[pick % len(live)]))

    @precondition(lambda self: bool(self.jobs_in(("failed", "cancelled"))))
    @rule(pick=PICK)
    def retry(self, pick):
        done = self.jobs_in(("failed", "cancelled"))
        job = self.store.state.jobs[done[pick % len(done)]]
        self.apply(ops.Retry(self.now, job.id))  # a member whose dep was pruned is refused (DepsGone)

    @rule()
    def prune(self):
        self.apply(w.Prune(self.now, RETENTION, signal_ttl=300))

    # --- workers ----------------------------------------------------------------------------------

    @rule(queue=st.sampled_from([QUEUE, KIDS]), demand=st.integers(1, 3))
    def claim(self, queue, demand):
        self.apply(w.Claim(self.now, queue, "n1", demand, lease_ttl=timedelta(seconds=30)))

    @rule(outcome=st.sampled_from(["succeed", "fail", "cancel"]))
    def child_worker(self, outcome):
        """Another node's chunk worker: claim spawned children, run them, ack them in one batch."""
        end = {"succeed": w.Succeed(1), "fail": w.Fail("boom"), "cancel": w.CancelSelf()}[outcome]
        claimed = self.apply(w.Claim(self.now, KIDS, "n2", 3, lease_ttl=timedelta(seconds=30))).jobs
        acks = tuple(w.Ack(self.now, j.id, j.attempt, end) for j in claimed if self.boundary(j.id, j.attempt))
        if acks:
            result = self.apply(w.AckMany(self.now, acks))
            assert all(isinstance(r, w.Acked) for r in result.results)

    @rule(kind=st.sampled_from(["renew", "reclaim", "reconcile"]))
    def sweep(self, kind):
        """A node's periodic work: renew its leases, reclaim expired ones, run the R2 reconciler."""
        if kind == "renew":
            self.apply(w.Renew(self.now, "n1", tuple(sorted(self.running)), self.now + timedelta(seconds=30)))
        elif kind == "reclaim":
            self.apply(w.Reclaim(self.now, w.Backoff(1, 2, 60)))
        else:
            self.apply(w.Reconcile(self.now))

    @precondition(lambda self: bool(self.running))
    @rule(demand=st.integers(0, 3))
    def node_pauses_past_its_leases(self, demand):
        """Nemesis: node n1 stalls (GC pause, partition) until its leases expire; another node reclaims
        them and, once the retry backoff passed, claims work — n1's executions are now stale."""
        jobs = self.store.state.jobs
        self.now = max(self.now, max(jobs[i].lease_until for i in self.running) + timedelta(seconds=1))
        self.apply(w.Reclaim(self.now, w.Backoff(1, 2, 60)))
        self.now += timedelta(seconds=60)
        self.apply(w.Claim(self.now, QUEUE, "n3", demand, lease_ttl=timedelta(seconds=30)))

    @precondition(lambda self: bool(self.running))
    @rule(pick=PICK, outcome=st.sampled_from(["succeed", "retry", "fail", "cancel", "snooze"]))
    def ack(self, pick, outcome):
        got = self.live(pick)
        if got is None:
            return
        self.finish(
            *got,
            {
                "succeed": w.Succeed({"ok": True}),
                "retry": w.Fail("boom", None, self.now + timedelta(seconds=5)),
                "fail": w.Fail("boom"),
                "cancel": w.CancelSelf(),
                "snooze": w.Snooze(self.now + timedelta(seconds=20)),
            }[outcome],
        )

    @precondition(lambda self: bool(self.stale))
    @rule(pick=PICK, kind=st.sampled_from(["ack", "batch", "park", "sleep", "await"]))
    def stale_write(self, pick, kind):
        if not self.stale:
            return
        # Executions whose job another attempt now runs first: the writes a missing fence would let through.
        jobs = self.store.state.jobs
        stale = sorted(self.stale, key=lambda e: (e[0] not in jobs or jobs[e[0]].state != "running", e))
        job_id, attempt = stale[pick % len(stale)]
        op = {
            "ack": w.Ack(self.now, job_id, attempt, w.Succeed("late")),
            "batch": w.AckMany(self.now, (w.Ack(self.now, job_id, attempt, w.Fail("late")),)),
            "park": w.ParkAwait(self.now, job_id, attempt, "s:a", "go"),
            "sleep": w.Sleep(self.now, job_id, attempt, "nap", self.now + timedelta(seconds=30)),
            "await": w.AwaitChildren(self.now, job_id, attempt),
        }[kind]
        result = self.apply(op)
        stale = result.results[0] if isinstance(result, w.AckedMany) else result
        assert isinstance(stale, w.Stale), f"job {job_id}: a stale {kind} (attempt {attempt}) was accepted: {result}"

    @precondition(lambda self: bool(self.running))
    @rule(pick=PICK, name=st.sampled_from(["s1", "s2", "s3"]), usd=st.integers(0, 40), tokens=st.integers(0, 2))
    def step(self, pick, name, usd, tokens):
        got = self.live(pick)
        if got is None or isinstance(self.apply(w.ReadStep(got[0], name)), w.StepHit):
            return
        if not self.boundary(*got):
            return
        recorded = self.apply(w.RecordStep(self.now, got[0], name, {"n": name, "usd": usd}, usd, tokens))
        if recorded.over_budget:
            self.finish(got[0], got[1], w.Fail("budget_exceeded"))

    @precondition(lambda self: any(not name.startswith("$") for _, name in self.store.state.steps))
    @rule(pick=PICK, usd=st.integers(0, 60))
    def duplicate_execution(self, pick, usd):
        """An at-least-once re-execution of an already journaled step: it loses to the journal."""
        keys = sorted(k for k in self.store.state.steps if not k[1].startswith("$"))
        if keys:
            job_id, name = keys[pick % len(keys)]
            assert not self.apply(w.RecordStep(self.now, job_id, name, "again", usd, 1)).inserted

    @precondition(lambda self: bool(self.running))
    @rule(pick=PICK, name=st.sampled_from(["nap", "rest"]), seconds=st.integers(0, 60))
    def sleep(self, pick, name, seconds):
        got = self.live(pick)
        if got is None or ((got[0], f"$sleep:{name}") not in self.store.state.steps and not self.boundary(*got)):
            return
        self.apply(w.Sleep(self.now, got[0], got[1], name, self.now + timedelta(seconds=seconds)))

    @precondition(lambda self: bool(self.running))
    @rule(
        pick=PICK,
        scope=st.sampled_from((*SCOPES, "own")),
        name=st.sampled_from((*SIGNALS, "$steer")),
        deadline=st.sampled_from([None, 30, 120]),
    )
    def park(self, pick, scope, name, deadline):
        got = self.live(pick)
        if got is not None:
            self.apply(
                w.ParkAwait(
                    self.now,
                    got[0],
                    got[1],
                    f"job:{got[0]}" if scope == "own" else scope,
                    name,
                    None if deadline is None else self.now + timedelta(seconds=deadline),
                )
            )

    @precondition(lambda self: bool(self.running))
    @rule(pick=PICK, name=st.sampled_from(["fan", "more"]), n=st.integers(0, 3), then_await=st.booleans())
    def spawn(self, pick, name, n, then_await):
        got = self.live(pick)
        if got is None or ((got[0], f"$spawn:{name}") not in self.store.state.steps and not self.boundary(*got)):
            return
        self.apply(w.Spawn(self.now, got[0], name, tuple(JobSpec(KIDS, "child", max_attempts=2) for _ in range(n))))
        if then_await:
            self.apply(w.AwaitChildren(self.now, got[0], got[1]))

    @precondition(lambda self: bool(self.running))
    @rule(pick=PICK, deadline=st.sampled_from([None, 60]))
    def await_children(self, pick, deadline):
        got = self.live(pick)
        if got is not None:
            self.apply(
                w.AwaitChildren(
                    self.now, got[0], got[1], None if deadline is None else self.now + timedelta(seconds=deadline)
                )
            )

    # --- checks -----------------------------------------------------------------------------------

    @invariant()
    def every_snapshot_invariant_holds(self):
        # The model's transactions are atomic, so every state is quiescent for the R2 backstop.
        found = check_all(self.store.state, ledger=ledger_from_history(self.trace), quiescent=True)
        assert not found, "\n".join(map(str, found))

    def drain(self) -> None:
        """Stop producing work; let conformant workers run until every job is terminal."""
        for _ in range(20):
            if all(j.state in ("succeeded", "failed", "cancelled") for j in self.store.state.jobs.values()):
                return
            self.now += timedelta(hours=2)
            self.apply(w.Reclaim(self.now, w.Backoff(1, 2, 60)))
            # Clients deliver what jobs wait for; `$children` is the system's own business (§7, §8.4).
            for key in sorted(
                {
                    (j.await_scope, j.await_name)
                    for j in self.store.state.jobs.values()
                    if j.state == "awaiting" and j.await_scope is not None and j.await_name != "$children"
                }
            ):
                self.apply(ops.DeliverSignal(self.now, *key, None))
            self.apply(w.Reconcile(self.now))
            for queue in (QUEUE, KIDS):
                for job in self.apply(w.Claim(self.now, queue, "drain", 1000, lease_ttl=TTL)).jobs:
                    if self.boundary(job.id, job.attempt):
                        self.finish(job.id, job.attempt, w.Succeed("drained"))

    def teardown(self) -> None:
        self.drain()
        ledger = ledger_from_history(self.trace)
        found = check_all(self.store.state, ledger=ledger, drained=True, quiescent=True)
        found += i2_stale_acks_change_nothing(stale_acks_from_history(self.trace))
        states = [State()] + [after for *_, after in self.trace]
        found += i3_steps_immutable(states, journal=ledger.journal)
        assert not found, "\n".join(map(str, found))


ModelRun.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_random_operation_sequences_keep_every_invariant = ModelRun.TestCase
