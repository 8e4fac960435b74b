"""Broken: the worker never renews its leases (§6 "renew all local leases each ttl/3" is missing).

A `slow` job (longer than the lease) is reclaimed from under a live, running worker.
Expected verdict: invalid, I1 (the lease-renewal rule: live work taken away and, attempts exhausted, lost)."""

from __future__ import annotations

from impl.runtime import Worker
from soak.reference_worker import main


class NoRenewalWorker(Worker):
    def _renew_loop(self) -> None:
        self.stopped.wait()


if __name__ == "__main__":
    main(worker_class=NoRenewalWorker)
