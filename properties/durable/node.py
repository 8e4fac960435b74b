"""`python -m properties.durable.node URL NODE TTL`: one real worker node (impl.runtime.Worker) serving the
durable-execution programs' queues until SIGTERM — a `belay worker` with the test's short timings
(fast polls and sweeps, retries and reclaims ready at once), which the CLI does not expose."""

from __future__ import annotations

import logging
import sys

from impl.runtime import QueueConfig, Termination, Worker, WorkerConfig
from impl.runtime.faults import RetryPolicy
from model.durable import CHILD_QUEUE, NO_BACKOFF, QUEUE
from model.queues import QueueOpts
from properties.durable.app import registry


def config(node: str, ttl: float) -> WorkerConfig:
    opts = QueueOpts(limit_min=4, limit_max=4)
    return WorkerConfig(
        node=node,
        queues=(QueueConfig(QUEUE, opts), QueueConfig(CHILD_QUEUE, opts)),
        lease_ttl=ttl,
        shutdown_grace=1.0,
        busy_poll=0.01,
        poll_interval=0.05,
        sweep_interval=0.1,
        reclaim_backoff=NO_BACKOFF,
        retry=RetryPolicy(initial=0.05, maximum=0.5, max_elapsed=120),
    )


def main(argv: list[str]) -> None:
    url, node, ttl = argv[0], argv[1], float(argv[2])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    termination = Termination()
    worker = Worker(url, registry, config(node, ttl)).start()
    print(f"node {node} ready", file=sys.stderr, flush=True)
    termination.wait()
    worker.stop(grace=1.0)


if __name__ == "__main__":
    main(sys.argv[1:])
