"""Broken: the step whose returned spend crosses the budget is acked as a retry (error `budget_exceeded`
with a retry time) instead of failing the job. The next attempt's §8.2 pre-flight then finds the durable
spend over the cap and fails the job with `budget_exceeded` — so the final row, and every step journaled,
look exactly like a correct worker's (I4 and P9 pass); only the crossing attempt's own ack is wrong.

Contract §8.2: "If a returned spent exceeds its budget column, the SDK MUST fail the job with error
budget_exceeded" (no retry).

Expected verdict: invalid, P19 (the crossing attempt acked a retry)."""

from __future__ import annotations

from impl import worker as sdk
from impl.runtime import node as runtime
from model import worker_ops as w
from soak.reference_worker import main

_outcome_for = sdk.outcome_for


def outcome_for(kind, ctx, exc, value, now):
    if isinstance(exc, sdk.BudgetExceeded) and "crossed the budget" in str(exc):  # raised by the crossing step
        return w.Fail("budget_exceeded", str(exc), kind.backoff.retry_at(now, ctx.attempt))  # BUG: a retry
    return _outcome_for(kind, ctx, exc, value, now)  # the pre-flight's BudgetExceeded still fails the job


if __name__ == "__main__":
    runtime.outcome_for = outcome_for
    main()
