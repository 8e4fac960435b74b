"""Broken: on SIGTERM the producers keep claiming through the whole grace (the operations guide: "producers
stop claiming first"); at the end of the grace the worker exits and what it claimed last is left to lease
expiry — the shape of the independent Node worker's bug (issue 30: 128 attempts claimed after SIGTERM,
4 of 6 drains out of grace, VALID before P11).

Expected verdict: invalid, P11 (attempts claimed by a node after its own SIGTERM), and P4 (jobs it held
ended by lease expiry)."""

from __future__ import annotations

import time

from impl.runtime import Worker
from soak.reference_worker import main


class KeepsClaimingWorker(Worker):
    def stop(self, grace: float | None = None) -> bool:
        grace = self.config.shutdown_grace if grace is None else grace
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.running for p in self.producers.values()):
            time.sleep(0.05)  # BUG: `stopping` is not set: the producers go on claiming during the drain
        return super().stop(grace=0.2)


if __name__ == "__main__":
    main(worker_class=KeepsClaimingWorker)
