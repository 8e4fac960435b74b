"""Worker processes and the nemesis that hurts them (and the database).

`Workers` runs N copies of the worker command (PROTOCOL.md §1), each in its own process group so a
signal reaches the whole command (a `sh -c` wrapper and what it execs). A process that dies is
replaced by a new incarnation with a new node id (`w<slot>-<incarnation>`), whether the nemesis killed
it or it exited by itself (`flaky` kills its own process on purpose).

`Nemesis` injects, on independent schedules: kill -9 of a random worker, SIGSTOP of a worker (one
running a `slow` job when there is one) for longer than the lease then SIGCONT — held, when it froze
`slow` attempts inside their paid step, until later attempts journaled that step (soak/zombies.py) — and a PostgreSQL
crash-restart (`cluster.crash()` then `cluster.restart()`). Every fault is recorded in the history
with its time *before* it takes effect (kill, stop, crash) or *after* it ended (cont, restarted), so
the intervals the checker derives are conservative.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import psycopg

from soak import zombies  # issue 11: zombie stops (duplicate paid step writes)
from soak.history import History

FAST_FAILURE_S = 5.0  # a self-exit this soon after the start is a fast failure (issue 11)
MAX_FAST_FAILURES = 6  # in a row, per slot: then the run ends INVALID (duty P1) with the worker's last log lines
DRAIN_WAIT_S = 20.0  # how long the SIGTERM fault waits for a worker to drain (PROTOCOL.md §1: grace ≤ 15 s)


def shell_command(cmd: str) -> str:
    """`exec CMD` for a simple command, so the process the harness waits for (and whose exit status it
    checks after SIGTERM, duty P4) is the worker itself, not a shell that a SIGTERM kills first."""
    import re

    return cmd if re.search(r"[;&|\n()`]|^\s*exec\s", cmd) else f"exec {cmd}"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Slot:
    index: int
    incarnation: int = 0
    proc: subprocess.Popen | None = None
    node: str = ""
    stopped: bool = False
    expected_end: str | None = None  # "kill" | "term" | "drain" while we are ending it on purpose
    lock: threading.Lock = field(default_factory=threading.Lock)
    started_at: float = 0.0
    fast_failures: int = 0


class Workers:
    def __init__(
        self,
        cmd: str,
        n: int,
        env: dict[str, str],
        cwd: Path,
        log_dir: Path,
        history: History,
        skew: dict[int, float] | None = None,
    ) -> None:
        self.cmd = cmd
        self.env = env
        self.cwd = cwd
        self.log_dir = log_dir
        self.history = history
        self.slots = [Slot(i + 1) for i in range(n)]
        self.closing = threading.Event()
        self.kills = self.stops = self.exits = 0
        self.slot_env: dict[int, dict[str, str]] = {}  # per-slot overrides (issue 13: each slot's proxy route)
        self.pgids: set[int] = set()  # every worker process group ever started (soak/reaper.py)
        self.reaped = 0
        self.skew = dict(skew or {})  # slot index → seconds its clock runs ahead (BELAY_CLOCK_OFFSET)
        self.fatal: str | None = None  # set when a worker cannot stay up: the run ends INVALID (P1)
        log_dir.mkdir(parents=True, exist_ok=True)

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)

    def _spawn(self, slot: Slot) -> None:
        with slot.lock:
            slot.incarnation += 1
            slot.node = f"w{slot.index}-{slot.incarnation}"
            slot.expected_end = None
            slot.stopped = False
            env = {**self.env, "BELAY_NODE": slot.node, **self.slot_env.get(slot.index, {})}
            skew = self.skew.get(slot.index)
            if skew:  # PROTOCOL.md §1: the worker adds BELAY_CLOCK_OFFSET to every `now` it sends
                env["BELAY_CLOCK_OFFSET"] = f"{skew:.3f}"
            log = open(self.log_dir / f"{slot.node}.log", "ab")  # noqa: SIM115 - the worker process writes to it
            self.history.record(
                "worker_start", node=slot.node, slot=slot.index, **({"clock_skew": skew} if skew else {})
            )
            slot.started_at = time.monotonic()
            slot.proc = subprocess.Popen(
                ["/bin/sh", "-c", shell_command(self.cmd)],
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            proc, node = slot.proc, slot.node
            self.pgids.add(proc.pid)
        threading.Thread(target=self._watch, args=(slot, proc, node), name=f"watch-{node}", daemon=True).start()

    def _deliberate(self, node: str) -> bool:
        """Did the worker record an `exit` observation (a kind asked it to exit) before it died?"""
        try:
            with psycopg.connect(self.env["BELAY_DATABASE_URL"], autocommit=True, connect_timeout=3) as c:
                return (
                    c.execute(
                        "SELECT 1 FROM soak_observations WHERE node = %s AND phase = 'exit' LIMIT 1", (node,)
                    ).fetchone()
                    is not None
                )
        except (psycopg.Error, KeyError):
            return False

    def _watch(self, slot: Slot, proc: subprocess.Popen, node: str) -> None:
        code = proc.wait()
        lived = time.monotonic() - slot.started_at
        with slot.lock:
            reason = slot.expected_end
            current = slot.proc is proc
        delay = 0.0
        if reason is None:
            self.exits += 1
            self.history.record("worker_exit", node=node, code=code, lived=round(lived, 3))
            if lived < FAST_FAILURE_S and not self._deliberate(node):
                slot.fast_failures += 1
                if slot.fast_failures >= MAX_FAST_FAILURES:
                    self.fatal = (
                        f"worker slot {slot.index} could not stay up: {slot.fast_failures} exits in a row "
                        f"within {FAST_FAILURE_S:.0f}s of starting (last: {node}, exit status {code}, restarted "
                        f"with exponential backoff); last lines of {node}.log:\n"
                        f"{tail(self.log_dir / f'{node}.log')}"
                    )
                    self.history.record(
                        "worker_unstable",
                        node=node,
                        slot=slot.index,
                        failures=slot.fast_failures,
                        code=code,
                        message=self.fatal,
                    )
                    return
                delay = min(0.25 * 2 ** (slot.fast_failures - 1), 8.0)  # exponential backoff
            else:
                slot.fast_failures = 0
        else:
            slot.fast_failures = 0
        if current and not self.closing.is_set():
            if delay and self.closing.wait(delay):
                return
            self._spawn(slot)

    def _signal(self, slot: Slot, sig: int) -> None:
        proc = slot.proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass

    # --- faults -----------------------------------------------------------------------------------------

    def running_slots(self) -> list[Slot]:
        return [
            s
            for s in self.slots
            if s.proc is not None and s.proc.poll() is None and not s.stopped and not s.expected_end
        ]

    def kill(self, slot: Slot) -> bool:
        """kill -9 the worker's process group; its watcher starts the next incarnation. False: not killed."""
        with slot.lock:
            if slot.stopped or slot.expected_end or slot.proc is None or slot.proc.poll() is not None:
                return False
            slot.expected_end = "kill"
            self.history.record("worker_kill", node=slot.node)
            self._signal(slot, signal.SIGKILL)
            self.kills += 1
            return True

    def stop(self, slot: Slot) -> bool:
        with slot.lock:
            if slot.stopped or slot.expected_end or slot.proc is None or slot.proc.poll() is not None:
                return False
            slot.stopped = True
            self.history.record("worker_stop", node=slot.node)
            self._signal(slot, signal.SIGSTOP)
            self.stops += 1
            return True

    def cont(self, slot: Slot) -> None:
        with slot.lock:
            if not slot.stopped:
                return
            self._signal(slot, signal.SIGCONT)
            slot.stopped = False
            self.history.record("worker_cont", node=slot.node)

    def drain_term(self, slot: Slot, running: list) -> bool:
        """SIGTERM one worker mid-run (duty P4) and wait for it to drain; its watcher starts the next one.
        False: no SIGTERM was sent."""
        with slot.lock:
            if slot.stopped or slot.expected_end or slot.proc is None or slot.proc.poll() is not None:
                return False  # already being killed (or stopped): not a drain
            slot.expected_end = "drain"
            proc, node = slot.proc, slot.node
            self.history.record("worker_drain_term", node=node, running=running)
            self._signal(slot, signal.SIGTERM)
        t0 = time.monotonic()
        try:
            code = proc.wait(timeout=DRAIN_WAIT_S)
            while group_alive(proc.pid) and time.monotonic() - t0 < DRAIN_WAIT_S:
                time.sleep(0.05)  # what the command started (a compound command's worker) drains too
            if group_alive(proc.pid):
                raise subprocess.TimeoutExpired(self.cmd, DRAIN_WAIT_S)
            self.history.record("worker_drained", node=node, code=code, seconds=round(time.monotonic() - t0, 2))
        except subprocess.TimeoutExpired:
            self.history.record("worker_drained", node=node, code=None, seconds=None, timeout=DRAIN_WAIT_S)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return True

    def cont_all(self) -> None:
        for slot in self.slots:
            self.cont(slot)

    def status(self) -> dict[str, int]:
        from soak.reaper import reap_orphans  # issue 13: no zombie pile-up over long runs

        self.reaped += reap_orphans(self.pgids, {s.proc.pid for s in self.slots if s.proc is not None})
        alive = sum(1 for s in self.slots if s.proc is not None and s.proc.poll() is None)
        return {
            "alive": alive,
            "stopped": sum(1 for s in self.slots if s.stopped),
            "kills": self.kills,
            "stops": self.stops,
            "exits": self.exits,
        }

    def terminate(self, grace: float = 20.0) -> None:
        """SIGTERM every worker (after SIGCONT), wait up to `grace`, then SIGKILL what is left."""
        self.closing.set()
        self.cont_all()
        for slot in self.slots:
            with slot.lock:
                if slot.proc is not None and slot.proc.poll() is None:
                    slot.expected_end = "term"
                    self.history.record("worker_term", node=slot.node)
                    self._signal(slot, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for slot in self.slots:
            if slot.proc is None:
                continue
            try:
                slot.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self._signal(slot, signal.SIGKILL)
                slot.proc.wait()


JITTER = 0.25  # each fault is due at a uniform point of the middle half of its slot: the gaps vary by ±every/2
MIN_GAP = 0.25  # catching up after a late fault: at most one per MIN_GAP × every (a burst, not a storm)
RETRY_S = 0.5  # a due fault with no target now (no running worker, a zombie stop holding …) is retried this often


RESTART_S = 1.0  # reserved per crash-restart still due in the phase (a crash and restart took 0.2 s here)


def zombie_hold_budget(
    stop_for: float, db_due_in: float, *, phase_left: float | None = None, db_every: float | None = None
) -> float | None:
    """How long a zombie stop may hold the database (soak/zombies.py), or None for a plain stop instead.

    A zombie stop holds `db_lock` — no crash-restart — for up to 3 × stop_for plus AFTER_CONT_S, and needs
    most of it: the frozen attempt's lease must run out, the job be reclaimed and claimed elsewhere, and
    that attempt sleep through its `nap` (about 25 s at the default ttl). Unbounded, holds starved
    `--db-restart-every` (issue 27: 0 of 2 crash-restarts in 60 s runs; the due crash waited out every
    hold). Bounded by the next crash's due time (`db_due_in`), holds were cut short ("cap") before their
    zombies wrote, and I4's duplicate-write scenario went missing in 2 of 14 default runs.

    So with the phase's end known (`phase_left`, `db_every`), a hold may delay due crash-restarts as long
    as all of them still fit before the phase ends: after the hold, they catch up one per MIN_GAP × every
    (FaultSchedule), so the hold leaves room for AFTER_CONT_S plus, for each crash due before the end
    (counted with the shortest gap, 0.75 × every), RESTART_S and a catch-up gap. Without it, a hold ends
    before the next crash is due. A zombie stop that could not last stop_for is a plain stop."""
    if phase_left is not None and db_every and db_due_in != float("inf"):
        due = 0 if db_due_in >= phase_left else 1 + int((phase_left - max(db_due_in, 0.0)) // (db_every * (1 - JITTER)))
        room = phase_left - zombies.AFTER_CONT_S - due * RESTART_S - max(due - 1, 0) * MIN_GAP * db_every
        if due == 0:
            room = float("inf")  # no crash left in the phase (a hold may outlast it by OVERRUN_S)
    else:
        room = db_due_in - zombies.AFTER_CONT_S - 1.0
    most = min(3 * stop_for, room)
    return most if most >= stop_for else None


class FaultSchedule:
    """When each fault of one kind (one lane of it) is due: an absolute schedule from the fault phase's start.

    The phase is cut into slots of `every` seconds; fault k of lane l is due at a uniform point of the middle
    half of slot k × lanes + l — t0 + every × (k × lanes + l + U(0.25, 0.75)) — so a phase of D seconds asks
    for D / every faults with an error of at most one in any run length, whatever each fault takes, however
    late a loaded harness wakes up, and however long a due fault waits for a target (it stays due:
    `injected` is not advanced until it happened). A late lane catches up, one fault per MIN_GAP × every at
    most. (The gaps used to be a random walk, each every × lanes × U(0.75, 1.25) after the last due time: in
    the default 60 s run a lane's second stop fell past the phase's end in 3 of 20 runs, 2 stops of 3 asked.)
    Lanes (`lanes` > 1) take turns over the slots, for faults that last longer than their period (a SIGSTOP
    past the lease, a drain): each lane runs its faults one after the other, lanes run side by side."""

    def __init__(self, every: float, rng: random.Random, start: float, *, lane: int = 0, lanes: int = 1) -> None:
        self.every = every
        self.period = every * lanes
        self.rng = rng
        self.base = start + every * lane  # slot k of this lane starts at base + k × period
        self.slot = 0
        self.due = self._due()
        self.not_before = start  # catching up: no sooner than MIN_GAP × every after the previous fault
        self.injected = 0

    def _due(self) -> float:
        return self.base + self.slot * self.period + self.every * self.rng.uniform(JITTER, 1 - JITTER)

    def skip(self) -> None:
        """The due fault is given up (it failed): the next slot's is due."""
        self.slot += 1
        self.due = self._due()

    def next_at(self) -> float:
        return max(self.due, self.not_before)

    def done(self, now: float) -> None:
        """The due fault happened at `now`: the next slot's is due (on the absolute schedule: a
        late one at once), but not sooner than MIN_GAP × every from now."""
        self.injected += 1
        self.skip()
        self.not_before = now + MIN_GAP * self.every


def run_schedule(
    schedule: FaultSchedule,
    fire: Callable[[], bool | None],
    wait: Callable[[float], bool],
    clock: Callable[[], float],
    on_error: Callable[[Exception], None] | None = None,
) -> None:
    """Fire `schedule`'s faults until `wait` returns True (halt). `fire()` returns False when it found no
    target (retried after RETRY_S, still due), anything else when the fault happened; an exception counts as
    no fault (recorded by `on_error`, retried at the next due time)."""
    while True:
        delay = schedule.next_at() - clock()
        if delay > 0 and wait(delay):
            return
        try:
            happened = fire() is not False
        except Exception as exc:  # noqa: BLE001 - a failed fault is recorded, never fatal
            if on_error is not None:
                on_error(exc)
            schedule.skip()
            schedule.not_before = clock() + MIN_GAP * schedule.every
            continue
        if happened:
            schedule.done(clock())
        elif wait(RETRY_S):
            return


def start_fault_loops(owner: Any, prefix: str) -> None:
    """Threads firing each fault kind of `owner` with a period in `owner.every` (seconds; None = off) on its
    FaultSchedule — `owner.lanes.get(kind, 1)` lanes — calling `owner._<kind>()` until `owner.halt` is set.
    `owner.schedules[kind]` holds the lanes (their `injected` counts); `owner.fault_phase` the phase's
    start and (after `fault_rates`) end. Serves this module's Nemesis and soak/netfaults.py's NetFaults."""
    start = time.monotonic()
    owner.fault_phase = [start, None]
    owner.schedules = {}
    for name, every in owner.every.items():
        if not every:
            continue
        lanes = max(1, int(getattr(owner, "lanes", {}).get(name, 1)))
        for lane in range(lanes):
            sched = FaultSchedule(every, owner.rng, start, lane=lane, lanes=lanes)
            owner.schedules.setdefault(name, []).append(sched)
            fire = getattr(owner, f"_{name}")

            def on_error(exc: Exception, name: str = name) -> None:
                owner.history.record("nemesis_error", fault=name, error=str(exc)[:200])

            t = threading.Thread(
                target=run_schedule,
                args=(sched, fire, owner.halt.wait, time.monotonic, on_error),
                name=f"{prefix}-{name}-{lane}",
                daemon=True,
            )
            t.start()
            owner.threads.append(t)


def fault_rates(owner: Any, end: float | None = None) -> dict[str, dict[str, Any]]:
    """Requested vs injected per fault kind over the fault phase so far (or up to `end`, monotonic):
    requested = phase seconds / every."""
    start, stopped = getattr(owner, "fault_phase", (None, None))
    if start is None:
        return {}
    seconds = (end if end is not None else stopped if stopped is not None else time.monotonic()) - start
    out = {}
    for name, every in owner.every.items():
        if every:
            injected = sum(s.injected for s in owner.schedules.get(name, ()))
            out[name] = {
                "every": every,
                "seconds": round(seconds, 1),
                "requested": round(seconds / every, 1),
                "injected": injected,
            }
    return out


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
        self.spare: set[str] = set()  # nodes running the later attempts of a zombie stop's jobs (soak/zombies.py)
        self.zombie_lock = threading.Lock()  # one zombie stop at a time (the other lane's stops are plain)
        self.zombie_quiet_until = float("-inf")  # no zombie stop before (monotonic)
        self.schedules: dict[str, list[FaultSchedule]] = {}
        self.fault_phase: list[float | None] = [None, None]

    def start(self) -> None:
        start_fault_loops(self, "nemesis")

    def _kill(self) -> bool:
        # Never a node running a later attempt of a zombie stop's jobs (`spare`, soak/zombies.py): it must
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
        # writes a duplicate: a zombie stop, soak/zombies.py); wait a little for one.
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
        if locked:  # a zombie stop (soak/zombies.py): no PostgreSQL crash until the zombies have written
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
