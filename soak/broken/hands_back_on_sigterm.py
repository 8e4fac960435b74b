"""Broken: on SIGTERM the worker stops claiming, then hands every job it is running back to the queue — a
fenced snooze ack to ready, now — and exits 0 at once, instead of giving the running jobs the grace to
finish. Nothing is left to lease expiry and the exit is prompt and clean, so the drain's exit code, its
duration and the lease expiries all look right; the handed-back jobs run again on another node.

Operations guide "Shutdown": "Running jobs get the shutdown grace to finish; whatever survives is left to
lease expiry"; PROTOCOL.md §1: "on SIGTERM: stop claiming, let running jobs finish within a grace period".

Expected verdict: invalid, P4 (a job running at the SIGTERM handed back: its attempt ended without an
error entry and a later attempt ran it)."""

from __future__ import annotations

import logging
import os

from impl.runtime import Termination
from model import worker_ops as w
from soak.reference_worker import build


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    worker = build(dict(os.environ))
    termination = Termination()
    worker.start()
    termination.wait()
    worker.stopping.set()  # stop claiming, as the reference does
    for producer in worker.producers.values():
        producer.poke()
        producer.thread.join(timeout=5)
    for ctx in list(worker._running_contexts().values()):
        now = ctx.clock()
        try:
            worker.store.apply(w.Ack(now, ctx.id, ctx.attempt, w.Snooze(now)))  # BUG: handed back, not finished
        except Exception as exc:  # noqa: BLE001 - a failed hand-back leaves the job to lease expiry
            logging.warning("hand-back of job %s failed: %s", ctx.id, exc)
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    main()
