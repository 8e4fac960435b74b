"""Forced interleavings on PostgreSQL: every counterexample the race explorer (model/explorer/) prints,
replayed statement by statement on a real database — threads, one connection each, failpoints
(impl/store/failpoints.py) to stop a transaction between two statements, and pg_stat_activity to see when a
connection is waiting on a lock (never a sleep standing in for "it must be blocked by now").

Each reproduction runs one schedule against a variant and returns an `Outcome`: whether the contract's
invariants (model/invariants.py, on a snapshot of the database) hold at the end, and what the schedule
observed on the way (who waited on whose lock). The real implementation must pass; the broken variant —
a test-local subclass of PgStore, confined to this file — must fail the same check. That the broken
variant fails is what shows the schedule actually reaches the race.

    r1          two last children ack together; `$children` count-gated (broken) or unconditional
    r2          await-children vs a child's ack and a signal prune; reconciler pass or not
    park_wake   await park vs signal delivery; scope lock or not
    lock_order  two acks of workflow children; one path taking the scope lock first (broken)
    settlement  operator retry of a doomed dependent; straight to ready (broken) or re-held (§8.6)
    cancel_ack  a finding: Cancel of a running workflow member racing its ack deadlocks in impl/store/client_store.py

The notebooks (notebooks/*.ipynb) import this module to show the same reproductions next to the
explorer's traces.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from impl.store import PgStore
from impl.store.failpoints import Pause, armed_points, failpoint
from impl.store.queries import SchemaSQL
from impl.store.snapshot import snapshot
from impl.testing import wait_for
from model import ops
from model import worker_ops as w
from model.invariants import i5_settlement_consistent, i9_awaiters_eventually_run
from model.ops import JobSpec, WorkflowMember
from model.rows import TERMINAL

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
TIMEOUT = 30.0  # seconds any single wait may take before the schedule is declared broken

# ---------------------------------------------------------------------------------------------------
# harness


class Client:
    """One concurrent client: its own PgStore (one connection, tagged with an application_name so
    pg_stat_activity can tell it apart) and its own thread, named after the client — failpoint
    pauses pick their thread by that name."""

    def __init__(self, url: str, name: str, store_class: type[PgStore] = PgStore) -> None:
        self.name = name
        self.app = f"belay-fi-{name}-{uuid.uuid4().hex[:8]}"
        self.store = store_class(make_conninfo(url, application_name=self.app), pool_size=1, notify=False)
        self.thread: threading.Thread | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()

    def start(self, fn: Callable[[PgStore], Any]) -> Client:
        def run() -> None:
            try:
                self.result = fn(self.store)
            except BaseException as exc:  # noqa: BLE001 - reported by join()/outcome
                self.error = exc
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run, name=self.name, daemon=True)
        self.thread.start()
        return self

    def join(self) -> Any:
        if not self.done.wait(TIMEOUT):
            raise AssertionError(f"{self.name} did not finish within {TIMEOUT}s")
        return self.result

    def close(self) -> None:
        self.store.close()


def lock_wait(observer: psycopg.Connection, client: Client) -> str | None:
    """The lock `client`'s connection is waiting on right now (pg_stat_activity), else None."""
    row = observer.execute(
        "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE application_name = %s",
        (client.app,),
    ).fetchone()
    if row is not None and row[0] == "Lock":
        return row[1]  # 'advisory', 'transactionid', 'tuple', …
    return None


def wait_until(condition: Callable[[], Any], what: str) -> Any:
    """Poll `condition` until it returns something truthy (a schedule step observed), or fail: the
    schedule stalled. Polled every 2 ms: the poll interval of an observation, not a stand-in for one."""
    return wait_for(condition, TIMEOUT, f"{what} (the schedule stalled)", interval=0.002)


def reached(pause: Pause, client: Client) -> None:
    """Wait until `client` stops at `pause`; fail at once (with its error) if it finishes instead."""
    wait_until(lambda: pause.arrived or client.done.is_set(), f"{client.name} at {pause.name}")
    if not pause.arrived:
        raise AssertionError(f"{client.name} finished before reaching {pause.name}: {client.error or client.result!r}")


