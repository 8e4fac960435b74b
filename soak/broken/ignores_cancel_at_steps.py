"""Broken: steps are not cancel boundaries — a cancel requested while a multi-step job runs is not
checked before the next step (parks still are), so the job runs every remaining step and succeeds
(§8.6: workers MUST check the flag at step boundaries). The soak's cancelled `steps` jobs may end
`cancelled` or `succeeded` (a request during the last step is moot), so only the timing shows it.

Expected verdict: invalid, P13 (two or more steps journaled after the cancel request)."""

from __future__ import annotations

from impl import worker as sdk
from model import worker_ops as w
from soak.reference_worker import main

_step = sdk.JobContext.step


def _boundary_without_cancel(self):
    if self.lost.is_set():
        raise sdk.LeaseLost(f"job {self.id}: lease lost")
    verdict = self.store.apply(w.Preflight(self.id))
    if isinstance(verdict, w.JobGone):
        raise sdk.LeaseLost(f"job {self.id} no longer exists")
    if isinstance(verdict, w.OverBudget):
        raise sdk.BudgetExceeded("over budget")
    return verdict  # BUG: verdict.cancel_requested is not honoured


def step(self, name, fn, *, cost=None):
    original = self._boundary
    self._boundary = lambda: _boundary_without_cancel(self)
    try:
        return _step(self, name, fn, cost=cost)
    finally:
        self._boundary = original


if __name__ == "__main__":
    sdk.JobContext.step = step  # type: ignore[method-assign]
    main()
