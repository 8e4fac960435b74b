"""The worker runtime (spec/belay-operations.txt; docs/architecture.md "Layout of impl/"): one `Worker` is one node.

`from impl.runtime import Worker, WorkerConfig` is the public path. The parts, bottom to top:
`faults.py` (transient faults, retry with backoff), `config.py` (`WorkerConfig`, `QueueConfig`),
`executor.py` (a queue's threads and deferred jobs), `watchdog.py` (hands waiting work to another
thread), `ack_group.py` (group commit of acks), `producer.py` (claims per queue), `node.py` (the
`Worker`: executions, renewal, claim recovery, the sweeper, start and stop) and `termination.py`
(signals for entry points).
"""

from impl.runtime.ack_group import AckGroup
from impl.runtime.config import QueueConfig, Telemetry, WorkerConfig, default_logger, utc_now
from impl.runtime.executor import _Executor
from impl.runtime.node import Worker
from impl.runtime.producer import _Producer
from impl.runtime.termination import Termination
from impl.runtime.watchdog import _Watchdog

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