def blocked_or_parked(observer: psycopg.Connection, client: Client, pause: Pause | None = None) -> str:
    """Wait until `client` waits on a lock, stops at `pause`, or finishes — and say which."""

    def seen() -> str | None:
        if pause is not None and pause.arrived:
            return f"{client.name} reached {pause.name} without waiting"
        if client.done.is_set():
            return f"{client.name} finished without waiting"
        waiting = lock_wait(observer, client)
        return f"{client.name} waits on a lock ({waiting})" if waiting else None

    return wait_until(seen, f"{client.name} blocked, paused or done")


@dataclass
class Outcome:
    """What one forced schedule ended with."""

    scenario: str
    variant: str
    ok: bool  # every invariant checked holds at the end
    violations: list[str] = field(default_factory=list)
    observed: list[str] = field(default_factory=list)  # the schedule as it happened
    errors: dict[str, str] = field(default_factory=dict)  # client → exception raised

    def report(self) -> str:
        lines = [f"{self.scenario}/{self.variant}: {'ok' if self.ok else 'VIOLATED'}"]
        lines += [f"  · {o}" for o in self.observed]
        lines += [f"  ✗ {v}" for v in self.violations]
        lines += [f"  ! {c}: {e}" for c, e in self.errors.items()]
        return "\n".join(lines)


def _state(url: str):
    with psycopg.connect(url) as conn:
        return snapshot(conn)


def _clients(url: str, **classes: type[PgStore]) -> dict[str, Client]:
    return {name: Client(url, name, cls) for name, cls in classes.items()}


def _close(clients: dict[str, Client]) -> None:
    for c in clients.values():
        c.close()


def _said(client: Client) -> str:
    """What a client's operation returned, or the first line of what it raised."""
    if client.error is not None:
        return f"{type(client.error).__name__}: {str(client.error).strip().splitlines()[0]}"
    return repr(client.result)


def _errors(clients: dict[str, Client]) -> dict[str, str]:
    return {
        n: f"{type(c.error).__name__}: {str(c.error).strip().splitlines()[0]}"
        for n, c in clients.items()
        if c.error is not None
    }


# ---------------------------------------------------------------------------------------------------
# broken variants (test-local: production code has no switch for any of them)


class CountGatedStore(PgStore):
    """R1's anti-pattern: a child delivers `$children` only if it counts no incomplete sibling."""

    def _notify_parents(self, tx, children):
        last = []
        for child, parent in children:
            if parent is None:
                continue
            incomplete = tx.cur.execute(
                "SELECT count(*) AS n FROM belay_jobs WHERE parent_id = %s AND id <> %s "
                "AND state NOT IN ('succeeded', 'failed', 'cancelled')",
                (parent, child),
            ).fetchone()["n"]
            if incomplete == 0:
                last.append((child, parent))
        super()._notify_parents(tx, last)


class _NoScopeLockSQL(SchemaSQL):
    def q(self, name: str, **extra: sql.Composable) -> sql.Composed:
        if name == "lock_scope":
            return sql.SQL("SELECT {}::text AS no_lock").format(sql.Placeholder("scope"))
        return super().q(name, **extra)


