"""The network and failover nemesis of the soak (issue 13), kept apart from soak/faults/nemesis.py's process faults.

With any of its options on, every worker slot reaches PostgreSQL through its own route of the harness's
proxy (soak/faults/proxy.py: `w<slot>`), the harness itself through `harness` (never faulted), and the faults run
on independent schedules (±25% jitter from the run's seeded RNG), each recorded in the history:

  net_partition / net_heal   a worker's route drops every connection and refuses new ones for
                             --partition-for s (default lease ttl + 5: its leases expire, it is a zombie)
  net_stall / net_heal       a worker's route stops forwarding for --stall-for s (queries hang)
  net_stall_conn / net_heal  one connection of a worker stalls for 1.5 × lease ttl: the worker is NOT
                             excused — its other leases must still be renewed (impl/store/deadline.py)
  net_latency / net_heal     a worker's route gets 50–200 ms per chunk for 10 s
  failover_* / standby_ready the primary is killed and the standby promoted (soak/faults/failover.py)

The checker (soak/judges/checker.py Timeline) treats a partitioned or stalled *slot* like a SIGSTOPped worker
(its leases may expire) and a failover like a database outage; D1 (soak/judges/durability.py) checks durability.
At least one worker slot is always left unisolated and not stopped.
"""

from __future__ import annotations

import argparse
import math
import random
import threading
import time
import urllib.parse
from typing import Any

from soak.faults.failover import MODES, Replication, primary_settings
from soak.faults.nemesis import fault_rates, start_fault_loops
from soak.faults.proxy import Proxy
from soak.record.history import History


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("network faults and failover (issue 13; all off by default)")
    g.add_argument("--partition-every", type=float, default=0, help="partition a worker from PostgreSQL every S s")
    g.add_argument(
        "--partition-for", type=float, default=None, help="seconds a partition lasts (default: lease ttl + 5)"
    )
    g.add_argument("--stall-every", type=float, default=0, help="stall every connection of a worker every S s")
    g.add_argument("--stall-for", type=float, default=None, help="seconds a stall lasts (default: lease ttl + 5)")
    g.add_argument(
        "--stall-conn-every",
        type=float,
        default=0,
        help="stall ONE connection of a worker for 1.5 × lease ttl every S s (its other leases must survive)",
    )
    g.add_argument(
        "--latency-every", type=float, default=0, help="add 50-200 ms latency to a worker for 10 s every S s"
    )
    g.add_argument(
        "--failover-every",
        type=float,
        default=0,
        help="kill the primary and promote the streaming standby every S s (embedded cluster only)",
    )
    g.add_argument(
        "--replication",
        choices=MODES,
        default="sync",
        help="standby replication for --failover-every "
        "(default %(default)s; async can lose committed work, which check D1 reports)",
    )
    g.add_argument(
        "--replication-lag",
        type=float,
        default=1.0,
        help="seconds the primary-standby link is partitioned before each failover (default %(default)s)",
    )


def wanted(args: argparse.Namespace) -> bool:
    return any((args.partition_every, args.stall_every, args.stall_conn_every, args.latency_every, args.failover_every))


def cluster_settings(args: argparse.Namespace) -> dict[str, str]:
    return primary_settings(args.replication) if args.failover_every else {}


