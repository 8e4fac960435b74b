"""Faults at the rate asked (issue 27 item 4): soak/faults/nemesis.py's FaultSchedule on a fake clock.

The old loop waited `every × U(0.75, 1.25)` *after* each fault ended and dropped a fault that found no
target: a kill -9 skipped during a zombie stop's hold, a SIGSTOP that lasts longer than its period, a
harness that wakes late under load each lost faults (`--kill-every 10` over 180 s gave 8–12 kills).
"""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from soak.faults import nemesis
from soak.faults.nemesis import FaultSchedule, Nemesis, fault_rates, run_schedule


class FakeClock:
    """Monotonic time that moves only when waited on (plus `lag`: a loaded harness wakes up late)."""

    def __init__(self, end: float, lag: float = 0.0) -> None:
        self.now = 0.0
        self.end = end
        self.lag = lag

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.now += seconds + self.lag
        return self.now >= self.end


def simulate(
    every: float,
    duration: float,
    *,
    takes: float = 0.0,
    blocked: list[tuple[float, float]] = (),
    lag: float = 0.0,
    lanes: int = 1,
    seed: int = 1,
) -> int:
    """Faults injected over `duration` s: each lasts `takes` s and finds no target inside `blocked`
    windows. Lanes are independent schedules (one fake clock each, as they run side by side)."""
    total = 0
    for lane in range(lanes):
        fake = FakeClock(duration, lag)
        sched = FaultSchedule(every, random.Random(seed + lane), 0.0, lane=lane, lanes=lanes)

        def fire(fake=fake) -> bool:
            if any(a <= fake.now < b for a, b in blocked):
                return False
            fake.now += takes  # the fault itself takes time (a stop lasts stop_for, a restart seconds)
            return True

        run_schedule(sched, fire, fake.wait, fake.clock)
        total += sched.injected
    return total


def within(got: float, want: float, tolerance: float = 0.2) -> bool:
    return abs(got - want) <= tolerance * want


@pytest.mark.parametrize("seed", range(5))
def test_kill_every_10_over_180_s_gives_about_18_even_with_no_target_a_third_of_the_time(seed):
    # zombie-stop holds (no killable node) for 60 of the 180 s, in three 20 s windows
    blocked = [(20, 40), (80, 100), (130, 150)]
    got = simulate(10, 180, takes=0.05, blocked=blocked, seed=seed)
    assert within(got, 18), got


@pytest.mark.parametrize("seed", range(5))
def test_a_harness_that_wakes_up_late_keeps_the_rate(seed):
    # every wait overshoots by 2 s (a loaded 2-core machine), every crash-restart takes 4 s
    got = simulate(30, 3600, takes=4.0, lag=2.0, seed=seed)
    assert within(got, 120, 0.1), got  # the old loop: 3600 / (30 + 4 + 2) = 100


@pytest.mark.parametrize("seed", range(5))
def test_faults_longer_than_their_period_keep_the_rate_on_two_lanes(seed):
    # a SIGSTOP of stop_for 15 s after waiting up to 10 s for a `slow` job in its nap: 25 s per stop, every 20 s
    got = simulate(20, 600, takes=25.0, lanes=2, seed=seed)
    assert within(got, 30), got


@pytest.mark.parametrize("seed", range(5))
def test_lanes_interleave_from_the_start_of_a_short_phase(seed):
    # the default 60 s soak at --stop-every 20 on two lanes: about 3 stops, not 1-2 (lanes first due at 2 × every)
    got = simulate(20, 60, takes=15.0, lanes=2, seed=seed)
    assert 2 <= got <= 4, got
    got = simulate(20, 180, takes=15.0, lanes=2, seed=seed)
    assert within(got, 9), got


def test_the_default_run_gets_exactly_the_faults_it_asks_for():
    """60 s at kill 10, stop 20 and term 20 on two lanes, db 30: 6, 3, 3 and 2 in every seed. With gaps as a
    random walk (each every × lanes × U(0.75, 1.25)) the default series had SIGSTOP 2 of 3 in 3 of 20 runs,
    SIGTERM 2 and 4 of 3 (issue 27: within ±20 % in the default run, where one fault is ±33 %)."""
    for seed in range(200):
        got = (
            simulate(10, 60, takes=0.05, seed=seed),
            simulate(20, 60, takes=15.0, lanes=2, seed=seed),  # a SIGSTOP for stop_for 15 s
            simulate(20, 60, takes=8.0, lanes=2, seed=seed),  # a SIGTERM drain
            simulate(30, 60, takes=1.0, seed=seed),  # a crash-restart
        )
        assert got == (6, 3, 3, 2), (seed, got)


