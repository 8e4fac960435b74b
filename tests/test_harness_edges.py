"""The harness the verdict rests on, second round (issue 54's mutation hunt J): the fault log read as a timeline
(soak/judges/inputs.py `Timeline`), a drain logged only once it is over, a fault that happened counted as one,
the route faults that keep one worker reaching the database, the driver's ledger and step samples, the fault
log read back without its samples, and a torn capture file. Each test failed on a bug planted in the harness
that the existing tests let pass (docs/mutants.md "Mutation hunts"); pure or with `sleep` processes, no
database: a few seconds in all."""

from __future__ import annotations

import os
import random
import signal
import struct
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from soak.judges.inputs import Timeline

# --- the fault log as a timeline (soak/judges/inputs.py) -------------------------------------------------------


def _started(*nodes: str) -> list[dict]:
    return [{"t": 0.0, "type": "worker_start", "node": n, "slot": int(n[1])} for n in nodes]


def test_a_stall_of_a_route_excuses_its_node_only_until_its_heal():
    """soak/faults/netfaults.py: "The checker treats a partitioned or stalled *slot* like a SIGSTOPped worker
    (its leases may expire)" — while the fault lasts. A stall's `net_heal` ends the excuse as a partition's
    does: a lease the node lost long after the heal is its own (P2, I1), not the stall's."""
    for fault in ("stall", "partition"):
        tl = Timeline(
            [
                *_started("w1-1"),
                {"t": 10.0, "type": f"net_{fault}", "slot": 1, "node": "w1-1", "seconds": 10},
                {"t": 20.0, "type": "net_heal", "slot": 1, "node": "w1-1", "fault": fault},
                {"t": 100.0, "type": "phase", "phase": "drain"},
            ]
        )
        assert not tl.node_ran("w1-1", 12, 15) and tl.cut_during("w1-1", 12, 15), fault
        assert tl.node_ran("w1-1", 30, 60), f"{fault}: the node is excused after its heal"
        assert not tl.cut_during("w1-1", 30, 60), fault
        assert tl.route_windows("w1-1") == [[10.0, 20.0]], fault


def test_the_end_of_a_cut_ends_only_the_cut_of_its_own_node():
    """Timeline `cut_during`: "A network cut of `node` (or of every node) overlapped [t0, t1]". A `cut_end`
    names its node: it closes that node's open cut, never another node's still going on."""
    tl = Timeline(
        [
            *_started("w1-1", "w2-1"),
            {"t": 10.0, "type": "cut_start", "node": "w2-1"},
            {"t": 12.0, "type": "cut_start", "node": "w1-1"},
            {"t": 15.0, "type": "cut_end", "node": "w2-1"},
            {"t": 40.0, "type": "cut_end", "node": "w1-1"},
        ]
    )
    assert tl.cut_during("w1-1", 20, 30), "w1-1's cut lasts until its own cut_end"
    assert not tl.cut_during("w2-1", 20, 30), "w2-1's cut ended at 15"
    assert tl.route_held("w1-1", 20, 30, 1.5) and not tl.route_held("w2-1", 20, 30, 1.5)


def test_a_cut_of_every_node_is_a_cut_of_each_node():
    """Timeline: "a network cut of one node (node) or of all (node None)". A cut of every node excuses each
    node as its own cut would — both where a lease expiry is judged (`cut_during`: P4, P11's drains) and
    where a claim's late `now` is (`route_held`, `route_windows`: P11, claim order) — else an honest worker
    is blamed for what the cut held."""
    tl = Timeline(
        [
            *_started("w1-1", "w2-1"),
            {"t": 10.0, "type": "cut_start", "node": None},
            {"t": 20.0, "type": "cut_end", "node": None},
        ]
    )
    for node in ("w1-1", "w2-1"):
        assert tl.cut_during(node, 12, 15), node
        assert [list(w) for w in tl.route_windows(node)] == [[10.0, 20.0]], node
        assert tl.route_held(node, 12, 19.5, 1.5), node
        assert not tl.cut_during(node, 25, 30), node


