"""The Client-level SDK (contract §10): enqueue, read, signal, steer, cancel, retry, await results.

A thin, clock-owning layer over `PgStore`: the store never reads a clock, the client supplies `now`
from its injectable `clock` (an entry point is the only place that reads the system time).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from impl.store import PgStore
from impl.store.pgrows import listen_for_pokes
from model import ops
from model.envelope import decode
from model.rows import Event, Job, Signal, Step


def utc_now() -> datetime:
    """The system clock, in UTC (the default `clock` of entry points)."""
    return datetime.now(UTC)


class Client:
    """Client conformance level. `check=True` runs the §1 compatibility check at startup."""

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "public",
        clock: Callable[[], datetime] = utc_now,
        check: bool = True,
        pool_size: int = 4,
        on_enqueue: Callable[[str], None] | None = None,
    ) -> None:
        """`on_enqueue(queue)` is a local poke (e.g. `worker.poke`) called after an enqueue commits."""
        self.conninfo = conninfo
        self.clock = clock
        self.on_enqueue = on_enqueue
        self.store = PgStore(conninfo, schema=schema, pool_size=pool_size)
        self._results: _ResultListener | None = None  # one LISTEN connection, opened by the first await
        self._results_lock = threading.Lock()
        self.compat: ops.Compatible | None = None
        if check:
            try:
                self.compat = self.store.apply(ops.CheckCompat())
            except Exception:
                self.store.close()
                raise

    def close(self) -> None:
        if self._results is not None:
            self._results.close()
        self.store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- enqueue ---------------------------------------------------------------------------------

    def enqueue(
        self, queue: str, worker: str, input: Any = None, *, conn: psycopg.Connection | None = None, **opts: Any
    ) -> ops.Inserted | ops.Duplicate:
        """Insert one job; `conn` makes it part of the caller's open transaction."""
        spec = ops.JobSpec(queue, worker, {} if input is None else input, **opts)
        return self.enqueue_many([spec], conn=conn).outcomes[0]

    def enqueue_many(self, specs: Iterable[ops.JobSpec], *, conn: psycopg.Connection | None = None) -> ops.Enqueued:
        specs = tuple(specs)
        result = self.store.apply(ops.Enqueue(self.clock(), specs), conn=conn)
        self._poke(conn, {s.queue for s in specs})
        return result

    def _poke(self, conn: psycopg.Connection | None, queues: set[str]) -> None:
        """Local pokes only after our own commit: a caller's transaction may still roll back (its
        pg_notify wake-up is delivered on commit instead)."""
        if self.on_enqueue is not None and conn is None:
            for queue in sorted(queues):
                self.on_enqueue(queue)

    def enqueue_workflow(
        self, workflow_id: str, members: Sequence[ops.WorkflowMember], *, conn: psycopg.Connection | None = None
    ) -> ops.WorkflowEnqueued:
        result = self.store.apply(ops.EnqueueWorkflow(self.clock(), workflow_id, tuple(members)), conn=conn)
        self._poke(conn, {m.job.queue for m in members})
        return result

    # --- signals ---------------------------------------------------------------------------------

    def signal(self, scope: str, name: str, payload: Any = None) -> ops.Signalled:
        return self.store.apply(ops.DeliverSignal(self.clock(), scope, name, payload))

    def steer(self, job_id: int, payload: Any) -> ops.Signalled | ops.NotFound:
        return self.store.apply(ops.Steer(self.clock(), job_id, payload))

    def clear_signal(self, scope: str, name: str) -> ops.Cleared:
        return self.store.apply(ops.ClearSignal(scope, name))

    # --- operator commands -------------------------------------------------------------------------

    def cancel(self, job_id: int) -> ops.CancelResult:
        return self.store.apply(ops.Cancel(self.clock(), job_id))

    def retry(self, job_id: int) -> ops.RetryResult:
        return self.store.apply(ops.Retry(self.clock(), job_id))

    def put_queue(self, name: str, **opts: Any) -> ops.QueuePut:
        return self.store.apply(ops.PutQueue(self.clock(), name, opts))

    def put_cron(self, name: str, expression: str, worker: str, input: Any = None, **kw: Any) -> ops.CronPut:
        return self.store.apply(
            ops.PutCron(self.clock(), name, expression, worker, {} if input is None else input, **kw)
        )

    # --- reads -------------------------------------------------------------------------------------

    def job(self, job_id: int) -> Job | None:
        found = self.store.apply(ops.ReadJob(job_id))
        return None if isinstance(found, ops.NotFound) else found

    def steps(self, job_id: int) -> tuple[Step, ...]:
        return self.store.apply(ops.ReadSteps(job_id))

    def events(self, job_id: int) -> tuple[Event, ...]:
        return self.store.apply(ops.ReadEvents(job_id))

    def workflow(self, workflow_id: str) -> tuple[Job, ...]:
        return self.store.apply(ops.ReadWorkflow(workflow_id))

    def signals(self, *scopes: str) -> tuple[Signal, ...]:
        return self.store.apply(ops.ReadSignals(tuple(scopes)))

    # --- results -----------------------------------------------------------------------------------

    def await_result(self, job_id: int, timeout: float = 30.0, *, listen: bool = True) -> Job:
        """Wait until the job is terminal and return it (decode `.result` with `result_value`).

        With `listen`, a dedicated connection LISTENs for result notifications {"t":"r","id":...}
        (§9.2) and re-checks on each; without it (or between notifications) it re-checks on a
        5 ms → 200 ms backoff. Notifications only shorten the wait: the re-read decides.
        Raises TimeoutError when the job is still not terminal after `timeout` seconds, and
        LookupError when it does not exist.
        """
        deadline = time.monotonic() + timeout
        delay = 0.005
        listener = self._listener() if listen else None
        woken = listener.register(job_id) if listener is not None else None
        try:
            while True:
                job = self.job(job_id)
                if job is None:
                    raise LookupError(f"job {job_id} does not exist")
                if job.terminal:
                    return job
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"job {job_id} is still {job.state} after {timeout}s")
                wait = min(delay, remaining)
                if woken is not None and woken.wait(wait):
                    woken.clear()
                    delay = 0.005
                    continue
                if woken is None:
                    time.sleep(wait)
                delay = min(delay * 2, 0.2)
        finally:
            if listener is not None and woken is not None:
                listener.unregister(job_id, woken)

    def _listener(self) -> _ResultListener:
        with self._results_lock:
            if self._results is None:
                self._results = _ResultListener(self.conninfo, self.store.schema)
            return self._results


