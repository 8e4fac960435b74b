"""The soak driver (the generator): writes work and the ledger, delivers signals, cancels, races unique keys.

Every enqueue is a transactional enqueue (contract §5.1): the jobs and their `soak_ledger` rows commit
in one transaction on the driver's own connection, so whatever the nemesis does — a crash mid-commit
included — the ledger names exactly the jobs that exist. Follow-ups (signals delivered after an
await, cancels) are driven from the ledger and the job rows, not from memory, so an ambiguous commit
never leaves an awaiter without its signal or its cancel.

Threads:
  * producer — every 100 ms a batch of `echo` jobs (the bulk) plus, at seeded random, the other kinds,
    all at priority 1 but `slow` jobs (priority 0, so that a reclaimed one is claimed again at once);
  * follow-up — delivers planned signals (before / racing / after the await) and repeats cancels
    until the job is terminal;
  * unique — every ~1.5 s, several connections insert the same unique key at once (barrier), each
    recording its outcome in `soak_unique` in its own transaction;
  * sampler — every 10 s, (seq, md5(value)) of every journaled step, for I3's immutability check.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from impl.store import PgStore
from model import ops
from soak.record.history import History
from soak.workload.plan import Plan, utc_now
from soak.workload.scenarios import Scenarios
from soak.workload.shapes import CRON as CRON
from soak.workload.shapes import QUEUE as QUEUE
from soak.workload.shapes import RACE_DELAY_S as RACE_DELAY_S
from soak.workload.shapes import RACE_PAUSE_MS as RACE_PAUSE_MS
from soak.workload.shapes import STEP_WINDOW_SLACK_S as STEP_WINDOW_SLACK_S
from soak.workload.shapes import STEPS_SINCE as STEPS_SINCE
from soak.workload.shapes import TERMINAL_SQL as TERMINAL_SQL
from soak.workload.shapes import WORKFLOW_SHAPES as WORKFLOW_SHAPES
from soak.workload.shapes import DriverConfig as DriverConfig
from soak.workload.shapes import workflow_outcomes as workflow_outcomes


class Driver:
    def __init__(self, url: str, history: History, rng: random.Random, config: DriverConfig = DriverConfig()) -> None:
        self.url = url
        self.history = history
        self.rng = rng
        self.cfg = config
        self.store = PgStore(url, pool_size=4, notify=True)
        self.producing = threading.Event()
        self.halt = threading.Event()
        # Set by the nemesis while a zombie stop holds (soak/faults/zombies.py): no new job that kills its own
        # worker (flaky `exit`, costed crash_at_crossing) until it ends — such an exit on the node running a
        # held job's later attempt restarts the lease-and-nap wait, and the hold ran out ("cap") before
        # the duplicate write I4 needs (a default run: the later attempt's node self-exited 8 s into its nap).
        self.exits_paused = threading.Event()
        self._owed_crashes = 0  # crash_at_crossing draws made while exits were paused, spent after
        self.threads: list[threading.Thread] = []
        self.enqueued = 0
        self.enqueue_errors = 0
        self.signals = 0
        self.cancels = 0
        self.unique_groups = 0
        self.wf_seq = 0
        self.grp_seq = 0
        self.lock = threading.Lock()
        self.digests: dict[tuple[int, str], tuple[int, str]] = {}  # the steps the last sample read
        self._sampled_since: float | None = None  # epoch seconds the last step sample began
        self._conn: psycopg.Connection | None = None
        self.scenarios = Scenarios(self)  # issue 11: the scenarios the coverage table needs

    # --- plumbing -----------------------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.url, connect_timeout=3)
        return self._conn

    def _safely(self, what: str, fn: Callable[[], Any], *, own_conn: bool = False) -> Any:
        """Run one driver action; a database fault makes it fail (counted), never the driver."""
        try:
            return fn()
        except (psycopg.Error, OSError):
            with self.lock:
                self.enqueue_errors += 1
            if not own_conn:
                return None
            if self._conn is not None and (self._conn.broken or self._conn.closed):
                self._conn = None
            if self._conn is not None:
                try:
                    self._conn.rollback()
                except psycopg.Error:
                    self._conn = None
            return None

    def enqueue(self, plans: list[Plan]) -> list[int]:
        """Insert jobs and their ledger rows in one transaction (transactional enqueue)."""

        def go() -> list[int]:
            conn = self._connection()
            now = utc_now()
            with conn.transaction():
                result = self.store.apply(ops.Enqueue(now, tuple(p.spec for p in plans)), conn=conn)
                rows = [
                    (o.id, p.kind, p.expected, now, Jsonb(p.detail))
                    for p, o in zip(plans, result.outcomes, strict=True)
                    if isinstance(o, ops.Inserted)
                ]
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO soak_ledger (job_id, kind, expected, inserted_at, detail) "
                        "VALUES (%s, %s, %s, %s, %s)",
                        rows,
                    )
            with self.lock:
                self.enqueued += len(rows)
            return [r[0] for r in rows]

        return self._safely("enqueue", go, own_conn=True) or []

    def enqueue_workflow(self, shape: str) -> None:
        members = WORKFLOW_SHAPES[shape]
        expected = workflow_outcomes(members)
        with self.lock:
            self.wf_seq += 1
            wf = f"wf-{shape}-{self.wf_seq}"

        def go() -> None:
            conn = self._connection()
            now = utc_now()
            specs = []
            for m in members:
                sched = now + timedelta(seconds=m["scheduled"]) if m.get("scheduled") else None
                spec = self._spec("member", {"member": m["name"], "fail": bool(m.get("fail"))}, scheduled_at=sched)
                specs.append(ops.WorkflowMember(m["name"], spec, tuple(m["deps"]), tuple(m["ignore"])))
            with conn.transaction():
                result = self.store.apply(ops.EnqueueWorkflow(now, wf, tuple(specs)), conn=conn)
                rows = [
                    (
                        job_id,
                        "member",
                        expected[name],
                        now,
                        Jsonb({"workflow": wf, "member": name, "cancel": bool(m.get("cancel"))}),
                    )
                    for (name, job_id), m in zip(result.ids, members, strict=True)
                ]
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO soak_ledger (job_id, kind, expected, inserted_at, detail) "
                        "VALUES (%s, %s, %s, %s, %s)",
                        rows,
                    )
            with self.lock:
                self.enqueued += len(rows)

        self._safely("workflow", go, own_conn=True)

    # --- what to insert -------------------------------------------------------------------------------------

    def _spec(self, kind: str, input: dict, **kw: Any) -> ops.JobSpec:
        kw.setdefault("priority", self.cfg.priority)
        return ops.JobSpec(QUEUE, kind, input, max_attempts=kw.pop("max_attempts", self.cfg.max_attempts), **kw)

    def plan_echo(self, n: int) -> list[Plan]:
        return [Plan(self._spec("echo", {"v": self.rng.randrange(1_000_000)}), "echo") for _ in range(n)]

    def plan_steps(self) -> Plan:
        n = self.rng.randint(2, 5)
        cancel = self.rng.random() < 0.1
        raise_after = self.rng.randint(1, n) if self.rng.random() < 0.35 else None
        pause = 400 if cancel else (300 if self.rng.random() < 0.5 else 0)  # paused ones: running when SIGTERMed
        inp = {"n": n, "raise_after": raise_after, "pause_ms": pause}
        detail = {"plan": "cancel"} if cancel else {}
        return Plan(self._spec("steps", inp), "steps", "cancelled|succeeded" if cancel else "succeeded", detail)

    def plan_costed(self) -> Plan:
        n = self.rng.randint(3, 6)
        costs = [self.rng.randint(10, 40) for _ in range(n)]
        cross = self.rng.random() < 0.75
        detail: dict[str, Any] = {}
        if cross:
            k = self.rng.randint(1, n - 1)  # the crossing step is never the last one
            budget = sum(costs[:k]) - 1
            detail["crossing"] = f"c{k}"
            expected = "failed:budget_exceeded"
        else:
            budget = sum(costs) + 5
            expected = "succeeded"
        if cross and self.rng.random() < 0.3:
            self._owed_crashes += 1  # owed, spent by the next crossing outside a hold (I4 coverage)
        crash = cross and self._owed_crashes > 0 and not self.exits_paused.is_set()
        if crash:
            self._owed_crashes -= 1
        return Plan(
            self._spec("costed", {"costs": costs, "crash_at_crossing": crash}, budget_usd_micros=budget),
            "costed",
            expected,
            detail,
        )

    def plan_awaiter(self) -> Plan:
        plan = self.rng.choices(["before", "race", "after", "cancel"], weights=[3, 2, 3, 2])[0]
        name = f"go-{self.rng.randrange(1 << 30)}"
        sched = utc_now() + timedelta(seconds=2) if plan == "before" else None
        # issue 51: a `race` awaiter pauses RACE_PAUSE_MS between its claim and its await, and its signal is
        # sent RACE_DELAY_S after the insert, so the delivery commits inside the claim→park window (where
        # the park must see it, §7) often enough for I9's coverage row (soak/judges/coverage.py signal_races).
        input = {"signal": name, "pause_ms": RACE_PAUSE_MS} if plan == "race" else {"signal": name}
        return Plan(
            self._spec("awaiter", input, scheduled_at=sched),
            "awaiter",
            "cancelled" if plan == "cancel" else "succeeded",
            {"plan": plan, "signal": name},
        )

    def plan_parent(self) -> Plan:
        return Plan(self._spec("parent", {"children": self.rng.randint(2, 4)}), "parent")

    def plan_flaky(self, mode: str) -> Plan:
        k = 1 if mode == "exit" else self.rng.randint(1, 2)
        return Plan(self._spec("flaky", {"mode": mode, "until_attempt": k}), "flaky", "succeeded", {"mode": mode})

    def plan_slow(self, last: bool = False) -> Plan:
        """A `slow` job (max_attempts 6); `last`: one with max_attempts 1 — a SIGSTOP or kill that loses its
        lease makes its reclaim fall on the last attempt (P16's risky case: the reclaim must fail it)."""
        if last:
            return Plan(
                self._spec("slow", {"seconds": self.cfg.slow_seconds}, max_attempts=1, priority=0),
                "slow",
                "succeeded|failed:lease_expired",
                {"last_attempt": True},
            )
        return Plan(self._spec("slow", {"seconds": self.cfg.slow_seconds}, max_attempts=6, priority=0), "slow")

    # --- producer ------------------------------------------------------------------------------------------

    def _produce(self) -> None:
        tick = 0.1
        owed = {"echo": 0.0}
        last_exit = last_slow = time.monotonic()
        scenario_clock: dict[str, float] = {}
        previous = time.monotonic() - tick
        while not self.halt.is_set():
            started = time.monotonic()
            # The kinds' rates follow the clock, not the tick count: under load a tick takes longer than
            # `tick` (its enqueues wait on the database), and the scenario kinds must not thin out with it
            # (the bulk `echo` does, per tick, so that an overloaded machine is not buried further).
            dt, previous = min(started - previous, 1.0), started
            if self.producing.is_set():
                owed["echo"] += self.cfg.echo_per_s * tick
                n = int(owed["echo"])
                owed["echo"] -= n
                plans = self.plan_echo(n) if n else []
                for rate, make in (
                    (self.cfg.steps_per_s, self.plan_steps),
                    (self.cfg.costed_per_s, self.plan_costed),
                    (self.cfg.parent_per_s, self.plan_parent),
                    (self.cfg.flaky_per_s, lambda: self.plan_flaky("raise")),
                ):
                    if self.rng.random() < rate * dt:
                        plans.append(make())
                if plans:
                    self.enqueue(plans)
                if self.rng.random() < self.cfg.awaiter_per_s * dt:
                    plan = self.plan_awaiter()
                    ids = self.enqueue([plan])
                    for job_id in ids:
                        if plan.detail["plan"] == "before":
                            self.deliver(job_id, plan.detail["signal"], "before")
                        elif plan.detail["plan"] == "race":
                            delay = self.rng.uniform(*RACE_DELAY_S)
                            threading.Timer(delay, self.deliver, (job_id, plan.detail["signal"], "race")).start()
                if self.rng.random() < self.cfg.workflow_per_s * dt:
                    self.enqueue_workflow(self.rng.choice(sorted(WORKFLOW_SHAPES)))
                now = time.monotonic()
                if self.exits_paused.is_set():
                    last_exit = max(last_exit, now - self.cfg.flaky_exit_every / 2)  # half a gap after the hold
                elif self.cfg.flaky_exit_every and now - last_exit >= self.cfg.flaky_exit_every:
                    last_exit = now
                    self.enqueue([self.plan_flaky("exit")])
                if now - last_slow >= self.cfg.slow_every:
                    last_slow = now
                    self.enqueue([self.plan_slow(last=i == 0) for i in range(self.cfg.slow_burst)])
                self.scenarios.produce_tick(scenario_clock)
            self.halt.wait(max(tick - (time.monotonic() - started), 0.0))

    # --- follow-ups: signals and cancels ----------------------------------------------------------------------

    def deliver(self, job_id: int, name: str, when: str) -> None:
        def go() -> None:
            # Attested before the write (as scenarios.py's lost_wakeup_intent): a crash-restart can commit
            # the signal and cut the connection before its answer, and the error would skip the `signal`
            # record — the trace validation would then find a signal nobody recorded. An intent whose
            # write never committed attests nothing extra.
            self.history.record("signal_intent", job_id=job_id)
            # The payload is a function of the job: a redelivery (late follow-up) upserts the same value.
            result = self.store.apply(
                ops.DeliverSignal(utc_now(), f"job:{job_id}", name, {"for": job_id, "n": job_id * 7919 % 1_000_003})
            )
            with self.lock:
                self.signals += 1
            self.history.record("signal", job_id=job_id, when=when, woken=list(result.woken))

        self._safely("signal", go)

    def cancel(
        self, job_id: int, *, state: str | None = None, kind: str | None = None, plan: str | None = None
    ) -> str | None:
        """Cancel; the history names the state the job was seen in just before (coverage of parked states)."""

        def go() -> str:
            self.history.record("cancel_intent", job_id=job_id)  # attested before the write, as a signal is
            result = self.store.apply(ops.Cancel(utc_now(), job_id))
            with self.lock:
                self.cancels += 1
            self.history.record(
                "cancel", job_id=job_id, result=type(result).__name__, state_before=state, kind=kind, plan=plan
            )
            return type(result).__name__

        return self._safely("cancel", go)

    FOLLOW_UPS = f"""
        SELECT l.job_id, l.kind, l.detail, j.state, extract(epoch FROM (%s - l.inserted_at)) AS age,
               s.scope IS NOT NULL AS signalled
        FROM soak_ledger l JOIN belay_jobs j ON j.id = l.job_id
        LEFT JOIN belay_signals s ON s.scope = 'job:' || l.job_id AND s.name = l.detail->>'signal'
        WHERE (l.detail ? 'plan' OR (l.detail->>'cancel')::boolean) AND j.state NOT IN {TERMINAL_SQL}
    """

    def follow_up_once(self) -> int:
        """One pass: deliver due signals, (re)issue due cancels. Returns how many jobs still need one."""

        def go() -> int:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=3) as c:
                rows = c.execute(self.FOLLOW_UPS, (utc_now(),)).fetchall()
            waiting = 0
            for job_id, kind, detail, state, age, signalled in rows:
                plan = detail.get("plan")
                if kind == "awaiter" and plan in ("before", "race", "after"):
                    if signalled:
                        continue
                    waiting += 1
                    # fallbacks (a job not yet parked after this long) only guarantee an end under heavy load
                    if state == "awaiting" or age > (30 if plan == "after" else 3):
                        self.deliver(job_id, detail["signal"], plan if plan == "after" else f"{plan}-late")
                elif plan == "cancel" or detail.get("cancel"):
                    waiting += 1
                    if (
                        (kind == "awaiter" and (state == "awaiting" or age > 30))
                        or (kind == "steps" and (state == "running" or age > 20))
                        or kind == "member"
                    ):
                        self.cancel(job_id, state=state, kind=kind, plan=plan or "workflow")
            return waiting

        return (self._safely("follow-up", go) or 0) + self.scenarios.follow_up_once()

    def _follow_up(self) -> None:
        while not self.halt.wait(0.5):
            self.follow_up_once()

    # --- unique keys from several connections at once ----------------------------------------------------------

    def _unique(self) -> None:
        conns: list[psycopg.Connection | None] = [None] * self.cfg.unique_parallel
        while not self.halt.wait(self.cfg.unique_every * self.rng.uniform(0.5, 1.5)):
            if not self.producing.is_set():
                continue
            mode = self.rng.choice(["incomplete", "window", "always"])
            key = f"{mode[:3]}-{self.rng.randrange(8)}"
            with self.lock:
                self.grp_seq += 1
                grp = self.grp_seq
            barrier = threading.Barrier(len(conns))
            outcomes: list[str | None] = [None] * len(conns)

            threads = [
                threading.Thread(target=self._unique_attempt, args=(conns, i, grp, key, mode, barrier, outcomes))
                for i in range(len(conns))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            with self.lock:
                self.unique_groups += 1
            self.history.record("unique_group", grp=grp, key=key, mode=mode, outcomes=outcomes)
        for c in conns:
            if c is not None:
                c.close()

    def _unique_attempt(
        self, conns: list, i: int, grp: int, key: str, mode: str, barrier: threading.Barrier, outcomes: list
    ) -> None:
        """One of the concurrent inserts of a group, in its own transaction on its own connection."""
        try:
            if conns[i] is None or conns[i].closed or conns[i].broken:
                conns[i] = psycopg.connect(self.url, connect_timeout=3)
            conn = conns[i]
            kw: dict[str, Any] = {"unique_key": key, "unique_mode": mode}
            if mode == "window":
                kw["unique_window"] = 3600
            if mode == "incomplete":
                kw["scheduled_at"] = utc_now() + timedelta(seconds=20)  # stays live across the group
            spec = self._spec("echo", {"v": key}, **kw)
            try:
                barrier.wait(timeout=5)
            except threading.BrokenBarrierError:
                pass
            now = utc_now()
            with conn.transaction():
                out = self.store.apply(ops.Enqueue(now, (spec,)), conn=conn).outcomes[0]
                inserted = isinstance(out, ops.Inserted)
                conn.execute(
                    "INSERT INTO soak_unique (grp, key, mode, outcome, job_id, at) VALUES (%s, %s, %s, %s, %s, %s)",
                    (grp, key, mode, "inserted" if inserted else "duplicate", out.id, now),
                )
                if inserted:
                    conn.execute(
                        "INSERT INTO soak_ledger (job_id, kind, expected, inserted_at, detail) "
                        "VALUES (%s, 'echo', 'succeeded', %s, %s)",
                        (out.id, now, Jsonb({"unique": key, "mode": mode, "grp": grp})),
                    )
            outcomes[i] = "inserted" if inserted else "duplicate"
            if inserted:
                with self.lock:
                    self.enqueued += 1
        except (psycopg.Error, OSError):
            conns[i] = None
            barrier.abort()

    # --- step-journal samples (I3 immutability over time) -----------------------------------------------------

    def sample_steps(self) -> None:
        """Record the (seq, md5) of every step that is new or changed since the previous sample, for the steps
        of jobs not finished before the previous sample began (less STEP_WINDOW_SLACK_S): each step is sampled
        while its job runs and once more after it finished, and the checker compares the first value with
        every later sample and with the final snapshot (I3). The digests kept here are those of the jobs
        sampled last time only: memory bounded by the live jobs, not by the run's journal (issue 27)."""

        def go() -> None:
            started = time.time()
            since = self._sampled_since
            with psycopg.connect(self.url, autocommit=True, connect_timeout=3) as c:
                if since is None:
                    rows = c.execute("SELECT job_id, name, seq, md5(value) FROM belay_steps").fetchall()
                else:
                    rows = c.execute(STEPS_SINCE, (since - STEP_WINDOW_SLACK_S,)).fetchall()
            delta = []
            kept: dict[tuple[int, str], tuple[int, str]] = {}
            for job_id, name, seq, digest in rows:
                key = (job_id, name)
                if self.digests.get(key) != (seq, digest):
                    delta.append([job_id, name, seq, digest])
                kept[key] = (seq, digest)
            self.digests = kept
            self._sampled_since = started
            self.history.record("step_sample", rows=delta, total=len(rows))

        self._safely("sample", go)

    def _sampler(self) -> None:
        while not self.halt.wait(self.cfg.sample_every):
            self.sample_steps()

    # --- crons ---------------------------------------------------------------------------------------------------

    def put_cron(self, paused: bool, deadline: float = 60.0) -> bool:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            try:
                self.store.apply(
                    ops.PutCron(
                        utc_now(),
                        CRON,
                        "* * * * *",
                        "echo",
                        {"v": "cron"},
                        {"queue": QUEUE, "max_attempts": self.cfg.max_attempts},
                        paused,
                    )
                )
                self.history.record("cron_paused" if paused else "cron_registered", name=CRON)
                return True
            except psycopg.Error:
                time.sleep(0.5)
        return False

    # --- lifecycle ---------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.producing.set()
        for target in (self._produce, self._follow_up, self._unique, self._sampler, self.scenarios.sample_leases):
            t = threading.Thread(target=target, name=f"driver{target.__name__}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop_producing(self) -> None:
        self.producing.clear()

    def close(self) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(timeout=30)
        if self._conn is not None:
            self._conn.close()
        self.store.close()

    def counters(self) -> dict[str, int]:
        with self.lock:
            return {
                "enqueued": self.enqueued,
                "signals": self.signals,
                "cancels": self.cancels,
                "unique_groups": self.unique_groups,
                "driver_errors": self.enqueue_errors,
            }
