"""Runtime and Client SDK edges the existing suites did not pin down (found by planting mutants: hunt L, the
`hunt2_rt_*` mutants of properties/mutants/runtime_hunt2.py; docs/mutants.md "Mutation hunts").

Each test quotes the rule it holds the code to: the wire contract (docs/spec/belay-wire-contract.txt), the
operations spec (docs/spec/belay-operations.txt), docs/python.md, docs/sdk-guide.md, docs/connections.md,
or the docstring of the API it calls where that docstring is the documented promise. Most drive one piece
directly — a JobContext over a hand-built store, a Worker's renew/sweep/prune/refresh over a fake store,
the AckGroup, the result listener — with no worker threads and no timing; the few that need the real
store's answers use the throwaway database of the `db_url` fixture.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import psycopg
import pytest
from psycopg import errors

from impl.client import Client, _ResultListener
from impl.flag import Flag
from impl.runtime import AckGroup, QueueConfig, Worker, WorkerConfig, utc_now
from impl.runtime.faults import Connectivity, RetryPolicy, with_retries
from impl.store import PgStore
from impl.worker import JobContext, Kind, Parked, Registry, SignalTimeout, Snooze, outcome_for
from model import ops
from model import worker_ops as w
from model.envelope import encode
from model.queues import QueueOpts
from model.rows import Job
from tests.jobrows import EMPTY
from tests.test_faults import FakeTime

Q = "edges2"
T0 = datetime(2026, 12, 8, 3, 0, 30, tzinfo=UTC)
NO_BACKOFF = w.Backoff(base_s=0, factor=1, max_s=0)


def _job(job_id: int = 7, attempt: int = 1, worker: str = "k", **over: Any) -> Job:
    fields: dict[str, Any] = dict(
        id=job_id,
        queue=Q,
        worker=worker,
        input=None,
        meta=None,
        state="running",
        priority=0,
        attempt=attempt,
        max_attempts=5,
        ready_at=None,
        inserted_at=T0,
        started_at=T0,
        finished_at=None,
        **EMPTY,
    )
    fields.update(over)
    return Job(**fields)


class JobStore:
    """A job-side store by hand: the step journal is `steps` (name → value), signals are `signals`
    ((scope, name) → payload); every op applied is kept in `ops`."""

    def __init__(self, steps: dict[str, Any] | None = None, *, theirs: dict[str, Any] | None = None) -> None:
        self.steps = dict(steps or {})
        self.theirs = dict(theirs or {})  # a step another attempt journals first, between our read and write
        self.signals: dict[tuple[str, str], Any] = {}
        self.ops: list[Any] = []

    def apply(self, op: Any, conn: Any = None) -> Any:
        self.ops.append(op)
        if isinstance(op, w.Preflight):
            return w.BudgetOk()
        if isinstance(op, w.ReadStep):
            return w.StepHit(encode(self.steps[op.name])) if op.name in self.steps else w.StepMiss()
        if isinstance(op, w.RecordStep):
            inserted = op.name not in self.theirs
            value = op.value if inserted else self.theirs[op.name]
            self.steps[op.name] = value
            return w.Recorded(inserted, encode(value), op.usd_micros, op.tokens, False)
        if isinstance(op, ops.ReadSignals):
            return tuple(
                type("Sig", (), {"name": n, "payload": p})() for (s, n), p in self.signals.items() if s in op.scopes
            )
        if isinstance(op, w.Sleep):
            return w.Slept(op.job_id, op.until)
        if isinstance(op, w.ParkAwait):
            return w.Parked(op.job_id, "awaiting")
        if isinstance(op, w.AwaitChildren):
            return w.Parked(op.job_id, "awaiting")
        raise AssertionError(f"unexpected {op!r}")

    def of(self, kind: type) -> list[Any]:
        return [op for op in self.ops if isinstance(op, kind)]


def _ctx(store: JobStore, now: datetime = T0, **job: Any) -> JobContext:
    return JobContext(_job(**job), store, lambda: now)


# --- the job-code API (impl/worker.py) ------------------------------------------------------------------


def test_a_sleep_resumed_exactly_at_its_wake_time_returns_and_does_not_park_again():
    """`ctx.sleep`: durable sleep "returns at once when already slept" (impl/worker.py); the job is ready
    again at its journaled wake time (wire contract §6: claimable when ready_at <= now), so a resume whose
    clock reads exactly that instant has slept — it must not park for another whole duration."""
    until = T0
    store = JobStore({"$sleep:nap": until.isoformat()})
    _ctx(store, now=until).sleep("nap", timedelta(hours=1))
    assert not store.of(w.Sleep), "a sleep resumed at its wake time parked again"
    later = JobStore({"$sleep:nap": until.isoformat()})
    _ctx(later, now=until + timedelta(microseconds=1)).sleep("nap", 3600)
    assert not later.of(w.Sleep)
    early = JobStore({"$sleep:nap": until.isoformat()})
    with pytest.raises(Parked):
        _ctx(early, now=until - timedelta(microseconds=1)).sleep("nap", 3600)
    assert [op.until for op in early.of(w.Sleep)] == [until - timedelta(microseconds=1) + timedelta(hours=1)]


def test_a_step_whose_journal_write_lost_to_another_attempt_returns_the_journaled_value():
    """Wire contract §8.2: the journal INSERT is ON CONFLICT DO NOTHING and "step values, once journaled,
    are immutable and exactly one row per (job, name)" (§9, 3): when another attempt journaled the step
    between this attempt's read and its write, the step returns the journaled value, not the one this
    attempt computed — every later use of the step (and every replay) sees one value."""
    store = JobStore(theirs={"fetch": {"page": "theirs"}})
    assert _ctx(store).step("fetch", lambda: {"page": "mine"}) == {"page": "theirs"}
    own = JobStore()
    assert _ctx(own).step("fetch", lambda: {"page": "mine"}) == {"page": "mine"}


def test_an_await_with_a_zero_timeout_parks_with_a_deadline_of_now_not_forever():
    """`await_signal(..., timeout=...)`: SignalTimeout "when the job resumed at its deadline without it"
    (impl/worker.py), the deadline being now + timeout: a timeout of 0 (a caller's computed remaining
    time reaching zero) is a deadline of now — not "no timeout", which would park the job forever."""
    store = JobStore()
    with pytest.raises(Parked):
        _ctx(store).await_signal("go", timeout=0)
    with pytest.raises(Parked):
        _ctx(store).await_children(timeout=timedelta(0))
    with pytest.raises(Parked):
        _ctx(store).await_signal("go")
    deadlines = [op.deadline for op in store.ops if isinstance(op, (w.ParkAwait, w.AwaitChildren))]
    assert deadlines == [T0, T0, None]


def test_a_job_that_timed_out_on_one_scope_parks_on_a_signal_of_the_same_name_in_another():
    """sdk-guide §10: the claim of a due awaiting job keeps `await_scope` and `await_name`, "how the job's
    code tells a timeout from a wake-up" — a timeout of *that* await, the signal `name` in `scope`
    (impl/worker.py: SignalTimeout "when the job resumed at its deadline without it"). An await of the
    same name in another scope is another await: it parks on its own (scope, name)."""
    store = JobStore()
    ctx = _ctx(store, await_scope="job:7", await_name="approve")
    with pytest.raises(SignalTimeout):
        ctx.await_signal("approve")
    with pytest.raises(Parked):
        ctx.await_signal("approve", scope="orders")
    assert [(op.scope, op.name) for op in store.of(w.ParkAwait)] == [("orders", "approve")]


def test_a_snooze_for_a_duration_counts_from_now_not_from_the_attempts_start():
    """`Snooze(until)`: "ready again at `until`" (impl/worker.py), a timedelta meaning that long from now
    (the ack's clock) — not from when the attempt started, which for a long job is already in the past."""
    kind = Kind("k", lambda *_: None)
    ctx = _ctx(JobStore(), started_at=T0 - timedelta(hours=2))
    outcome = outcome_for(kind, ctx, Snooze(timedelta(minutes=5)), None, T0)
    assert outcome == w.Snooze(T0 + timedelta(minutes=5))
    assert outcome_for(kind, ctx, Snooze(T0 + timedelta(days=1)), None, T0) == w.Snooze(T0 + timedelta(days=1))


def test_a_raise_is_retried_after_the_kinds_backoff_for_the_attempt_that_failed():
    """docs/python.md: "raising retries with the kind's backoff"; `Backoff`: "delay(attempt) = min(base *
    factor^(attempt-1), max)" — the delay of the attempt that raised: the default's first retry comes 1 s
    later (sdk-guide §2: "the reference: the kind's backoff for errors"), the third's 4 s."""
    kind = Kind("k", lambda *_: None, backoff=w.Backoff(base_s=1, factor=2, max_s=3600))
    for attempt, delay in ((1, 1), (2, 2), (3, 4)):
        outcome = outcome_for(kind, _ctx(JobStore(), attempt=attempt), ValueError("boom"), None, T0)
        assert isinstance(outcome, w.Fail) and outcome.retry_at == T0 + timedelta(seconds=delay), (attempt, outcome)


def test_a_chunk_size_below_one_is_refused_at_registration():
    """Registry.kind's chunk options: "chunk size must be >= 1 and gather_ms >= 0" — a chunk kind of size 0
    would gather claimed jobs into chunks that never fill."""
    registry = Registry()
    for chunk in ({"size": 0}, {"size": -1}, {"size": 2, "gather_ms": -1}):
        with pytest.raises(ValueError):
            registry.kind(f"c{len(registry.kinds)}", chunk=chunk)(lambda contexts: {})
    registry.kind("ok", chunk={"size": 1})(lambda contexts: {})
    assert registry.kinds["ok"].chunk_size == 1


# --- the node (impl/runtime/node.py) --------------------------------------------------------------------


def _worker(
    db_url: str, registry: Registry | None = None, events: list[tuple[str, dict]] | None = None, **config: Any
) -> Worker:
    """A worker on queue Q at T0; with `events`, its telemetry events are appended there."""
    config.setdefault("queues", (QueueConfig(Q),))
    config.setdefault("node", "edge2-node")
    clock = config.pop("clock", lambda: T0)
    if events is None:
        return Worker(db_url, registry or Registry(), WorkerConfig(**config), clock=clock)
    sink = (lambda event, meta: events.append((event, meta)),)
    return Worker(db_url, registry or Registry(), WorkerConfig(**config), clock=clock, telemetry=sink)


def _stop(worker: Worker) -> None:
    """End a worker the tests drove by hand: its producers' pools and its store."""
    worker.stopping.set()
    worker.stopped.set()
    for p in worker.producers.values():
        p.pool.shutdown(wait=True)
    real = getattr(worker, "_real_store", None)
    (real or worker.store).close()


class NodeStore:
    """A node-side store by hand: answers each op with `answers[type]` (a value or a function of the op),
    keeps every op in `ops`."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.ops: list[Any] = []
        self.schema = "public"

    def apply(self, op: Any, conn: Any = None) -> Any:
        self.ops.append(op)
        answer = self.answers[type(op).__name__]
        return answer(op) if callable(answer) else answer

    def held_leases(self, node: str, queues: Any) -> list[Job]:
        self.ops.append(("held_leases", node, tuple(queues)))
        return list(self.answers["held_leases"])

    def of(self, kind: type) -> list[Any]:
        return [op for op in self.ops if isinstance(op, kind)]

    def close(self) -> None:
        pass


def _fake(worker: Worker, store: NodeStore) -> NodeStore:
    worker._real_store = worker.store  # type: ignore[attr-defined]
    worker.store = store  # type: ignore[assignment]
    return store


def test_claim_recovery_leaves_a_lease_that_a_claim_in_flight_may_have_taken(db_url):
    """Worker.recover_claims: "a row counts as an orphan only if no claim-bearing call in flight then, or
    begun since, can have leased it: its lease ends before the oldest such call began + ttl" — a lease
    ending exactly at began + ttl may be that call's own (its `now` can equal `began`), which registers it
    on return: adopting it too would run the job twice on this node. One ending a microsecond earlier is
    an orphan."""
    worker = _worker(db_url, lease_ttl=30.0)
    try:
        limit = T0 + timedelta(seconds=30)
        exact = _job(11, lease_until=limit, leased_by="edge2-node")
        before = _job(12, lease_until=limit - timedelta(microseconds=1), leased_by="edge2-node")
        _fake(worker, NodeStore(held_leases=[exact, before]))
        adopted: list[int] = []
        worker.producers[Q].adopt = lambda finished, jobs: adopted.extend(j.id for j in jobs)  # type: ignore[method-assign]
        with worker.claiming():  # a claim call in flight, begun at T0
            assert worker.recover_claims() == 1
        assert adopted == [12], f"adopted {adopted}: a lease a claim in flight may hold was taken for an orphan"
        assert worker._recover_due, "recovery must look again while a call is in flight"
    finally:
        _stop(worker)


def test_a_sweep_whose_reconciler_woke_a_parent_pokes_the_producers(db_url):
    """operations spec: "Local pokes (always on): inserts, releases, and completions poke producers on the
    same node instantly" — a sweep whose `$children` reconciler made a parked parent ready (R2) is such a
    release: the producers claim it now, not after their idle poll."""
    worker = _worker(db_url)
    try:
        _fake(
            worker,
            NodeStore(
                Reclaim=w.Reclaimed((), ()),
                Reconcile=w.Reconciled((42,)),
                FireCrons=w.CronsFired(()),
                Prune=w.Pruned((), 0, 0),
            ),
        )
        producer = worker.producers[Q]
        producer.poked.clear()
        worker.sweep_once(T0 - timedelta(minutes=1))
        assert producer.poked.is_set(), "a parent the reconciler made ready did not poke the producer"
    finally:
        _stop(worker)


def test_a_queue_row_that_lowers_limit_max_clamps_the_running_limit(db_url, monkeypatch):
    """Worker.refresh_queues: "Merge belay_queues rows over static options (runtime CRUD reconciled by every
    node)" — a row `{"limit": {"min": 1, "max": 2}}` put on a queue whose adaptive limit had grown to 8
    brings this node's limit down to 2 at the next refresh, not when an idle round happens to decay it."""
    worker = _worker(db_url, queues=(QueueConfig(Q, QueueOpts(limit_min=1, limit_max=8)),))
    try:
        producer = worker.producers[Q]
        producer.limit = 8
        monkeypatch.setattr(worker, "_queue_rows", lambda: {Q: {"limit": {"min": 1, "max": 2}}})
        worker.refresh_queues()
        assert producer.opts.limit_max == 2
        assert producer.limit == 2, f"the node still runs {producer.limit} jobs at once on a queue limited to 2"
    finally:
        _stop(worker)


