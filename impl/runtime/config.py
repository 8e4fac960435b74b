"""A node's configuration (spec/belay-operations.txt defaults): `WorkerConfig`, `QueueConfig`, the clock.

Configuration is one frozen object per component; the environment is read only by entry points.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from impl import telemetry
from impl.runtime.faults import RetryPolicy
from model import ops
from model import worker_ops as w
from model.cron import CronDef
from model.queues import QueueOpts


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class QueueConfig:
    """Static queue options; a belay_queues row with the same name merges over them at runtime."""

    name: str
    opts: QueueOpts = QueueOpts()


@dataclass(frozen=True)
class WorkerConfig:
    """A node's configuration (defaults from spec/belay-operations.txt)."""

    node: str = field(default_factory=lambda: f"node-{uuid.uuid4().hex[:8]}")
    queues: tuple[QueueConfig, ...] = ()
    lease_ttl: float = 30.0  # seconds
    shutdown_grace: float = 15.0  # seconds
    busy_poll: float = 0.025  # seconds: the hot cadence while claims return work
    poll_interval: float = 0.5  # seconds: the idle ceiling
    sweep_interval: float = 1.0  # seconds between sweeper passes
    notify: bool = False  # the pg_notify accelerator (one LISTEN connection per node)
    listen_url: str | None = None  # a direct connection for LISTEN (past any transaction pooler)
    crons: tuple[CronDef, ...] = ()
    # True: run exactly `queues` (not also the registry's other queues) and fire only the crons of
    # those queues — `belay worker --queues A,B`. False: `queues` plus every queue of the registry's kinds.
    exclusive_queues: bool = False
    retention: tuple[tuple[str, int | None], ...] = (
        ("succeeded", 86400),
        ("failed", 7 * 86400),
        ("cancelled", 7 * 86400),
    )
    signal_ttl: int | None = 7 * 86400
    # Retention deletes at most w.Prune's limit (500) rows per transaction; a sweeper pass repeats it while
    # a batch comes back full, up to this many batches — so retention keeps up with a queue finishing
    # more than 500 jobs per pass (issue 54: the steady hour at ~1,000 jobs/s grew its table 4.3× with one).
    prune_batches: int = 20
    # Table upkeep (impl/runtime/upkeep.py, issue 54): every `upkeep_interval` seconds the node reads
    # belay_jobs' statistics and runs VACUUM once `vacuum_dead_rows` row versions are dead (bounding the
    # claim's walk over claimed rows' index entries at any claim rate), ANALYZE once `analyze_rows` rows are
    # live and the planner believes fewer than half of them exist (a claim planned on an empty table
    # seq-scans). 0 turns a rule off; `upkeep_interval` 0 turns upkeep off.
    vacuum_dead_rows: int = 50_000
    analyze_rows: int = 1_000
    upkeep_interval: float = 2.0
    queue_refresh: float = 5.0  # seconds between reads of belay_queues rows
    reclaim_backoff: w.Backoff = w.Backoff()  # retry delay of a job whose lease expired (by attempt)
    retry: RetryPolicy = RetryPolicy()
    # Client-side deadline of one store call, after which its connection is cut and the call retried
    # (impl/store/deadline.py, docs/connections.md): None = max(lease_ttl / 4, 2 s), 0 = none.
    call_timeout: float | None = None
    # Group commit of single-job acks (issue 33): acks that finish while one commits go in the next
    # AckMany (each row fenced on its own attempt; a lone ack takes the one-statement path). 1 = off.
    ack_group_max: int = 64
    # A group's leader waits up to this long (seconds) for the acks of the node's other executions of the
    # queue that are still running, and never when it is the only one (idle latency unchanged): short
    # jobs that finish together then commit, and claim their slots' successors, in one transaction.
    ack_linger: float = 0.001
    # Jobs claimed on an execution's thread (an ack group's leader) run on that thread one after another,
    # waking no other (issue 33); a job or ack that has waited this long (seconds) for it is handed to
    # another thread. 0 = every claimed job wakes a thread of its own.
    defer_handoff: float = 0.002

    def __post_init__(self) -> None:
        ops.require_name(self.node, "node")
        if self.ack_group_max < 1:
            raise ValueError("ack_group_max must be at least 1")
        if not 0 <= self.ack_linger <= 0.1:
            raise ValueError("ack_linger must be between 0 and 0.1 s")
        if not 0 <= self.defer_handoff <= 1:
            raise ValueError("defer_handoff must be between 0 and 1 s")
        if self.lease_ttl <= 0 or self.shutdown_grace < 0 or self.busy_poll <= 0 or self.poll_interval <= 0:
            raise ValueError("lease_ttl, busy_poll and poll_interval must be positive; shutdown_grace >= 0")
        if self.vacuum_dead_rows < 0 or self.analyze_rows < 0 or self.upkeep_interval < 0:
            raise ValueError("vacuum_dead_rows, analyze_rows and upkeep_interval must not be negative")
        names = [q.name for q in self.queues]
        if len(set(names)) != len(names):
            raise ValueError(f"a queue is configured twice: {names}")


# Telemetry: one small interface (impl/telemetry/); `default_logger` is re-exported for callers.
Telemetry = telemetry.Handler


default_logger = telemetry.default_logger