def test_a_node_ends_at_its_first_ending_event_not_its_last():
    """soak/faults/nemesis.py: "Every fault is recorded in the history with its time *before* it takes effect
    (kill, stop, crash) … so the intervals the checker derives are conservative." A node SIGTERMed for a
    drain and then SIGTERMed again at the run's end (still draining) is not a running node in between: its
    end is the first of its ending events."""
    tl = Timeline(
        [
            *_started("w1-1"),
            {"t": 10.0, "type": "worker_drain_term", "node": "w1-1", "running": []},
            {"t": 30.0, "type": "worker_term", "node": "w1-1"},
        ]
    )
    assert tl.ended["w1-1"] == 10.0
    assert not tl.node_ran("w1-1", 5, 20), "a node draining since 10 did not run unhindered until 20"


def test_every_sigstop_of_a_node_ends_at_its_own_sigcont():
    """`worker_stop` … `worker_cont` is one SIGSTOP (soak/faults/workers.py); a node stopped twice is excused
    for each stop's own time, and runs again after its last SIGCONT (P2, I1 blame it from then on)."""
    tl = Timeline(
        [
            *_started("w1-1"),
            {"t": 10.0, "type": "worker_stop", "node": "w1-1"},
            {"t": 15.0, "type": "worker_cont", "node": "w1-1"},
            {"t": 30.0, "type": "worker_stop", "node": "w1-1"},
            {"t": 35.0, "type": "worker_cont", "node": "w1-1"},
        ]
    )
    assert tl.stopped["w1-1"] == [[10.0, 15.0], [30.0, 35.0]]
    assert tl.node_ran("w1-1", 40, 50), "the second stop ended at 35"
    assert not tl.node_ran("w1-1", 31, 33) and tl.node_ran("w1-1", 20, 25)


def test_the_timeline_orders_the_fault_log_by_time_not_by_line():
    """soak/record/history.py records each event's wall-clock `t` before it takes the file's lock, so two
    threads' events (a SIGCONT and the next fault) may reach the file out of time order; the timeline is
    built in time order — a SIGCONT written before its SIGSTOP's line still ends that stop."""
    tl = Timeline(
        [
            *_started("w1-1"),
            {"t": 15.0, "type": "worker_cont", "node": "w1-1"},  # written first, happened after the stop
            {"t": 10.0, "type": "worker_stop", "node": "w1-1"},
        ]
    )
    assert tl.stopped["w1-1"] == [[10.0, 15.0]]
    assert tl.node_ran("w1-1", 20, 30)


# --- a drain is logged over only when it is over (soak/faults/workers.py) ------------------------------------

# The shell execs the worker (it dies at the SIGTERM); a process it started ignores SIGTERM and goes on for 3 s,
# as a compound command's real worker drains after its wrapper exited.
LINGERING = "(trap '' TERM; sleep 3) & exec sleep 60"