def test_the_listener_listens_while_any_queue_has_a_free_slot(db_url):
    """Worker._wants_pokes: "while every queue's slots are all taken the listener does not LISTEN" — only
    then: a node with one saturated queue and one with free slots still listens, or the free queue's
    inserts elsewhere reach it only at its poll (operations spec, the pg_notify accelerator)."""
    worker = _worker(db_url, queues=(QueueConfig(Q, QueueOpts(limit_min=1, limit_max=1)), QueueConfig("other")))
    try:
        busy = worker.producers[Q]
        busy.running[1] = JobContext(_job(1), JobStore(), worker.clock)
        assert busy.saturated() and not worker.producers["other"].saturated()
        assert worker._wants_pokes()
        worker.producers["other"].opts = QueueOpts(paused=True)
        assert not worker._wants_pokes()
    finally:
        _stop(worker)


def test_a_job_that_parks_is_reported_as_a_stop_not_as_an_exception(db_url):
    """Telemetry (docs/operations.md): `job.exception` is for job code that raised; a job that parks
    (sleep, await) ends its attempt with its park, which is no failure — its execution reports
    `job.stop` with state `parked`."""
    registry = Registry()

    @registry.kind("napper", queue=Q)
    def napper(ctx: JobContext, input: Any) -> None:
        ctx.sleep("nap", 60)

    events: list[tuple[str, dict]] = []
    worker = _worker(db_url, registry, events)
    try:
        producer = worker.producers[Q]
        ctx = JobContext(_job(5, worker="napper"), JobStore(), worker.clock)
        producer.running[5] = ctx
        worker.execute(producer, ctx)
        ends = [(e, m.get("state")) for e, m in events if e in ("job.stop", "job.exception")]
        assert ends == [("job.stop", "parked")], ends
        assert not producer.running
    finally:
        _stop(worker)


