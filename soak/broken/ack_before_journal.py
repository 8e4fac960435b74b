"""Broken: step values are handed to the job at once but journaled only after the job's ack commits
(a write-behind journal). A crash in between loses steps the result already used; even without one,
the journal lags the ack.

Expected verdict: invalid, I3 (a result names steps the journal did not hold when the job finished)."""

from __future__ import annotations

from impl import worker as sdk
from impl.runtime import Worker
from model import worker_ops as w
from soak.reference_worker import main


def step(self, name, fn, *, cost=None):
    hit = self.store.apply(w.ReadStep(self.id, name))
    if isinstance(hit, w.StepHit):
        return sdk.decode(hit.value)
    self._boundary()
    value = fn()
    usd, tokens = cost(value) if callable(cost) else (cost or (0, 0))
    self.__dict__.setdefault("pending_steps", []).append((name, value, usd, tokens))  # BUG: journaled later
    self.steps_run.append(name)
    return value


class WriteBehindWorker(Worker):
    def execute(self, producer, ctx):
        super().execute(producer, ctx)  # runs the job and acks it
        for name, value, usd, tokens in ctx.__dict__.get("pending_steps", []):
            try:
                self.store.apply(w.RecordStep(self.clock(), ctx.id, name, value, usd, tokens))
            except Exception:  # noqa: BLE001
                pass


if __name__ == "__main__":
    sdk.JobContext.step = step
    main(worker_class=WriteBehindWorker)
