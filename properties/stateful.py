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

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

import psycopg
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, multiple, rule

from impl.snapshot import snapshot
from impl.store import PgStore
from model import invariants as inv
from model import ops
from model import worker_ops as w
from model.ops import JobSpec, WorkflowMember
from model.queues import QueueOpts
from model.store import ModelStore
from model.transitions import judge_state_change  # issue 12

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

    # --- the comparison -----------------------------------------------------------------------

    def both(self, op: Any) -> Any:
        """Apply to both stores; results and full snapshots must be equal; store-level invariants hold."""
        before = self.model.state
        expected = _outcome(lambda: self.model.apply(op))
        actual = _outcome(lambda: self.pg.apply(op))
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
        illegal = judge_state_change(
            before,
            after,
            getattr(op, "now", None),
            retry=isinstance(op, ops.Retry),
            ignore=frozenset({"lease_forward"}),
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
        return multiple(*((j.id, j.attempt) for j in result.jobs))

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
        self.both(w.Ack(self.now, claim[0], claim[1], outcome))

    @rule(claim=claims, outcome=outcomes)
    def ack_possibly_stale(self, claim: tuple[int, int], outcome: w.Outcome) -> None:
        """Acks with an attempt that may have been reclaimed or already acked: the fence decides."""
        self.both(w.Ack(self.now, claim[0], claim[1], outcome))

    @rule(claims_=st.lists(consumes(claims), min_size=1, max_size=3, unique_by=lambda c: c[0]), outcome=outcomes)
    def ack_many(self, claims_: list[tuple[int, int]], outcome: w.Outcome) -> None:
        self.both(w.AckMany(self.now, tuple(w.Ack(self.now, j, a, outcome) for j, a in claims_)))

    @rule(target=scopes, scope=st.sampled_from(["s1", "s2"]))
    def user_scope(self, scope: str) -> str:
        return scope

    @rule(
        claim=consumes(claims), scope=scopes, name=st.sampled_from(["go", "stop"]), deadline=st.sampled_from([None, 30])
    )
    def park_await(self, claim: tuple[int, int], scope: str, name: str, deadline: int | None) -> None:
        until = None if deadline is None else self.now + timedelta(seconds=deadline)
        self.both(w.ParkAwait(self.now, claim[0], claim[1], scope, name, until))

    @rule(claim=consumes(claims), name=st.sampled_from(["go"]))
    def park_on_own_scope(self, claim: tuple[int, int], name: str) -> None:
        self.both(w.ParkAwait(self.now, claim[0], claim[1], f"job:{claim[0]}", name, self.now + timedelta(seconds=30)))

    @rule(scope=scopes, name=st.sampled_from(["go", "stop"]), payload=small_json)
    def signal(self, scope: str, name: str, payload: Any) -> None:
        self.both(ops.DeliverSignal(self.now, scope, name, payload))

    @rule(job=jobs, payload=small_json)
    def signal_job_scope(self, job: int, payload: Any) -> None:
        self.both(ops.DeliverSignal(self.now, f"job:{job}", "go", payload))

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