class NoScopeLockStore(PgStore):
    """Park and delivery without pg_advisory_xact_lock(hashtext('belay_sig:' || scope))."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.q = _NoScopeLockSQL(self.schema)


class ScopeFirstStore(PgStore):
    """A path taking the locks in reverse: `$children` to the parent (scope lock) before settlement
    (workflow lock)."""

    def _after_terminal(self, tx, terminal):
        terminal = list(terminal)
        self._notify_parents(tx, [(t["id"], t["parent_id"]) for t in terminal])
        for workflow_id in sorted({t["workflow_id"] for t in terminal if t["workflow_id"]}):
            tx.one("lock_workflow", {"workflow_id": workflow_id})
            _, doomed = self._settle(tx, workflow_id)
            self._notify_parents(tx, [(d["id"], d["parent_id"]) for d in doomed])


class NoReholdStore(PgStore):
    """Retry before §8.6: failed|cancelled → ready, even for a dep-bearing member; no settlement."""

    def apply(self, op, conn=None):  # the handler table binds PgStore's methods: route Retry here
        return self._retry(op, conn) if isinstance(op, ops.Retry) else super().apply(op, conn)

    def _retry(self, op, conn):
        with self.transaction(op.now) as tx:
            row = self._lock_job(tx, op.job_id)
            if row is None or row["state"] not in ("failed", "cancelled"):
                return ops.NotRetryable(op.job_id, row["state"] if row else None)
            tx.one("retry_job", {"id": op.job_id, "now": op.now, "state": "ready"})
            failpoint("retry.before_settle")
            return ops.Retried(op.job_id, "ready")


class WorkflowLockFirstCancelStore(PgStore):
    """The cancel_ack finding's broken order (the implementation before the fix): workflow lock, then
    a waiting FOR UPDATE on the job's row — which a running job's ack holds while it waits for the
    workflow lock."""

    def apply(self, op, conn=None):  # the handler table binds PgStore's methods: route Cancel here
        return self._cancel(op, conn) if isinstance(op, ops.Cancel) else super().apply(op, conn)

    def _cancel(self, op, conn):
        with self.transaction(op.now) as tx:
            header = tx.one("job_header", {"id": op.job_id})
            if header["workflow_id"] is not None:
                tx.one("lock_workflow", {"workflow_id": header["workflow_id"]})
            row = tx.cur.execute("SELECT state FROM belay_jobs WHERE id = %s FOR UPDATE", (op.job_id,)).fetchone()
            if row["state"] == "running":
                tx.cur.execute("UPDATE belay_jobs SET cancel_requested = true WHERE id = %s", (op.job_id,))
                return ops.CancelRequested(op.job_id)
            return ops.NotCancellable(op.job_id, row["state"])


def text_order_await_children(store: PgStore, parent_id: int, attempt: int) -> Any:
    """An SDK following §8.4 step by step as the contract text lists them — re-verify, clear, re-verify
    as statements of their own — then the §7 park (the real ParkAwait, under the scope lock)."""
    scope = f"job:{parent_id}"
    for step in ("first", "second"):
        states = [r["state"] for r in store.statement("children_states", {"parent_id": parent_id})]
        if all(s in TERMINAL for s in states):
            return w.ChildrenDone(())
        if step == "first":
            store.statement("clear_signal", {"scope": scope, "name": "$children"})
    failpoint("text_await.before_park")
    return store.apply(w.ParkAwait(NOW, parent_id, attempt, scope, "$children"))


# ---------------------------------------------------------------------------------------------------
# setups (through the store's own operations)


def _parent_with_children(url: str, n: int, *, park: bool) -> tuple[int, list[int]]:
    """A parent running attempt 1 (parked awaiting `$children` if `park`) and n running children."""
    with PgStore(url, notify=False) as store:
        (parent,) = store.apply(ops.Enqueue(NOW, (JobSpec("parents", "parent"),))).outcomes
        store.apply(w.Claim(NOW, "parents", "setup", 1))
        kids = store.apply(w.Spawn(NOW, parent.id, "kids", tuple(JobSpec("children", "child") for _ in range(n))))
        store.apply(w.Claim(NOW, "children", "setup", n))
        if park:
            assert store.apply(w.AwaitChildren(NOW, parent.id, 1)) == w.Parked(parent.id, "awaiting")
        return parent.id, list(kids.child_ids)


def _ack(job_id: int) -> Callable[[PgStore], Any]:
    return lambda store: store.apply(w.Ack(NOW, job_id, 1, w.Succeed(None)))


# ---------------------------------------------------------------------------------------------------
# reproductions


R1_VARIANTS = {"real": PgStore, "broken": CountGatedStore}


def reproduce_r1(url: str, variant: str) -> Outcome:
    """Explorer trace r1/broken: C1 ack · C1 count · C2 ack · C2 count · C1 commit · C2 commit."""
    store_class = R1_VARIANTS[variant]
    parent, (c1, c2) = _parent_with_children(url, 2, park=True)
    clients = _clients(url, C1=store_class, C2=store_class)
    observer = psycopg.connect(url, autocommit=True)
    observed = []
    try:
        with (
            Pause("ack.after_update", thread="C1") as c1_acked,
            Pause("ack.after_update", thread="C2") as c2_acked,
            Pause("store.before_commit", thread="C1") as c1_commit,
            Pause("store.before_commit", thread="C2") as c2_commit,
        ):
            clients["C1"].start(_ack(c1))
            reached(c1_acked, clients["C1"])
            clients["C2"].start(_ack(c2))
            reached(c2_acked, clients["C2"])
            observed.append("C1 and C2 have both written succeeded, neither committed")
            c1_acked.release()
            reached(c1_commit, clients["C1"])
            observed.append("C1 ran its after-terminal steps and stopped before COMMIT")
            c2_acked.release()
            observed.append(blocked_or_parked(observer, clients["C2"], c2_commit))
            c1_commit.release()
            clients["C1"].join()
            c2_commit.release()
            clients["C2"].join()
        state = _state(url)
    finally:
        observer.close()
        _close(clients)
    # I9 checked as if quiescent with no reconcile pass: the wake protocol alone must not strand anyone
    violations = [str(v) for v in i9_awaiters_eventually_run(state, quiescent=True)]
    observed.append("I9 checked with no reconcile pass: the wake protocol alone")
    observed.append(
        f"parent {state.jobs[parent].state}, children "
        f"{', '.join(state.jobs[c].state for c in (c1, c2))}, "
        f"$children signal {'present' if (f'job:{parent}', '$children') in state.signals else 'absent'}"
    )
    errs = _errors(clients)
    return Outcome("r1", variant, not violations and not errs, violations, observed, errs)


R2_VARIANTS = {
    "real": ("impl", True),  # impl/store/worker_store.py _await_children; the sweeper's reconciler pass
    "broken": ("text", False),  # §8.4 in the text's order, step by step; no reconciler
    "text_with_reconciler": ("text", True),  # the same SDK, rescued by the backstop
}


def reproduce_r2(url: str, variant: str) -> Outcome:
    """Explorer trace r2/broken: P re-verifies (C running) · C acks and signals · the signal is pruned ·
    P parks (signal absent) — then one sweeper pass, with or without the reconciler."""
    sdk, reconcile = R2_VARIANTS[variant]
    parent, (child,) = _parent_with_children(url, 1, park=False)
    clients = _clients(url, P=PgStore, C=PgStore, sweeper=PgStore)
    observer = psycopg.connect(url, autocommit=True)
    observed = []
    point = "await_children.before_park" if sdk == "impl" else "text_await.before_park"
    try:
        with Pause(point, thread="P") as p_checked:
            if sdk == "impl":
                clients["P"].start(lambda s: s.apply(w.AwaitChildren(NOW, parent, 1)))
            else:
                clients["P"].start(lambda s: text_order_await_children(s, parent, 1))
            reached(p_checked, clients["P"])
            observed.append(f"P re-verified (child running) and stopped before its park ({point})")
            clients["C"].start(_ack(child))
            observed.append(blocked_or_parked(observer, clients["C"]))
            pruned = clients["sweeper"].store.apply(w.Prune(NOW + timedelta(seconds=1), {}, signal_ttl=0))
            observed.append(f"the signal-TTL prune deleted {pruned.signals} signal row(s)")
            p_checked.release()
            parked = clients["P"].join()
            observed.append(f"P: {parked}")
            clients["C"].join()
        if reconcile:
            woken = clients["sweeper"].store.apply(w.Reconcile(NOW + timedelta(seconds=2)))
            observed.append(f"sweeper pass with the reconciler: woke {list(woken.woken)}")
        else:
            observed.append("sweeper pass without the reconciler")
        state = _state(url)
    finally:
        observer.close()
        _close(clients)
    violations = [str(v) for v in i9_awaiters_eventually_run(state, quiescent=True)]
    observed.append(f"parent {state.jobs[parent].state}, child {state.jobs[child].state}")
    errs = _errors(clients)
    return Outcome("r2", variant, not violations and not errs, violations, observed, errs)


PARK_WAKE_VARIANTS = {"real": PgStore, "broken": NoScopeLockStore}


def reproduce_park_wake(url: str, variant: str) -> Outcome:
    """Explorer trace park_wake/broken: W checks (absent) · D upserts, wakes (0 rows), commits · W parks."""
    store_class = PARK_WAKE_VARIANTS[variant]
    with PgStore(url, notify=False) as store:
        (job,) = store.apply(ops.Enqueue(NOW, (JobSpec("q", "waiter"),))).outcomes
        store.apply(w.Claim(NOW, "q", "setup", 1))
    clients = _clients(url, W=store_class, D=store_class)
    observer = psycopg.connect(url, autocommit=True)
    observed = []
    try:
        with Pause("park.after_check", thread="W") as checked:
            clients["W"].start(lambda s: s.apply(w.ParkAwait(NOW, job.id, 1, "s", "n")))
            reached(checked, clients["W"])
            observed.append("W read signal_exists (absent) and stopped before its park UPDATE")
            clients["D"].start(lambda s: s.apply(ops.DeliverSignal(NOW, "s", "n", {"go": True})))
            observed.append(blocked_or_parked(observer, clients["D"]))
            checked.release()
            observed.append(f"W: {clients['W'].join()}")
            observed.append(f"D: {clients['D'].join()}")
        state = _state(url)
    finally:
        observer.close()
        _close(clients)
    violations = [str(v) for v in i9_awaiters_eventually_run(state, quiescent=True)]
    observed.append(f"W {state.jobs[job.id].state}, signal {'present' if ('s', 'n') in state.signals else 'absent'}")
    errs = _errors(clients)
    return Outcome("park_wake", variant, not violations and not errs, violations, observed, errs)


LOCK_ORDER_VARIANTS = {"real": PgStore, "broken": ScopeFirstStore}


def _members_and_children(url: str) -> dict[str, int]:
    """Workflow wf (running roots m1, m2; held d with deps m1, m2) and a parent P awaiting its two
    running children k1, k2 — what two chunk workers' AckMany calls finish together."""
    with PgStore(url, notify=False) as store:
        wf = dict(
            store.apply(
                ops.EnqueueWorkflow(
                    NOW,
                    "wf",
                    (
                        WorkflowMember("m1", JobSpec("q", "member")),
                        WorkflowMember("m2", JobSpec("q", "member")),
                        WorkflowMember("d", JobSpec("q", "dependent"), deps=("m1", "m2")),
                    ),
                )
            ).ids
        )
        store.apply(w.Claim(NOW, "q", "setup", 2))
    parent, (k1, k2) = _parent_with_children(url, 2, park=True)
    return {"m1": wf["m1"], "m2": wf["m2"], "d": wf["d"], "P": parent, "k1": k1, "k2": k2}


