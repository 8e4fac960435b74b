"""Broken: `echo` runs as a chunk kind (up to 50 jobs per call) whose gather window is three lease TTLs,
and the window is not clamped to half the lease TTL (operations guide, "Chunks"). The renewer of this
variant, like an SDK of the original's design, renews the leases of executing jobs only — jobs waiting
in a gather window are leased but not renewed, which is exactly what the clamp keeps safe: without it a
partial chunk waits past its leases, other nodes reclaim the jobs, and the chunk runs and acks stale.

(The reference runtime renews gathered jobs too, so for it an unclamped window would cost latency only.)

Expected verdict: invalid, P2 (leases of a live, unexcused node expired under jobs it still held)."""

from __future__ import annotations

import time
from dataclasses import replace

from impl.runtime import Worker
from impl.runtime import producer as runtime
from impl.worker import JobContext
from soak.reference_worker import _with_chunked_echo, main, registry


def gather(self: runtime._Producer, kind, arrived) -> None:
    gather_s = kind.gather_ms / 1000  # BUG: the reference takes min(gather_ms, lease_ttl / 2)
    size = kind.chunk_size or 1
    full = []
    with self.gather_lock:
        waiting = self.gathering.get(kind.name)
        deadline, contexts = waiting or (time.monotonic() + gather_s, [])
        opened = waiting is None
        for ctx in arrived:
            contexts.append(ctx)
            if len(contexts) >= size:
                full.append(contexts)
                deadline, contexts, opened = time.monotonic() + gather_s, [], True
        if contexts and self.worker.stopping.is_set():
            full.append(contexts)
            contexts = []
        if contexts:
            self.gathering[kind.name] = (deadline, contexts)
        else:
            self.gathering.pop(kind.name, None)
            opened = False
    for chunk in full:
        self.pool.submit(self.worker.execute_chunk, self, kind, chunk)
    if opened:
        self.poke()


class ExecutingOnlyRenewalWorker(Worker):
    def _running_contexts(self) -> dict[int, JobContext]:
        """Leases of executing jobs only: a gathered job is not renewed (the design the clamp protects)."""
        running = super()._running_contexts()
        for p in self.producers.values():
            with p.gather_lock:
                for _, contexts in list(p.gathering.values()):
                    for ctx in contexts:
                        running.pop(ctx.id, None)
        return running


if __name__ == "__main__":
    import os

    # patched here, not at import: importing a variant (the catalogue test does) must leave impl/ as it is
    runtime._Producer.gather = gather  # type: ignore[method-assign]

    ttl = float(os.environ.get("BELAY_LEASE_TTL", "10"))
    reg = _with_chunked_echo(registry, 50)
    reg.kinds["echo"] = replace(reg.kinds["echo"], gather_ms=int(3 * ttl * 1000))  # three lease TTLs
    main(worker_class=ExecutingOnlyRenewalWorker, reg=reg)