# --- the producer, the ack group, the executor ----------------------------------------------------------------


def test_the_claim_event_reports_the_jobs_claimed_not_the_demand(db_url):
    """Telemetry (docs/operations.md): the runtime emits `claim` with what the claim did — its `demand` and
    the jobs it `claimed` (a queue drained dry claims fewer than it asked for)."""
    events: list[tuple[str, dict]] = []
    worker = _worker(db_url, events=events)
    try:
        _fake(worker, NodeStore(Claim=w.Claimed((_job(9),))))
        assert [j.id for j in worker.producers[Q].claim_jobs(3)] == [9]
        claims = [(m["demand"], m["claimed"]) for e, m in events if e == "claim"]
        assert claims == [(3, 1)], claims
    finally:
        _stop(worker)


def test_a_group_of_acks_commits_at_the_latest_of_its_acks_clocks():
    """AckGroup: a batch commits "as one `AckMany`" whose after-terminal steps run "once for all" at the
    batch's `now` — the latest of its acks' clocks: an ack is never written at an instant before the
    moment its own execution read the clock (wire contract §2: each write carries its `now`; the soak's
    freshness rule judges a batch at its latest now)."""
    seen: list[w.AckMany] = []

    def many(acks: w.AckMany, tags: tuple) -> w.AckedMany:
        seen.append(acks)
        return w.AckedMany(tuple(w.Acked(a.job_id, "succeeded") for a in acks.acks))

    group = AckGroup(lambda op: w.Acked(op.job_id, "succeeded"), many, max_batch=8)
    later, earlier = T0 + timedelta(seconds=2), T0
    group._busy = True  # a commit in flight: both acks queue up behind it
    results: list[Any] = []
    group.ack_then(w.Ack(later, 1, 1, w.Succeed(None)), None, lambda wt: results.append(wt.outcome()))
    group.ack_then(w.Ack(earlier, 2, 1, w.Succeed(None)), None, lambda wt: results.append(wt.outcome()))
    group._busy = False
    group.ack_then(w.Ack(earlier, 3, 1, w.Succeed(None)), None, lambda wt: results.append(wt.outcome()))
    assert len(results) == 3 and len(seen) == 1
    assert seen[0].now == later, f"the batch committed at {seen[0].now}, before an ack's own clock {later}"


