"""Model vs PostgreSQL, step by step: a Hypothesis `RuleBasedStateMachine` over the whole vocabulary.

Every rule builds ONE operation (with its `now` and every other input), applies it to the model
(`model.store.ModelStore`) and to the reference implementation (`impl.store.PgStore`), and fails at
the first difference in the results or in a snapshot of every observable row (jobs, steps, events,
signals, rate windows, queues, crons, and the id sequence). After each step the §11 invariant
predicates run on both states. Hypothesis shrinks a failure to a minimal run and prints it as
replayable code.

Bundles carry what later rules need: job ids (`jobs`), claimed attempts (`claims`: (job_id, attempt),
some of which are stale by the time they are used) and signal scopes.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

import psycopg
from hypothesis import HealthCheck, settings, target
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, multiple, precondition, rule

from impl.store import PgStore
from impl.store.snapshot import snapshot
from model import invariants as inv
from model import ops
from model import worker_ops as w
from model.ops import JobSpec, WorkflowMember
from model.queues import QueueOpts
from model.store import ModelStore, transition
from model.transitions import judge_state_change  # issue 12
from properties import statements

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
QUEUES = ("a", "b")
NODES = ("n1", "n2")
TABLES = ("jobs", "steps", "events", "signals", "rate", "queues", "crons", "next_id")
OPTS = {
    "plain": QueueOpts(),
    "global": QueueOpts.parse({"global_limit": 2}),
    "rate": QueueOpts.parse({"rate": {"allowed": 3, "period": 60, "estimate": 1}}),
    "rate_est": QueueOpts.parse({"rate": {"allowed": 5, "period": 30, "estimate": 2, "resource": "llm"}}),
    "partition": QueueOpts.parse({"limit": 2, "partition": {"field": "input", "key": "t"}}),
    "partition_global": QueueOpts.parse({"global_limit": 3, "partition": {"field": "meta", "key": "t"}}),
}

RESET_SQL = """
DELETE FROM belay_jobs; DELETE FROM belay_steps; DELETE FROM belay_events; DELETE FROM belay_signals;
DELETE FROM belay_rate; DELETE FROM belay_queues; DELETE FROM belay_crons;
SELECT setval('belay_jobs_id_seq', 1, false);
"""

# Profiles: `ci` (the default under CI=true) is derandomized — the same examples every run — with 200
# examples of up to 50 steps; `dev` explores randomly. Select one with BELAY_HYPOTHESIS_PROFILE.
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)
settings.register_profile(
    "dev",
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)
PROFILE = os.environ.get("BELAY_HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")

TARGETS = ("jobs claimed in groups", "live claims acked in bulk", "bulk succeeds with distinct results")

# The database the machine drives; set by the test (a fresh migrated database per test module).
TARGET: dict[str, Any] = {}

small_json = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.sampled_from(["x", "y", ""]),
    st.dictionaries(st.sampled_from(["k", "t"]), st.integers(0, 2), max_size=2),
)
partition_value = st.sampled_from(["x", "y", None, 1])


def job_specs(**overrides: Any) -> st.SearchStrategy[JobSpec]:
    @st.composite
    def build(draw: st.DrawFn) -> JobSpec:
        mode = draw(st.sampled_from([None, None, "incomplete", "window", "always"]))
        return JobSpec(
            overrides.get("queue", draw(st.sampled_from(QUEUES))),
            draw(st.sampled_from(["echo", "steps"])),
            {"t": draw(partition_value), "v": draw(small_json)},
            meta={"t": draw(partition_value)},
            priority=draw(st.integers(0, 2)),
            max_attempts=draw(st.integers(1, 3)),
            scheduled_at=draw(st.sampled_from([None, None, T0 + timedelta(seconds=40)])),
            unique_key=None if mode is None else draw(st.sampled_from(["k1", "k2"])),
            unique_mode=mode,
            unique_window=60 if mode == "window" else None,
            budget_usd_micros=draw(st.sampled_from([None, None, 5, 10])),
            budget_tokens=draw(st.sampled_from([None, 3])),
        )

    return build()


class BelayMachine(RuleBasedStateMachine):
    retries_emit = True  # the reference retries its emits (EmitEvent.once); an SDK adapter's machine does not
    jobs = Bundle("jobs")
    claims = Bundle("claims")
    scopes = Bundle("scopes")

    def __init__(self) -> None:
        super().__init__()
        self.model = ModelStore()
        self.pg: PgStore = TARGET["store"]
        self.conn: psycopg.Connection = TARGET["conn"]
        self.conn.execute(RESET_SQL)
        self.now = T0
        self.steps = 0
        # Hypothesis target(): one score per label per example (reported at teardown), steering the
        # generation towards programs that reach the batched paths with live claims.
        self.targets: Counter[str] = Counter()
        self.staged = False

    def teardown(self) -> None:
        for label in TARGETS:
            target(float(self.targets[label]), label=label)

    # --- the comparison -----------------------------------------------------------------------

    def both(self, op: Any) -> Any:
        """Apply to both stores; results and full snapshots must be equal; store-level invariants hold."""
        before = self.model.state
        expected = _outcome(lambda: self.model.apply(op))
        rec = statements.RECORDER
        rec.rule = _rule_name()
        rec.rules[rec.rule] += 1
        try:
            actual = _outcome(lambda: self.pg.apply(op))
        finally:
            rec.rule = None
        assert expected == actual, f"{type(op).__name__} results differ:\n model: {expected}\n pg:    {actual}"
        state = snapshot(self.conn)
        for table in TABLES:
            mine, theirs = getattr(self.model.state, table), getattr(state, table)
            if mine != theirs:
                raise AssertionError(f"after {op!r}: table {table} differs:\n{_diff(mine, theirs)}")
        self.steps += 1
        self.contract_invariants(op, expected, before, state)
        return expected

    def contract_invariants(self, op: Any, result: Any, before: Any, after: Any) -> None:
        """§11 on the PostgreSQL snapshot (equal to the model's by now). I4's "fail on the crossing step"
        and I1's "all reach a terminal state" are worker behaviour, which this machine does not imitate
        (it acks at random): the runtime tests and the soak check those."""
        ledger = inv.ledger_from_history(self.model.history)
        violations = [
            *inv.i1_no_job_lost(after, ledger.inserted, drained=False, pruned=ledger.pruned),
            *inv.i2_stale_acks_change_nothing(inv.stale_acks_from_history([(op, result, before, after)])),
            *inv.i3_steps_immutable([before, after]),
            *inv.i5_settlement_consistent(after, retried=ledger.retried),
            *inv.i6_cron_slots_once(after, ledger.cron_slots),
            *inv.i7_unique_keys(after),
            *inv.i8_children_as_declared(after, pruned=ledger.pruned),
            *inv.i9_awaiters_eventually_run(after, quiescent=False),
        ]
        assert not violations, "; ".join(map(str, violations))
        # issue 12: every row change is a legal §4 transition (model/transitions.py, shared with the soak's
        # history checker). This machine renews with arbitrary extensions, so lease_forward is not its rule.
        ignore = frozenset({"lease_forward"})
        if isinstance(op, w.AckClaim):
            # Two writes in one transaction (a snoozed row may be claimed again at once): judge each
            # against the model's state between them (the acks, then the claim).
            try:
                mid, _ = transition(before, op.acks)
            except Exception:  # noqa: BLE001 - the acks raised: nothing changed
                mid = before
            illegal = judge_state_change(before, mid, op.acks.now, ignore=ignore)
            illegal += judge_state_change(mid, after, op.claim.now, ignore=ignore)
        else:
            illegal = judge_state_change(
                before, after, getattr(op, "now", None), retry=isinstance(op, ops.Retry), ignore=ignore
            )
        assert not illegal, f"after {op!r}: " + "; ".join(illegal)

    # --- enqueue --------------------------------------------------------------------------------

    @initialize(target=jobs, specs=st.lists(job_specs(), min_size=1, max_size=3))
    def seed(self, specs: list[JobSpec]) -> Any:
        return self._enqueue(specs)

    @rule(target=jobs, specs=st.lists(job_specs(), min_size=1, max_size=3))
    def enqueue(self, specs: list[JobSpec]) -> Any:
        return self._enqueue(specs)

    def _enqueue(self, specs: list[JobSpec]) -> Any:
        result = self.both(ops.Enqueue(self.now, tuple(specs)))
        if isinstance(result, ops.Enqueued):
            return multiple(*result.ids)
        return multiple()

    @rule(
        target=jobs,
        deps=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=3),
        ignore=st.sampled_from([(), ("failed",), ("cancelled",), ("failed", "cancelled")]),
    )
    def enqueue_workflow(self, deps: list[tuple[bool, bool]], ignore: tuple[str, ...]) -> Any:
        """A chain-ish DAG: member i may depend on i-1 and/or i-2."""
        members = [WorkflowMember("m0", JobSpec("a", "echo"))]
        for i, (prev, prev2) in enumerate(deps, start=1):
            d = tuple(n for n, keep in ((f"m{i - 1}", prev), (f"m{i - 2}", prev2 and i >= 2)) if keep)
            members.append(WorkflowMember(f"m{i}", JobSpec(QUEUES[i % 2], "echo"), d, ignore if d else ()))
        result = self.both(ops.EnqueueWorkflow(self.now, f"wf{self.steps}", tuple(members)))
        return multiple(*(i for _, i in result.ids)) if isinstance(result, ops.WorkflowEnqueued) else multiple()

    @rule(target=jobs, since=st.sampled_from([1, 3]), paused=st.booleans())
    def fire_crons(self, since: int, paused: bool) -> Any:
        if paused:
            self.both(ops.PutCron(self.now, "dyn", "*/2 * * * *", "echo", {}, {"queue": "b"}, paused=True))
        static = (w.CronDef("every", "* * * * *", "echo", queue="a"), w.CronDef("dyn", "* * * * *", "echo"))
        result = self.both(w.FireCrons(self.now, self.now - timedelta(minutes=since), static))
        return multiple(*(f.job_id for f in result.fired if f.inserted))

    # --- claims and leases --------------------------------------------------------------------------

    @rule(
        target=claims,
        queue=st.sampled_from(QUEUES),
        node=st.sampled_from(NODES),
        demand=st.integers(0, 4),
        opts=st.sampled_from(sorted(OPTS)),
        ttl=st.sampled_from([10, 30]),
    )
    def claim(self, queue: str, node: str, demand: int, opts: str, ttl: int) -> Any:
        result = self.both(w.Claim(self.now, queue, node, demand, timedelta(seconds=ttl), OPTS[opts]))
        self._claimed(result)
        return multiple(*((j.id, j.attempt) for j in result.jobs))

    @rule(
        target=claims,
        queue=st.sampled_from(QUEUES),
        node=st.sampled_from(NODES),
        demand=st.integers(2, 6),
        opts=st.sampled_from(["plain", "plain", "global", "partition", "rate", "rate_est"]),
    )
    def claim_chunk(self, queue: str, node: str, demand: int, opts: str) -> Any:
        """A chunk worker's grouped claim: several jobs at once, mostly on a plain queue (issue 32: the
        batched paths are reached as often as the single-row ones)."""
        result = self.both(w.Claim(self.now, queue, node, demand, timedelta(seconds=30), OPTS[opts]))
        self._claimed(result)
        return multiple(*((j.id, j.attempt) for j in result.jobs))

    @rule(target=jobs, queue=st.sampled_from(QUEUES), n=st.integers(2, 6), value=small_json)
    def enqueue_chunk(self, queue: str, n: int, value: Any) -> Any:
        """A bulk enqueue of ready jobs sharing every column (the compact insert's all-scalar shape): the
        work the chunk rules claim."""
        return self._enqueue([JobSpec(queue, "echo", {"v": value}, max_attempts=2) for _ in range(n)])

    @precondition(lambda self: not self.staged)
    @rule(target=jobs, n=st.integers(65, 70), scheduled=st.booleans())
    def enqueue_large(self, n: int, scheduled: bool) -> Any:
        """A batch above impl.store's array limit with more than four varying columns: the staged insert
        (binary COPY into a temp table, then insert_staged_jobs). Once per program: it is 65+ rows."""
        self.staged = True
        at = T0 + timedelta(seconds=40) if scheduled else None
        specs = [
            JobSpec(
                QUEUES[i % 2],
                ("echo", "steps")[i % 3 == 0],
                {"i": i},
                meta={"t": i % 3},
                priority=i % 3,
                max_attempts=1 + i % 2,
                scheduled_at=at if i % 4 == 0 else None,
            )
            for i in range(n)
        ]
        return self._enqueue(specs)

    def _claimed(self, result: Any) -> None:
        n = len(result.jobs)
        statements.RECORDER.paths[
            "claim: grouped (2+ jobs)" if n > 1 else "claim: one job" if n else "claim: none"
        ] += 1
        if n > 1:
            self.targets["jobs claimed in groups"] += n

    @rule(node=st.sampled_from(NODES), ids=st.lists(jobs, max_size=4), extend=st.sampled_from([5, 30]))
    def renew(self, node: str, ids: list[int], extend: int) -> None:
        self.both(w.Renew(self.now, node, tuple(ids), self.now + timedelta(seconds=extend)))

    @rule()
    def reclaim(self) -> None:
        self.both(w.Reclaim(self.now, w.Backoff(1, 2, 20), limit=3))

    @rule(job=jobs)
    def foreign_unscheduled_row(self, job: int) -> None:
        """A foreign SDK may leave a ready job's ready_at NULL (§4: claimable when ready_at IS NULL);
        write that into both stores the way such an SDK would, so NULLS FIRST ordering is exercised."""
        row = self.model.state.jobs.get(job)
        if row is None or row.state != "ready":
            return
        self.model.state = replace(
            self.model.state, jobs=MappingProxyType({**self.model.state.jobs, job: replace(row, ready_at=None)})
        )
        self.conn.execute("UPDATE belay_jobs SET ready_at = NULL WHERE id = %s AND state = 'ready'", (job,))

    @rule(seconds=st.sampled_from([1, 5, 11, 31, 61, 3600, 2 * 86400]))
    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    # --- acks -----------------------------------------------------------------------------------------

    outcomes = st.one_of(
        st.builds(w.Succeed, small_json),
        st.builds(
            w.Fail,
            st.sampled_from(["boom", "budget_exceeded"]),
            st.sampled_from([None, "detail"]),
            st.sampled_from([None, T0 + timedelta(seconds=5)]),
        ),
        st.just(w.CancelSelf()),
        st.builds(w.Snooze, st.sampled_from([T0, T0 + timedelta(seconds=20)])),
    )

    @rule(claim=consumes(claims), outcome=outcomes)
    def ack(self, claim: tuple[int, int], outcome: w.Outcome) -> None:
        self._ack_one(claim, outcome)

    @rule(claim=claims, outcome=outcomes)
    def ack_possibly_stale(self, claim: tuple[int, int], outcome: w.Outcome) -> None:
        """Acks with an attempt that may have been reclaimed or already acked: the fence decides."""
        self._ack_one(claim, outcome)

    def _ack_one(self, claim: tuple[int, int], outcome: w.Outcome) -> None:
        live = self._live(*claim)
        self.both(w.Ack(self.now, claim[0], claim[1], outcome))
        statements.RECORDER.paths["ack: one, live" if live else "ack: one, not live"] += 1

    @rule(
        target=claims,
        outcome=st.sampled_from(["succeed", "fail", "retry", "cancel"]),
        ignore=st.sampled_from([(), ("failed", "cancelled")]),
        bulk=st.booleans(),
        again=st.booleans(),
    )
    def settle_workflow(self, outcome: str, ignore: tuple[str, ...], bulk: bool, again: bool) -> Any:
        """A workflow run to its settlement: root m0 and m1 (after m0, ignoring `ignore`) on queue `w`
        (no other rule claims it), the root claimed and acked alone or in a bulk ack; m1 is then released
        or doomed (§8.3) — the path through ack_succeed (a member is never a solo succeed), release_held
        and doom_held. m1's claim, if released, joins the live claims."""
        members = (
            WorkflowMember("m0", JobSpec("w", "echo", max_attempts=2)),
            WorkflowMember("m1", JobSpec("w", "echo"), ("m0",), ignore),
        )
        run = f"sw{self.steps}"
        self.both(ops.EnqueueWorkflow(self.now, run, members))
        claimed = self.both(w.Claim(self.now, "w", "n1", 1, timedelta(seconds=30), OPTS["plain"]))
        self._claimed(claimed)
        done: w.Outcome = {  # type: ignore[assignment]  # the dict's values are all outcomes
            "succeed": w.Succeed({"m": 0}),
            "fail": w.Fail("boom", None, None),
            "retry": w.Fail("boom", None, self.now),
            "cancel": w.CancelSelf(),
        }[outcome]
        for job in claimed.jobs:
            if bulk:
                self._ack_many([(job.id, job.attempt, done, self.now)], "workflow member")
            else:
                self._ack_one((job.id, job.attempt), done)
        if again:  # §8.6: retry what ended (the doomed member first: its deps are checked, missing_deps)
            rows = self.model.state.jobs
            for job_id in sorted((i for i, r in rows.items() if r.workflow_id == run), reverse=True):
                self.both(ops.Retry(self.now, job_id))
        then = self.both(w.Claim(self.now, "w", "n2", 2, timedelta(seconds=30), OPTS["plain"]))
        self._claimed(then)
        return multiple(*((j.id, j.attempt) for j in then.jobs))

    @rule(attempts=st.integers(1, 2), ttl=st.sampled_from([10, 30]))
    def lease_expires(self, attempts: int, ttl: int) -> None:
        """A claimed job whose node dies: its lease runs out and the sweeper retries it (attempts left)
        or fails it (none left) — reclaim_retry / reclaim_fail with a live expired lease."""
        self.both(ops.Enqueue(self.now, (JobSpec("x", "echo", max_attempts=attempts),)))
        claimed = self.both(w.Claim(self.now, "x", "n1", 1, timedelta(seconds=ttl), OPTS["plain"]))
        self._claimed(claimed)
        self.now += timedelta(seconds=ttl + 1)
        self.both(w.Reclaim(self.now, w.Backoff(1, 2, 20), limit=3))

    # Bulk acks (AckMany). `ack_many` is a chunk's shared outcome (a shared Succeed is
    # ack_succeed_many_same); `ack_many_distinct` gives each ack its own result and time
    # (ack_succeed_many), mixed with other outcomes; `ack_many_possibly_stale` batches claims that may have
    # been reclaimed or acked already. Claims are drawn without `unique_by` (a rejected draw wastes the
    # example) and deduplicated per job here: AckMany acks a job once.

    @rule(claims_=st.lists(consumes(claims), min_size=1, max_size=4), outcome=outcomes)
    def ack_many(self, claims_: list[tuple[int, int]], outcome: w.Outcome) -> None:
        self._ack_many([(j, a, outcome, self.now) for j, a in _per_job(claims_)], "shared outcome")

    @rule(
        claims_=st.lists(consumes(claims), min_size=1, max_size=4),
        mixed=st.lists(st.one_of(st.none(), outcomes), min_size=4, max_size=4),
        stagger=st.booleans(),
    )
    def ack_many_distinct(self, claims_: list[tuple[int, int]], mixed: list[w.Outcome | None], stagger: bool) -> None:
        acks: list[tuple[int, int, w.Outcome, datetime]] = []
        for i, (j, a) in enumerate(_per_job(claims_)):
            given = mixed[i]
            outcome = given if given is not None else w.Succeed({"job": j})  # None: a result of its own
            at = self.now - timedelta(milliseconds=250 * i) if stagger else self.now
            acks.append((j, a, outcome, at))
        self._ack_many(acks, "distinct outcomes")

    @rule(claims_=st.lists(claims, min_size=1, max_size=4), same=st.booleans())
    def ack_many_possibly_stale(self, claims_: list[tuple[int, int]], same: bool) -> None:
        acks = [(j, a, w.Succeed(None if same else j), self.now) for j, a in _per_job(claims_)]
        self._ack_many(acks, "possibly stale")

    def _ack_many(self, acks: Sequence[tuple[int, int, w.Outcome, datetime]], kind: str) -> Any:
        live = sum(1 for j, a, _, _ in acks if self._live(j, a))
        result = self.both(w.AckMany(self.now, tuple(w.Ack(at, j, a, o) for j, a, o, at in acks)))
        succeeds = sum(1 for _, _, o, _ in acks if isinstance(o, w.Succeed))
        statements.RECORDER.paths[f"ack_many: {kind}, {'2+' if len(acks) > 1 else '1'} acks, {min(live, 2)}+ live"] += 1
        if live > 1:
            self.targets["live claims acked in bulk"] += live
        if succeeds > 1 and len({repr(o) for _, _, o, _ in acks}) > 1:
            self.targets["bulk succeeds with distinct results"] += succeeds
        return result

    def _live(self, job: int, attempt: int) -> bool:
        row = self.model.state.jobs.get(job)
        return row is not None and row.state == "running" and row.attempt == attempt

    @rule(
        target=claims,
        queue=st.sampled_from(QUEUES),
        node=st.sampled_from(NODES),
        demand=st.integers(2, 5),
        done=st.integers(1, 5),
        same=st.booleans(),
    )
    def chunk_refill(self, queue: str, node: str, demand: int, done: int, same: bool) -> Any:
        """The runtime's chunk execution (impl/runtime/producer.py _Producer.refill): claim a chunk, ack the first
        `done` of its jobs in one bulk ack (shared or distinct results), then claim as many jobs as it
        acked for the freed slots. The chunk's unacked jobs and the refill's are live claims."""
        claimed = self.both(w.Claim(self.now, queue, node, demand, timedelta(seconds=30), OPTS["plain"]))
        self._claimed(claimed)
        finished, kept = claimed.jobs[:done], claimed.jobs[done:]
        if not finished:
            return multiple()
        acks = [(j.id, j.attempt, w.Succeed(None if same else j.id), self.now) for j in finished]
        result = self._ack_many(acks, "chunk")
        freed = sum(1 for r in result.results if isinstance(r, w.Acked))
        refill = self.both(w.Claim(self.now, queue, node, freed, timedelta(seconds=30), OPTS["plain"]))
        statements.RECORDER.paths["chunk refill: " + ("claimed" if refill.jobs else "nothing left")] += 1
        return multiple(*((j.id, j.attempt) for j in (*kept, *refill.jobs)))

    @rule(
        target=claims,
        claims_=st.lists(consumes(claims), min_size=1, max_size=3, unique_by=lambda c: c[0]),
        outcomes_=st.lists(outcomes, min_size=3, max_size=3),
        queue=st.sampled_from(QUEUES),
        node=st.sampled_from(NODES),
        demand=st.integers(0, 3),
    )
    def ack_claim(
        self,
        claims_: list[tuple[int, int]],
        outcomes_: list[w.Outcome],
        queue: str,
        node: str,
        demand: int,
    ) -> Any:
        """The runtime's group commit (issue 33): a group of acks, each its own outcome, and the claim of
        the slots they free, in one transaction. When `demand` is odd every ack is a succeed (a drawn
        outcome of another kind becomes Succeed(None)): the runtime's commonest group, which PostgreSQL
        commits as one statement (ack_claim_solo) unless an acked row is a workflow member or a child."""
        if demand % 2:
            outcomes_ = [o if isinstance(o, w.Succeed) else w.Succeed(None) for o in outcomes_]
        pairs = zip(claims_, outcomes_, strict=False)
        acks = w.AckMany(self.now, tuple(w.Ack(self.now, j, a, o) for (j, a), o in pairs))
        result = self.both(w.AckClaim(acks, w.Claim(self.now, queue, node, demand, timedelta(seconds=30))))
        if not isinstance(result, w.AckedClaimed):
            return multiple()
        return multiple(*((j.id, j.attempt) for j in result.claimed.jobs))

    @rule(target=scopes, scope=st.sampled_from(["s1", "s2"]))
    def user_scope(self, scope: str) -> str:
        return scope

    @rule(
        claim=consumes(claims), scope=scopes, name=st.sampled_from(["go", "stop"]), deadline=st.sampled_from([None, 30])
    )
    def park_await(self, claim: tuple[int, int], scope: str, name: str, deadline: int | None) -> None:
        until = None if deadline is None else self.now + timedelta(seconds=deadline)
        self.both(w.ParkAwait(self.now, claim[0], claim[1], scope, name, until))

    @rule(claim=consumes(claims), name=st.sampled_from(["go"]), first=st.booleans())
    def park_on_own_scope(self, claim: tuple[int, int], name: str, first: bool) -> None:
        """`first`: the signal is already there when the job parks (§7's park rule: ready at once)."""
        if first:
            self.both(ops.DeliverSignal(self.now, f"job:{claim[0]}", name, {"early": True}))
        self.both(w.ParkAwait(self.now, claim[0], claim[1], f"job:{claim[0]}", name, self.now + timedelta(seconds=30)))

    @rule(scope=scopes, name=st.sampled_from(["go", "stop"]), payload=small_json)
    def signal(self, scope: str, name: str, payload: Any) -> None:
        self.both(ops.DeliverSignal(self.now, scope, name, payload))

    @rule(job=jobs, payload=small_json)
    def signal_job_scope(self, job: int, payload: Any) -> None:
        self.both(ops.DeliverSignal(self.now, f"job:{job}", "go", payload))
        if payload == 0:  # now and then the signal is withdrawn again before anyone parks on it
            self.both(ops.ClearSignal(f"job:{job}", "go"))

    @rule(job=jobs, payload=small_json)
    def steer(self, job: int, payload: Any) -> None:
        self.both(ops.Steer(self.now, job, payload))

    @rule(scope=scopes, name=st.sampled_from(["go", "stop"]))
    def clear_signal(self, scope: str, name: str) -> None:
        self.both(ops.ClearSignal(scope, name))

    @rule(claim=consumes(claims), seconds=st.sampled_from([0, 10, 40]))
    def sleep(self, claim: tuple[int, int], seconds: int) -> None:
        self.both(w.Sleep(self.now, claim[0], claim[1], "nap", self.now + timedelta(seconds=seconds)))

    # --- steps, events, children ------------------------------------------------------------------------

    @rule(
        claim=claims,
        name=st.sampled_from(["s1", "s2", "s3"]),
        value=small_json,
        usd=st.integers(0, 6),
        tokens=st.integers(0, 2),
    )
    def step(self, claim: tuple[int, int], name: str, value: Any, usd: int, tokens: int) -> None:
        job = claim[0]
        self.both(w.ReadStep(job, name))
        self.both(w.Preflight(job))
        self.both(w.RecordStep(self.now, job, name, value, usd, tokens))

    @rule(job=jobs, payload=small_json)
    def emit(self, job: int, payload: Any) -> None:
        self.both(w.EmitEvent(self.now, job, payload))
        # the reference's retry of that emit after a lost answer (sdk-guide §7): answered with the same
        # event, nothing appended — no draw of its own, so the derandomized examples are the ones before.
        # Not sent to an SDK adapter (properties/sdk/machine.py): how an SDK retries its emits is its own.
        if self.retries_emit:
            self.both(w.EmitEvent(self.now, job, payload, once=True))

    @rule(target=jobs, claim=claims, name=st.sampled_from(["kids", "more"]), n=st.integers(0, 3))
    def spawn(self, claim: tuple[int, int], name: str, n: int) -> Any:
        result = self.both(w.Spawn(self.now, claim[0], name, tuple(JobSpec("b", "echo") for _ in range(n))))
        return multiple(*result.child_ids) if isinstance(result, w.Spawned) else multiple()

    @rule(claim=consumes(claims), deadline=st.sampled_from([None, 60]))
    def await_children(self, claim: tuple[int, int], deadline: int | None) -> None:
        until = None if deadline is None else self.now + timedelta(seconds=deadline)
        self.both(w.AwaitChildren(self.now, claim[0], claim[1], until))

    @rule()
    def reconcile(self) -> None:
        self.both(w.Reconcile(self.now))

    # --- operator commands and retention -------------------------------------------------------------------

    @rule(job=jobs)
    def cancel(self, job: int) -> None:
        self.both(ops.Cancel(self.now, job))

    @rule(job=jobs)
    def retry(self, job: int) -> None:
        self.both(ops.Retry(self.now, job))

    @rule(
        succeeded=st.sampled_from([0, 60, None]),
        failed=st.sampled_from([0, 3600, None]),
        ttl=st.sampled_from([60, None]),
        limit=st.integers(1, 3),
    )
    def prune(self, succeeded: int | None, failed: int | None, ttl: int | None, limit: int) -> None:
        retention = {"succeeded": succeeded, "failed": failed, "cancelled": failed}
        self.both(w.Prune(self.now, retention, ttl, limit))

    @rule(job=jobs)
    def read(self, job: int) -> None:
        self.both(ops.ReadJob(job))
        self.both(ops.ReadSteps(job))
        self.both(ops.ReadEvents(job))
        self.both(ops.ReadSignals((f"job:{job}", "s1")))
        row = self.model.state.jobs.get(job)
        self.both(ops.ReadWorkflow(row.workflow_id if row is not None and row.workflow_id else "none"))

    @rule()
    def check_compat(self) -> None:
        self.both(ops.CheckCompat())

    @rule(
        queue=st.sampled_from(QUEUES),
        opts=st.sampled_from([{}, {"global_limit": 2}, {"limit": {"min": 1, "max": 3}}, {"paused": True}]),
    )
    def put_queue(self, queue: str, opts: dict) -> None:
        self.both(ops.PutQueue(self.now, queue, opts))


class SplitSpawnMachine(BelayMachine):
    """BelayMachine plus the split spawn (issue 51): §8.4's insert half alone (`SpawnChildren`), in any index
    order, with `spawn` journaling later — the shape a foreign SDK may take ("the id list is rebuilt by
    fetching those keys — never trusted from a possibly-partial insert"). A machine of its own, run by
    properties/test_stateful.py: adding the rule to BelayMachine would change the derandomized ci run whose
    counts calibrate the statement floors (docs/statements.md)."""

    @rule(
        target=BelayMachine.jobs,
        claim=BelayMachine.claims,
        name=st.sampled_from(["kids", "more"]),
        indices=st.sampled_from([(1, 0), (0,), (2,), (0, 1, 2)]),
    )
    def spawn_children(self, claim: tuple[int, int], name: str, indices: tuple[int, ...]) -> Any:
        """The insert half, then the journal as its own operation (compared after each). The journal
        follows at once: an ack of the running parent between the two would finish it with its spawn
        never journaled, which I8 forbids (the split's intermediate state is legal only until the parent
        runs past it) and no SDK's parent code does."""
        if not self._live(*claim):
            return multiple()
        children = tuple((i, JobSpec("b", "echo")) for i in indices)
        inserted = self.both(w.SpawnChildren(self.now, claim[0], name, children))
        n = max(indices) + 1
        self.both(w.Spawn(self.now, claim[0], name, tuple(JobSpec("b", "echo") for _ in range(n))))
        if isinstance(inserted, w.Spawned) and not inserted.memoized:
            return multiple(*inserted.child_ids)
        return multiple()


def _per_job(claims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The first claim of each job, in order (AckMany acks a job once)."""
    seen: dict[int, int] = {}
    for job, attempt in claims:
        seen.setdefault(job, attempt)
    return list(seen.items())


def _rule_name() -> str:
    """The machine rule applying the current operation (the first caller that is not a helper)."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_name.startswith("_") or frame.f_code.co_name == "both"):
        frame = frame.f_back  # type: ignore[assignment]
    return frame.f_code.co_name if frame is not None else "-"


def _outcome(fn: Any) -> Any:
    """A result value, or (exception type, message) for an exception."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - compared between the stores
        return ("raised", type(exc).__name__, str(exc))


def _diff(mine: Any, theirs: Any) -> str:
    if not hasattr(mine, "keys"):
        return f" model: {mine}\n pg:    {theirs}"
    lines = []
    for key in sorted(set(mine) | set(theirs), key=repr):
        if mine.get(key) != theirs.get(key):
            lines.append(f" {key!r}:\n  model: {mine.get(key)}\n  pg:    {theirs.get(key)}")
    return "\n".join(lines[:5])
