"""The worker runtime (spec/belay-operations.txt): producers, executors, leases, sweeper, wake-ups.

One `Worker` is one node:

- a producer per queue claims while it has free slots: adaptive polling (busy 25 ms → idle 500 ms),
  woken early by local pokes (an insert through this process, a release, a completion) and by the
  optional pg_notify accelerator; a storm of pokes coalesces into one claim round; a chunk execution
  that has acked claims the next jobs for its own slots (`_Producer.refill`);
- executors run claimed jobs on threads and ack them (fenced; a stale ack is logged and dropped); acks
  that finish while another ack of the node is committing are committed together in one transaction
  (`AckGroup`: group commit, each row still fenced on its own attempt; a lone ack commits at once), which
  also claims the jobs that take their slots; those run on the committing thread one after another
  (`_Executor.defer`: no thread woken per job), and a watchdog per queue hands a job or an ack that has
  waited `defer_handoff` behind a long job to another thread (`_Producer.look`);
- a renewer extends every local lease each ttl/3 in one statement and flags executions whose lease
  was lost, which stop at their next step boundary;
- a sweeper reclaims expired leases, runs the `$children` reconciler, fires crons and prunes;
- table upkeep vacuums and analyzes belay_jobs when its statistics say the claim needs it (upkeep.py);
- adaptive concurrency doubles a queue's limit toward max on saturated rounds and decays it to min;
- SIGTERM (or `stop()`): stop claiming, give running jobs `shutdown_grace`, then return;
- transient database faults (restart, lost connection, deadlock) degrade and retry with backoff.

Configuration is one frozen object per component; the environment is read only by entry points.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Container, Iterator
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from impl import telemetry
from impl.runtime.ack_group import _Waiter
from impl.runtime.config import QueueConfig, Telemetry, WorkerConfig, utc_now
from impl.runtime.faults import Connectivity, with_retries
from impl.runtime.producer import _Producer
from impl.runtime.upkeep import TableUpkeep
from impl.store import PgStore
from impl.store.pgrows import listen_for_pokes
from impl.worker import JobContext, Kind, Registry, UnknownKind, outcome_for
from model import ops
from model import worker_ops as w
from model.queues import merge_opts
from model.rows import Job

log = logging.getLogger("belay")


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
        self.upkeep = TableUpkeep(conninfo, self.store.schema, config.vacuum_dead_rows, config.analyze_rows)
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
        self.prune(now)
        return now

    def prune(self, now: datetime) -> int:
        """Retention (§8.7) in batches of w.Prune's limit, repeated while a batch comes back full (at most
        `prune_batches`); returns the jobs deleted."""
        retention = dict(self.config.retention)
        deleted = 0
        for _ in range(max(self.config.prune_batches, 1)):
            op = w.Prune(now, retention, self.config.signal_ttl)
            pruned: w.Pruned = self.call(partial(self.store.apply, op), "prune")
            deleted += len(pruned.jobs)
            if len(pruned.jobs) < op.limit or self.stopped.is_set():
                break
        return deleted

    def _sweep_loop(self) -> None:
        since = self.clock() - timedelta(minutes=1)
        while not self.stopped.wait(self.config.sweep_interval):
            try:
                since = self.sweep_once(since)
            except Exception as exc:  # noqa: BLE001
                log.error("belay sweeper pass failed: %s", exc)

    def _upkeep_loop(self) -> None:
        self.upkeep.loop(self.stopped, self.config.upkeep_interval)

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
        if self.upkeep.enabled and self.config.upkeep_interval > 0:
            loops.append(self._upkeep_loop)
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