# --- transient faults (impl/runtime/faults.py) --------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [errors.DeadlockDetected("deadlock"), errors.LockNotAvailable("lock timeout"), errors.SerializationFailure("s")],
    ids=["deadlock", "lock_timeout", "serialization"],
)
def test_a_deadlock_or_lock_timeout_is_retried_but_is_no_database_outage(fault):
    """docs/python.md: the worker "logs one line per change (`database unreachable …`, `database reachable
    again …`)" and `--exit-on-unreachable SECONDS` makes it exit after the database was unreachable that
    long; Connectivity: "`fault()` is told of every connectivity fault" — a deadlock victim or a lock
    timeout is transient (sdk-guide §7) but reaches the database fine: no outage, nothing for
    --exit-on-unreachable to count."""
    t = FakeTime()
    connectivity = Connectivity(clock=t.clock)
    faults = [fault, fault]

    def fn() -> str:
        if faults:
            raise faults.pop()
        return "ok"

    assert (
        with_retries(fn, RetryPolicy(0.05, 0.4, 60.0), sleep=t.sleep, clock=t.clock, connectivity=connectivity) == "ok"
    )
    assert (connectivity.outages, connectivity.down_since) == (0, None)


def _raise_first(faults: list[BaseException]) -> str:
    if faults:
        raise faults.pop()
    return "ok"


