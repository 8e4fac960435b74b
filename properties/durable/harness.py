"""Run model/durable.py programs on a real fleet under real faults, and observe what a job author sees.

The fleet (`Fleet`): an embedded PostgreSQL cluster of its own (so it can be crash-restarted), two worker
node processes (`python -m properties.durable.node`, impl.runtime.Worker with a short lease ttl) serving
the programs' queues, and an in-process sweeper node whose clock runs `skew` seconds ahead (within the
contract's tolerance: it reclaims expired leases early, never live ones — unless renewal is too slow).

Faults are injected for real: a crash fault makes the executing node `os._exit(137)` (the harness
respawns it), a freeze stops the executing node with SIGSTOP until the sweeper has reclaimed its lease
and resumes it with SIGCONT, a database restart SIGKILLs the postmaster and starts it again, a cancel
request is an operator command sent while the job waits before a step, signals are sent before the job
is enqueued or once it has parked. `Fleet.run(program)` returns an `Observed` comparable field by field
with `model.durable.Prediction`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from impl import testing
from impl.client import Client
from impl.provision import ClusterConfig, EmbeddedCluster
from impl.runtime import Worker, WorkerConfig, utc_now
from impl.runtime.faults import RetryPolicy
from impl.store.migrate import migrate
from impl.worker import Registry
from model.durable import NO_BACKOFF, PROGRAM_KIND, QUEUE, normalize_journal_value, signal_scope
from model.envelope import decode
from properties.durable import app

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = ("succeeded", "failed", "cancelled")


class HarnessError(AssertionError):
    """The real runtime did not get where the program says it must (a hang, a zombie that never stops)."""


def wait_for(condition: Any, timeout: float, what: str, interval: float = 0.01) -> Any:
    """impl.testing.wait_for, failing with a HarnessError."""
    return testing.wait_for(condition, timeout, what, interval=interval, error=HarnessError)


@dataclass
class Observed:
    state: str
    attempt: int
    max_attempts: int
    result: Any
    errors: list[tuple[int, str]]
    journal: list[tuple[str, Any, int, int]]
    runs: dict[str, int]
    events: list[Any]
    stale_acks: int
    crashes: int = 0
    freezes: int = 0
    cancels: int = 0
    db_restarts: int = 0


@dataclass
class _Node:
    name: str
    proc: subprocess.Popen
    log: Path


@dataclass
class Fleet:
    workdir: Path
    ttl: float = 1.5
    skew: float = 0.4
    cluster: EmbeddedCluster = field(default_factory=lambda: EmbeddedCluster(ClusterConfig()))
    nodes: dict[str, _Node] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)
    generation: Counter = field(default_factory=Counter)
    sweeper: Worker | None = None
    totals: Counter = field(default_factory=Counter)
    runs: int = 0

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> Fleet:
        self.cluster.start()
        with psycopg.connect(self.url, autocommit=True) as c:
            migrate(c)
            app.install(c)
        config = WorkerConfig(
            node="sweeper-ahead",
            queues=(),
            lease_ttl=self.ttl,
            sweep_interval=0.1,
            reclaim_backoff=NO_BACKOFF,
            retry=RetryPolicy(initial=0.05, maximum=0.5, max_elapsed=120),
        )
        self.sweeper = Worker(
            self.url, Registry(), config, clock=lambda: utc_now() + timedelta(seconds=self.skew), telemetry=()
        ).start()
        for name in ("A", "B"):
            self.spawn(name)
        for node in self.nodes.values():
            wait_for(
                lambda n=node: "ready" in n.log.read_text(errors="replace") or n.proc.poll() is not None,
                60,
                f"node {node.name} to start",
            )
        return self

    @property
    def url(self) -> str:
        return self.cluster.url

    def spawn(self, name: str) -> None:
        self.generation[name] += 1
        log = self.workdir / f"node-{name}-{self.generation[name]}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "properties.durable.node",
                    self.url,
                    f"{name}{self.generation[name]}",
                    str(self.ttl),
                ],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.nodes[name] = _Node(name, proc, log)

    def respawn_dead(self) -> int:
        dead = [n for n in self.nodes.values() if n.proc.poll() is not None]
        for node in dead:
            self.spawn(node.name)
        return len(dead)

    def stop(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=3) as c:
                c.execute("INSERT INTO dx_gate (name) VALUES ('*') ON CONFLICT DO NOTHING")
        except Exception:  # noqa: BLE001 - teardown: the cluster may be gone
            pass
        for node in self.nodes.values():
            if node.proc.poll() is None:
                try:
                    os.kill(node.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                node.proc.terminate()
        for node in self.nodes.values():
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(timeout=10)
        if self.sweeper is not None:
            self.sweeper.stop(grace=1)
        self.cluster.destroy()

    # --- one program ----------------------------------------------------------------------------------

    def _pg(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True, connect_timeout=5)

    def _one(self, query: str, *params: Any) -> Any:
        for _ in range(100):
            try:
                with self._pg() as c:
                    return c.execute(query, params).fetchone()
            except psycopg.OperationalError:
                time.sleep(0.1)  # the cluster is restarting
        raise HarnessError("the database did not come back")

    def _effect(self, job_id: int, attempt: int, what: str) -> Any:
        return self._one(
            "SELECT pid FROM dx_effect WHERE job_id = %s AND attempt = %s AND what = %s LIMIT 1", job_id, attempt, what
        )

    def _open(self, gate: str) -> None:
        self._one("INSERT INTO dx_gate (name) VALUES (%s) ON CONFLICT DO NOTHING RETURNING name", gate)

    def stale_acks(self, job_id: int) -> int:
        pattern = re.compile(rf"belay stale ack job={job_id} attempt=")
        return sum(len(pattern.findall(log.read_text(errors="replace"))) for log in self.logs if log.exists())

    def run(self, program: dict, expected_stale: int = 0, timeout: float = 90.0) -> Observed:
        counts: Counter = Counter()
        # A fresh uid per run: signals, gates and markers of an earlier run of the same program (Hypothesis
        # replays programs while it shrinks) must not leak into this one. The model never reads the uid.
        self.runs += 1
        program = {**program, "uid": f"{program['uid']}.{self.runs}"}
        uid, scope = program["uid"], signal_scope(program["uid"])
        faults = [(f["f"], f["at"], f["attempt"]) for f in program.get("faults", ())]
        awaits = {op["name"]: op for op in program["ops"] if op["op"] == "await"}
        self.respawn_dead()  # a death before this program is not one of its faults
        with Client(self.url) as client:
            for op in awaits.values():
                if op["when"] == "before":
                    client.signal(scope, op["name"], op["payload"])
            job_id = client.enqueue(
                QUEUE,
                PROGRAM_KIND,
                program,
                max_attempts=program["max_attempts"],
                budget_usd_micros=program.get("budget_usd"),
            ).id
        delivered: set[str] = set()
        done: set[tuple] = set()
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"job {job_id} not terminal after {timeout}s: "
                    f"{self._one('SELECT state, attempt FROM belay_jobs WHERE id = %s', job_id)}"
                )
            counts["crashes"] += self.respawn_dead()
            state, await_name = self._one("SELECT state, await_name FROM belay_jobs WHERE id = %s", job_id)
            frozen = [(at, a) for f, at, a in faults if f == "freeze" and ("freeze", at, a) in done]
            zombies_done = all(self._effect(job_id, a, "exec_end") for _, a in frozen)
            if state in TERMINAL and zombies_done:
                break
            if state == "awaiting":
                if await_name == "$children":
                    self._open(f"children:{uid}")
                elif await_name in awaits and await_name not in delivered:
                    if awaits[await_name].get("db_restart") and not counts["db_restarts"]:
                        self.cluster.crash()
                        self.cluster.restart()
                        counts["db_restarts"] += 1
                    with Client(self.url) as client:
                        client.signal(scope, await_name, awaits[await_name]["payload"])
                    delivered.add(await_name)
            for f, at, a in faults:
                if (f, at, a) in done:
                    continue
                if f == "freeze" and (row := self._effect(job_id, a, "freeze_reached")):
                    done.add((f, at, a))
                    self.freeze(job_id, a, row[0], uid)
                    counts["freezes"] += 1
                elif f == "cancel" and self._effect(job_id, a, f"cancel_gate:{at}"):
                    done.add((f, at, a))
                    with Client(self.url) as client:
                        client.cancel(job_id)
                    self._open(f"cancel:{uid}:{at}:{a}")
                    counts["cancels"] += 1
            time.sleep(0.01)
        # A stale ack is logged just after the execution ends: give the logs a moment to catch up.
        end = time.monotonic() + 3.0
        while self.stale_acks(job_id) < expected_stale and time.monotonic() < end:
            time.sleep(0.02)
        observed = self.observe(job_id, counts)
        self.totals.update(counts)
        return observed

    def freeze(self, job_id: int, attempt: int, pid: int, uid: str) -> None:
        """SIGSTOP the node running the attempt until its lease is reclaimed, SIGCONT it, and let the zombie
        go on once it has learned (from the renewer, or a newer claim on its node) that its lease is lost."""
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(
                lambda: self._one(
                    "SELECT NOT (state = 'running' AND attempt = %s) FROM belay_jobs WHERE id = %s", attempt, job_id
                )[0],
                30,
                "the frozen attempt's lease to be reclaimed",
            )
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(
            lambda: self._effect(job_id, attempt, "lost_seen"),
            15,
            f"the resumed zombie of job {job_id} attempt {attempt} to learn that its lease is lost",
        )
        self._open(f"thaw:{uid}")

    def observe(self, job_id: int, counts: Counter) -> Observed:
        with self._pg() as c:
            state, attempt, max_attempts, result, errors = c.execute(
                "SELECT state, attempt, max_attempts, result, errors FROM belay_jobs WHERE id = %s", (job_id,)
            ).fetchone()
            steps = c.execute(
                "SELECT name, value, usd_micros, tokens FROM belay_steps WHERE job_id = %s ORDER BY seq", (job_id,)
            ).fetchall()
            events = [
                r[0] for r in c.execute("SELECT payload FROM belay_events WHERE job_id = %s ORDER BY seq", (job_id,))
            ]
            runs = dict(
                c.execute(
                    "SELECT substr(what, 6), count(*) FROM dx_effect WHERE job_id = %s "
                    "AND what LIKE 'step:%%' GROUP BY what",
                    (job_id,),
                ).fetchall()
            )
        return Observed(
            state=state,
            attempt=attempt,
            max_attempts=max_attempts,
            result=decode(bytes(result)) if result is not None else None,
            errors=[(e["attempt"], e["error"]) for e in errors],
            journal=[(n, normalize_journal_value(n, decode(bytes(v))), u, t) for n, v, u, t in steps],
            runs=runs,
            events=events,
            stale_acks=self.stale_acks(job_id),
            crashes=counts["crashes"],
            freezes=counts["freezes"],
            cancels=counts["cancels"],
            db_restarts=counts["db_restarts"],
        )
