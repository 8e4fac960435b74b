"""Worker processes and the nemesis that hurts them (and the database).

`Workers` runs N copies of the worker command (PROTOCOL.md §1), each in its own process group so a
signal reaches the whole command (a `sh -c` wrapper and what it execs). A process that dies is
replaced by a new incarnation with a new node id (`w<slot>-<incarnation>`), whether the nemesis killed
it or it exited by itself (`flaky` kills its own process on purpose).

`Nemesis` injects, on independent schedules: kill -9 of a random worker, SIGSTOP of a worker (one
running a `slow` job when there is one) for longer than the lease then SIGCONT — held, when it froze
`slow` attempts inside their paid step, until later attempts journaled that step (soak/faults/zombies.py) — and a PostgreSQL
crash-restart (`cluster.crash()` then `cluster.restart()`). Every fault is recorded in the history
with its time *before* it takes effect (kill, stop, crash) or *after* it ended (cont, restarted), so
the intervals the checker derives are conservative.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime
from typing import Any, ClassVar

import psycopg

from soak.faults import zombies
from soak.faults.schedule import JITTER as JITTER
from soak.faults.schedule import MIN_GAP as MIN_GAP
from soak.faults.schedule import RESTART_S as RESTART_S
from soak.faults.schedule import RETRY_S as RETRY_S
from soak.faults.schedule import FaultSchedule as FaultSchedule
from soak.faults.schedule import fault_rates as fault_rates
from soak.faults.schedule import run_schedule as run_schedule
from soak.faults.schedule import start_fault_loops as start_fault_loops
from soak.faults.schedule import zombie_hold_budget as zombie_hold_budget
from soak.faults.workers import DRAIN_WAIT_S as DRAIN_WAIT_S
from soak.faults.workers import FAST_FAILURE_S as FAST_FAILURE_S
from soak.faults.workers import MAX_FAST_FAILURES as MAX_FAST_FAILURES
from soak.faults.workers import Slot as Slot
from soak.faults.workers import Workers as Workers
from soak.faults.workers import group_alive as group_alive
from soak.faults.workers import shell_command as shell_command
from soak.faults.workers import tail as tail
from soak.record.history import History


class Nemesis:
    """Faults on schedules (seconds; None = off), with ±25% jitter from the run's seeded RNG (FaultSchedule:
    each kind at its rate over the fault phase). Each `_<kind>()` returns False when it found no target."""

    # SIGSTOPs last stop_for (plus the wait for a `slow` job in its nap, plus a zombie hold) and SIGTERM
    # drains up to DRAIN_WAIT_S: longer than their usual period, so two lanes each (at most two at a time)
    lanes: ClassVar[dict[str, int]] = {"stop": 2, "term": 2}

    def __init__(
        self,
        workers: Workers,
        history: History,
        rng: random.Random,
        *,
        url: str,
        cluster: Any | None,
        kill_every: float | None,
        stop_every: float | None,
        db_restart_every: float | None,
        stop_for: float,
        term_every: float | None = None,
        phase_seconds: float | None = None,
    ) -> None:
        self.workers = workers
        self.phase_seconds = phase_seconds  # the fault phase's length: zombie holds fit its crash-restarts in it
        self.exits_paused: threading.Event | None = None  # the driver's: no self-exiting jobs during a hold
        self.history = history
        self.rng = rng
        self.url = url
        self.cluster = cluster
        self.every = {
            "kill": kill_every,
            "stop": stop_every,
            "db": db_restart_every if cluster else None,
            "term": term_every,
        }
        self.stop_for = stop_for
        self.halt = threading.Event()
        self.db_restarts = 0
        self.db_lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.last = ""
        self.restarted_at = float("-inf")  # monotonic time of the last PostgreSQL restart
        self.spare: set[str] = (
            set()
        )  # nodes running the later attempts of a zombie stop's jobs (soak/faults/zombies.py)
        self.zombie_lock = threading.Lock()  # one zombie stop at a time (the other lane's stops are plain)
        self.zombie_quiet_until = float("-inf")  # no zombie stop before (monotonic)
        self.schedules: dict[str, list[FaultSchedule]] = {}
        self.fault_phase: list[float | None] = [None, None]

    def start(self) -> None:
        start_fault_loops(self, "nemesis")

    def _kill(self) -> bool:
        # Never a node running a later attempt of a zombie stop's jobs (`spare`, soak/faults/zombies.py): it must
        # journal the paid step the zombie then writes again. (Skipping every kill during a zombie stop
        # delivered half the kills asked for: zombie stops hold for up to 3 × stop_for.)
        slots = [s for s in self.workers.running_slots() if s.node not in self.spare]
        if not slots:
            return False
        slot = self.rng.choice(slots)
        self.last = f"kill -9 {slot.node}"
        return self.workers.kill(slot)

    def _stop(self) -> bool:
        # One zombie stop at a time: while one holds, the other lane's stops are plain ones (not of its nodes).
        # After a zombie stop, the next waits twice as long as that one held: a hold keeps the database from
        # crash-restarts, so holds back to back would starve `--db-restart-every` of its rate.
        if time.monotonic() < self.zombie_quiet_until or not self.zombie_lock.acquire(blocking=False):
            running = self.workers.running_slots()
            slots = [s for s in running if s.node not in self.spare]
            if not slots or len(running) < 2 or self.halt.is_set():  # keep at least one worker running
                return False
            slot = self.rng.choice(slots)
            if not self.workers.stop(slot):
                return False
            self.last = f"SIGSTOP {slot.node} for {self.stop_for:.0f}s"
            self.halt.wait(self.stop_for)
            self.workers.cont(slot)
            return True
        try:
            return self._zombie_or_plain_stop()
        finally:
            self.zombie_lock.release()

    def _zombie_or_plain_stop(self) -> bool:
        # Prefer a node in the middle of a `slow` job's paid `nap` step (so an attempt comes back stale, and
        # writes a duplicate: a zombie stop, soak/faults/zombies.py); wait a little for one.
        patience = (self.every["stop"] or 10) / 2  # seconds of waiting while the database answers
        while True:
            t0 = time.monotonic()
            slots = self.workers.running_slots()
            found = zombies.slow_in_nap(self.url)  # None while the database is down: wait for it
            napping = found or {}
            preferred = [s for s in slots if s.node in napping]
            if preferred or patience <= 0 or self.halt.wait(1.0):
                break
            if found is not None:
                patience -= time.monotonic() - t0
        if len(slots) < 2 or self.halt.is_set():  # keep at least one worker running; no stop after the phase
            return False
        # among them, the node with the most `slow` attempts inside their `nap`
        most = max((len(napping.get(s.node, ())) for s in preferred), default=0)
        slot = self.rng.choice([s for s in preferred if len(napping.get(s.node, ())) == most] or preferred or slots)
        node, held = slot.node, napping.get(slot.node, [])
        most = self._hold_budget() if held else None
        if most is None:  # no zombie stop now: it would hold the database past a due crash-restart
            held = []
        locked = bool(held)
        if locked:  # a zombie stop (soak/faults/zombies.py): no PostgreSQL crash until the zombies have written
            self.db_lock.acquire()
            # …and none just before: the node must first replace the connections a crash broke
            gap = zombies.AFTER_RESTART_S - (time.monotonic() - self.restarted_at)
            if gap > 0:
                time.sleep(gap)
                held = [h for h in (zombies.slow_in_nap(self.url) or {}).get(node, []) if h in held]
                if not held:
                    self.db_lock.release()
                    locked = False
        try:
            if not self.workers.stop(slot):
                return False
            self.last = f"SIGSTOP {node} for {self.stop_for:.0f}s"
            if held:
                self.history.record("zombie_stop", node=node, held=[list(h) for h in held])
                t0 = time.monotonic()
                if self.exits_paused is not None:
                    self.exits_paused.set()
                try:
                    why = zombies.hold(self.url, held, self.halt, self.spare, most=most or 3 * self.stop_for)
                finally:
                    if self.exits_paused is not None:
                        self.exits_paused.clear()
                self.zombie_quiet_until = time.monotonic() + 2 * (time.monotonic() - t0)
                self.history.record("zombie_cont", node=node, why=why)
                self.spare.clear()
                self.spare.add(node)
            elif not self.halt.wait(self.stop_for):
                pass
            self.workers.cont(slot)
            if held:
                time.sleep(zombies.AFTER_CONT_S)
            return True
        finally:
            if locked:
                self.spare.clear()
                self.db_lock.release()

    def _hold_budget(self) -> float | None:
        start = self.fault_phase[0]
        left = start + self.phase_seconds - time.monotonic() if start is not None and self.phase_seconds else None
        return zombie_hold_budget(self.stop_for, self._db_due_in(), phase_left=left, db_every=self.every["db"])

    def _db_due_in(self) -> float:
        """Seconds until the next PostgreSQL crash-restart is due (negative: overdue; inf: that lane is off)."""
        lanes = self.schedules.get("db", ())
        return min(s.next_at() for s in lanes) - time.monotonic() if lanes else float("inf")

    def _running_by_node(self) -> dict[str, list]:
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=2) as c:
                rows = c.execute(
                    "SELECT leased_by, id, attempt, worker FROM belay_jobs WHERE state = 'running' "
                    "AND lease_until > %s",
                    (datetime.now(UTC),),
                ).fetchall()
        except psycopg.Error:
            return {}
        out: dict[str, list] = {}
        for node, job_id, attempt, kind in rows:
            out.setdefault(node, []).append([job_id, attempt, kind])
        return out

    def _term(self) -> bool:
        """SIGTERM a worker that runs short jobs (besides `slow` ones, which may outlast a grace) and watch it drain."""
        deadline = time.monotonic() + 5
        while True:
            slots = self.workers.running_slots()
            running = self._running_by_node()
            preferred = [s for s in slots if any(k != "slow" for _, _, k in running.get(s.node, ()))]
            if preferred or time.monotonic() > deadline or self.halt.wait(0.5):
                break
        if len(slots) < 2 or not preferred:
            return False
        slot = self.rng.choice(preferred)
        self.last = f"SIGTERM {slot.node} (drain)"
        return self.workers.drain_term(slot, running.get(slot.node, []))

    def _db(self) -> bool:
        if not self.db_lock.acquire(timeout=RETRY_S):  # a zombie stop (or a failover) holds the database
            return False
        try:
            self.last = "PostgreSQL crash-restart"
            self.history.record("db_crash")
            t0 = time.monotonic()
            self.cluster.crash()
            self.cluster.restart()
            self.history.record("db_restarted", took=round(time.monotonic() - t0, 3))
            self.restarted_at = time.monotonic()
            self.db_restarts += 1
            return True
        finally:
            self.db_lock.release()

    def stop_all(self) -> None:
        if self.fault_phase[0] is not None and self.fault_phase[1] is None:
            self.fault_phase[1] = time.monotonic()  # the faults phase ends here (a stop may still be ending)
        self.halt.set()
        for t in self.threads:
            t.join(timeout=30)
        self.workers.cont_all()
        self.history.record("fault_rates", source="nemesis", kinds=fault_rates(self))
