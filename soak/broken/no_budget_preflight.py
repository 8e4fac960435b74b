"""Broken: no §8.2 pre-flight — a missed step runs without first checking the durable spend. The step
that crosses the budget still fails the job; but when the worker dies right after journaling the
crossing step (`costed` with crash_at_crossing), the next attempt replays the journal and runs one
more paid step.

Expected verdict: invalid, I4 (a step journaled after the crossing step)."""

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
    return verdict  # BUG: OverBudget is not refused before running a missed step


if __name__ == "__main__":
    sdk.JobContext._boundary = boundary
    main()