class _ResultListener:
    """One long-lived LISTEN connection per client (§9.2 result notifications), on its own thread.

    Awaiters register an Event per job id *before* they re-read the job, so a notification that
    arrives between the read and the wait is not lost; after a reconnect every awaiter is woken to
    re-read (anything missed while disconnected). Notifications only shorten waits: the re-read
    decides, and polling is the floor."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[int, list[threading.Event]] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=listen_for_pokes,
            name="belay-client-results",
            daemon=True,
            args=(conninfo, schema, self._stopped, None, "client result listener"),
            kwargs={"on_payload": self._on_payload},
        )
        self._thread.start()

    def register(self, job_id: int) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._waiters.setdefault(job_id, []).append(event)
        return event

    def unregister(self, job_id: int, event: threading.Event) -> None:
        with self._lock:
            events = self._waiters.get(job_id, [])
            if event in events:
                events.remove(event)
            if not events:
                self._waiters.pop(job_id, None)

    def _on_payload(self, payload: str | None) -> None:
        with self._lock:
            if payload is None:  # (re)connected: everyone re-reads
                targets = [e for events in self._waiters.values() for e in events]
            else:
                job_id = _result_id(payload)
                targets = list(self._waiters.get(job_id, ())) if job_id is not None else []
        for event in targets:
            event.set()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)


def _result_id(payload: str) -> int | None:
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if isinstance(data, dict) and data.get("t") == "r" and isinstance(data.get("id"), int):
        return data["id"]
    return None


def result_value(job: Job) -> Any:
    """The decoded §2 envelope of a job's result (None when it has none)."""
    return decode(job.result)
