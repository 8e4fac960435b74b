"""Broken: an execution reads its clock once, when it starts, and sends that instant as the `now` of every
later write of the attempt — its steps, events, spawns and its ack (§2: every operation takes the
caller's `now`; a write's `now` is the instant it is made). Nothing else differs: the rows are those of an
honest worker whose writes were each delayed by the time the job had run so far.

Expected verdict: invalid, trace validation's `now` freshness (a write stamped seconds before its commit
on a node with no fault of its own in between)."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from impl.runtime import Worker
from soak.reference_worker import main


class StaleNowWorker(Worker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        fresh = self.clock
        frozen = threading.local()

        def clock() -> datetime:
            at = getattr(frozen, "at", None)
            return at if at is not None else fresh()

        self._frozen = frozen
        self._fresh = fresh
        self.clock = clock

    def execute(self, producer: Any, ctx: Any) -> None:
        at = self._fresh()  # BUG: read once at the start of the execution
        ctx.clock = lambda: at
        self._frozen.at = at  # the ack is built on this thread from self.clock()
        try:
            super().execute(producer, ctx)
        finally:
            self._frozen.at = None


if __name__ == "__main__":
    main(worker_class=StaleNowWorker)