def test_the_hour_soak_at_kill_every_15_gives_about_240():
    blocked = [(t, t + 20) for t in range(100, 3600, 90)]  # a zombie hold of 20 s every 90 s
    got = simulate(15, 3600, takes=0.05, blocked=blocked, lag=0.3)
    assert within(got, 240), got


def test_catching_up_is_a_burst_not_a_storm():
    # blocked for 100 s, then free: the 10 faults due meanwhile come at most one per MIN_GAP × every
    fake = FakeClock(200)
    sched = FaultSchedule(10, random.Random(3), 0.0)
    times: list[float] = []

    def fire() -> bool:
        if fake.now < 100:
            return False
        times.append(fake.now)
        return True

    run_schedule(sched, fire, fake.wait, fake.clock)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= nemesis.MIN_GAP * 10 - 1e-9
    assert within(sched.injected, 20)


def test_a_failing_fault_is_recorded_and_the_schedule_goes_on():
    fake = FakeClock(100)
    sched = FaultSchedule(10, random.Random(0), 0.0)
    errors: list[Exception] = []
    calls = 0

    def fire() -> bool:
        nonlocal calls
        calls += 1
        if calls % 2:
            raise RuntimeError("boom")
        return True

    run_schedule(sched, fire, fake.wait, fake.clock, errors.append)
    assert errors and sched.injected >= 3


# --- the nemesis's own faults -------------------------------------------------------------------------


class FakeWorkers:
    def __init__(self, nodes: list[str]) -> None:
        self.slots = [SimpleNamespace(index=i + 1, node=n) for i, n in enumerate(nodes)]
        self.killed: list[str] = []

    def running_slots(self):
        return [s for s in self.slots if s.node not in self.killed]

    def kill(self, slot) -> bool:
        self.killed.append(slot.node)
        return True


def make_nemesis(workers) -> Nemesis:
    history = SimpleNamespace(record=lambda *a, **k: None)
    return Nemesis(
        workers,
        history,
        random.Random(0),
        url="postgresql://unused",
        cluster=None,
        kill_every=10,
        stop_every=None,
        db_restart_every=None,
        stop_for=15,
    )


def test_kills_go_on_during_a_zombie_stop_but_spare_its_later_attempts_nodes():
    w = FakeWorkers(["w1-1", "w2-1", "w3-1"])
    n = make_nemesis(w)
    n.spare.update({"(zombie stop)", "w2-1"})  # w1-1 is the stopped zombie (not running), w2-1 runs the retry
    w.slots[0].node = "w1-1"
    w.killed.append("w1-1")  # not among the running slots (stopped)
    assert n._kill() is True and w.killed[-1] == "w3-1"
    assert n._kill() is False  # only the spared node is left: no target, the schedule retries


def test_fault_rates_reports_requested_and_injected_per_kind():
    owner = SimpleNamespace(every={"kill": 10, "stop": None}, fault_phase=[0.0, 180.0])
    owner.schedules = {"kill": [SimpleNamespace(injected=17)]}
    assert fault_rates(owner) == {"kill": {"every": 10, "seconds": 180.0, "requested": 18.0, "injected": 17}}


def test_a_short_phase_gets_its_whole_count_on_average():
    # the default 60 s soak at --db-restart-every 30: 2 requested; a first fault a whole gap in gave 1.5
    counts = [simulate(30, 60, takes=3.0, seed=s) for s in range(200)]
    assert within(sum(counts) / len(counts), 2.0, 0.1), sum(counts) / len(counts)
    counts = [simulate(20, 60, takes=15.0, lanes=2, seed=s) for s in range(200)]
    assert within(sum(counts) / len(counts), 3.0, 0.1), sum(counts) / len(counts)