def test_a_shutdown_grace_of_zero_is_a_valid_configuration():
    """WorkerConfig: "shutdown_grace >= 0" — a grace of 0 (stop at once, leave running jobs to their
    leases: operations spec, Shutdown) is a valid choice, not a configuration error."""
    assert WorkerConfig(shutdown_grace=0).shutdown_grace == 0
    with pytest.raises(ValueError):
        WorkerConfig(shutdown_grace=-1)


# --- impl/flag.py -----------------------------------------------------------------------------------------------


def test_a_set_that_races_the_first_wait_is_not_lost():
    """Flag.wait: "A set() that ran before the Event existed wrote _set first and found no Event: carry it
    over" — a lease-lost flag set while an execution starts waiting on it must wake it, not leave it to
    its timeout."""
    import impl.flag

    flag = Flag()
    woke: list[bool] = []
    with impl.flag._MAKING:  # the waiter passes its first check, then blocks making the Event
        waiter = threading.Thread(target=lambda: woke.append(flag.wait(5)))
        started = time.monotonic()
        waiter.start()
        time.sleep(0.05)
        flag.set()  # finds no Event yet
    waiter.join(6)
    assert woke == [True]
    assert time.monotonic() - started < 2, "the set that raced the wait was lost: the wait ran to its timeout"