def _ack_many(*job_ids: int) -> Callable[[PgStore], Any]:
    return lambda store: store.apply(w.AckMany(NOW, tuple(w.Ack(NOW, j, 1, w.Succeed(None)) for j in job_ids)))


def reproduce_lock_order(url: str, variant: str) -> Outcome:
    """Explorer trace lock_order/broken: chunk1 acks (m1, k1), takes the workflow lock, settles · chunk2
    acks (m2, k2), takes P's scope lock, signals · chunk1 waits for the scope lock · chunk2 waits for the
    workflow lock."""
    ids = _members_and_children(url)
    clients = _clients(url, chunk1=PgStore, chunk2=LOCK_ORDER_VARIANTS[variant])
    observer = psycopg.connect(url, autocommit=True)
    observed = []
    try:
        with Pause("after_terminal.before_notify", thread="chunk1") as settled:
            clients["chunk1"].start(_ack_many(ids["m1"], ids["k1"]))
            reached(settled, clients["chunk1"])
            observed.append("chunk1 acked m1, k1 and settled under the workflow lock; stopped before `$children`")
            clients["chunk2"].start(_ack_many(ids["m2"], ids["k2"]))
            observed.append(blocked_or_parked(observer, clients["chunk2"]))
            settled.release()
            clients["chunk1"].join()
            clients["chunk2"].join()
        state = _state(url)
    finally:
        observer.close()
        _close(clients)
    errs = _errors(clients)
    violations = [f"{c} was aborted: {e}" for c, e in errs.items() if "DeadlockDetected" in e]
    violations += [str(v) for v in i5_settlement_consistent(state)]
    violations += [str(v) for v in i9_awaiters_eventually_run(state, quiescent=True)]
    observed.append(", ".join(f"{n} {state.jobs[i].state}" for n, i in ids.items()))
    return Outcome("lock_order", variant, not violations and not errs, violations, observed, errs)