def test_without_the_phase_end_a_zombie_stop_never_holds_the_database_past_a_due_crash_restart():
    # issue 27: unbounded zombie holds (up to 3 × stop_for with the database locked) starved
    # --db-restart-every: 0 of 2 crash-restarts in 60 s default runs
    stop_for = 10.0
    assert nemesis.zombie_hold_budget(stop_for, float("inf")) == 30.0  # no crash lane: the usual cap
    assert nemesis.zombie_hold_budget(stop_for, 100.0) == 30.0
    budget = nemesis.zombie_hold_budget(stop_for, 20.0)
    assert budget is not None and stop_for <= budget and budget + nemesis.zombies.AFTER_CONT_S < 20.0
    assert nemesis.zombie_hold_budget(stop_for, 12.0) is None, "too little room: a plain stop instead"
    assert nemesis.zombie_hold_budget(stop_for, -3.0) is None, "a crash-restart is overdue"


HOLD_NEEDS_S = 25.0  # a default zombie stop: lease (≤ 10 s) runs out, reclaim + claim, `begin`, the 12 s nap


def crash_restarts(seed: int, hold_at: float | None, *, duration=60.0, every=30.0, stop_for=15.0, budget_kw=None):
    """Crash-restarts injected over a `duration` s phase when a zombie stop starting at `hold_at` holds the
    database for its whole budget (the worst case: its zombies never write); and that budget."""

    def run(window):
        fake = FakeClock(duration)
        sched = FaultSchedule(every, random.Random(seed), 0.0)
        fired = []

        def fire() -> bool:
            if window and window[0] <= fake.now < window[1]:
                return False  # the hold has the database lock: retried every RETRY_S, still due
            fired.append(fake.now)
            fake.now += 0.2  # a crash-restart here takes about 0.2 s
            return True

        run_schedule(sched, fire, fake.wait, fake.clock)
        return sched.injected, fired

    free, fired = run(None)
    if hold_at is None:
        return free, None
    due_in = min((t for t in fired if t > hold_at), default=duration + every) - hold_at  # as the nemesis sees it
    budget = nemesis.zombie_hold_budget(stop_for, due_in, **budget_kw(duration - hold_at, every))
    window = (hold_at, hold_at + budget + nemesis.zombies.AFTER_CONT_S) if budget is not None else None
    return run(window)[0], budget


def test_a_zombie_stop_gets_the_time_it_needs_and_costs_no_crash_restart_of_the_phase():
    # issue 27: bounded by the next crash's due time, the one zombie stop of a default run often ended at
    # "cap" (15.5 s of the ~25 s it needs) and I4 was unknown in 2 of 14 runs. Bounded by the phase's end
    # instead, a hold may delay crash-restarts, which then catch up before the phase ends.
    with_end = lambda left, every: {"phase_left": left, "db_every": every}  # noqa: E731
    next_only = lambda left, every: {}  # noqa: E731 -- the old budget: only the next crash's due time
    enough, enough_before, total = 0, 0, 0
    for seed in range(200):
        for hold_at in (5.0, 10.0, 15.0, 20.0, 25.0, 30.0):  # the first stop lane's stop, with its patience
            free, _ = crash_restarts(seed, None)
            held, budget = crash_restarts(seed, hold_at, budget_kw=with_end)
            assert held == free, (seed, hold_at, budget)  # not one crash-restart of the phase lost
            _, old = crash_restarts(seed, hold_at, budget_kw=next_only)
            total += 1
            enough += budget is not None and budget >= HOLD_NEEDS_S
            enough_before += old is not None and old >= HOLD_NEEDS_S
    assert enough >= 0.9 * total, (enough, total)  # measured: 1,162 of 1,200
    assert enough_before < 0.25 * total, (enough_before, total)  # the old budget: 121 of 1,200


def test_a_long_phase_keeps_the_usual_cap_and_its_crash_restarts():
    for seed in range(50):
        free, _ = crash_restarts(seed, None, duration=600.0)
        held, budget = crash_restarts(
            seed, 300.0, duration=600.0, budget_kw=lambda left, every: {"phase_left": left, "db_every": every}
        )
        assert budget == 45.0 and held == free


def test_fault_rates_counts_every_lane_of_a_kind():
    """The report's "injected N of M requested" is what a reader takes as the faults the verdict survived: a
    kind fired by more than one lane (schedule) counts the faults of all of them (hunt J: the first lane only
    went unnoticed)."""
    owner = SimpleNamespace(every={"stop": 20}, fault_phase=[0.0, 100.0])
    owner.schedules = {"stop": [SimpleNamespace(injected=3), SimpleNamespace(injected=2)]}
    assert fault_rates(owner)["stop"]["injected"] == 5
