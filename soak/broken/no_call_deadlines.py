"""Broken: the worker's connections have no client-side call deadline, no connect_timeout and no TCP
keepalives (PROTOCOL §1 "survive the network"; impl/deadline.py is what the reference adds). A call on a
connection that stops forwarding hangs until the network heals: under `--stall-conn-every` the stalled
connection is sometimes the one the lease renewal takes, and every lease of the node expires while the
node is up and not excused (a single stalled connection is not a partition).

Expected verdict: invalid, P2 (leases of a live node expired under jobs it still held)."""

from __future__ import annotations

from impl.store import PgStore
from soak.reference_worker import main


class NoDeadlineStore(PgStore):
    def __init__(self, *args, **kwargs) -> None:
        kwargs["call_timeout"] = None  # BUG: no Watchdog, no connect_timeout, no keepalives
        super().__init__(*args, **kwargs)


if __name__ == "__main__":
    main(store_class=NoDeadlineStore)
