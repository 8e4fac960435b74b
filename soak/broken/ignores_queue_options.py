"""Broken: the worker never reads the `belay_queues` rows, so it claims from every queue with its static
options only — `soak-global` (global_limit 2) and `soak-rate` (4 per second) are claimed without
admission, as many at once as its local limit allows (an SDK that treats queue options as local
configuration only). Contract §6: with global_limit, rate or partition the claim takes the advisory
lock and admits by the row's options.

Expected verdict: invalid, P18 (more live leases on soak-global than its global_limit; claims on the
admission queues that the model, applying the queue's options, does not explain)."""

from __future__ import annotations

from typing import Any

from impl.runtime import Worker
from soak.reference_worker import main


class IgnoresQueueOptions(Worker):
    def _queue_rows(self) -> dict[str, Any]:
        return {}  # BUG: belay_queues rows never read — static options only


if __name__ == "__main__":
    main(worker_class=IgnoresQueueOptions)
