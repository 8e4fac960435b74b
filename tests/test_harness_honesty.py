"""The soak harness's fault injection, workload and fault log, where planted bugs went unnoticed (the
`cert_harness_*` mutants of properties/mutants/certifier.py): a fault the history records must be the fault that happened — a kill -9 that kills the
whole worker, a SIGSTOP that freezes it and lasts its time, a crash-restart logged as over only once it is,
a connection stall not logged as a route stall, a heal that ends the latency too — and the driver's
intents must precede its writes. Then the coverage counts that must not count what did not happen.

Fast: real processes (`sleep` under `/bin/sh`) where a signal is the point, fakes elsewhere; no database.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest

from soak.faults import zombies
from soak.faults.nemesis import Nemesis
from soak.faults.schedule import FaultSchedule, run_schedule
from soak.faults.workers import Workers
from soak.record.history import History
from tests.test_certifier_checks import coverage_count
from tests.test_soak_checker import E0, baseline, err, step

WAIT = 10.0


def _wait_until(cond, timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _group(pgid: int) -> dict[int, str]:
    """pid → state ('R', 'S', 'T', …) of every live process of process group `pgid` (zombies left out)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read().decode(errors="replace")
        except OSError:
            continue
        rest = data[data.rfind(")") + 2 :].split()
        if int(rest[2]) == pgid and rest[0] not in ("Z", "X"):
            out[int(name)] = rest[0]
    return out


SIGSTOP_BIT = 1 << (signal.SIGSTOP - 1)


def _stopped(pid: int, state: str) -> bool:
    """Stopped ('T'), or in uninterruptible sleep ('D', in the kernel: on a loaded machine a page fault or an
    exec can last seconds) with the SIGSTOP queued for it — it stops as it leaves the kernel: the signal
    reached it, which is what the test asks of `stop`."""
    if state == "T":
        return True
    if state != "D":
        return False
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return False
    return any(int(fields.get(k, "0").strip(), 16) & SIGSTOP_BIT for k in ("SigPnd", "ShdPnd"))


# A compound command (no `exec`: the shell stays, the worker is its child, as with `cd x && node worker.js`)
# whose processes ignore SIGTERM: only a SIGKILL of the whole process group ends it.
COMPOUND = "trap '' TERM; sleep 60; true"


@pytest.fixture
def workers(tmp_path: Path):
    w = Workers(COMPOUND, 1, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, tmp_path, tmp_path / "logs", History())
    w.start()
    slot = w.slots[0]
    pgid = slot.proc.pid
    assert _wait_until(lambda: len(_group(pgid)) == 2), _group(pgid)  # the shell and its `sleep`
    yield w
    w.closing.set()
    for s in w.slots:
        if s.proc is not None:
            try:
                os.killpg(s.proc.pid, 9)
            except ProcessLookupError:
                pass
    for pg in w.pgids:
        try:
            os.killpg(pg, 9)
        except ProcessLookupError:
            pass


def test_a_kill_9_kills_every_process_of_the_workers_group_not_only_the_shell(workers):
    """The fault log says `worker_kill`: I1/I3/P17 count it as a crash (coverage `kills`) and the judges take
    the node for dead from then on. A SIGKILL sent to the shell's pid alone (Popen.kill), or a SIGTERM,
    leaves the worker itself running — a kill -9 that killed nothing."""
    slot = workers.slots[0]
    pgid = slot.proc.pid
    assert workers.kill(slot) is True
    assert [e["type"] for e in workers.history.of("worker_kill")] == ["worker_kill"]
    assert _wait_until(lambda: not _group(pgid)), f"still alive after the kill -9: {_group(pgid)}"


def test_a_sigstop_freezes_every_process_of_the_workers_group_and_sigcont_releases_them(workers):
    """`worker_stop` excuses the node's lost leases (P2) and makes stale acks (I2): the worker itself, not only
    the shell that started it, must be frozen until `worker_cont`."""
    slot = workers.slots[0]
    pgid = slot.proc.pid
    assert workers.stop(slot) is True
    assert _wait_until(lambda: all(_stopped(pid, st) for pid, st in _group(pgid).items())), (
        f"not all stopped: {_group(pgid)}"
    )
    workers.cont(slot)
    assert _wait_until(lambda: "T" not in _group(pgid).values()), f"still stopped: {_group(pgid)}"
    assert [e["type"] for e in workers.history.of("worker_stop", "worker_cont")] == ["worker_stop", "worker_cont"]