SETTLEMENT_VARIANTS = {"real": PgStore, "broken": NoReholdStore}


def reproduce_settlement(url: str, variant: str) -> Outcome:
    """Explorer trace settlement/broken: Retry(d) → ready (no re-hold, no settlement) · a worker claims d
    while its dep a is still failed. Here with a's retry racing: it waits on the workflow lock, then
    stops before its own commit, so a is still failed when the worker claims."""
    with PgStore(url, notify=False) as store:
        wf = dict(
            store.apply(
                ops.EnqueueWorkflow(
                    NOW,
                    "wf",
                    (
                        WorkflowMember("a", JobSpec("q", "a")),
                        WorkflowMember("d", JobSpec("q", "d"), deps=("a",)),
                    ),
                )
            ).ids
        )
        store.apply(w.Claim(NOW, "q", "setup", 1))
        store.apply(w.Ack(NOW, wf["a"], 1, w.Fail("boom")))  # a failed → d doomed (cancelled)
    a, d = wf["a"], wf["d"]
    clients = _clients(url, retry_d=SETTLEMENT_VARIANTS[variant], retry_a=PgStore, worker=PgStore)
    observer = psycopg.connect(url, autocommit=True)
    observed = []
    try:
        with (
            Pause("retry.before_settle", thread="retry_d") as d_rewritten,
            Pause("retry.before_settle", thread="retry_a") as a_rewritten,
        ):
            clients["retry_d"].start(lambda s: s.apply(ops.Retry(NOW, d)))
            reached(d_rewritten, clients["retry_d"])
            observed.append("Retry(d) rewrote d and stopped before settlement (workflow lock held)")
            clients["retry_a"].start(lambda s: s.apply(ops.Retry(NOW, a)))
            observed.append(blocked_or_parked(observer, clients["retry_a"]))
            d_rewritten.release()
            observed.append(f"Retry(d): {clients['retry_d'].join()}")
            reached(a_rewritten, clients["retry_a"])
            observed.append("Retry(a) got the workflow lock and stopped before its commit: a is still failed")
            claimed = clients["worker"].store.apply(w.Claim(NOW, "q", "worker", 2))
            observed.append(f"the worker claimed {[j.wf_name for j in claimed.jobs]}")
            state = _state(url)  # the moment of the race: whatever the worker now runs, beside a failed a
            a_rewritten.release()
            observed.append(f"Retry(a): {clients['retry_a'].join()}")
    finally:
        observer.close()
        _close(clients)
    violations = [str(v) for v in i5_settlement_consistent(state)]
    observed.append(f"when the worker claimed: a {state.jobs[a].state}, d {state.jobs[d].state}")
    errs = _errors(clients)
    return Outcome("settlement", variant, not violations and not errs, violations, observed, errs)


