"""Each node's faults from the fault log, as the time judges (soak/judges/timing/) excuse them: SIGSTOPs,
its route's partitions, stalls, cuts and latency, database crash-restarts and failovers, machine stalls.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# --- the fault log, per node -------------------------------------------------------------------------

INF = float("inf")
SAMPLE_EVERY = 0.5  # s: the harness's lease-sample interval (soak/workload/scenarios.py)
STALL_GAP = 2 * SAMPLE_EVERY  # a sample this late (one missed) is a stall of the machine, not jitter
FREEZES = ("stop", "isolated", "slowed", "cut", "db")  # faults that can hold a node's transaction open
LONG = 60.0  # s: a window longer than this is scanned on every query; shorter ones are found by their start


@dataclass
class NodeFaults:
    """The fault windows of each node (harness clock, epoch seconds) from the run's history.jsonl: SIGSTOP
    windows by node; partitions, stalls and latency by slot (issue 13: all incarnations of a slot share a
    route); cuts of one node or of all; PostgreSQL crash-restarts and failovers (every node's connection).
    Windows still open at the end of the log last until `end`."""

    offset: dict[str, float] = field(default_factory=dict)  # node → BELAY_CLOCK_OFFSET (s, ahead)
    slot_of: dict[str, int] = field(default_factory=dict)
    stopped: dict[str, list[list[float]]] = field(default_factory=lambda: defaultdict(list))
    isolated: dict[int, list[list[float]]] = field(default_factory=lambda: defaultdict(list))
    slowed: dict[int, list[list[float]]] = field(default_factory=lambda: defaultdict(list))
    cuts: list[list[Any]] = field(default_factory=list)
    db_down: list[list[float]] = field(default_factory=list)
    # The machine's own stalls, seen by the harness: its lease sampler runs every SAMPLE_EVERY s; a gap of
    # more than STALL_GAP between two samples means the harness was starved (the 2-core machine is shared)
    # or its read waited, and every process on the machine — every node — may have been held alike.
    stalls: list[list[float]] = field(default_factory=list)
    last_sample: float | None = None
    end: float = 0.0
    events: int = 0
    # windows(node) as last built: the log is read before the judging starts, so each node's list is built
    # once, not once per claim (a long run's windows are many; issue 54 target 5). Cleared by every feed.
    _windows: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict, repr=False, compare=False)
    # The same windows indexed by their start (excuse) and the freeze windows' starts and ends (freezes,
    # any_freeze), so a query costs the windows near it, not every window of the run. Cleared by every feed.
    _by_start: dict[str, tuple[list[float], list[Any], list[Any]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _freeze_index: list[Any] = field(default_factory=list, repr=False, compare=False)

    def feed(self, e: Mapping[str, Any]) -> None:
        self._windows.clear()
        self._by_start.clear()
        self._freeze_index.clear()
        t, kind, node = float(e.get("t", 0.0)), e.get("type"), e.get("node")
        self.end = max(self.end, t)
        if kind == "lease_sample":
            at = float(e.get("at", t))
            if self.last_sample is not None and at - self.last_sample > STALL_GAP:
                self.stalls.append([self.last_sample + SAMPLE_EVERY, at])
            self.last_sample = at
            return
        if kind == "worker_start" and node is not None:
            self.slot_of[node] = e.get("slot")  # type: ignore[assignment]
            if e.get("clock_skew"):
                self.offset[node] = float(e["clock_skew"])
        elif kind == "worker_stop" and node is not None:
            self.stopped[node].append([t, INF])
        elif kind == "worker_cont" and node is not None and self.stopped.get(node):
            self.stopped[node][-1][1] = t
        elif kind in ("db_crash", "failover_begin"):
            self.db_down.append([t, INF])
        elif kind in ("db_restarted", "standby_ready") and self.db_down and self.db_down[-1][1] == INF:
            self.db_down[-1][1] = t
        elif kind in ("net_partition", "net_stall"):
            self.isolated[e["slot"]].append([t, INF])
        elif kind == "net_latency":
            self.slowed[e["slot"]].append([t, INF])
        elif kind == "net_heal":
            by = self.isolated if e.get("fault") in ("partition", "stall") else self.slowed
            if e.get("fault") in ("partition", "stall", "latency") and by.get(e["slot"]):
                by[e["slot"]][-1][1] = t
        elif kind == "cut_start":
            self.cuts.append([node, t, INF])
        elif kind == "cut_end":
            for c in reversed(self.cuts):
                if c[0] == node and c[2] == INF:
                    c[2] = t
                    break
        else:
            return
        self.events += 1

    def windows(self, node: str) -> list[tuple[float, float, str]]:
        """Every fault window that can delay `node`'s writes or hold its transactions open."""
        got = self._windows.get(node)
        if got is None:
            got = self._windows[node] = self._build_windows(node)
        return got

    def _build_windows(self, node: str) -> list[tuple[float, float, str]]:
        slot = self.slot_of.get(node)
        out = [(a, b, "SIGSTOP") for a, b in self.stopped.get(node, ())]
        out += [(a, b, "partition/stall") for a, b in self.isolated.get(slot, ())] if slot is not None else []
        out += [(a, b, "latency") for a, b in self.slowed.get(slot, ())] if slot is not None else []
        out += [(a, b, "cut") for n, a, b in self.cuts if n is None or n == node]
        out += [(a, b, "database crash-restart/failover") for a, b in self.db_down]
        out += [(a, b, "machine-wide stall (harness samples late)") for a, b in self.stalls]
        return [(a, min(b, self.end), what) for a, b, what in out]

    def overlapping(self, node: str, t0: float, t1: float) -> list[tuple[float, float, str]]:
        """`node`'s windows that overlap [t0, t1] (a ≤ t1 and b ≥ t0), found by their start: a window of at
        most LONG seconds that starts before t0 − LONG ends before t0."""
        idx = self._by_start.get(node)
        if idx is None:
            ws = self.windows(node)
            short = sorted((w for w in ws if w[1] - w[0] <= LONG), key=lambda w: w[0])
            long_ = [w for w in ws if not w[1] - w[0] <= LONG]
            idx = self._by_start[node] = ([w[0] for w in short], short, long_)
        starts, short, long_ = idx
        near = short[bisect_left(starts, t0 - LONG - 1.0) : bisect_right(starts, t1)]
        return [w for w in near if w[0] <= t1 and w[1] >= t0] + [w for w in long_ if w[0] <= t1 and w[1] >= t0]

    def excuse(self, node: str, t0: float, t1: float) -> tuple[float, list[str]]:
        """Seconds of [t0, t1] covered by `node`'s own faults (overlaps merged), and what they were."""
        spans = sorted((max(a, t0), min(b, t1), what) for a, b, what in self.overlapping(node, t0, t1))
        total, reach, names = 0.0, t0, []
        for a, b, what in spans:
            if b > reach:
                total += b - max(a, reach)
                reach = b
            names.append(what)
        return total, sorted(set(names))

    def froze_holding(self, written: float, t0: float, t1: float) -> bool:
        """Could a transaction frozen by a fault hold a row written at `written` locked during [t0, t1]?
        It locked the row after that write and before its node froze (a SIGSTOP, a partition, stall, cut
        or latency of its route: a fault beginning after `written`), and holds it until the fault ends
        (then commits or aborts): the fault began by t1 and lasted until t0 or later."""
        frozen = [w for ws in self.stopped.values() for w in ws]
        frozen += [w for ws in self.isolated.values() for w in ws] + [w for ws in self.slowed.values() for w in ws]
        frozen += [[a, b] for _n, a, b in self.cuts] + self.stalls
        return any(written - 1.0 <= a <= t1 and min(b, self.end) >= t0 for a, b in frozen)

    def _freeze_count(self, t0: float, t1: float) -> int | None:
        """`freezes(t0, t1)` counted with sorted starts and ends (any_freeze's fast answer; `freezes` itself
        keeps its scan, the line the certifier's mutant edits): a window overlaps [t0, t1] unless it starts
        after t1 or ends before t0, and (t0 ≤ t1, every window starting by its end) one that ends before t0
        started before t1 — so the count is #(start ≤ t1) − #(end < t0). None where that does not hold."""
        if not self._freeze_index:
            one = [w for ws in (*self.stopped.values(), *self.isolated.values(), *self.slowed.values()) for w in ws]
            one += [[a, b] for node, a, b in self.cuts if node is not None]
            every = [[a, b] for node, a, b in self.cuts if node is None]
            ok = all(a <= min(b, self.end) for a, b in (*one, *every))
            slots = max(1, len(set(self.slot_of.values())))
            self._freeze_index.append(
                (
                    ok,
                    sorted(a for a, _ in one),
                    sorted(min(b, self.end) for _, b in one),
                    sorted(a for a, _ in every),
                    sorted(min(b, self.end) for _, b in every),
                    slots,
                )
            )
        ok, a1, b1, a2, b2, slots = self._freeze_index[0]
        if not ok or not t0 <= t1:
            return None
        n = bisect_right(a1, t1) - bisect_left(b1, t0)
        n2 = bisect_right(a2, t1) - bisect_left(b2, t0)
        return int(n + slots * n2)

    def freezes(self, t0: float, t1: float) -> int:
        """How many transactions faults could have frozen over [t0, t1]: one per window of a node or
        route (SIGSTOP, partition, stall, latency, a cut of one node) overlapping it, one per known slot for
        a cut of every node."""
        n = sum(1 for ws in self.stopped.values() for a, b in ws if a <= t1 and min(b, self.end) >= t0)
        n += sum(
            1
            for ws in (*self.isolated.values(), *self.slowed.values())
            for a, b in ws
            if a <= t1 and min(b, self.end) >= t0
        )
        slots = max(1, len(set(self.slot_of.values())))
        n += sum(1 if node is not None else slots for node, a, b in self.cuts if a <= t1 and min(b, self.end) >= t0)
        return n

    def any_freeze(self, t0: float, t1: float) -> str | None:
        """A fault of any node (or of the database) overlapping [t0, t1] that can keep a transaction open
        (and so hold row locks): its description, else None."""
        if self._freeze_count(t0, t1) == 0:  # none overlaps: the scan below would find none
            return None
        for node, ws in self.stopped.items():
            if any(a <= t1 and min(b, self.end) >= t0 for a, b in ws):
                return f"SIGSTOP of {node}"
        for what, by in (("partition/stall", self.isolated), ("latency", self.slowed)):
            for slot, ws in by.items():
                if any(a <= t1 and min(b, self.end) >= t0 for a, b in ws):
                    return f"{what} of slot {slot}"
        for n, a, b in self.cuts:
            if a <= t1 and min(b, self.end) >= t0:
                return f"cut of {n or 'every node'}"
        return None


def load_faults(records: Iterable[Mapping[str, Any]]) -> NodeFaults:
    f = NodeFaults()
    for r in records:
        f.feed(r)
    return f
