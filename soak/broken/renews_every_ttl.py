"""Broken: leases are renewed every ttl instead of every ttl/3 (§6). A renewal then lands just as the
lease runs out, and a node whose clock runs a little ahead (the harness skews one) reclaims the job
from under its live owner.

Expected verdict: invalid, P2 (a lease lost while its node was alive, running and connected)."""

from __future__ import annotations

from impl.runtime import Worker
from soak.reference_worker import main


class LateRenewalWorker(Worker):
    def _renew_loop(self) -> None:
        period = self.config.lease_ttl  # BUG: the reference renews every ttl / 3
        while not self.stopped.wait(period):
            try:
                self.renew_once()
            except Exception:  # noqa: BLE001
                continue


if __name__ == "__main__":
    main(worker_class=LateRenewalWorker)