# --- the nemesis ---------------------------------------------------------------------------------------------


class StopWorkers:
    """Two running slots; stop/cont remember when they were called (monotonic)."""

    def __init__(self) -> None:
        self.slots = [SimpleNamespace(index=i, node=f"w{i}-1") for i in (1, 2)]
        self.calls: list[tuple[str, str, float]] = []

    def running_slots(self):
        return list(self.slots)

    def stop(self, slot) -> bool:
        self.calls.append(("stop", slot.node, time.monotonic()))
        return True

    def cont(self, slot) -> None:
        self.calls.append(("cont", slot.node, time.monotonic()))


def _nemesis(workers, history, *, stop_for: float = 15.0, cluster=None) -> Nemesis:
    return Nemesis(
        workers,
        history,
        random.Random(0),
        url="postgresql://unused",
        cluster=cluster,
        kill_every=None,
        stop_every=20,
        db_restart_every=30 if cluster is not None else None,
        stop_for=stop_for,
    )


def test_a_plain_sigstop_lasts_stop_for_before_its_sigcont():
    """Coverage counts every `worker_stop` as I2's "SIGSTOP of a worker past its lease": a plain stop (here: the
    other lane's, while a zombie stop holds) released early would count without ever outlasting a lease."""
    w = StopWorkers()
    n = _nemesis(w, History(), stop_for=0.5)
    n.zombie_quiet_until = float("inf")  # the plain-stop path (no zombie stop now)
    assert n._stop() is True
    (stop, node, t0), (cont, node2, t1) = w.calls
    assert (stop, cont, node) == ("stop", "cont", node2)
    assert t1 - t0 >= 0.45, f"SIGCONT {t1 - t0:.3f}s after the SIGSTOP, stop_for 0.5s"


def test_a_crash_restart_is_logged_over_only_once_the_restart_returned():
    """`db_crash`…`db_restarted` is the outage the judges excuse (P2, P14, P17, I1): logging the restart
    before it happened ends the window early, and leases lost while PostgreSQL was still starting are then
    blamed on an honest worker."""
    order: list[str] = []

    class Recording(History):
        def record(self, type, **fields):
            order.append(type)
            return super().record(type, **fields)

    cluster = SimpleNamespace(crash=lambda: order.append("crash()"), restart=lambda: order.append("restart()"))
    n = _nemesis(StopWorkers(), Recording(), cluster=cluster)
    assert n._db() is True
    assert order == ["db_crash", "crash()", "restart()", "db_restarted"]


def _refused_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: every connect is refused at once
    return f"postgresql://nobody@127.0.0.1:{port}/nowhere"


def test_a_zombie_hold_that_cannot_read_the_database_waits_it_does_not_call_the_stop_journaled():
    """An unreadable database says nothing about the held jobs: `zombie_cont` with `journaled` (what coverage's
    `stale_paid_step_resumes` takes as a released zombie whose later attempt wrote `nap`) must not be
    recorded because a read failed — the hold waits, here until its cap."""
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(_refused_url(), connect_timeout=2).close()
    spare: set[str] = set()
    why = zombies.hold(_refused_url(), [(7, 1)], threading.Event(), spare, most=0.6)
    assert why == "cap"
    assert spare == {"(zombie stop)"}


# --- the network nemesis -------------------------------------------------------------------------------------


