"""Broken: the reclaim pass treats leases that expire within the next 3 s as expired (§6: reclaim only
`lease_until <= now`), taking live work from nodes that renew on time.

Expected verdict: invalid, P2 (a lease lost while its node was alive and renewing) or I1's renewal rule."""

from __future__ import annotations

from soak.broken.base import patched_queries
from soak.reference_worker import main

EarlyReclaimStore = patched_queries(
    expired_leases=("lease_until <= %(now)s", "lease_until <= %(now)s + interval '3 seconds'")  # BUG
)


if __name__ == "__main__":
    main(store_class=EarlyReclaimStore)
