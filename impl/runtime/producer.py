"""`_Producer`: one per queue; claims while it has free slots.

Adaptive polling (busy 25 ms → idle 500 ms), woken early by local pokes and by the optional pg_notify
accelerator; a storm of pokes coalesces into one claim round; a chunk execution that has acked claims
the next jobs for its own slots (`refill`), in one transaction with its acks; adaptive concurrency doubles a queue's
limit toward max on saturated rounds and decays it to min.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from impl import telemetry
from impl.runtime.ack_group import AckGroup
from impl.runtime.config import QueueConfig, Telemetry, WorkerConfig
from impl.runtime.executor import _Executor
from impl.runtime.watchdog import _Watchdog
from impl.store import PgStore
from impl.worker import JobContext, Kind, Registry
from model import worker_ops as w
from model.rows import Job

log = logging.getLogger("belay")


class _Node(Protocol):
    """What a producer uses of its node, `impl.runtime.node.Worker` (which builds its producers): typed by
    shape so that this module need not import the one that imports it (tests/test_import_graph.py)."""

    config: WorkerConfig
    registry: Registry
    store: PgStore
    telemetry: tuple[Telemetry, ...]
    clock: Callable[[], datetime]
    stopping: threading.Event
    pokes_wanted: threading.Event

    def emit(self, event: str, meta: dict[str, Any]) -> None: ...

    def call(self, fn: Callable[[], Any], what: str) -> Any: ...

    def claim_call(self, fn: Callable[[], Any], what: str, unclaimed: Callable[[], Any]) -> Any: ...

    def claiming(self) -> contextlib.AbstractContextManager[None]: ...

    def execute(self, producer: _Producer, ctx: JobContext) -> None: ...

    def execute_chunk(self, producer: _Producer, kind: Kind, contexts: list[JobContext]) -> None: ...


class _Producer:
    """Claims for one queue and hands jobs to the executor pool."""

    def __init__(self, worker: _Node, config: QueueConfig) -> None:
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
        free, within the node's limit; none while stopping or paused. On a queue with admission (global
        limit, rate, partitions) the claim's admission may take fewer: it counts under the queue's lock,
        after the acks of its transaction."""
        opts = self.opts
        if self.worker.stopping.is_set() or opts.paused:
            return 0
        with self.lock:
            others = len(self.running) - sum(1 for c in finished if self.running.get(c.id) is c)
            return max(0, min(len(finished), self.limit - others))

    def refill(self, finished: Sequence[JobContext]) -> None:
        """A chunk execution that has acked claims the next jobs for its own slots (at most as many as it
        frees, within the limit) instead of leaving that to the producer: the node then has a claim per
        chunk in flight rather than one at a time, and a batched drain is not bound by the producer's
        serial claims. None while stopping or paused. The finished executions keep
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
        """Commit a group of acks and claim the slots they free in the same transaction
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
