"""Broken: journaled steps are executed again on every attempt, and the job uses its own fresh value
instead of the journaled one (the §8.2 read-before-run is skipped).

Expected verdict: invalid, I3 (a result disagrees with the journal)."""

from __future__ import annotations

from impl import worker as sdk
from model import worker_ops as w
from soak.reference_worker import main


def step(self, name, fn, *, cost=None):
    self._boundary()
    value = fn()  # BUG: no ReadStep first, and the fresh value wins over the journal
    usd, tokens = cost(value) if callable(cost) else (cost or (0, 0))
    recorded = self.store.apply(w.RecordStep(self.clock(), self.id, name, value, usd, tokens))
    self.steps_run.append(name)
    if getattr(recorded, "over_budget", False):
        raise sdk.BudgetExceeded(f"step {name!r} crossed the budget")
    return value


if __name__ == "__main__":
    sdk.JobContext.step = step
    main()