CANCEL_ACK_VARIANTS = {"real": PgStore, "broken": WorkflowLockFirstCancelStore}


def reproduce_cancel_ack(url: str, variant: str) -> Outcome:
    """Explorer trace cancel_ack/impl: ack c1 (row lock) · Cancel(c1): workflow lock, FOR UPDATE on c1
    (waits) · the ack's settlement waits for the workflow lock — a deadlock."""
    with PgStore(url, notify=False) as store:
        wf = dict(
            store.apply(
                ops.EnqueueWorkflow(
                    NOW,
                    "wf",
                    (
                        WorkflowMember("c1", JobSpec("q", "c1")),
                        WorkflowMember("d", JobSpec("q", "d"), deps=("c1",)),
                    ),
                )
            ).ids
        )
        store.apply(w.Claim(NOW, "q", "setup", 1))
    c1, d = wf["c1"], wf["d"]
    clients = _clients(url, ack=PgStore, cancel=CANCEL_ACK_VARIANTS[variant])
    observer = psycopg.connect(url, autocommit=True)
    observed = []
    try:
        with Pause("ack.after_update", thread="ack") as acked:
            clients["ack"].start(_ack(c1))
            reached(acked, clients["ack"])
            observed.append("the worker's ack UPDATE ran: c1's row lock held, uncommitted")
            clients["cancel"].start(lambda s: s.apply(ops.Cancel(NOW, c1)))
            observed.append(blocked_or_parked(observer, clients["cancel"]))
            acked.release()
            clients["ack"].join()
            clients["cancel"].join()
            observed.append(f"ack: {_said(clients['ack'])}")
            observed.append(f"cancel: {_said(clients['cancel'])}")
        state = _state(url)
    finally:
        observer.close()
        _close(clients)
    errs = _errors(clients)
    violations = [f"{c} was aborted: {e}" for c, e in errs.items() if "DeadlockDetected" in e]
    violations += [str(v) for v in i5_settlement_consistent(state)]
    observed.append(f"c1 {state.jobs[c1].state}, d {state.jobs[d].state}")
    return Outcome("cancel_ack", variant, not violations and not errs, violations, observed, errs)


