"""Broken: leases are renewed every 0.8 ttl instead of every ttl/3 (§6). Renewals land with a fifth of the
lease left; nothing is lost unless a stall or a clock running ahead makes the difference, so the loss is
rare — the cadence is what is wrong.

Expected verdict: invalid, P14 (leases seen with under ttl/3 left), or P2 when a lease is lost."""

from __future__ import annotations

from impl.runtime import Worker
from soak.reference_worker import main


class LateRenewalWorker(Worker):
    def _renew_loop(self) -> None:
        period = 0.8 * self.config.lease_ttl  # BUG: the reference renews every ttl / 3
        while not self.stopped.wait(period):
            try:
                self.renew_once()
            except Exception:  # noqa: BLE001
                continue


if __name__ == "__main__":
    main(worker_class=LateRenewalWorker)
