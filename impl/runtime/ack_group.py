"""Group commit of single-job acks (issue 33): `AckGroup`.

Acks that finish while another ack of the node is committing are committed together in one transaction
(each row still fenced on its own attempt; a lone ack commits at once), which also claims the jobs that
take their slots.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from model import worker_ops as w

log = logging.getLogger("belay")


class _Waiter:
    __slots__ = ("error", "event", "op", "result", "tag", "then")

    def __init__(self, op: w.Ack, tag: Any, then: Callable[[_Waiter], None] | None = None) -> None:
        self.op, self.tag, self.then = op, tag, then
        # a caller that waits for its own ack (`ack`) waits on an Event; one that handed the rest of its
        # work to a callback (`ack_then`) has returned, and the leader runs `then` after the commit
        self.event = threading.Event() if then is None else None
        self.result: w.Acked | w.Stale | None = None
        self.error: BaseException | None = None

    def outcome(self) -> w.Acked | w.Stale:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class AckGroup:
    """Group commit of the acks of single-job executions (issue 33), leader/follower, no thread of its own.
    One per producer (queue): `many` may then claim the batch's slots in the same transaction (AckClaim).

    An ack that finds no commit in flight leads: when `pending()` (the executions that may still ack into
    this group) says it is the only one, it commits at once and alone (the one-statement path: idle latency
    is unchanged); otherwise it first waits up to `linger` seconds for those others to queue their acks.
    Acks that arrive while a commit is in flight queue up; when it ends, the same leader commits every
    queued ack (up to `max_batch`) as one `AckMany`, and so on until none is queued: one transaction per
    batch, each row fenced on its own attempt exactly as a single Ack, the §7 after-terminal steps once
    for all. A caller of `ack` returns only after its own ack committed; a caller of `ack_then` returns at
    once (unless it leads) and its `then` runs on the leader's thread after its ack committed — durable
    before its result is visible either way, and no thread is woken per ack (a wake costs a futex call
    and, on a virtual machine, often an inter-processor interrupt: py-spy found a third of the worker's
    GIL time in waking followers). A batch that fails with a permanent error is retried ack by ack, so
    each execution sees its own ack's outcome."""

    def __init__(
        self,
        one: Callable[[w.Ack], w.Acked | w.Stale],
        many: Callable[[w.AckMany, tuple[Any, ...]], w.AckedMany],
        max_batch: int = 64,
        *,
        pending: Callable[[], int] | None = None,
        linger: float = 0.0,
    ) -> None:
        self._one, self._many, self.max_batch = one, many, max_batch
        self._pending, self.linger = pending, linger
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # a lingering leader waits on it for more acks
        self._queue: list[_Waiter] = []
        self._busy = False
        self._want = 0  # a lingering leader's batch size: an ack wakes it only when the queue reaches it
        self.deferred_since: float | None = None  # when the oldest ack queued with no leader was queued
        self.commits = 0  # transactions committed (for benchmarks and tests)
        self.acks = 0

    def ack(self, op: w.Ack, tag: Any = None) -> w.Acked | w.Stale:
        """Commit `op` (with whatever acks queue up meanwhile) and return its outcome; `tag` travels to
        `many` with it."""
        me = _Waiter(op, tag)
        if self._join(me):
            self._lead()
        else:
            assert me.event is not None
            me.event.wait()
        return me.outcome()

    def ack_then(self, op: w.Ack, tag: Any, then: Callable[[_Waiter], None], *, defer: bool = False) -> None:
        """Queue `op` and return; `then(waiter)` runs after it committed (`waiter.outcome()` returns or
        raises its result) — on this thread if it leads the commit, else on the leader's.

        With `defer` (the caller has more of the group's jobs to run first: `_Executor.defer`) an ack that
        finds no commit in flight is queued without a leader: the next ack to come without `defer` leads
        it, or `lead_stale` once it has waited too long."""
        if self._join(_Waiter(op, tag, then), defer):
            self._lead()

    def _join(self, me: _Waiter, defer: bool = False) -> bool:
        """Queue an ack; True when the caller must lead (no commit in flight, and not deferred)."""
        with self._lock:
            self._queue.append(me)
            if self._busy:
                if self._want and len(self._queue) >= self._want:
                    self._arrived.notify()  # one wake per batch, not one per ack
                return False
            if defer:
                if self.deferred_since is None:
                    self.deferred_since = time.monotonic()
                return False
            self._busy = True
            self.deferred_since = None
        return True

    def lead_stale(self, older_than: float) -> bool:
        """Lead the queued acks on this thread if none leads them and the oldest has waited `older_than`
        seconds (a deferred ack whose execution thread went on to a long job); True while acks wait
        leaderless (the caller looks again later)."""
        with self._lock:
            since = self.deferred_since
            if self._busy or since is None or not self._queue:
                return False
            if time.monotonic() - since < older_than:
                return True
            self._busy = True
            self.deferred_since = None
        self._lead()
        return False

    def _lead(self) -> None:
        """Commit batches until no ack is queued."""
        try:
            self._lead_batches()
        except BaseException:
            # leaving abnormally (an interrupt): the next ack to arrive, or lead_stale, leads what is queued
            with self._lock:
                self._busy = False
                self.deferred_since = time.monotonic() if self._queue else None
            raise

    def _lead_batches(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._busy = False
                    return
                if self.linger > 0 and self._pending is not None and len(self._queue) < self.max_batch:
                    deadline = time.monotonic() + self.linger
                    while len(self._queue) < (want := min(self._pending(), self.max_batch)):
                        left = deadline - time.monotonic()
                        self._want = want
                        woken = left > 0 and self._arrived.wait(left)
                        self._want = 0
                        if not woken:
                            break
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
            try:
                self._commit(batch)
            finally:
                for waiter in batch:
                    if waiter.event is not None:
                        waiter.event.set()
                    else:
                        assert waiter.then is not None
                        try:
                            waiter.then(waiter)
                        except Exception:
                            log.exception("belay: the completion of job %s failed", waiter.op.job_id)

    def _commit(self, batch: list[_Waiter]) -> None:
        self.acks += len(batch)
        if len(batch) > 1:
            try:
                acks = w.AckMany(max(x.op.now for x in batch), tuple(x.op for x in batch))
                done = self._many(acks, tuple(x.tag for x in batch))
                self.commits += 1
                for waiter, result in zip(batch, done.results, strict=True):
                    waiter.result = result
                return
            except Exception:  # noqa: BLE001 - a permanent fault of the batch: each ack alone says its own
                log.warning("belay: a grouped ack of %d jobs failed; acking them one by one", len(batch))
        for waiter in batch:
            try:
                waiter.result = self._one(waiter.op)
                self.commits += 1
            except BaseException as exc:  # noqa: BLE001 - the execution's own ack raises it
                waiter.error = exc
