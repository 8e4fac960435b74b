"""When faults happen (soak/faults/nemesis.py, soak/faults/netfaults.py): jittered schedules per fault kind,
the loops that run them, the zombie-hold budget, and the rates a run actually reached.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from soak.faults import zombies

JITTER = 0.25  # each fault is due at a uniform point of the middle half of its slot: the gaps vary by ±every/2
MIN_GAP = 0.25  # catching up after a late fault: at most one per MIN_GAP × every (a burst, not a storm)
RETRY_S = 0.5  # a due fault with no target now (no running worker, a zombie stop holding …) is retried this often


RESTART_S = 1.0  # reserved per crash-restart still due in the phase (a crash and restart took 0.2 s here)


def zombie_hold_budget(
    stop_for: float, db_due_in: float, *, phase_left: float | None = None, db_every: float | None = None
) -> float | None:
    """How long a zombie stop may hold the database (soak/faults/zombies.py), or None for a plain stop instead.

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
    start and (after `fault_rates`) end. Serves this module's Nemesis and soak/faults/netfaults.py's NetFaults."""
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
