"""Scenarios the coverage table needs (issue 11), driven beside the driver's bulk load.

Each scenario exists so that a worker duty or an invariant can be *exposed* in a run; the checker
(soak/judges/coverage.py) counts how many occurred and reports `unknown` for a duty whose scenario did not.

  * lost wake-ups (§8.4 R2): `parent` jobs whose children go to queue `soak-external`, which no worker
    claims; once the parent is parked on `$children`, the harness finishes the children with plain SQL
    that skips the `$children` delivery (as a buggy SDK would) — only the worker's reconciler can wake
    the parent;
  * cancels of parked jobs in each parked state: a parent awaiting children, a `sleeper` sleeping
    (awaiting signals and held workflow members are cancelled by the driver's own follow-ups);
  * a cancel pending at a park (duty P3): an `awaiter` with a pause before its await is cancelled while
    it runs; its signal is delivered only after the request, so the job must end cancelled;
  * parents parked on `$children` whose children workers run (duty P10): every 5 s a `parent` whose
    children are 1-step `steps` jobs pausing 1.5 s (`child_pause_ms`), so the parent parks before its
    children finish, whatever the load — and the last child's terminal write must wake it;
  * priority contention (duty P5): batches of 1-step `steps` jobs at priorities 0 and 5 that become due
    at one instant, sampled every 0.25 s while workers choose between them;
  * claim order within a priority (duty P5, issue 51): every 20 s (the first 10 s in) an order-backlog
    batch of 120 1-step `steps` jobs pausing 0.8 s at the bulk's priority, due at one instant — more than a
    fleet runs at once, so for seconds every claim chooses among claimable rows of one priority, and trace
    validation (soak/judges/timing/) judges whether it took them in §6 order;
  * lease samples (duty P2, P4, clock skew): every 0.5 s the running rows (job, attempt, node,
    lease_until), so the checker knows which node held an attempt and whether leases were renewed;
  * admission (§6, duty P18): three queues with `belay_queues` rows written before any worker starts —
    `soak-global` (global_limit 2), `soak-rate` (rate 4 per 1 s) and `soak-part` (partitioned by
    input.tenant, limit 2: at most 2 live leases per tenant) — get bursts of `steps`/`echo` jobs every
    5 s, more than their limits admit at once; the lease samples count their live leases (per tenant on
    soak-part), and trace validation judges every claim there with the queue's options.

Everything is recorded in the history; the SQL uses harness-side `now` parameters (no now()).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import psycopg

from model import ops
from model.envelope import encode
from soak.workload.plan import Plan, utc_now

EXTERNAL_QUEUE = "soak-external"
# §6 admission (duty P18): queue → its belay_queues opts; a worker claims from them (BELAY_QUEUES) and
# must apply the row's options, however it was configured
ADMISSION_QUEUES: dict[str, dict[str, Any]] = {
    "soak-global": {"global_limit": 2},
    "soak-rate": {"rate": {"allowed": 4, "period": 1}},
    # per-key limit = the queue's limit (no global_limit): at most 2 live leases per tenant, fleet-wide
    "soak-part": {"limit": 2, "partition": {"field": "input", "key": "tenant"}},
}
LIVE_SLACK_S = 1.0  # a lease counts as live in a sample only if it runs this far past the sample (skewed nodes)
TERMINAL = ("succeeded", "failed", "cancelled")


class Scenarios:
    """Attached to a `soak.workload.driver.Driver` (uses its store, enqueue, cancel, deliver, rng and history)."""

    def __init__(
        self,
        driver: Any,
        *,
        lost_wakeup_every: float = 6.0,
        park_cancel_every: float = 10.0,
        cancel_at_park_every: float = 8.0,
        sleeper_every: float = 4.0,
        priority_every: float = 15.0,
        priority_batch: int = 60,
        order_every: float = 20.0,
        order_batch: int = 120,
        sample_every: float = 0.5,
        held_cancel_every: float = 15.0,
        children_park_every: float = 5.0,
        admission_every: float = 5.0,
        child_pause_ms: int = 1500,
    ) -> None:
        self.d = driver
        self.every = {
            "lost_wakeup": lost_wakeup_every,
            "park_cancel": park_cancel_every,
            "cancel_at_park": cancel_at_park_every,
            "sleeper": sleeper_every,
            "priority": priority_every,
            "order": order_every,
            "held_cancel": held_cancel_every,
            "children_park": children_park_every,
            "admission": admission_every,
        }
        self.child_pause_ms = child_pause_ms
        self.priority_batch = priority_batch
        self.order_batch = order_batch
        self.sample_every = sample_every
        self.requested: dict[int, float] = {}  # awaiter cancel_at_park: job → time its cancel was requested
        self.batches: list[tuple[int, list[int], float]] = []  # (batch, ids, due epoch)
        self.batch_seq = 0
        self.lock = threading.Lock()

    # --- producing ---------------------------------------------------------------------------------------

    def _spec(self, kind: str, input: dict, **kw: Any) -> ops.JobSpec:
        return self.d._spec(kind, input, **kw)

    def produce_tick(self, last: dict[str, float]) -> None:
        """Called by the driver's producer every tick while producing."""

        now = time.monotonic()
        last.setdefault("priority", now - self.every["priority"] + 5.0)  # the first batch 5 s into the run
        last.setdefault("order", now - self.every["order"] + 10.0)  # the first order-backlog batch at 10 s
        due = {name: now - last.setdefault(name, now) >= every for name, every in self.every.items()}
        for name in due:
            if due[name]:
                last[name] = now
        plans = []
        if due["lost_wakeup"]:
            plans.append(
                Plan(
                    self._spec("parent", {"children": self.d.rng.randint(2, 3), "queue": EXTERNAL_QUEUE}),
                    "parent",
                    "succeeded",
                    {"plan": "lost_wakeup"},
                )
            )
        if due["park_cancel"]:
            plans.append(
                Plan(
                    self._spec("parent", {"children": 2, "queue": EXTERNAL_QUEUE}),
                    "parent",
                    "cancelled",
                    {"plan": "park_cancel"},
                )
            )
            plans.append(Plan(self._spec("sleeper", {"seconds": 60}), "sleeper", "cancelled", {"plan": "park_cancel"}))
        if due["children_park"]:  # children that run a while: the parent parks on $children first (P10)
            plans.append(
                Plan(
                    self._spec("parent", {"children": self.d.rng.randint(2, 3), "child_pause_ms": self.child_pause_ms}),
                    "parent",
                    "succeeded",
                    {"plan": "children_park"},
                )
            )
        if due["sleeper"]:
            plans.append(Plan(self._spec("sleeper", {"seconds": round(self.d.rng.uniform(1.0, 3.0), 2)}), "sleeper"))
        if due["cancel_at_park"]:
            name = f"cp-{self.d.rng.randrange(1 << 30)}"
            plans.append(
                Plan(
                    self._spec("awaiter", {"signal": name, "pause_ms": 2500}),
                    "awaiter",
                    "cancelled",
                    {"plan": "cancel_at_park", "signal": name},
                )
            )
        if due["admission"]:  # bursts past the limits: 5 jobs of ~0.4 s on global_limit 2, 8 on rate 4/s
            for _ in range(5):
                plans.append(
                    Plan(
                        self._admission_spec("soak-global", "steps", {"n": 1, "raise_after": None, "pause_ms": 400}),
                        "steps",
                    )
                )
            for _ in range(8):
                plans.append(Plan(self._admission_spec("soak-rate", "echo", {"v": self.d.rng.randrange(1000)}), "echo"))
            for tenant in "aaaaaabb":  # 6 of tenant a on a per-key limit of 2
                inp = {"n": 1, "raise_after": None, "pause_ms": 400, "tenant": tenant}
                plans.append(Plan(self._admission_spec("soak-part", "steps", inp), "steps"))
        if plans:
            self.d.enqueue(plans)
        if due["priority"]:
            self.priority_batch_now()
        if due["order"]:
            self.order_batch_now()
        if due["held_cancel"]:  # a workflow whose held member the driver's follow-up cancels
            self.d.enqueue_workflow("cancel")

    def _admission_spec(self, queue: str, kind: str, input: dict) -> ops.JobSpec:
        base = self._spec(kind, input)
        return ops.JobSpec(queue, kind, input, max_attempts=base.max_attempts, priority=base.priority)

    def put_admission_queues(self, deadline: float = 60.0) -> bool:
        """The admission queues' belay_queues rows; called before any worker starts."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            try:
                for name, opts in ADMISSION_QUEUES.items():
                    self.d.store.apply(ops.PutQueue(utc_now(), name, opts))
                self.d.history.record("admission_queues", queues=ADMISSION_QUEUES)
                return True
            except psycopg.Error:
                time.sleep(0.5)
        self.d.history.record("admission_queues_failed", queues=ADMISSION_QUEUES)  # P18 then stays unknown
        return False

    def priority_batch_now(self) -> None:

        with self.lock:
            self.batch_seq += 1
            batch = self.batch_seq
        when = utc_now() + timedelta(seconds=1.5)
        half = self.priority_batch // 2
        plans = [
            Plan(
                self._spec("steps", {"n": 1, "raise_after": None, "pause_ms": 600}, priority=p, scheduled_at=when),
                "steps",
                "succeeded",
                {"batch": batch, "priority": p},
            )
            for p in [5] * half + [0] * half
        ]
        ids = self.d.enqueue(plans)
        if ids:
            self.d.history.record(
                "priority_batch",
                batch=batch,
                ids=ids,
                due=when.timestamp(),
                priorities={str(i): p.detail["priority"] for i, p in zip(ids, plans, strict=True)},
            )
            threading.Thread(target=self._sample_batch, args=(batch, ids, when.timestamp()), daemon=True).start()

    def order_batch_now(self) -> None:
        """A standing backlog of one priority (duty P5 within a priority): `order_batch` jobs due at one
        instant, 1 s from now, at the bulk's priority — ordered among themselves by id alone (§6)."""
        when = utc_now() + timedelta(seconds=1.0)
        inp = {"n": 1, "raise_after": None, "pause_ms": 800}
        plans = [
            Plan(self._spec("steps", inp, scheduled_at=when), "steps", "succeeded", {"plan": "order_backlog"})
            for _ in range(self.order_batch)
        ]
        ids = self.d.enqueue(plans)
        if ids:
            self.d.history.record("order_batch", ids=[min(ids), max(ids)], n=len(ids), due=when.timestamp())

    def _sample_batch(self, batch: int, ids: list[int], due: float) -> None:
        end = due + 30.0  # under a backlog the batch waits behind older work
        try:
            with psycopg.connect(self.d.url, autocommit=True, connect_timeout=3) as c:
                while time.time() < end and not self.d.halt.is_set():
                    t = time.time()
                    rows = c.execute(
                        "SELECT id, priority, state, attempt FROM belay_jobs WHERE id = ANY(%s) "
                        "AND state IN ('ready', 'running')",
                        (ids,),
                    ).fetchall()
                    self.d.history.record("priority_sample", batch=batch, at=t, due=due, rows=[list(r) for r in rows])
                    if not rows and t > due:
                        break
                    time.sleep(0.25)
        except psycopg.Error as exc:
            self.d.history.record("priority_sample_error", batch=batch, error=str(exc)[:200])

    # --- follow-ups ----------------------------------------------------------------------------------------

    PENDING = """
        SELECT l.job_id, l.kind, l.detail->>'plan', j.state, j.await_name, extract(epoch FROM (%s - l.inserted_at)),
               (SELECT count(*) FROM belay_jobs c WHERE c.parent_id = j.id),
               (SELECT count(*) FROM belay_jobs c WHERE c.parent_id = j.id AND c.state NOT IN
                    ('succeeded', 'failed', 'cancelled')),
               EXISTS (SELECT 1 FROM belay_steps s WHERE s.job_id = j.id AND s.name LIKE '$sleep:%%')
        FROM soak_ledger l JOIN belay_jobs j ON j.id = l.job_id
        WHERE l.detail->>'plan' IN ('lost_wakeup', 'park_cancel', 'cancel_at_park')
          AND (j.state NOT IN ('succeeded', 'failed', 'cancelled') OR EXISTS (
               SELECT 1 FROM belay_jobs c WHERE c.parent_id = j.id AND c.state NOT IN ('succeeded', 'failed', 'cancelled')))
    """

    def follow_up_once(self) -> int:
        """One pass; returns how many scenario jobs still need the harness."""

        try:
            with psycopg.connect(self.d.url, autocommit=True, connect_timeout=3) as c:
                rows = c.execute(self.PENDING, (utc_now(),)).fetchall()
                waiting = 0
                for job_id, kind, plan, state, await_name, age, _n_kids, live_kids, slept in rows:
                    waiting += 1
                    if plan == "lost_wakeup" and kind == "parent":
                        if state == "awaiting" and await_name == "$children" and live_kids:
                            self._finish_children_silently(c, job_id)
                    elif plan == "park_cancel":
                        if kind == "sleeper" and state == "ready" and slept:  # a durable sleep parks as ready
                            self.d.cancel(job_id, state="sleeping", kind=kind, plan=plan)
                        elif (kind == "parent" and state == "awaiting") or (state not in TERMINAL and age > 40):
                            self.d.cancel(job_id, state=state, kind=kind, plan=plan)
                        elif state in TERMINAL and live_kids:  # the cancelled parent's children: not needed any more
                            for (child,) in c.execute(
                                "SELECT id FROM belay_jobs WHERE parent_id = %s AND state NOT IN "
                                "('succeeded', 'failed', 'cancelled')",
                                (job_id,),
                            ).fetchall():
                                self.d.cancel(child, state="ready", kind="child", plan="orphan")
                    elif plan == "cancel_at_park":
                        self._cancel_at_park(job_id, state, age)
                return waiting
        except psycopg.Error:
            return 1

    def _finish_children_silently(self, c: psycopg.Connection, parent: int) -> None:
        """Finish the parent's external children the way a buggy SDK would: a legal claim and a legal fenced
        ack (so the committed history sees only §4 transitions), but no `$children` delivery after it."""

        now = utc_now()
        claimed = c.execute(
            "UPDATE belay_jobs SET state = 'running', attempt = attempt + 1, lease_until = %(until)s, "
            "leased_by = 'soak-harness', started_at = COALESCE(started_at, %(now)s) "
            "WHERE parent_id = %(parent)s AND queue = %(queue)s AND state = 'ready' "
            "AND (ready_at IS NULL OR ready_at <= %(now)s) RETURNING id, attempt",
            {"now": now, "until": now + timedelta(seconds=30), "parent": parent, "queue": EXTERNAL_QUEUE},
        ).fetchall()
        done = []
        for job_id, attempt in claimed:
            # attested before the ack: a crash-restart can commit the ack and cut the connection before
            # its answer (seed 2032's two-hour soak: job 141450's ack committed at the crash's instant, the
            # error skipped the `lost_wakeup` record — the trace validation then found a harness ack nobody
            # had recorded). An intent whose ack never committed attests nothing extra.
            self.d.history.record("lost_wakeup_intent", parent=parent, children=[job_id])
            row = c.execute(
                "UPDATE belay_jobs SET state = 'succeeded', finished_at = %(now)s, result = %(result)s, "
                "lease_until = NULL, leased_by = NULL "
                "WHERE id = %(id)s AND state = 'running' AND attempt = %(attempt)s RETURNING id",
                {
                    "now": now,
                    "id": job_id,
                    "attempt": attempt,
                    "result": encode({"echo": "external", "attempt": attempt}),
                },
            ).fetchone()
            if row:
                done.append(row[0])
        if done:
            self.d.history.record("lost_wakeup", parent=parent, children=done)

    def _cancel_at_park(self, job_id: int, state: str, age: float) -> None:

        asked = self.requested.get(job_id)
        if asked is None:
            if state == "running" or (state == "awaiting") or age > 30:
                result = self.d.cancel(job_id, state=state, kind="awaiter", plan="cancel_at_park")
                if result is not None:
                    self.requested[job_id] = time.time()
            return
        if time.time() - asked >= 1.0:
            # The signal arrives only after the cancel request: a job that parked with the request pending
            # must still end cancelled when this wakes it (duty P3).
            detail_signal = self._signal_name(job_id)
            if detail_signal:
                self.d.deliver(job_id, detail_signal, "after-cancel")
            if state == "ready" and time.time() - asked > 60:
                pass  # left to the worker; I1 / P3 judge it

    def _signal_name(self, job_id: int) -> str | None:
        try:
            with psycopg.connect(self.d.url, autocommit=True, connect_timeout=3) as c:
                row = c.execute(
                    "SELECT l.detail->>'signal', EXISTS (SELECT 1 FROM belay_signals s WHERE "
                    "s.scope = 'job:' || l.job_id AND s.name = l.detail->>'signal') "
                    "FROM soak_ledger l WHERE job_id = %s",
                    (job_id,),
                ).fetchone()
        except psycopg.Error:
            return None
        if row is None or row[1]:
            return None
        return row[0]

    PARKED_PARENTS = f"""
        SELECT p.id, NOT EXISTS (SELECT 1 FROM belay_jobs c WHERE c.parent_id = p.id
                                 AND c.state NOT IN ('succeeded', 'failed', 'cancelled'))
        FROM belay_jobs p
        WHERE p.state = 'awaiting' AND p.await_name = '$children' AND p.await_scope = 'job:' || p.id
          AND EXISTS (SELECT 1 FROM belay_jobs c WHERE c.parent_id = p.id)
          AND NOT EXISTS (SELECT 1 FROM belay_jobs c WHERE c.parent_id = p.id AND c.queue = '{EXTERNAL_QUEUE}')
    """

    # --- lease samples -------------------------------------------------------------------------------------

    def sample_leases(self) -> None:
        conn = None
        while not self.d.halt.wait(self.sample_every):
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(self.d.url, autocommit=True, connect_timeout=2)
                t = time.time()
                rows = conn.execute(
                    "SELECT id, attempt, leased_by, extract(epoch FROM lease_until)::float8, worker "
                    "FROM belay_jobs WHERE state = 'running'"
                ).fetchall()
                # Parents parked on $children whose children (all run by workers) are all terminal: a correct
                # worker wakes the parent in the last child's terminal transaction (§7 step 2), so one
                # consistent read never sees this; the reconciler only repairs it later (duty P10).
                parked = conn.execute(self.PARKED_PARENTS).fetchall()
                live_by_key = conn.execute(  # one read: per queue, and per tenant for the partitioned one
                    "SELECT queue, COALESCE(input->>'tenant', ''), count(*) FROM belay_jobs WHERE state = 'running' "
                    "AND queue = ANY(%s) AND lease_until > to_timestamp(%s) GROUP BY 1, 2",
                    (list(ADMISSION_QUEUES), t + LIVE_SLACK_S),
                ).fetchall()
                live: dict[str, int] = {}
                for q, _key, n in live_by_key:
                    live[q] = live.get(q, 0) + n
                per_key = [(q, k, n) for q, k, n in live_by_key if q == "soak-part"]
                self.d.history.record(
                    "lease_sample",
                    at=t,
                    admission=live,
                    partitions={f"{q}:{k}": n for q, k, n in per_key},
                    rows=[[r[0], r[1], r[2], r[3], r[4]] for r in rows],
                    parked=[r[0] for r in parked],
                    stranded=[r[0] for r in parked if r[1]],
                )
            except psycopg.Error:
                conn = None
        if conn is not None:
            conn.close()


__all__ = ["ADMISSION_QUEUES", "EXTERNAL_QUEUE", "Scenarios"]
