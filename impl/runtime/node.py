"""The worker runtime (spec/belay-operations.txt): producers, executors, leases, sweeper, wake-ups.

One `Worker` is one node:

- a producer per queue claims while it has free slots: adaptive polling (busy 25 ms → idle 500 ms),
  woken early by local pokes (an insert through this process, a release, a completion) and by the
  optional pg_notify accelerator; a storm of pokes coalesces into one claim round; a chunk execution
  that has acked claims the next jobs for its own slots (`_Producer.refill`) on plain queues;
- executors run claimed jobs on threads and ack them (fenced; a stale ack is logged and dropped); acks
  that finish while another ack of the node is committing are committed together in one transaction
  (`AckGroup`: group commit, each row still fenced on its own attempt; a lone ack commits at once), which
  also claims the jobs that take their slots; those run on the committing thread one after another
  (`_Executor.defer`: no thread woken per job), and a watchdog per queue hands a job or an ack that has
  waited `defer_handoff` behind a long job to another thread (`_Producer.look`);
- a renewer extends every local lease each ttl/3 in one statement and flags executions whose lease
  was lost, which stop at their next step boundary;
- a sweeper reclaims expired leases, runs the `$children` reconciler, fires crons and prunes;
- adaptive concurrency doubles a queue's limit toward max on saturated rounds and decays it to min;
- SIGTERM (or `stop()`): stop claiming, give running jobs `shutdown_grace`, then return;
- transient database faults (restart, lost connection, deadlock) degrade and retry with backoff.

Configuration is one frozen object per component; the environment is read only by entry points.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from impl import telemetry
from impl.runtime.faults import Connectivity, RetryPolicy, with_retries
from impl.store import PgStore
from impl.store.pgrows import listen_for_pokes
from impl.worker import JobContext, Kind, Registry, UnknownKind, outcome_for
from model import ops
from model import worker_ops as w
from model.cron import CronDef
from model.queues import QueueOpts, merge_opts
from model.rows import Job

log = logging.getLogger("belay")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class QueueConfig:
    """Static queue options; a belay_queues row with the same name merges over them at runtime."""

    name: str
    opts: QueueOpts = QueueOpts()


@dataclass(frozen=True)
class WorkerConfig:
    """A node's configuration (defaults from spec/belay-operations.txt)."""

    node: str = field(default_factory=lambda: f"node-{uuid.uuid4().hex[:8]}")
    queues: tuple[QueueConfig, ...] = ()
    lease_ttl: float = 30.0  # seconds
    shutdown_grace: float = 15.0  # seconds
    busy_poll: float = 0.025  # seconds: the hot cadence while claims return work
    poll_interval: float = 0.5  # seconds: the idle ceiling
    sweep_interval: float = 1.0  # seconds between sweeper passes
    notify: bool = False  # the pg_notify accelerator (one LISTEN connection per node)
    listen_url: str | None = None  # a direct connection for LISTEN (past any transaction pooler)
    crons: tuple[CronDef, ...] = ()
    # True: run exactly `queues` (not also the registry's other queues) and fire only the crons of
    # those queues — `belay worker --queues A,B`. False: `queues` plus every queue of the registry's kinds.
    exclusive_queues: bool = False
    retention: tuple[tuple[str, int | None], ...] = (
        ("succeeded", 86400),
        ("failed", 7 * 86400),
        ("cancelled", 7 * 86400),
    )
    signal_ttl: int | None = 7 * 86400
    queue_refresh: float = 5.0  # seconds between reads of belay_queues rows
    reclaim_backoff: w.Backoff = w.Backoff()  # retry delay of a job whose lease expired (by attempt)
    retry: RetryPolicy = RetryPolicy()
    # Client-side deadline of one store call, after which its connection is cut and the call retried
    # (impl/store/deadline.py, docs/connections.md): None = max(lease_ttl / 4, 2 s), 0 = none.
    call_timeout: float | None = None
    # Group commit of single-job acks (issue 33): acks that finish while one commits go in the next
    # AckMany (each row fenced on its own attempt; a lone ack takes the one-statement path). 1 = off.
    ack_group_max: int = 64
    # A group's leader waits up to this long (seconds) for the acks of the node's other executions of the
    # queue that are still running, and never when it is the only one (idle latency unchanged): short
    # jobs that finish together then commit, and claim their slots' successors, in one transaction.
    ack_linger: float = 0.001
    # Jobs claimed on an execution's thread (an ack group's leader) run on that thread one after another,
    # waking no other (issue 33); a job or ack that has waited this long (seconds) for it is handed to
    # another thread. 0 = every claimed job wakes a thread of its own.
    defer_handoff: float = 0.002

    def __post_init__(self) -> None:
        ops.require_name(self.node, "node")
        if self.ack_group_max < 1:
            raise ValueError("ack_group_max must be at least 1")
        if not 0 <= self.ack_linger <= 0.1:
            raise ValueError("ack_linger must be between 0 and 0.1 s")
        if not 0 <= self.defer_handoff <= 1:
            raise ValueError("defer_handoff must be between 0 and 1 s")
        if self.lease_ttl <= 0 or self.shutdown_grace < 0 or self.busy_poll <= 0 or self.poll_interval <= 0:
            raise ValueError("lease_ttl, busy_poll and poll_interval must be positive; shutdown_grace >= 0")
        names = [q.name for q in self.queues]
        if len(set(names)) != len(names):
            raise ValueError(f"a queue is configured twice: {names}")


# Telemetry: one small interface (impl/telemetry/__init__.py); `default_logger` is re-exported for callers.
Telemetry = telemetry.Handler
default_logger = telemetry.default_logger


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


