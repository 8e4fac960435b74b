"""`now` freshness (soak/judges/timing/__init__.py has the rule): a write's `now` may lag its commit by
NOW_BASE plus the time its own node's faults held it, no more.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from soak.judges.timing.nodes import NodeFaults

# --- `now` freshness --------------------------------------------------------------------------------

# Base tolerance of a write's lag (commit − now) on a node with no fault of its own in between: one call
# of the reference SDK under the soak's load. The reference gives each call a 2.5 s deadline and retries a
# call that outlives it (impl/runtime/node.py `call`), so an honest write may commit up to one deadline plus a
# retry's round trip after its `now`; CPU starvation on the shared 2-core machine stretches both. Measured
# (docs/certification.md "now freshness"): the reference's largest fault-free lag over the soaks run for
# issue 51 was well under this bound. A worker that stamps writes with an instant read seconds earlier
# (a stale clock read) exceeds it as soon as a job runs longer than it.
NOW_BASE = 5.0  # = 2.0 (retry backoff) + 2.5 (call deadline) + 0.5 (one sample interval of scheduling)
# Two writes beyond every excuse make the verdict: one could still be an honest call that hit two deadline
# cuts in a row on a machine the harness did not see stall; a stale clock read repeats with every write.
STALE_MIN_WRITES = 2


@dataclass
class Stale:
    node: str
    what: str
    lag: float
    excused: float
    faults: list[str]
    lsn: str
    at: datetime

    def line(self) -> str:
        why = f", {self.excused:.1f} s excused by its own {' and '.join(self.faults)}" if self.faults else ""
        return (
            f"now freshness: {self.what} on node {self.node} committed {self.lag:.1f} s after its `now` (LSN "
            f"{self.lsn}, at {self.at.isoformat(timespec='milliseconds')}){why}: more than {NOW_BASE:g} s "
            "beyond the node's own faults — a write's `now` is the instant it is made (§2)"
        )


class Freshness:
    def __init__(self, faults: NodeFaults | None) -> None:
        # without the run's fault log (refine --no-ledger, a bare history) nothing can be excused: not judged
        self.enabled = faults is not None
        self.faults = faults or NodeFaults()
        self.stale: list[Stale] = []
        self.count = 0  # stale writes
        self.judged = 0
        self.nodes: dict[str, int] = defaultdict(int)  # node → stale writes
        self.free_lag_max = 0.0  # the largest lag of a write no fault of its node touched
        self.lags: list[float] = []  # fault-free lags above 0.5 s (the distribution's tail, for calibration)
        self.small = 0  # lags of at most 0.5 s (not judged further)
        self.excused_lag_max = 0.0

    def judge(self, node: str | None, now: datetime, at: datetime, what: str, lsn: str) -> None:
        if not node or node == "soak-harness" or not self.enabled:
            return
        self.judged += 1
        t_now = now.timestamp() - self.faults.offset.get(node, 0.0)
        t_at = at.timestamp()
        lag = t_at - t_now
        if lag <= 0.5:
            self.small += 1
            return
        excused, names = self.faults.excuse(node, t_now, t_at)
        if not excused:
            self.free_lag_max = max(self.free_lag_max, lag)
            if len(self.lags) < 10000:
                self.lags.append(round(lag, 3))
        else:
            self.excused_lag_max = max(self.excused_lag_max, lag)
        if lag <= NOW_BASE + excused:
            return
        self.count += 1
        self.nodes[node] += 1
        if len(self.stale) < 20:
            self.stale.append(Stale(node, what, lag, excused, names, lsn, at))

    def lines(self) -> list[str]:
        if self.count < STALE_MIN_WRITES:
            return []
        nodes = ", ".join(f"{n} {c}" for n, c in sorted(self.nodes.items(), key=lambda kv: -kv[1])[:5])
        head = (
            f"now freshness: {self.count} write(s) stamped more than {NOW_BASE:g} s before their commit beyond "
            f"their node's own faults (by node: {nodes})"
        )
        return [head] + [s.line() for s in self.stale[:5]]