def _group_pids(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                rest = f.read().decode(errors="replace").rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(rest[2]) == pgid and rest[0] not in ("Z", "X"):
            out.append(int(name))
    return out


def test_a_drain_is_logged_drained_only_once_every_process_of_the_worker_has_exited(tmp_path: Path):
    """`worker_drained` ends the drain P4 and P11 judge (soak/judges/duties/timing.py `_drain_end`: claims
    are looked for up to its `seconds`): "what the command started (a compound command's worker) drains
    too". Logged when the shell exited while the worker itself still runs, it closes the window early and a
    worker claiming after its SIGTERM goes unjudged."""
    from impl.provision.processes import _become_subreaper
    from soak.faults.workers import Workers, group_alive
    from soak.record.history import History

    # as in a soak: the harness is a child subreaper (it provisions PostgreSQL), so the lingering process comes
    # back to this one and, once dead, is a zombie of the group until reaped — no longer running (without the
    # reaping in `group_alive` the drain waited DRAIN_WAIT_S and was logged as a timeout)
    _become_subreaper()
    w = Workers(LINGERING, 1, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, tmp_path, tmp_path / "logs", History())
    w.start()
    w.closing.set()  # no next incarnation
    slot = w.slots[0]
    pgid = slot.proc.pid
    try:
        deadline = time.monotonic() + 5
        while len(_group_pids(pgid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(_group_pids(pgid)) >= 2, _group_pids(pgid)
        t0 = time.monotonic()
        assert w.drain_term(slot, []) is True
        assert not group_alive(pgid), "worker_drained logged while the worker's processes still ran"
        (drained,) = w.history.of("worker_drained")
        assert drained["code"] is not None and drained["seconds"] >= 1.0, drained
        assert time.monotonic() - t0 >= 1.0
    finally:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- a fault that happened is counted as one (soak/faults/schedule.py) ---------------------------------------


def test_a_fault_whose_fire_returns_none_happened_and_is_counted_once():
    """run_schedule: "`fire()` returns False when it found no target (retried after RETRY_S, still due),
    anything else when the fault happened" — a failover (soak/faults/netfaults.py `_failover`) returns None.
    Taken for "no target", it is counted as not injected and fired again half a second later: a storm
    of failovers, none of them in the requested-vs-injected line."""
    from soak.faults.schedule import RETRY_S, FaultSchedule, run_schedule

    clock = [1000.0]
    sched = FaultSchedule(10.0, random.Random(1), start=0.0)  # long overdue
    fired: list[float] = []
    waits: list[float] = []

    def fire():
        fired.append(clock[0])
        return None

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return True  # halt at the first wait

    run_schedule(sched, fire, wait, lambda: clock[0])
    assert fired == [1000.0] and sched.injected == 1
    assert waits and waits[0] != RETRY_S, "a fault that happened was retried as one that found no target"


# --- network faults leave one worker reaching the database (soak/faults/netfaults.py) -------------------------


def test_an_isolating_fault_never_takes_the_last_worker_that_reaches_the_database():
    """soak/faults/netfaults.py: "At least one worker slot is always left unisolated and not stopped." With
    slot 1 partitioned, slot 2 is the last worker reaching PostgreSQL: no partition or stall may take it
    (a fault that does not isolate — latency, one connection's stall — may)."""
    from soak.faults.netfaults import NetFaults

    nf = object.__new__(NetFaults)
    slots = [SimpleNamespace(index=1, node="w1-1"), SimpleNamespace(index=2, node="w2-1")]
    nf.lock, nf.rng = threading.Lock(), random.Random(3)
    nf.workers = SimpleNamespace(running_slots=lambda: list(slots))
    nf.busy, nf.isolated = {1}, {1}
    assert nf._pick(True) is None
    assert nf.isolated == {1} and nf.busy == {1}
    assert nf._pick(False) is slots[1]


# --- the driver's ledger and step samples (soak/workload/driver.py) -------------------------------------------


def test_an_awaiter_the_driver_cancels_and_never_signals_is_expected_cancelled_only():
    """The ledger's `expected` is what P9 holds the job to. An awaiter of plan `cancel` is cancelled by the
    driver while it awaits a signal the driver never sends (`follow_up_once` signals only the before, race
    and after plans): an honest worker ends it cancelled. Accepting `succeeded` too certifies a worker that
    ignores a cancel of a parked awaiter (contract §8.6: a park is a step boundary)."""
    from soak.workload.driver import Driver, DriverConfig

    d = object.__new__(Driver)
    d.rng, d.cfg = random.Random(11), DriverConfig()
    plans = [d.plan_awaiter() for _ in range(200)]
    cancelled = [p for p in plans if p.detail["plan"] == "cancel"]
    assert len(cancelled) > 20
    assert {p.expected for p in cancelled} == {"cancelled"}
    assert {p.expected for p in plans if p.detail["plan"] != "cancel"} == {"succeeded"}


class _FakeConn:
    def __init__(self, rows: list) -> None:
        self.rows = rows

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql, params=None):
        return SimpleNamespace(fetchall=lambda: list(self.rows))


def test_a_step_sample_records_a_step_whose_value_changed_under_the_same_seq(monkeypatch):
    """sample_steps: "Record the (seq, md5) of every step that is new or changed since the previous sample"
    — I3 compares a step's first value with every later sample. A journaled value rewritten in place (same
    seq, another digest) must be in the next sample, else a rewrite undone before the snapshot is invisible."""
    import soak.workload.driver as driver_mod
    from soak.record.history import History
    from soak.workload.driver import Driver

    d = object.__new__(Driver)
    d.url, d.history, d.lock = "postgresql://unused", History(), threading.Lock()
    d.enqueue_errors, d.digests, d._sampled_since = 0, {}, None
    reads = iter([[(1, "s1", 1, "aaa"), (2, "s1", 1, "ccc")], [(1, "s1", 1, "bbb"), (2, "s1", 1, "ccc")]])
    monkeypatch.setattr(driver_mod.psycopg, "connect", lambda *a, **k: _FakeConn(next(reads)))
    d.sample_steps()
    d.sample_steps()
    first, second = (e["rows"] for e in d.history.of("step_sample"))
    assert sorted(first) == [[1, "s1", 1, "aaa"], [2, "s1", 1, "ccc"]]
    assert second == [[1, "s1", 1, "bbb"]], "the changed value under the same seq was not sampled"


# --- the fault log read back (soak/record/history.py) ---------------------------------------------------------


def test_a_snapshot_leaves_out_the_event_types_it_is_told_to_skip(tmp_path: Path):
    """History.snapshot: "The whole history as a list (samples included), but events of the `skip` types".
    The soak reads its history with the lease and priority samples skipped and streams them apart (issue 27):
    a snapshot that keeps them holds the run's largest part in memory and hands the checker every sample
    twice."""
    from soak.record.history import History

    for h in (History(tmp_path / "history.jsonl"), History()):
        h.record("worker_start", node="w1-1", slot=1)
        h.record("lease_sample", at=1.0, rows=[])
        h.record("priority_sample", at=1.0, rows=[])
        h.record("worker_kill", node="w1-1")
        assert [e["type"] for e in h.snapshot(skip=("lease_sample", "priority_sample"))] == [
            "worker_start",
            "worker_kill",
        ]
        assert len(h.snapshot()) == 4
        h.close()


# --- a torn capture file (soak/record/capture.py) --------------------------------------------------------------


def _transactions(n: int):
    from soak.record.capture import Transaction

    def tx(i: int) -> Transaction:
        lsn, us = 1000 * i, 10**15 + i
        begin = b"B" + struct.pack(">QqI", lsn, us, i)
        commit = b"C" + struct.pack(">BQQq", 0, lsn, lsn + 10, us)
        return Transaction(lsn, lsn + 10, us, i, (begin, b"M" + os.urandom(50), commit))

    return [tx(i) for i in range(1, n + 1)]


def test_an_uncompressed_capture_torn_inside_a_record_is_truncated_and_its_replay_unknown(tmp_path: Path):
    """TransactionReader: "`truncated` is True when the file ended inside a frame or a record (a harness crash
    mid-write)"; the replay then cannot say `valid` (the transactions after the tear are lost). The older,
    uncompressed format is read too, and torn the same way."""
    from soak.judges.replay import replay
    from soak.record.capture import read_transactions, write_transaction

    path = tmp_path / "old.bin"
    txs = _transactions(4)
    with open(path, "wb") as out:
        for t in txs:
            write_transaction(out, t)
    whole = path.read_bytes()
    for cut in (len(whole) - 3, len(whole) - 60):
        path.write_bytes(whole[:cut])
        reader = read_transactions(path)
        assert list(reader) == txs[:3] and reader.compressed is False
        assert reader.truncated and reader.truncated_bytes > 0, cut
    result = replay(read_transactions(path), None, None, {})
    assert result.verdict == "unknown" and result.capture["truncated"]


# --- a worker ended by the harness is no self-exit (soak/faults/workers.py) -------------------------------------


def _join_watchers(timeout: float = 5.0) -> None:
    for t in threading.enumerate():
        if t.name.startswith("watch-w"):
            t.join(timeout)


def _workers(tmp_path: Path, cmd: str = "sleep 60"):
    from soak.faults.workers import Workers
    from soak.record.history import History

    return Workers(cmd, 1, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, tmp_path, tmp_path / "logs", History())


def test_the_end_of_run_sigterm_is_no_self_exit_of_the_worker(tmp_path: Path):
    """P1 (soak/judges/duties/running.py) flags every `worker_exit` without an `exit` observation: "a worker
    must … exit only when a kind asks". The harness's own SIGTERM at the end of the run (`worker_term`)
    ends the worker on purpose; its exit is no self-exit, else every honest run is INVALID."""
    w = _workers(tmp_path)
    w.start()
    w.terminate(grace=5)
    _join_watchers()
    types = [e["type"] for e in w.history.snapshot()]
    assert "worker_term" in types and "worker_exit" not in types, types


def test_a_drained_worker_is_no_self_exit_of_the_worker(tmp_path: Path):
    """The SIGTERM fault (duty P4) ends the worker on purpose: its exit is the drain (`worker_drained`), not a
    `worker_exit` P1 would flag as exiting by itself."""
    w = _workers(tmp_path)
    w.start()
    w.closing.set()  # no next incarnation
    slot = w.slots[0]
    try:
        assert w.drain_term(slot, []) is True
        _join_watchers()
        types = [e["type"] for e in w.history.snapshot()]
        assert "worker_drained" in types and "worker_exit" not in types, types
    finally:
        w.terminate(grace=1)


# --- the nemesis keeps one worker running (soak/faults/nemesis.py) ----------------------------------------------


class _OneWorker:
    def __init__(self) -> None:
        self.slots = [SimpleNamespace(index=1, node="w1-1")]
        self.calls: list[str] = []

    def running_slots(self):
        return list(self.slots)

    def stop(self, slot) -> bool:
        self.calls.append("stop")
        return True

    def cont(self, slot) -> None:
        self.calls.append("cont")


def test_a_plain_sigstop_never_freezes_the_last_running_worker():
    """soak/faults/netfaults.py: "At least one worker slot is always left unisolated and not stopped"; the
    nemesis's stops "keep at least one worker running". With one worker running, no SIGSTOP is due now."""
    from soak.faults.nemesis import Nemesis
    from soak.record.history import History

    w = _OneWorker()
    n = Nemesis(
        w,
        History(),
        random.Random(0),
        url="postgresql://unused",
        cluster=None,
        kill_every=None,
        stop_every=20,
        db_restart_every=None,
        stop_for=0.2,
    )
    n.zombie_quiet_until = float("inf")  # the plain-stop path
    assert n._stop() is False
    assert w.calls == []


# --- the driver's ledger: what a last-attempt `slow` job may end as (soak/workload/driver.py) --------------------


def test_a_last_attempt_slow_job_may_fail_only_by_its_lease_expiry():
    """plan_slow(last=True): "a SIGSTOP or kill that loses its lease makes its reclaim fall on the last
    attempt (P16's risky case: the reclaim must fail it)" — failed with `lease_expired` (contract §7). The
    ledger accepts that failure and success, never a failure with any other error (a worker failing the job
    with an error of its own making)."""
    from soak.judges.verdicts import _matches
    from soak.workload.driver import Driver, DriverConfig

    d = object.__new__(Driver)
    d.rng, d.cfg = random.Random(5), DriverConfig()
    p = d.plan_slow(last=True)
    assert p.spec.max_attempts == 1 and p.detail == {"last_attempt": True}

    def job(state: str, error: str | None = None):
        return SimpleNamespace(state=state, errors=[{"error": error, "attempt": 1}] if error else [])

    assert _matches(p.expected, job("succeeded"))
    assert _matches(p.expected, job("failed", "lease_expired"))
    assert not _matches(p.expected, job("failed", "Boom"))
    assert not _matches(p.expected, job("failed"))
    assert not _matches(p.expected, job("cancelled"))


# --- a partition partitions (soak/faults/proxy.py) --------------------------------------------------------------


def test_a_connection_partitioned_while_it_connected_forwards_nothing(monkeypatch):
    """Proxy.partition: "Reset every connection of `name` and refuse new ones until heal". A client whose
    connection to the target was being opened as the partition began must not get through: the judges
    excuse the partitioned slot (Timeline `isolated`), so a route that still forwards hides what it did."""
    import asyncio
    import socket

    import soak.faults.proxy as proxy_mod

    echo = socket.socket()
    echo.bind(("127.0.0.1", 0))
    echo.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = echo.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    proxy = proxy_mod.Proxy("127.0.0.1", echo.getsockname()[1])
    real_open = asyncio.open_connection

    async def open_then_partitioned(*a, **k):
        got = await real_open(*a, **k)
        proxy.listeners["w1"].partitioned = True  # the partition began while this connection was being made
        return got

    monkeypatch.setattr(proxy_mod.asyncio, "open_connection", open_then_partitioned)
    try:
        port = proxy.listen("w1")
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            c.settimeout(1.0)
            try:
                c.sendall(b"ping")
                got = c.recv(16)
            except (ConnectionError, TimeoutError, OSError):
                got = b""
        assert got == b"", f"{got!r} came back through a partitioned route"
    finally:
        proxy.close()
        echo.close()


# --- a zombie hold spares the nodes running the later attempts (soak/faults/zombies.py) -------------------------


def test_a_zombie_hold_names_the_nodes_running_the_later_attempts_as_spared(monkeypatch):
    """zombies.hold: "Meanwhile `spare` … names the nodes running them" (the later attempts of the held jobs):
    kill -9 spares them (soak/faults/nemesis.py `_kill`), since the node that journals the paid step is the
    one the zombie must write after — else the hold runs out and I4's duplicate-write scenario never comes."""
    import soak.faults.zombies as z

    reads = iter(
        [
            [(7, "running", 2, "w3-1", False)],  # the later attempt runs on w3-1, nap not yet journaled
            [(7, "running", 2, "w3-1", True)],  # …and journaled it
        ]
    )

    class Conn:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def execute(self, sql, params=None):
            return next(reads)

    monkeypatch.setattr(z.psycopg, "connect", lambda *a, **k: Conn())
    spare: set[str] = set()
    assert z.hold("postgresql://unused", [(7, 1)], threading.Event(), spare, most=10) == "journaled"
    assert "w3-1" in spare, spare


# --- the lost wake-up's harness ack is attested before it is written (soak/workload/scenarios.py) --------------


def test_the_lost_wakeup_intent_is_recorded_before_the_harness_acks_the_child():
    """soak/workload/scenarios.py: "attested before the ack: a crash-restart can commit the ack and cut the
    connection before its answer" — the trace validation then finds a harness write nobody recorded (an
    honest run INVALID). The intent naming the child is in the fault log before the ack is sent."""
    import psycopg
    import pytest

    from soak.record.history import History
    from soak.workload.scenarios import Scenarios

    s = object.__new__(Scenarios)
    s.d = SimpleNamespace(history=History())
    seen: list[list] = []

    class Conn:
        calls = 0

        def execute(self, sql, params=None):
            Conn.calls += 1
            if Conn.calls == 1:  # the claim of the external child
                return SimpleNamespace(fetchall=lambda: [(101, 1)])
            seen.append([(e["type"], e.get("children")) for e in s.d.history.snapshot()])
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    with pytest.raises(psycopg.OperationalError):
        s._finish_children_silently(Conn(), 100)
    assert seen == [[("lost_wakeup_intent", [101])]]