REPRODUCTIONS: dict[str, Callable[[str, str], Outcome]] = {
    "r1": reproduce_r1,
    "r2": reproduce_r2,
    "park_wake": reproduce_park_wake,
    "lock_order": reproduce_lock_order,
    "settlement": reproduce_settlement,
    "cancel_ack": reproduce_cancel_ack,
}


# ---------------------------------------------------------------------------------------------------
# tests


@pytest.fixture(autouse=True)
def _no_failpoint_left_armed():
    yield
    assert armed_points() == {}, "a test left failpoints armed"


def test_r1_two_last_children_acking_together_wake_their_parent(db_url):
    outcome = reproduce_r1(db_url, "real")
    assert outcome.ok, outcome.report()
    assert any("waits on a lock (advisory)" in o for o in outcome.observed), outcome.report()


def test_r1_a_count_gated_children_signal_strands_the_parent(db_url):
    outcome = reproduce_r1(db_url, "broken")
    assert not outcome.ok, outcome.report()
    assert any("all its 2 children" in v for v in outcome.violations), outcome.report()


def test_r2_impl_await_children_holds_the_scope_lock_so_the_child_cannot_slip_in(db_url):
    outcome = reproduce_r2(db_url, "real")
    assert outcome.ok, outcome.report()
    assert any("C waits on a lock (advisory)" in o for o in outcome.observed), outcome.report()


def test_r2_without_the_reconciler_a_parent_stranded_by_a_pruned_signal_stays_stranded(db_url):
    outcome = reproduce_r2(db_url, "broken")
    assert not outcome.ok, outcome.report()
    assert any("awaits $children but all its 1 children" in v for v in outcome.violations), outcome.report()