# --- the Client SDK (impl/client.py) --------------------------------------------------------------------------


def test_a_workflow_over_several_queues_pokes_each_of_them(db_url):
    """Client(on_enqueue=...): "`on_enqueue(queue)` is a local poke (e.g. `worker.poke`) called after an
    enqueue commits" — operations spec: "inserts ... poke producers on the same node instantly": a
    workflow whose members go to two queues inserts ready jobs in both, and pokes both."""
    poked: list[str] = []
    with Client(db_url, on_enqueue=poked.append) as client:
        client.enqueue_workflow(
            "wf-edges2",
            [
                ops.WorkflowMember("a", ops.JobSpec("q-one", "k")),
                ops.WorkflowMember("b", ops.JobSpec("q-two", "k")),
                ops.WorkflowMember("c", ops.JobSpec("q-two", "k"), deps=("a",)),
            ],
        )
    assert poked == ["q-one", "q-two"]


def test_an_enqueue_in_the_callers_transaction_sends_no_local_poke(db_url):
    """Client: "`on_enqueue(queue)` is a local poke ... called after an enqueue commits" and "Local pokes only
    after our own commit: a caller's transaction may still roll back (its pg_notify wake-up is delivered on
    commit instead)" — an enqueue on the caller's connection pokes nothing: the job is not visible to a claim
    until the caller commits, and after a rollback there is no job at all."""
    poked: list[str] = []
    with Client(db_url, on_enqueue=poked.append) as client:
        with psycopg.connect(db_url) as conn:
            outcome = client.enqueue("q-tx", "k", {"n": 1}, conn=conn)
            assert poked == [], "a local poke was sent before the caller's transaction committed"
            conn.rollback()
        assert client.job(outcome.id) is None
        client.enqueue("q-own", "k")
    assert poked == ["q-own"]


def _listener() -> _ResultListener:
    """A result listener's registry without its LISTEN thread (the routing of notifications only)."""
    listener = _ResultListener.__new__(_ResultListener)
    listener._lock = threading.Lock()
    listener._waiters = {}
    return listener


def test_two_awaiters_of_one_job_are_each_woken_after_the_other_gave_up():
    """_ResultListener: "Awaiters register an Event per job id" — each awaiter its own: one that ends
    (its timeout, its result) unregisters only its own Event, and a result notification still wakes the
    other awaiting the same job (§9.2 result notifications; else it waits for its polling floor)."""
    listener = _listener()
    first, second = listener.register(5), listener.register(5)
    listener.unregister(5, first)
    listener._on_payload('{"t":"r","id":5}')
    assert second.is_set() and not first.is_set()
    listener.unregister(5, second)
    assert listener._waiters == {}