def _netfault_args(**kw) -> argparse.Namespace:
    base = dict(
        lease_ttl=10.0,
        partition_every=0,
        partition_for=None,
        stall_every=0,
        stall_for=None,
        stall_conn_every=5,
        latency_every=0,
        failover_every=0,
        replication="sync",
        replication_lag=1.0,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def test_a_connection_stall_is_logged_as_one_not_as_a_stall_of_the_whole_route():
    """`net_stall` isolates the slot (its lost leases are excused, P2/P14); `net_stall_conn` must not: the worker
    must renew its other leases through its other connections (docs/connections.md). A connection stall
    logged as a route stall excuses exactly the worker the fault exists to catch."""
    from soak.faults.netfaults import NetFaults
    from soak.judges.inputs import Timeline

    history = History()
    nf = NetFaults(_netfault_args(), "postgresql://u@127.0.0.1:5/db", None, history, random.Random(1))
    real = nf.proxy
    try:
        calls: list[tuple[str, str]] = []
        nf.proxy = SimpleNamespace(
            stall_one=lambda route: calls.append(("stall_one", route)) or True,
            heal=lambda route: calls.append(("heal", route)),
        )
        nf.workers = SimpleNamespace(running_slots=lambda: [SimpleNamespace(index=2, node="w2-1")])
        nf.halt.set()  # the fault's wait returns at once
        assert nf._stall_conn() is True
        assert calls == [("stall_one", "w2"), ("heal", "w2")]
        events = history.snapshot()
        assert [e["type"] for e in events] == ["net_stall_conn", "net_heal"]
        assert events[0]["seconds"] == 15.0 and events[1]["fault"] == "stall_conn"
        assert nf.counts["stall_conn"] == 1 and nf.counts["stall"] == 0
        timeline = Timeline([{"t": E0 - 1, "type": "worker_start", "node": "w2-1", "slot": 2}, *events])
        assert not timeline.isolated.get(2)  # the slot is not excused
    finally:
        real.close()


def test_a_heal_ends_the_injected_latency_too():
    """`net_heal` closes the latency window the judges excuse (P5's slowed route, P14's recovery): a route that
    stays slow after it is judged as a healthy one."""
    from soak.faults.proxy import Proxy

    p = Proxy("127.0.0.1", 1)
    try:
        p.listen("w1")
        p.set_latency("w1", 0.15)
        assert p.stats()["w1"]["latency"] == 0.15
        p.heal("w1")
        assert p.stats()["w1"]["latency"] == 0.0
    finally:
        p.close()


def test_a_fault_that_raised_is_not_counted_as_injected():
    """`fault_rates` reports injected faults — the ones that happened (soak/report/artifacts.py): a fault whose
    injection raised every time must report none."""

    class Clock:
        now = 0.0

        def clock(self) -> float:
            return self.now

        def wait(self, s: float) -> bool:
            self.now += s
            return self.now >= 60

    c = Clock()
    sched = FaultSchedule(10, random.Random(0), 0.0)
    errors: list[Exception] = []

    def fire() -> bool:
        raise RuntimeError("no such process")

    run_schedule(sched, fire, c.wait, c.clock, errors.append)
    assert len(errors) >= 4
    assert sched.injected == 0


# --- the driver's intents --------------------------------------------------------------------------------------


def _driver(apply):
    from soak.workload.driver import Driver

    d = object.__new__(Driver)
    d.history, d.lock, d._conn = History(), threading.Lock(), None
    d.signals = d.cancels = d.enqueue_errors = 0
    d.store = SimpleNamespace(apply=apply)
    return d


@pytest.mark.parametrize("what", ["signal", "cancel"])
def test_the_driver_records_its_intent_before_a_write_whose_connection_breaks_as_it_commits(what):
    """A crash-restart can commit the driver's signal or cancel and cut the connection before the answer:
    the write happened, and only an intent recorded *before* it attests it to the trace validation
    (soak/judges/refine/world.py) — else an honest run shows a client write nobody recorded. The intent's
    time also opens I9's race window (coverage.py `signal_races`)."""
    seen: list[list[str]] = []

    def apply(op):
        seen.append([e["type"] for e in d.history.snapshot()])
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    d = _driver(apply)
    if what == "signal":
        d.deliver(41, "go-1", "after")
    else:
        d.cancel(41, state="running", kind="steps", plan="cancel")
    assert seen == [[f"{what}_intent"]]  # recorded before the write
    assert [e["type"] for e in d.history.snapshot()] == [f"{what}_intent"]
    assert d.enqueue_errors == 1


def test_a_costed_jobs_ledger_names_the_step_whose_spend_first_exceeds_its_budget():
    """I4 (soak/judges/invariants_jobs.py) fails a job that ended `budget_exceeded` after another step than the
    ledger's `crossing`: the driver must name the first step whose cumulative spend *strictly* exceeds the
    budget (§8.2), never the last one. A budget equal to the crossing step's spend makes an honest worker
    run one step more and fail there — INVALID against the ledger."""
    from soak.workload.driver import Driver, DriverConfig

    d = object.__new__(Driver)
    d.rng, d.cfg, d.exits_paused, d._owed_crashes = random.Random(7), DriverConfig(), threading.Event(), 0
    crossed = 0
    for _ in range(300):
        p = d.plan_costed()
        costs, budget = p.spec.input["costs"], p.spec.budget_usd_micros
        spent = [sum(costs[: i + 1]) for i in range(len(costs))]
        first = next((i + 1 for i, s in enumerate(spent) if s > budget), None)
        if first is None:
            assert "crossing" not in p.detail and p.expected == "succeeded", (costs, budget, p.detail)
            continue
        crossed += 1
        assert p.detail.get("crossing") == f"c{first}", (costs, budget, p.detail)
        assert first < len(costs) and p.expected == "failed:budget_exceeded"
    assert crossed > 100


# --- coverage: what must not count as a scenario that happened -------------------------------------------------


def test_i4_a_crash_at_crossing_job_failed_by_its_first_attempt_is_not_the_pre_flight_scenario():
    """The worker did not kill itself after the crossing step (attempt 1 failed the job itself): no next
    attempt ran its pre-flight, so I4's `crash_at_crossing` scenario did not happen."""
    r = baseline()
    r.jobs[3] = replace(r.jobs[3], attempt=1, errors=[err(1, "budget_exceeded", 2)])
    result = r.check()
    assert coverage_count(result, "I4", "crash_at_crossing") == 0
    assert result.invariants["I4"].verdict != "valid", result.invariants["I4"].to_json()


def test_i9_a_delivery_after_the_park_that_woke_nothing_is_not_a_signal_after_park():
    r = baseline()
    for e in r.history:
        if e["type"] == "signal" and e.get("when") == "after":
            e["woken"] = []
    result = r.check()
    assert coverage_count(result, "I9", "signal_after_park") == 0
    assert result.invariants["I9"].verdict != "valid", result.invariants["I9"].to_json()


def test_p3_a_cancel_at_park_that_cancelled_a_job_not_yet_running_is_not_a_cancel_before_park():
    """`Cancelled` (the awaiter was still ready: cancelled outright) is no cancel requested while it ran."""
    r = baseline()
    r.history.append(
        {
            "t": E0 + 6,
            "type": "cancel",
            "job_id": 4,
            "result": "Cancelled",
            "state_before": "ready",
            "kind": "awaiter",
            "plan": "cancel_at_park",
        }
    )
    result = r.check()
    assert coverage_count(result, "P3", "cancel_before_park") == 0
    assert result.duties["P3"].verdict != "valid", result.duties["P3"].to_json()


def _zombie_run(exit_at: float | None):
    """Baseline job 11, but only the zombie stop as evidence: attempt 1 frozen in `nap` on w1-1, released with
    `journaled` at +24.9 after attempt 2 (w2-1) journaled `nap`."""
    r = baseline()
    r.observations = [o for o in r.observations if not (o.job_id == 11 and o.phase == "pre_ack")]
    r.steps = [s for s in r.steps if not (s.job_id == 11 and s.name == "nap")]
    r.steps.append(step(11, 2, "nap", {"token": "n", "attempt": 2}, usd=1, t=24.5))
    r.history += [
        {"t": E0 + 5, "type": "zombie_stop", "node": "w1-1", "held": [[11, 1]]},
        {"t": E0 + 24.9, "type": "zombie_cont", "node": "w1-1", "why": "journaled"},
    ]
    if exit_at is not None:
        r.history.append({"t": E0 + exit_at, "type": "worker_exit", "node": "w1-1", "code": 1, "lived": 30})
    return r


def test_i4_a_zombie_that_exited_right_after_its_sigcont_did_not_execute_its_paid_step_again():
    assert coverage_count(_zombie_run(None).check(), "I4", "zombies_back") == 1  # the control: it counts
    result = _zombie_run(25.2).check()  # the zombie's node died 0.3 s after the SIGCONT (not a kill -9)
    assert coverage_count(result, "I4", "zombies_back") == 0
    assert result.invariants["I4"].verdict != "valid", result.invariants["I4"].to_json()


# --- the fault log itself --------------------------------------------------------------------------------------


def test_every_event_is_on_disk_as_soon_as_it_is_recorded(tmp_path: Path):
    """The history is the fault log a killed harness leaves behind (soak/record/history.py): an event recorded
    must be in the file at once, not in a buffer a kill -9 of the harness would lose."""
    path = tmp_path / "history.jsonl"
    h = History(path)
    try:
        h.record("worker_stop", node="w1-1")
        text = path.read_text()
        assert '"type": "worker_stop"' in text and text.endswith("\n")
    finally:
        h.close(compress=False)
