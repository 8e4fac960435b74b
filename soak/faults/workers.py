"""The worker processes under test (soak/faults/nemesis.py kills and stops them): one slot per worker, its
process group, its log, restarts, drains on SIGTERM, and the fast-failure rule (P1: a worker that exits
MAX_FAST_FAILURES times in a row within FAST_FAILURE_S of starting ends the run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from soak.record.history import History

FAST_FAILURE_S = 5.0  # a self-exit this soon after the start is a fast failure (issue 11)
MAX_FAST_FAILURES = 6  # in a row, per slot: then the run ends INVALID (duty P1) with the worker's last log lines
DRAIN_WAIT_S = 20.0  # how long the SIGTERM fault waits for a worker to drain (PROTOCOL.md §1: grace ≤ 15 s)


def shell_command(cmd: str) -> str:
    """`exec CMD` for a simple command, so the process the harness waits for (and whose exit status it
    checks after SIGTERM, duty P4) is the worker itself, not a shell that a SIGTERM kills first."""
    import re

    return cmd if re.search(r"[;&|\n()`]|^\s*exec\s", cmd) else f"exec {cmd}"


def group_alive(pgid: int) -> bool:
    """A process of group `pgid` still runs. The harness is a child subreaper (impl/provision/processes.py):
    a worker's process that outlives its parent comes back to it and, once dead, stays a zombie of the group
    until reaped — which `kill(0)` would count as alive (a drain then logged late, or as a timeout): our own
    zombies of the group are reaped first."""
    from soak.faults.reaper import reap_orphans

    reap_orphans({pgid}, set())
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
        self.pgids: set[int] = set()  # every worker process group ever started (soak/faults/reaper.py)
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
        from soak.faults.reaper import reap_orphans  # issue 13: no zombie pile-up over long runs

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