def test_a_reconnected_result_listener_wakes_every_awaiter_to_re_read():
    """_ResultListener: "after a reconnect every awaiter is woken to re-read (anything missed while
    disconnected)" — notifications are at-most-once (operations spec), so a result that committed while
    the LISTEN connection was down is found by the re-read at once, not at the next poll."""
    listener = _listener()
    events = [listener.register(1), listener.register(1), listener.register(2)]
    listener._on_payload('{"t":"r","id":3}')
    assert not any(e.is_set() for e in events)
    listener._on_payload(None)  # (re)connected
    assert all(e.is_set() for e in events)


# --- §8.2 budgets and chunks, on the real store ------------------------------------------------------------------


def _states(db_url: str, ids: list[int]) -> dict[int, tuple[str, Any]]:
    with psycopg.connect(db_url, autocommit=True) as pg:
        rows = pg.execute("SELECT id, state, errors FROM belay_jobs WHERE id = ANY(%s)", (ids,)).fetchall()
    return {i: (state, errs[-1]["error"] if errs else None) for i, state, errs in rows}


def _run_chunk(db_url: str, fn: Callable[[list[JobContext]], Any], n: int = 3) -> dict[int, tuple[str, Any]]:
    registry = Registry()
    registry.kind("edge2_chunk", queue=Q, chunk={"size": 10})(fn)
    now = utc_now()
    with PgStore(db_url) as store:
        ids = store.apply(ops.Enqueue(now, tuple(ops.JobSpec(Q, "edge2_chunk", max_attempts=1) for _ in range(n)))).ids
        claimed = store.apply(w.Claim(now, Q, "edge2-node", n, timedelta(minutes=5))).jobs
    worker = _worker(db_url, registry, queues=(QueueConfig(Q, QueueOpts(limit_min=n, limit_max=n)),), clock=lambda: now)
    try:
        producer = worker.producers[Q]
        contexts = [JobContext(j, worker.store, worker.clock, call=worker.call) for j in claimed]
        with producer.lock:
            producer.running.update({c.id: c for c in contexts})
        worker.execute_chunk(producer, registry.kinds["edge2_chunk"], contexts)
        return _states(db_url, list(ids))
    finally:
        _stop(worker)


def test_a_job_missing_from_a_chunks_results_fails_and_the_others_succeed(db_url):
    """Worker.execute_chunk: "fn(contexts) returns {job_id: value | Exception} ...; a job missing from it,
    or a raise of the whole call, fails that job" (operations spec: "per-job partial failure") — it does
    not succeed with a null result nobody computed."""
    states = _run_chunk(db_url, lambda contexts: {c.id: "done" for c in contexts[1:]})
    first = min(states)
    assert states.pop(first)[0] == "failed", "a job the chunk function never answered succeeded"
    assert {s for s, _ in states.values()} == {"succeeded"}


def test_a_chunk_function_returning_more_results_than_jobs_fails_the_chunk(db_url):
    """Worker.execute_chunk: results as a list are "in context order" — a list of another length than the
    chunk cannot be matched to its jobs, so the chunk fails (RuntimeError: "chunk function returned N
    results for M jobs"), as it does for a shorter list; no job succeeds with a guessed result."""
    short = _run_chunk(db_url, lambda contexts: ["r"] * (len(contexts) - 1))
    assert {s for s, _ in short.values()} == {"failed"}
    long = _run_chunk(db_url, lambda contexts: ["r"] * (len(contexts) + 1))
    assert {s for s, _ in long.values()} == {"failed"}, long


