"""Broken: the renewal statement has no `state = 'running' AND leased_by = $node` guard (§6): it extends
every id the node lists, so a renewal that races the node's own ack puts a lease back on a finished row,
and a node resuming from a stall renews rows another node has reclaimed (or that went back to ready).

Expected verdict: invalid, refine (a renewal transaction writes lease_until on a row that is not running
under this node: no Renew of the model explains it)."""

from __future__ import annotations

from soak.broken.base import patched_queries
from soak.reference_worker import main

UnguardedRenewStore = patched_queries(
    renew_leases=("WHERE id = ANY(%(ids)s) AND state = 'running' AND leased_by = %(node)s", "WHERE id = ANY(%(ids)s)")
)

if __name__ == "__main__":
    main(store_class=UnguardedRenewStore)
