"""Broken: budgets are ignored — no §8.2 pre-flight, a recorded spend over the cap does not fail the job,
and the runtime's check before a budgeted job succeeds is gone too.

Expected verdict: invalid, I4 (steps journaled past the crossing step; crossed jobs succeed)."""

from __future__ import annotations

from impl import worker as sdk
from model import worker_ops as w
from soak.reference_worker import main


def boundary(self):
    if self.lost.is_set():
        raise sdk.LeaseLost(f"job {self.id}: lease lost")
    verdict = self.store.apply(w.Preflight(self.id))
    if isinstance(verdict, w.JobGone):
        raise sdk.LeaseLost(f"job {self.id} no longer exists")
    if verdict.cancel_requested:
        raise sdk.CancelRequested(f"job {self.id}: cancel requested")
    return verdict  # BUG: OverBudget is not refused


def step(self, name, fn, *, cost=None):
    hit = self.store.apply(w.ReadStep(self.id, name))
    if isinstance(hit, w.StepHit):
        return sdk.decode(hit.value)
    self._boundary()
    value = fn()
    usd, tokens = cost(value) if callable(cost) else (cost or (0, 0))
    recorded = self.store.apply(w.RecordStep(self.clock(), self.id, name, value, usd, tokens))
    self.steps_run.append(name)
    return sdk.decode(recorded.value)  # BUG: recorded.over_budget is ignored


if __name__ == "__main__":
    sdk.JobContext._boundary = boundary
    sdk.JobContext.step = step
    sdk.JobContext.check_budget = lambda self: None  # BUG: no durable-spend check before success
    main()