def test_claim_recovery_never_adopts_an_execution_that_finished_while_the_census_was_read(db_url):
    """Worker._recover_claims: "Registrations are read before the census and after it: a job acked and
    forgotten while the census was read is in the first" — the census may still show its lease (read before
    the ack committed); taking it for an orphan would run a finished job again on this node."""
    worker = _worker(db_url, lease_ttl=30.0)
    try:
        producer = worker.producers[Q]
        ctx = JobContext(_job(21, lease_until=T0 + timedelta(seconds=20)), JobStore(), worker.clock)
        producer.running[21] = ctx

        def census() -> list[Job]:
            del producer.running[21]  # its ack commits and the execution is forgotten meanwhile
            return [ctx.job]

        store = _fake(worker, NodeStore(held_leases=[]))
        store.held_leases = lambda node, queues: census()  # type: ignore[method-assign]
        adopted: list[int] = []
        producer.adopt = lambda finished, jobs: adopted.extend(j.id for j in jobs)  # type: ignore[method-assign]
        assert worker.recover_claims() == 0
        assert adopted == [], "an execution that finished during the census was adopted as an orphan"
    finally:
        _stop(worker)


def test_a_renewal_that_crossed_an_executions_end_flags_nothing(db_url):
    """Worker.renew_once: "flag the executions whose lease is gone" — of executions still running: one that
    finished (and acked) between the listing and the renewal gave its lease up itself; neither it is flagged
    nor is a `lease.lost` event emitted (operations.md telemetry: lease.lost means a live attempt lost it)."""
    events: list[tuple[str, dict]] = []
    worker = _worker(db_url, events=events)
    try:
        producer = worker.producers[Q]
        ctx = JobContext(_job(31), JobStore(), worker.clock)
        producer.running[31] = ctx

        def renew(op: w.Renew) -> w.Renewed:
            producer.running.pop(31)  # the execution acked and was forgotten while the renewal ran
            return w.Renewed((), op.job_ids)

        _fake(worker, NodeStore(Renew=renew))
        assert worker.renew_once() == ()
        assert not ctx.lost.is_set()
        assert [e for e, _ in events if e == "lease.lost"] == []
    finally:
        _stop(worker)


def test_a_deferred_ack_is_led_once_the_oldest_has_waited_not_the_newest():
    """AckGroup.lead_stale leads queued acks "if none leads them and the oldest has waited `older_than`
    seconds" (`deferred_since`: "when the oldest ack queued with no leader was queued") — a stream of new
    deferred acks must not keep postponing the first one behind a long job."""
    committed: list[int] = []

    def one(op: w.Ack) -> w.Acked:
        committed.append(op.job_id)
        return w.Acked(op.job_id, "succeeded")

    def many(acks: w.AckMany, tags: tuple) -> w.AckedMany:
        committed.extend(a.job_id for a in acks.acks)
        return w.AckedMany(tuple(w.Acked(a.job_id, "succeeded") for a in acks.acks))

    group = AckGroup(one, many)
    group.ack_then(w.Ack(T0, 1, 1, w.Succeed(None)), None, lambda wt: None, defer=True)
    time.sleep(0.2)
    group.ack_then(w.Ack(T0, 2, 1, w.Succeed(None)), None, lambda wt: None, defer=True)
    assert group.lead_stale(0.1) is False, "the oldest deferred ack waited past the hand-off and was not led"
    assert sorted(committed) == [1, 2]


def test_an_outage_is_counted_once_however_many_retries_it_takes():
    """Connectivity: "A node's view of its database, logged once per change — lost, back — never once per
    retry" (docs/python.md: "it logs one line per change ..., never one per attempt"); `outages` counts
    those changes: a restart met by three retries before the database is back is one outage."""
    t = FakeTime()
    connectivity = Connectivity(clock=t.clock)
    lost = [
        psycopg.OperationalError("connection refused"),
        errors.AdminShutdown("restart"),
        errors.CannotConnectNow("s"),
    ]
    policy = RetryPolicy(0.05, 0.4, 60.0)
    assert with_retries(partial(_raise_first, lost), policy, sleep=t.sleep, clock=t.clock, connectivity=connectivity)
    assert (connectivity.outages, connectivity.down_since) == (1, None)
    again = [errors.AdminShutdown("restart")]
    assert with_retries(partial(_raise_first, again), policy, sleep=t.sleep, clock=t.clock, connectivity=connectivity)
    assert connectivity.outages == 2, "a second outage after the database came back is counted"
