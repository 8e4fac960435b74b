"""Broken: the §7 park rule is skipped — a first attempt parks on its signal without looking for the signal
row (neither before the park nor under the scope lock), trusting that a signal cannot be there before the
job ever ran. A signal delivered before the park (the harness delivers some before the job runs, some
racing it) has already been delivered: nothing wakes the job again.

Expected verdict: invalid, I9 (a job awaiting a signal that was delivered)."""

from __future__ import annotations

from impl import worker as sdk
from impl.store import PgStore
from model import worker_ops as w
from soak.reference_worker import main

_await_signal = sdk.JobContext.await_signal


def await_signal(self, name, *, scope=None, timeout=None):
    if self.attempt > 1:
        return _await_signal(self, name, scope=scope, timeout=timeout)
    self._boundary()
    now = self.clock()
    # BUG: no read of the signal before parking on a first attempt
    result = self._releasing(w.ParkAwait(now, self.id, self.attempt, scope or f"job:{self.id}", name, None))
    self._park_result(result)


class NoParkRuleStore(PgStore):
    def _park(self, tx, job_id, attempt, scope, name, deadline):
        from impl.store.worker_store import PARK_BUDGET

        params = {"id": job_id, "attempt": attempt, "scope": scope, "name": name, "deadline": deadline}
        parked = tx.one("park_awaiting", {**params, "now": tx.now, **PARK_BUDGET})  # BUG: no scope lock, no check
        return None if parked is None else w.Parked(job_id, "awaiting")


if __name__ == "__main__":
    sdk.JobContext.await_signal = await_signal  # type: ignore[method-assign]
    main(store_class=NoParkRuleStore)
