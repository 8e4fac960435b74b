"""The worker runtime (docs/architecture.md "Layout of impl/"): one `Worker` is one node.

`from impl.runtime import Worker, WorkerConfig` is the public path; the parts live in their own modules.
"""

from impl.runtime.node import (
    AckGroup,
    QueueConfig,
    Telemetry,
    Termination,
    Worker,
    WorkerConfig,
    _Executor,
    _Producer,
    _Watchdog,
    default_logger,
    utc_now,
)

__all__ = [
    "AckGroup",
    "QueueConfig",
    "Telemetry",
    "Termination",
    "Worker",
    "WorkerConfig",
    "_Executor",
    "_Producer",
    "_Watchdog",
    "default_logger",
    "utc_now",
]