def test_r2_the_reconciler_wakes_a_parent_stranded_by_a_pruned_signal(db_url):
    outcome = reproduce_r2(db_url, "text_with_reconciler")
    assert outcome.ok, outcome.report()
    assert any("woke [" in o and "woke []" not in o for o in outcome.observed), outcome.report()


def test_park_wake_delivery_waits_for_a_park_holding_the_scope_lock(db_url):
    outcome = reproduce_park_wake(db_url, "real")
    assert outcome.ok, outcome.report()
    assert any("D waits on a lock (advisory)" in o for o in outcome.observed), outcome.report()


def test_park_wake_without_the_scope_lock_loses_the_wake_up(db_url):
    outcome = reproduce_park_wake(db_url, "broken")
    assert not outcome.ok, outcome.report()
    assert any("a lost wake-up" in v for v in outcome.violations), outcome.report()


def test_lock_order_two_chunks_acking_members_and_children_together_do_not_deadlock(db_url):
    outcome = reproduce_lock_order(db_url, "real")
    assert outcome.ok, outcome.report()
    assert any("chunk2 waits on a lock (advisory)" in o for o in outcome.observed), outcome.report()


def test_lock_order_a_path_taking_the_scope_lock_first_deadlocks(db_url):
    outcome = reproduce_lock_order(db_url, "broken")
    assert not outcome.ok, outcome.report()
    assert any("DeadlockDetected" in v for v in outcome.violations), outcome.report()


def test_settlement_a_retried_dependent_is_re_doomed_while_its_dep_is_failed(db_url):
    outcome = reproduce_settlement(db_url, "real")
    assert outcome.ok, outcome.report()
    assert any("retry_a waits on a lock (advisory)" in o for o in outcome.observed), outcome.report()


def test_settlement_retry_without_the_re_hold_runs_the_dependent_beside_its_failed_dep(db_url):
    outcome = reproduce_settlement(db_url, "broken")
    assert not outcome.ok, outcome.report()
    assert any("although dep 'a'" in v and "is failed" in v for v in outcome.violations), outcome.report()


def test_cancel_of_a_running_member_racing_its_ack_does_not_deadlock(db_url):
    """Found by the explorer (model/explorer/scenarios/cancel_ack.py) and fixed in PgStore._cancel: a
    running job's cancel request takes its row lock alone, never the workflow lock first."""
    outcome = reproduce_cancel_ack(db_url, "real")
    assert outcome.ok, outcome.report()
    assert any("cancel waits on a lock (transactionid)" in o for o in outcome.observed), outcome.report()


def test_cancel_taking_the_workflow_lock_before_a_running_row_deadlocks_with_its_ack(db_url):
    outcome = reproduce_cancel_ack(db_url, "broken")
    assert not outcome.ok, outcome.report()
    assert any("DeadlockDetected" in v for v in outcome.violations), outcome.report()


def test_a_paused_thread_that_is_never_released_fails_instead_of_hanging():
    from impl.store.failpoints import FailpointTimeout

    with (
        Pause("nowhere", timeout=0.05) as pause,
        pytest.raises(FailpointTimeout, match="never reached failpoint 'nowhere'"),
    ):
        pause.wait_arrived()


def test_an_unarmed_failpoint_is_a_no_op():
    failpoint("ack.after_update")
    assert armed_points() == {}


def test_a_pause_stops_only_the_thread_it_names():
    seen = []
    with Pause("fp.test", thread="target") as pause:
        failpoint("fp.test")  # the main thread passes straight through
        seen.append("main passed")
        t = threading.Thread(target=lambda: (failpoint("fp.test"), seen.append("target passed")), name="target")
        t.start()
        pause.wait_arrived()
        assert seen == ["main passed"]
        pause.release()
        t.join(5)
    assert seen == ["main passed", "target passed"]
