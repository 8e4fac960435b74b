"""Broken: the worker's connections have no client-side call deadline, no connect_timeout and no TCP
keepalives (PROTOCOL §1 "survive the network"; impl/store/deadline.py is what the reference adds). A call on a
connection that stops forwarding hangs until the network heals: under `--stall-conn-every` the stalled
connection is sometimes the one the lease renewal takes, and every lease of the node expires while the
node is up and not excused (a single stalled connection is not a partition).

Expected verdict: invalid, P2 (leases of a live node expired under jobs it still held), or the trace
validation's `now` freshness (refine): a write that hung on the stalled connection commits after the stall
with the `now` it was made at, more than 5 s old — a single stalled connection excuses no lag, because
PROTOCOL §1 bounds every call with a client-side deadline (measured 2026-12-06 under `--stall-conn-every 2`:
the reference's largest write lag 2.46 s, its deadline; this variant's 6.0 s, 69 writes)."""

from __future__ import annotations

from impl.store import PgStore
from soak.reference_worker import main


class NoDeadlineStore(PgStore):
    def __init__(self, *args, **kwargs) -> None:
        kwargs["call_timeout"] = None  # BUG: no Watchdog, no connect_timeout, no keepalives
        super().__init__(*args, **kwargs)


if __name__ == "__main__":
    main(store_class=NoDeadlineStore)