class NetFaults:
    def __init__(
        self, args: argparse.Namespace, db_url: str, cluster: Any | None, history: History, rng: random.Random
    ) -> None:
        if args.failover_every and cluster is None:
            raise SystemExit("--failover-every needs the embedded cluster (not --database-url)")
        parts = urllib.parse.urlsplit(db_url)
        self.args = args
        self.history = history
        self.rng = rng
        self.proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 5432, rng=random.Random(rng.random()))
        self.db_url = db_url
        self.harness_url = self.proxy.url("harness", db_url)
        ttl = args.lease_ttl
        self.every = {
            "partition": args.partition_every,
            "stall": args.stall_every,
            "stall_conn": args.stall_conn_every,
            "latency": args.latency_every,
            "failover": args.failover_every,
        }
        self.durations = {
            "partition": args.partition_for or ttl + 5,
            "stall": args.stall_for or ttl + 5,
            "stall_conn": 1.5 * ttl,
            "latency": 10.0,
        }
        self.counts = {k: 0 for k in self.every}
        # a fault that lasts longer than half its period gets more lanes (FaultSchedule): its rate holds
        self.lanes = {
            k: min(3, max(1, math.ceil(2 * self.durations[k] / every)))
            for k, every in self.every.items()
            if every and k in self.durations
        }
        self.schedules: dict[str, list] = {}
        self.fault_phase: list[float | None] = [None, None]
        self.replication: Replication | None = None
        if args.failover_every:
            self.replication = Replication(cluster, self.proxy, history, args.replication, lag=args.replication_lag)
            self.replication.add_standby()
        self.halt = threading.Event()
        self.threads: list[threading.Thread] = []
        self.isolated: set[int] = set()
        self.busy: set[int] = set()  # slots with any network fault on (one at a time per route)
        self.lock = threading.Lock()
        self.last = ""
        self.workers = self.nemesis = None

    def slot_env(self, n: int) -> dict[int, dict[str, str]]:
        return {i: {"BELAY_DATABASE_URL": self.proxy.url(f"w{i}", self.db_url)} for i in range(1, n + 1)}

    def summary(self) -> str:
        c = self.counts
        return (
            f"partition {c['partition']}, stall {c['stall']}, conn-stall {c['stall_conn']}, "
            f"latency {c['latency']}, failover {c['failover']}"
        )

    def start(self, workers: Any, nemesis: Any) -> None:
        self.workers, self.nemesis = workers, nemesis
        start_fault_loops(self, "netfault")

    def _pick(self, isolating: bool) -> Any | None:
        with self.lock:
            running = self.workers.running_slots()
            free = [s for s in running if s.index not in self.busy]
            if isolating and len([s for s in running if s.index not in self.isolated]) < 2:
                return None  # keep one worker that reaches the database
            if not free:
                return None
            slot = self.rng.choice(free)
            self.busy.add(slot.index)
            if isolating:
                self.isolated.add(slot.index)
            return slot

    def _release(self, slot: Any) -> None:
        with self.lock:
            self.busy.discard(slot.index)
            self.isolated.discard(slot.index)

    def _fault(self, name: str, isolating: bool, apply: Any, **fields: Any) -> bool:
        slot = self._pick(isolating)
        if slot is None:
            return False
        route, seconds = f"w{slot.index}", self.durations[name]
        try:
            self.history.record(f"net_{name}", slot=slot.index, node=slot.node, seconds=seconds, **fields)
            if apply(route) is False:
                self.history.record("net_heal", slot=slot.index, node=slot.node, fault=name, applied=False)
                return False
            self.counts[name] += 1
            self.last = f"{name.replace('_', ' ')} {slot.node} for {seconds:.0f}s"
            self.halt.wait(seconds)
            return True
        finally:
            self.proxy.heal(route)
            self.history.record("net_heal", slot=slot.index, node=slot.node, fault=name)
            self._release(slot)

    def _partition(self) -> bool:
        return self._fault("partition", True, self.proxy.partition)

    def _stall(self) -> bool:
        return self._fault("stall", True, self.proxy.stall)

    def _stall_conn(self) -> bool:
        return self._fault("stall_conn", False, self.proxy.stall_one)

    def _latency(self) -> bool:
        ms = self.rng.uniform(0.05, 0.2)
        return self._fault("latency", False, lambda route: self.proxy.set_latency(route, ms), latency=round(ms, 3))

    def _failover(self) -> None:
        with self.nemesis.db_lock:  # never while the crash-restart nemesis holds the primary
            self.last = f"failover ({self.replication.mode})"
            self.replication.failover()
            self.nemesis.cluster = self.replication.primary
            self.counts["failover"] += 1

    def stop_all(self) -> None:
        if self.fault_phase[0] is not None and self.fault_phase[1] is None:
            self.fault_phase[1] = time.monotonic()
        self.halt.set()
        for t in self.threads:
            t.join(timeout=150)
        for name in list(self.proxy.listeners):
            self.proxy.heal(name)
        self.history.record("fault_rates", source="netfaults", kinds=fault_rates(self))

    def close(self) -> None:
        self.halt.set()
        self.proxy.close()
        if self.replication is not None:
            self.replication.close()