class _Executor:
    """The executions' threads of one queue: at most `max_workers` daemon threads, started as work needs
    them, fed by one queue.SimpleQueue. What ThreadPoolExecutor does for this use, without what the
    runtime never reads: a Future per task (a Condition and its lock, taken twice per task) and a
    pure-Python Semaphore to find an idle thread — a tenth of an unbatched drain's GIL time (py-spy,
    issue 33). A thread leaves a token in `_idle` (a C queue too) after each task, as ThreadPoolExecutor
    releases its idle semaphore; `submit` takes one, or starts a thread while below the maximum (the same
    approximation). A task's exception is logged (a Future kept it unread); the runtime's tasks handle
    their own."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max, self._prefix = max_workers, thread_name_prefix
        self._work: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._idle: queue.SimpleQueue[None] = queue.SimpleQueue()
        # Deferred tasks (`defer`): (queued at, fn, args), run by this pool's threads before they take from
        # `_work`; nothing is woken for them (`hand_off_stale` moves those that wait too long to `_work`).
        self._deferred: collections.deque[tuple[float, Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._mine = threading.local()  # set on this pool's threads
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()  # starting threads and shutting down
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._shutdown:
            raise RuntimeError("cannot schedule new work after shutdown")
        self._work.put((fn, args))
        try:
            self._idle.get_nowait()  # an idle thread will take it
        except queue.Empty:
            with self._lock:
                if len(self._threads) < self._max and not self._shutdown:
                    thread = threading.Thread(
                        target=self._run, name=f"{self._prefix}_{len(self._threads)}", daemon=True
                    )
                    self._threads.append(thread)
                    thread.start()

    def mine(self) -> bool:
        """The calling thread is one of this pool's (it takes deferred tasks when its task returns)."""
        return getattr(self._mine, "pool", None) is self

    def defer(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on this pool, waking no thread: a thread of the pool takes deferred tasks, in
        order, each time its task returns, before it would wait for `submit`ted ones. For the caller when
        it is a thread of this pool (`mine`) and has work to hand out (issue 33: the jobs an ack group's
        leader claimed): when they are short, the thread runs them one after another instead of waking a
        thread per job — a wake is a futex call and a thread switch, and in an unbatched drain ten per
        cycle were a sixth of its time. Whoever defers must see that `hand_off_stale` runs every few
        milliseconds while tasks wait, so a long task never holds the others up."""
        if self._shutdown:
            raise RuntimeError("cannot schedule new work after shutdown")
        self._deferred.append((time.monotonic(), fn, args))

    def deferred(self) -> int:
        return len(self._deferred)

    def hand_off_stale(self, older_than: float) -> bool:
        """Submit (wake a thread for) each deferred task that has waited `older_than` seconds: the thread
        that deferred it is still in a long task. True while deferred tasks wait (the caller looks again)."""
        now = time.monotonic()
        while True:
            try:
                queued = self._deferred[0][0]
            except IndexError:
                return False
            if now - queued < older_than:
                return True
            try:
                task = self._deferred.popleft()
            except IndexError:  # a thread of the pool took it meanwhile
                return False
            if self._shutdown:
                return False
            self.submit(task[1], *task[2])

    def _run(self) -> None:
        self._mine.pool = self
        first = True  # a thread starts for the task that started it: that task first, and no idle token
        while True:
            task, deferred = None, None
            if not first:
                with contextlib.suppress(IndexError):
                    deferred = self._deferred.popleft()
            if deferred is not None:
                _, fn, args = deferred
            else:
                # Idle only now, about to wait (ThreadPoolExecutor releases its idle semaphore after each
                # task): a thread that went on to deferred work is busy, and a token given before it would
                # let a handed-off task wait behind that work instead of starting a thread of its own.
                if not first:
                    self._idle.put(None)
                first = False
                task = self._work.get()
                if task is None:  # shut down
                    return
                fn, args = task
            try:
                fn(*args)
            except BaseException:  # a task's own fault (as a Future would keep it): logged, the thread serves on
                log.exception("belay: an execution task failed")
            del task, deferred, fn, args

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more tasks; with `cancel_futures` the queued ones never run; with `wait`, join the threads
        (each finishes the task it runs)."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            self._deferred.clear()
            while True:
                try:
                    self._work.get_nowait()
                except queue.Empty:
                    break
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()


class _Watchdog:
    """A thread that calls `look()` every `tick` seconds while it returns True (something waits that may
    need a hand: `_Producer.look`) and for `QUIET_TICKS` ticks after, then sleeps without a timer until
    `arm()` is called again. `arm` costs an attribute read while it ticks; waking it (an Event.set, a
    futex call) was a seventh of a busy unbatched worker's GIL time when it slept between every group
    commit's deferred jobs, so a busy queue keeps it ticking."""

    QUIET_TICKS = 50

    def __init__(self, name: str, tick: float, look: Callable[[], bool]) -> None:
        self.name, self.tick, self._look = name, tick, look
        self._armed = False
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def arm(self) -> None:
        if self._armed:
            return
        self._armed = True
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._stopped:
                    self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                    self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def _looked(self) -> bool:
        try:
            return self._look()
        except Exception:  # logged; it looks again at the next tick
            log.exception("belay: the hand-off of waiting work failed")
            return True

    def _loop(self) -> None:
        while not self._stopped:
            self._wake.wait()
            self._wake.clear()
            quiet = 0
            while not self._stopped:
                time.sleep(self.tick)
                if self._looked():
                    quiet = 0
                    continue
                quiet += 1
                if quiet < self.QUIET_TICKS:
                    continue
                self._armed = False
                if not self._looked():  # an arm() between the look and the disarming found it still armed
                    break
                self._armed = True
                quiet = 0


class _Producer:
    """Claims for one queue and hands jobs to the executor pool."""

    def __init__(self, worker: Worker, config: QueueConfig) -> None:
        self.worker = worker
        self.name = config.name
        self.static = config.opts
        self.opts = config.opts
        self.limit = config.opts.limit_min
        self.running: dict[int, JobContext] = {}
        self.lock = threading.Lock()
        self.poked = threading.Event()
        self.gathering: dict[str, tuple[float, list[JobContext]]] = {}  # chunk kind → (deadline, contexts)
        self.gather_lock = threading.Lock()  # chunk executions refilling their slots gather too
        self.adapt_lock = threading.Lock()
        self.pool = _Executor(config.opts.limit_max, f"belay-{self.name}")
        self.handoff = worker.config.defer_handoff
        self.watchdog = _Watchdog(f"belay-handoff-{self.name}", self.handoff / 2 or 1.0, self.look)
        self.acks = AckGroup(
            lambda op: worker.call(lambda: worker.store.apply(op), "ack"),
            self.ack_group,
            max_batch=worker.config.ack_group_max,
            pending=self.executing,
            linger=worker.config.ack_linger,
        )
        self.thread = threading.Thread(target=self.loop, name=f"belay-producer-{self.name}", daemon=True)

    def poke(self) -> None:
        self.poked.set()
        want = self.worker.pokes_wanted
        if not want.is_set():  # a slot may be free: the listener listens again (Worker._wants_pokes)
            want.set()

    def saturated(self) -> bool:
        """No poke can make this producer claim: every slot is taken, or the queue is paused."""
        return self.opts.paused or len(self.running) >= self.limit

    def look(self) -> bool:
        """The watchdog's look: deferred jobs and acks that waited `defer_handoff` for the thread that
        deferred them (it is in a long job) are handed to another thread (jobs) or led here (acks). True
        while some wait."""
        jobs = self.pool.hand_off_stale(self.handoff)  # True while deferred jobs wait
        acks = self.acks.lead_stale(self.handoff)
        return jobs or acks

    def defers(self) -> bool:
        """An execution's ack on this thread waits for the jobs this thread will run next (`adopt`)."""
        return self.pool.mine() and self.pool.deferred() > 0

    def executing(self) -> int:
        """The single-job executions registered here (running, or queued in the ack group)."""
        return len(self.running)  # a dict's len: no lock needed for an estimate

    def free(self) -> int:
        with self.lock:
            return max(self.limit - len(self.running), 0)

    def loop(self) -> None:
        interval = self.worker.config.busy_poll
        while not self.worker.stopping.is_set():
            self.poked.clear()
            claimed, demand = 0, 0
            if not self.opts.paused:
                demand = self.free()
                if demand:
                    try:
                        claimed = self.claim(demand)
                    except Exception as exc:  # noqa: BLE001 - transient faults already retried
                        log.error("belay producer %s: claim failed: %s", self.name, exc)
                        self.worker.stopping.wait(1.0)
            self.adapt(claimed, demand)
            gather_wait = self.dispatch_gathered()
            if claimed:
                interval = self.worker.config.busy_poll
                if claimed == demand:
                    continue  # saturated: claim again as soon as a slot frees (the completion pokes)
            else:
                interval = min(interval * 2, self.worker.config.poll_interval)
            self.poked.wait(min(interval, gather_wait))

    def adapt(self, claimed: int, demand: int) -> None:
        """Adaptive concurrency: saturated rounds double the limit toward max; idle rounds decay to min.
        A round is the producer's claim or a chunk execution's refill (`refill`)."""
        with self.adapt_lock:
            lo, hi = self.opts.limit_min, self.opts.limit_max
            new = self.limit
            if demand and claimed == demand and self.limit < hi:
                new = min(self.limit * 2, hi)
            elif claimed == 0 and not self.running and self.limit > lo:
                new = max(self.limit // 2, lo)
            if new == self.limit:
                return
            grew, self.limit = new > self.limit, new
        if grew:
            self.poke()  # a refill that grew the limit: the producer claims the new slots now
        self.worker.emit("queue.scale", {"queue": self.name, "limit": new})

    def claim(self, demand: int) -> int:
        with self.worker.claiming():  # registered before a claim-recovery census may count them as orphans
            jobs = self.claim_jobs(demand)
            self.adopt((), jobs)
        return len(jobs)

    def claim_jobs(self, demand: int) -> tuple[Job, ...]:
        cfg = self.worker.config
        op = w.Claim(self.worker.clock(), self.name, cfg.node, demand, timedelta(seconds=cfg.lease_ttl), self.opts)
        started = time.monotonic()
        jobs = self.worker.claim_call(lambda: self.worker.store.apply(op), "claim", lambda: w.Claimed(())).jobs
        if "claim" in telemetry.taken(self.worker.telemetry):  # issue 15: no metadata nobody takes
            self.worker.emit(
                "claim",
                {
                    "queue": self.name,
                    "node": cfg.node,
                    "demand": demand,
                    "claimed": len(jobs),
                    "duration_ms": (time.monotonic() - started) * 1000,
                },
            )
        return jobs

    def refill_slots(self, finished: Sequence[JobContext]) -> int:
        """How many jobs the finished executions may claim for their own slots: at most as many as they
        free, within the limit; none while stopping, paused, or on an admission-locked queue."""
        opts = self.opts
        if self.worker.stopping.is_set() or opts.paused or opts.needs_admission_lock:
            return 0
        with self.lock:
            others = len(self.running) - sum(1 for c in finished if self.running.get(c.id) is c)
            return max(0, min(len(finished), self.limit - others))

    def refill(self, finished: Sequence[JobContext]) -> None:
        """A chunk execution that has acked claims the next jobs for its own slots (at most as many as it
        frees, within the limit) instead of leaving that to the producer: the node then has a claim per
        chunk in flight rather than one at a time, and a batched drain is not bound by the producer's
        serial claims. None while stopping, paused, or on a queue whose claims take the admission lock
        (global limit, rate, partitions): the producer claims for those. The finished executions keep
        their slots until the claimed jobs take them (`adopt`), so nothing claims past the limit."""
        take = self.refill_slots(finished)
        jobs: tuple[Job, ...] = ()
        with self.worker.claiming():
            try:
                if take:
                    jobs = self.claim_jobs(take)
                    self.adapt(len(jobs), take)
            except Exception as exc:  # noqa: BLE001 - transient faults already retried
                log.error("belay producer %s: refill claim failed: %s", self.name, exc)
            finally:
                self.adopt(finished, jobs)

    def _ack_claim(self, acks: w.AckMany, take: int, what: str) -> w.AckedClaimed:
        """The acks and the claim of `take` jobs for their slots as one AckClaim (one commit); a retry once
        the node is stopping acks alone (Worker.claim_call). The caller holds `worker.claiming()`."""
        worker, cfg = self.worker, self.worker.config
        claim = w.Claim(worker.clock(), self.name, cfg.node, take, timedelta(seconds=cfg.lease_ttl), self.opts)
        return worker.claim_call(
            lambda: worker.store.apply(w.AckClaim(acks, claim)),
            what,
            lambda: w.AckedClaimed(worker.store.apply(acks), w.Claimed(())),
        )

    def ack_refill(self, acks: w.AckMany, contexts: Sequence[JobContext]) -> w.AckedMany | None:
        """A chunk's acks and the claim of the jobs that take its slots (`refill`) as one AckClaim: one
        commit instead of two. None, with nothing written by this call, when there is no slot to refill
        (the caller acks alone and `refill` frees the slots) or when the call failed (the caller acks
        again: a grouped ack that did commit answers Stale, fenced by its attempt, as a retry would)."""
        take = self.refill_slots(contexts)
        if not take:
            return None
        with self.worker.claiming():
            try:
                done = self._ack_claim(acks, take, "ack chunk and claim")
            except Exception as exc:  # noqa: BLE001 - transient faults already retried
                log.error("belay producer %s: chunk ack and claim failed: %s", self.name, exc)
                return None
            self.adopt(contexts, done.claimed.jobs)
        self.adapt(len(done.claimed.jobs), take)
        return done.acked

    def ack_group(self, acks: w.AckMany, contexts: tuple[JobContext, ...]) -> w.AckedMany:
        """Commit a group of acks; on a plain queue, claim the slots they free in the same transaction
        (AckClaim: one commit for the acks and the jobs that take their slots — at most as many as the
        group frees, within the limit; none while stopping or paused) and run what it claimed."""
        worker = self.worker
        take = self.refill_slots(contexts)
        if not take:
            return worker.call(lambda: worker.store.apply(acks), "ack group")
        with worker.claiming():
            done = self._ack_claim(acks, take, "ack group and claim")
            self.adopt(contexts, done.claimed.jobs)
        self.adapt(len(done.claimed.jobs), take)
        return done.acked

    def adopt(self, finished: Sequence[JobContext], jobs: Sequence[Job]) -> None:
        """Register newly claimed jobs in place of finished executions (under one lock, so the slot count
        never drops in between), then run them: chunk kinds gather, the rest go to the pool. Slots the
        claim did not fill poke the producer."""
        store, clock, call = self.worker.store, self.worker.clock, self.worker.call
        contexts = [JobContext(job, store, clock, call=call) for job in jobs]
        with self.lock:
            self._forget(finished)
            for ctx in contexts:
                zombie = self.running.get(ctx.id)
                if zombie is not None:  # an earlier attempt still runs here: its lease is gone (§6), and
                    zombie.lost.set()  # the renewer no longer lists it — stop it at its next step boundary
                self.running[ctx.id] = ctx
        kinds = self.worker.registry.kinds
        chunked: dict[str, list[JobContext]] = {}
        # On a thread of the pool (an ack group's leader, a chunk's refill) the jobs are deferred: this
        # thread runs them when its task returns, and the watchdog hands any that wait `defer_handoff` to
        # other threads (_Executor.defer).
        defer = self.handoff > 0 and self.pool.mine()
        deferred = False
        for ctx in contexts:
            kind = kinds.get(ctx.job.worker)
            if kind is not None and kind.chunk_size is not None:
                chunked.setdefault(kind.name, []).append(ctx)
            elif defer:
                self.pool.defer(self.worker.execute, self, ctx)
                deferred = True
            else:
                self.pool.submit(self.worker.execute, self, ctx)
        if deferred:
            self.watchdog.arm()
        for name, group in chunked.items():
            self.gather(kinds[name], group)
        if finished and len(contexts) < len(finished):
            self.poke()  # free slots: the producer claims (or, finding nothing, backs off)

    def gather(self, kind: Kind, arrived: Sequence[JobContext]) -> None:
        """Chunk workers: collect claimed jobs of a kind; full chunks dispatch at once, partial ones
        when gather_ms (clamped to half the lease ttl) has passed since the first arrived."""
        gather_s = min(kind.gather_ms / 1000, self.worker.config.lease_ttl / 2)
        size = kind.chunk_size or 1
        full = []
        with self.gather_lock:
            waiting = self.gathering.get(kind.name)
            deadline, contexts = waiting or (time.monotonic() + gather_s, [])
            opened = waiting is None  # a new window: its deadline must reach the producer's wait
            for ctx in arrived:
                contexts.append(ctx)
                if len(contexts) >= size:
                    full.append(contexts)
                    deadline, contexts, opened = time.monotonic() + gather_s, [], True
            if contexts and self.worker.stopping.is_set():  # no producer round will close the window
                full.append(contexts)
                contexts = []
            if contexts:
                self.gathering[kind.name] = (deadline, contexts)
            else:
                self.gathering.pop(kind.name, None)
                opened = False
        for chunk in full:
            self.pool.submit(self.worker.execute_chunk, self, kind, chunk)
        if opened and threading.current_thread() is not self.thread:
            self.poke()  # a new gather window opened by a refill: the producer dispatches it in time

    def dispatch_gathered(self) -> float:
        """Dispatch partial chunks whose gather window closed; seconds until the next one closes."""
        now = time.monotonic()
        wait = float("inf")
        due = []
        with self.gather_lock:
            for name, (deadline, contexts) in list(self.gathering.items()):
                if deadline <= now or self.worker.stopping.is_set():
                    del self.gathering[name]
                    due.append((self.worker.registry.kinds[name], contexts))
                else:
                    wait = min(wait, deadline - now)
        for kind, contexts in due:
            self.pool.submit(self.worker.execute_chunk, self, kind, contexts)
        return wait

    def done(self, ctx: JobContext) -> None:
        self.done_many((ctx,))

    def done_many(self, contexts: Sequence[JobContext]) -> None:
        with self.lock:
            freed = self._forget(contexts)
        if freed:  # a refill that took these slots (AckClaim) already poked for any it left free
            self.poke()

    def _forget(self, contexts: Sequence[JobContext]) -> int:  # with self.lock held
        """Forget finished executions — each only if it is still the one registered: a zombie attempt
        of a job ending here must not orphan the live attempt the same node claimed since. Returns how
        many it forgot (the slots freed here)."""
        freed = 0
        for ctx in contexts:
            if self.running.get(ctx.id) is ctx:
                del self.running[ctx.id]
                freed += 1
        return freed


class Worker:
    """One node of the Belay runtime."""

    def __init__(
        self,
        conninfo: str,
        registry: Registry,
        config: WorkerConfig,
        *,
        schema: str = "public",
        clock: Callable[[], datetime] = utc_now,
        telemetry: tuple[Telemetry, ...] = (telemetry.dispatch,),
    ) -> None:
        self.conninfo = conninfo
        self.registry = registry
        self.config = config
        self.clock = clock
        self.telemetry = telemetry
        queues = {q.name: q for q in config.queues}
        for name in sorted(registry.queues() - set(queues)) if not config.exclusive_queues else ():
            queues[name] = QueueConfig(name)
        # Static crons: the config's and those declared beside the kinds (Registry.cron); by name, the config's win.
        self.crons = tuple({c.name: c for c in (*getattr(registry, "static_crons", tuple)(), *config.crons)}.values())
        self.cron_queues = frozenset(queues) if config.exclusive_queues else None
        # Without the accelerator the node sends no pg_notify at all (pokes nor results): droppable by config.
        pool_size = min(sum(q.opts.limit_max for q in queues.values()) + 4, 32)
        call_timeout = max(config.lease_ttl / 4, 2.0) if config.call_timeout is None else config.call_timeout
        self.store = PgStore(
            conninfo, schema=schema, pool_size=pool_size, notify=config.notify, call_timeout=call_timeout or None
        )
        self.producers = {name: _Producer(self, q) for name, q in queues.items()}
        self.stopping = threading.Event()  # no new claims
        self.stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self.stale_acks = 0
        # Claim recovery (issue 27): a claim whose commit the node could not confirm (the connection broke
        # during it and the call was retried, or gave up) may have leased jobs to this node that nobody here
        # runs or renews. The renewal loop then adopts them (recover_claims) — found by a two-hour soak:
        # 7 leases of a live node expired after its AckClaim's commit outlived the call's deadline.
        self._claim_lock = threading.Lock()
        self._recover_lock = threading.Lock()  # one recovery at a time (the renewal thread, a draining stop)
        self._claims_in_flight = 0
        self._claim_starts: list[datetime] = []  # the clock when each claim-bearing call in flight began
        self._claim_gen = 0  # claim-bearing calls ended (a census is valid only if none started or ended)
        self._recover_due = False
        self._renew_wake = threading.Event()
        self.recovered = 0  # jobs adopted by claim recovery
        self.completed = 0
        self.connectivity = Connectivity(log)  # database lost / back, logged once per change
        self.pokes_wanted = threading.Event()  # set by a producer's poke(): the listener re-checks _wants_pokes

    # --- plumbing ------------------------------------------------------------------------------------

    def emit(self, event: str, meta: dict[str, Any]) -> None:
        for sink in self.telemetry:
            if not telemetry.takes(sink, event):  # issue 15: a sink's `events` attribute, when it has one
                continue
            try:
                sink(event, meta)
            except Exception:  # telemetry never breaks the worker
                log.exception("belay telemetry sink failed")

    def call(self, fn: Callable[[], Any], what: str) -> Any:
        """A store call that degrades and retries on transient faults until the node stops."""
        return with_retries(fn, self.config.retry, what=what, stop=self.stopped, connectivity=self.connectivity)

    def claim_call(self, fn: Callable[[], Any], what: str, unclaimed: Callable[[], Any]) -> Any:
        """`call` for a store call that claims (a claim, an ack group with its claim). When a try failed —
        the call was retried or gave up — that try's commit may still have happened without the node
        learning what it claimed: claim recovery is then due (recover_claims, on the renewal thread).

        A retry once the node is stopping runs `unclaimed` instead (the same call without its claim): on
        SIGTERM a producer stops claiming, and a retry is a new claim. In a default soak a claim built
        0.2 s before the SIGTERM was cut by its 2.5 s deadline and retried; the retry committed 3.2 s after
        the signal (P11). What the cut try may have claimed, claim recovery still finds."""
        tries = 0

        def once() -> Any:
            nonlocal tries
            tries += 1
            if tries > 1 and self.stopping.is_set():
                return unclaimed()
            return fn()

        ok = False
        try:
            result = self.call(once, what)
            ok = True
            return result
        finally:
            if tries > 1 or not ok:
                self._recover_due = True
                self._renew_wake.set()

    @contextlib.contextmanager
    def claiming(self) -> Iterator[None]:
        """A claim-bearing call and the registration of what it claimed: no census is trusted meanwhile."""
        began = self.clock()  # before the call builds its `now`: its leases end at or after began + ttl
        with self._claim_lock:
            self._claims_in_flight += 1
            self._claim_starts.append(began)
        try:
            yield
        finally:
            with self._claim_lock:
                self._claims_in_flight -= 1
                self._claim_starts.remove(began)
                self._claim_gen += 1

    def recover_claims(self) -> int:
        """Adopt the jobs this node holds a live lease on that no execution here knows. The census
        (`held_leases`) is compared with what was registered before it was read and after; a row counts as
        an orphan only if no claim-bearing call in flight then, or begun since, can have leased it: its
        lease ends before the oldest such call began + ttl (a call's leases end at its `now` + ttl, and its
        `now` is taken after it began; a call that ended has registered its rows). So a busy node, always
        claiming, still adopts what a lost claim leased it (the 55-minute soak of seed 2030: a census
        never trusted while claims flowed, two orphans' leases expired, P2). Recovery stays due while a
        call is in flight. Returns the jobs adopted; they run here as if this node's claim had returned
        them, and are renewed at once."""
        with self._recover_lock:
            return self._recover_claims()

    def _recover_claims(self) -> int:
        # Registrations are read before the census and after it: a job acked and forgotten while the census
        # was read is in the first, one a call registered meanwhile in the second. Any call in flight at
        # the first read, or begun since, began no later than `cutoff`: its leases end at or after cutoff +
        # ttl, while what a lost call leased (it ended before this recovery) ends before now + ttl.
        with self._claim_lock:
            cutoff = min([self.clock(), *self._claim_starts])
            known = {(i, c.attempt) for i, c in self._running_contexts().items()}
        node, queues = self.config.node, sorted(self.producers)
        jobs = self.call(lambda: self.store.held_leases(node, queues), "claim recovery")
        with self._claim_lock:
            known |= {(i, c.attempt) for i, c in self._running_contexts().items()}
            in_flight = bool(self._claim_starts)
        limit = cutoff + timedelta(seconds=self.config.lease_ttl)
        unknown = [j for j in jobs if (j.id, j.attempt) not in known]
        orphans = [j for j in unknown if j.lease_until is not None and j.lease_until < limit]
        # Look again next round while a call is in flight (it may yet turn out lost) or a row was passed
        # over because a call in flight could have leased it (that call may be the lost one, still
        # registering: recovery is woken by its retry before it has left `claiming`).
        self._recover_due = in_flight or len(orphans) < len(unknown)
        for job in orphans:
            log.warning(
                "belay claim recovery: job=%s attempt=%s is leased to this node by a claim whose commit it "
                "could not confirm; running it",
                job.id,
                job.attempt,
            )
            self.producers[job.queue].adopt((), (job,))
        self.recovered += len(orphans)
        return len(orphans)

    def poke(self, queue: str) -> None:
        producer = self.producers.get(queue)
        if producer is not None:
            producer.poke()

    # --- execution -------------------------------------------------------------------------------------

    def execute(self, producer: _Producer, ctx: JobContext) -> None:
        job = ctx.job
        kind = self.registry.kinds.get(job.worker)
        started = time.monotonic()
        # --- telemetry (issues 15, 17): metadata is built only for the job events some sink takes
        taken = telemetry.taken(self.telemetry)
        start, stop, exception = "job.start" in taken, "job.stop" in taken, "job.exception" in taken
        meta = (
            {
                "job_id": job.id,
                "kind": job.worker,
                "worker": job.worker,
                "queue": job.queue,
                "attempt": job.attempt,
                "node": self.config.node,
            }
            if start or stop or exception
            else {}
        )
        if start:
            self.emit("job.start", meta)
        # --- end telemetry
        value, error = None, None
        try:
            if kind is None:
                raise UnknownKind(f"no worker is registered under kind {job.worker!r} on node {self.config.node}")
            value = kind.fn(ctx, job.input)
            if job.budget_usd_micros is not None or job.budget_tokens is not None:
                ctx.check_budget()  # a re-run that only replayed the journal must not succeed past a crossing
        except BaseException as exc:  # noqa: BLE001 - every ending maps to an outcome
            error = exc
        try:
            outcome = outcome_for(kind or Kind(job.worker, lambda *_: None), ctx, error, value, self.clock())
        except Exception:
            log.exception("belay job=%s: no outcome; the lease will expire and the job will be retried", job.id)
            self._finished(producer, ctx, None, None, None, started)
            return
        if outcome is None:  # parked: its own transaction already committed
            self._finished(producer, ctx, "parked", error, meta, started, taken)
            return
        # The ack joins the queue's group commit and this thread returns to the pool: the rest (telemetry,
        # the slot) runs after the commit on the thread that led it (AckGroup.ack_then).
        ctx.releasing.set()
        try:
            op = w.Ack(self.clock(), ctx.id, ctx.attempt, outcome)
        except Exception:  # never leave the slot taken: an execution that cannot ack still ends here
            log.exception("belay job=%s: could not ack; the lease will expire and the job will be retried", job.id)
            self._finished(producer, ctx, None, None, None, started)
            return

        def acked(waiter: _Waiter) -> None:
            try:
                state = self._ack_state(ctx, waiter.outcome())
            except Exception:  # a permanent store fault: the lease will expire, another node retries
                log.exception("belay job=%s: could not ack; the lease will expire and the job will be retried", job.id)
                self._finished(producer, ctx, None, None, None, started)
                return
            self._finished(producer, ctx, state, error, meta, started, taken)

        if producer.defers():  # this thread runs the next of the group's jobs first; their acks commit together
            producer.acks.ack_then(op, ctx, acked, defer=True)
            producer.watchdog.arm()
        else:
            producer.acks.ack_then(op, ctx, acked)

    def _finished(
        self,
        producer: _Producer,
        ctx: JobContext,
        state: str | None,
        error: BaseException | None,
        meta: dict[str, Any] | None,
        started: float,
        taken: Container[str] = frozenset(),
    ) -> None:
        """An execution's epilogue once its outcome is durable (state None: it could not be acked): its
        job.stop / job.exception event (`taken`: the events some sink takes, as `execute` read them), then
        its slot."""
        try:
            if state is not None and meta:
                duration = int((time.monotonic() - started) * 1000)
                if error is not None and state != "parked":
                    if "job.exception" in taken:
                        failure = f"{type(error).__name__}: {error}"
                        self.emit("job.exception", {**meta, "state": state, "duration_ms": duration, "error": failure})
                elif "job.stop" in taken:
                    self.emit("job.stop", {**meta, "state": state, "duration_ms": duration})
        finally:
            self.completed += 1
            producer.done(ctx)

    def execute_chunk(self, producer: _Producer, kind: Kind, contexts: list[JobContext]) -> None:
        """One invocation for many jobs: fn(contexts) returns {job_id: value | Exception} (or a list in
        context order); a job missing from it, or a raise of the whole call, fails that job."""
        started = time.monotonic()
        refilled = False  # the chunk's slots went to jobs claimed with its acks (ack_refill)
        taken = telemetry.taken(self.telemetry)  # issues 15, 17: only the events some sink takes
        for ctx in contexts if "job.start" in taken else ():
            self.emit(
                "job.start",
                {
                    "job_id": ctx.id,
                    "kind": kind.name,
                    "worker": kind.name,
                    "queue": producer.name,
                    "attempt": ctx.attempt,
                    "node": self.config.node,
                },
            )
        try:
            try:
                returned = kind.fn(contexts)
                if isinstance(returned, dict):
                    missing = RuntimeError("the chunk function returned no result for this job")
                    results = [returned.get(c.id, missing) for c in contexts]
                else:
                    results = list(returned)
                    if len(results) != len(contexts):
                        raise RuntimeError(f"chunk function returned {len(results)} results for {len(contexts)} jobs")
            except BaseException as exc:  # noqa: BLE001 - the whole chunk failed
                results = [exc] * len(contexts)
            now = self.clock()
            acks, raised = [], {}
            for ctx, result in zip(contexts, results, strict=True):
                error = result if isinstance(result, BaseException) else None
                outcome = outcome_for(kind, ctx, error, None if error else result, now)
                if outcome is not None:
                    acks.append(w.Ack(now, ctx.id, ctx.attempt, outcome))
                    if error is not None:  # job.exception, whatever the ack makes of it (a retry too)
                        raised[ctx.id] = error
            if acks:
                for ctx in contexts:
                    ctx.releasing.set()
                group = w.AckMany(now, tuple(acks))
                done = None
                if len(acks) == len(contexts):  # every job acked: the acks and the refill claim, one commit
                    done = producer.ack_refill(group, contexts)
                    refilled = done is not None
                if done is None:
                    done = self.call(lambda: self.store.apply(group), "ack chunk")
                duration = int((time.monotonic() - started) * 1000)
                for ack, result in zip(acks, done.results, strict=True):
                    if isinstance(result, w.Stale):
                        self.stale_acks += 1
                        _log_stale(ack.job_id, ack.attempt)
                        self.emit("ack.stale", {"job_id": ack.job_id, "attempt": ack.attempt})
                    elif (event := "job.exception" if ack.job_id in raised else "job.stop") in taken:
                        meta = {
                            "job_id": ack.job_id,
                            "kind": kind.name,
                            "worker": kind.name,
                            "queue": producer.name,
                            "attempt": ack.attempt,
                            "node": self.config.node,
                            "state": result.state,
                            "duration_ms": duration,
                        }
                        if event == "job.exception":
                            failure = raised[ack.job_id]
                            meta["error"] = f"{type(failure).__name__}: {failure}"
                        self.emit(event, meta)
        except Exception:
            log.exception("belay chunk of %d %s jobs: could not ack", len(contexts), kind.name)
        finally:
            self.completed += len(contexts)
            if not refilled:
                producer.refill(contexts)  # claims for the chunk's slots, then frees them

    def ack(self, ctx: JobContext, outcome: w.Outcome, producer: _Producer | None = None) -> str:
        ctx.releasing.set()
        op = w.Ack(self.clock(), ctx.id, ctx.attempt, outcome)
        if producer is None:
            result = self.call(lambda: self.store.apply(op), "ack")
        else:
            result = producer.acks.ack(op, ctx)
        return self._ack_state(ctx, result)

    def _ack_state(self, ctx: JobContext, result: w.Acked | w.Stale) -> str:
        if isinstance(result, w.Stale):
            self.stale_acks += 1
            _log_stale(ctx.id, ctx.attempt)
            self.emit("ack.stale", {"job_id": ctx.id, "attempt": ctx.attempt})
            return "stale"
        return result.state

    # --- leases, sweeper, listener ----------------------------------------------------------------------

    def _renew_loop(self) -> None:
        period = self.config.lease_ttl / 3
        while not self.stopped.is_set():
            self._renew_wake.wait(period)  # every ttl/3, or at once when claim recovery is due
            self._renew_wake.clear()
            if self.stopped.is_set():
                break
            try:
                if self._recover_due:
                    self.recover_claims()
                self.renew_once()
            except Exception as exc:  # noqa: BLE001
                log.error("belay lease renewal failed: %s", exc)

    def renew_once(self) -> tuple[int, ...]:
        """§6: extend every lease this node holds in one statement; flag the executions whose lease is
        gone (they stop at their next step boundary). Returns the ids reported as lost."""
        contexts = self._running_contexts()
        if not contexts:
            return ()
        now = self.clock()
        op = w.Renew(now, self.config.node, tuple(sorted(contexts)), now + timedelta(seconds=self.config.lease_ttl))
        result = self.call(functools.partial(self.store.apply, op), "renew")
        registered = self._running_contexts()
        lost = []
        for job_id in result.lost:
            ctx = contexts[job_id]
            if registered.get(job_id) is not ctx:
                continue  # it finished (and acked) between the listing and the renewal
            if ctx.releasing.is_set():
                continue  # its own ack or park gave the lease up; that call's fence reports a stale attempt
            ctx.lost.set()  # the execution stops at its next step boundary; its ack will be stale
            lost.append(job_id)
            log.warning("belay job=%s attempt=%s: lease lost", job_id, ctx.attempt)
            self.emit("lease.lost", {"job_id": job_id, "attempt": ctx.attempt, "node": self.config.node})
        return tuple(lost)

    def sweep_once(self, since: datetime) -> datetime:
        """One sweeper pass: reclaim, reconcile, crons, retention. Returns the new cron watermark."""
        now = self.clock()
        reclaimed = self.call(lambda: self.store.apply(w.Reclaim(now, self.config.reclaim_backoff)), "reclaim")
        woken = self.call(lambda: self.store.apply(w.Reconcile(now)), "reconcile")
        if reclaimed.retried or reclaimed.failed:
            self.emit(
                "reclaim",
                {"node": self.config.node, "retried": len(reclaimed.retried), "failed": len(reclaimed.failed)},
            )
        if reclaimed.retried or woken.woken:
            for producer in self.producers.values():
                producer.poke()
        self.call(lambda: self.store.apply(w.FireCrons(now, since, self.crons, self.cron_queues)), "cron")
        self.call(lambda: self.store.apply(w.Prune(now, dict(self.config.retention), self.config.signal_ttl)), "prune")
        return now

    def _sweep_loop(self) -> None:
        since = self.clock() - timedelta(minutes=1)
        while not self.stopped.wait(self.config.sweep_interval):
            try:
                since = self.sweep_once(since)
            except Exception as exc:  # noqa: BLE001
                log.error("belay sweeper pass failed: %s", exc)

    def refresh_queues(self) -> None:
        """Merge belay_queues rows over static options (runtime CRUD reconciled by every node)."""
        rows = self.call(lambda: self._queue_rows(), "queue refresh")
        for name, producer in self.producers.items():
            opts = producer.static
            if name in rows:
                try:
                    opts = merge_opts(producer.static, rows[name])  # key by key: `paused` keeps limits
                except ValueError as exc:
                    log.error("belay queue %s: ignoring invalid belay_queues row: %s", name, exc)
            if opts != producer.opts:
                producer.opts = opts
                producer.limit = min(max(producer.limit, opts.limit_min), opts.limit_max)
                producer.poke()

    def _refresh_queues_loop(self) -> None:
        # start() read the rows once before any producer claimed; then every queue_refresh seconds
        while not self.stopped.wait(self.config.queue_refresh):
            try:
                self.refresh_queues()
            except Exception as exc:  # noqa: BLE001
                log.error("belay queue refresh failed: %s", exc)

    def _queue_rows(self) -> dict[str, Any]:
        with self.store.transaction(None) as tx:
            return {r["name"]: r["opts"] for r in tx.all("snapshot_queues")}

    def _listen_loop(self) -> None:
        """The pg_notify accelerator: one LISTEN connection per node (`listen_url` past any pooler)."""
        listen_for_pokes(
            self.config.listen_url or self.conninfo,
            self.store.schema,
            self.stopped,
            self._on_poke,
            "listener",
            wanted=self._wants_pokes,
            want=self.pokes_wanted,
        )

    def _wants_pokes(self) -> bool:
        """Whether a poke could make a producer claim: while every queue's slots are all taken the listener
        does not LISTEN (impl.store.pgrows.listen_for_pokes); a producer's poke() — a slot freed — wakes it."""
        return not all(p.saturated() for p in self.producers.values())

    def _on_poke(self, queue: str | None) -> None:
        if queue is None:
            for producer in self.producers.values():
                producer.poke()
        else:
            self.poke(queue)

    # --- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> Worker:
        self.call(lambda: self.store.apply(ops.CheckCompat()), "compatibility check")
        # The belay_queues rows are in force from the first claim (§6 admission: a node that claimed with
        # its static options until its first refresh over-admitted a global_limit / rate queue — found by
        # the soak's trace validation, issue 30).
        self.refresh_queues()
        loops = [self._renew_loop, self._sweep_loop, self._refresh_queues_loop]
        if self.config.notify:
            loops.append(self._listen_loop)
        for loop in loops:
            t = threading.Thread(target=loop, name=f"belay{loop.__name__}", daemon=True)
            t.start()
            self._threads.append(t)
        for producer in self.producers.values():
            producer.thread.start()
        return self

    def stop(self, grace: float | None = None) -> bool:
        """Stop claiming, wait up to the grace for running jobs, then shut down. True when drained."""
        grace = self.config.shutdown_grace if grace is None else grace
        self.stopping.set()
        for producer in self.producers.values():
            producer.poke()
            producer.thread.join(timeout=5)
            producer.dispatch_gathered()  # claimed jobs gathering into a chunk run now (stopping: every window)
        deadline = time.monotonic() + grace
        # A claim whose commit the node could not confirm may have leased it jobs nobody here runs: they
        # are recovered and run within the grace, not left to lease expiry (P4). In a two-hour soak a node's
        # AckClaim was cut at its deadline just after its SIGTERM; the node drained and exited 4 s later
        # with the renewal thread (which recovers) still in a call, and the jobs waited out their leases.
        while time.monotonic() < deadline and (self._recover_due or any(p.running for p in self.producers.values())):
            if self._recover_due:
                try:
                    self.recover_claims()
                except Exception as exc:  # noqa: BLE001 - retried until the grace ends
                    log.error("belay claim recovery while draining failed: %s", exc)
            time.sleep(0.01)
        drained = not any(p.running for p in self.producers.values())
        self.stopped.set()
        self._renew_wake.set()
        for producer in self.producers.values():
            producer.watchdog.stop()
            producer.pool.shutdown(wait=drained, cancel_futures=True)
        for t in self._threads:
            t.join(timeout=2)
        self.store.close()
        return drained

    def _running_contexts(self) -> dict[int, JobContext]:
        return {i: c for p in self.producers.values() for i, c in list(p.running.items())}

    def running_jobs(self) -> list[Job]:
        return [c.job for c in self._running_contexts().values()]


def _log_stale(job_id: int, attempt: int) -> None:
    """Spec: "You'll see a stale ack warning — that's the fence working" (whatever telemetry is attached)."""
    log.warning(
        "belay stale ack job=%s attempt=%s: the job was reclaimed; discarding (the fence working)", job_id, attempt
    )


class Termination:
    """SIGTERM/SIGINT/SIGHUP handling for entry points: `Termination()` installs the handlers (before the
    worker starts), `wait()` blocks the main thread until one arrives and returns its number.

    The handlers only record the signal and the main thread polls for it: a handler that called
    `threading.Event.set()` could run while the interrupted main thread holds that event's internal
    lock (inside `Event.wait()`) and deadlock the process — a SIGTERM then never stops the worker."""

    def __init__(self) -> None:
        import signal

        self.received: list[int] = []
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda signum, _frame: self.received.append(signum))

    def wait(self, poll: float = 0.1) -> int:
        while not self.received:
            time.sleep(poll)
        return self.received[0]
