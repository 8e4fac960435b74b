"""The Postgres store: `PgStore.apply(op)` for the shared vocabulary (client level, contract §10).

Each operation is one SQL transaction built from the named queries in impl/store/sql/queries.sql; `now`
always comes from the op (the clock rule). Enqueue operations can instead run on the caller's own
psycopg connection inside the caller's transaction (transactional enqueue, §5.1): then nothing here
commits, and the pg_notify wake-up is issued in that same transaction so it is delivered only if the
caller commits.

Lock order, everywhere: workflow advisory lock → job row locks → signal-scope advisory lock. Cancel and
retry read a job's (immutable) workflow_id first so they can take the workflow lock before the row
lock; settlement then only ever waits on held rows, which no one else locks first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors, pq
from psycopg.rows import RowFactory, dict_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from impl.store.failpoints import failpoint
from impl.store.inserts import (
    _ARRAY_ROWS,
    _COMPACT_VARYING,
    _CRON_NAME,
    _CRON_SLOT,
    _LIST_FIELDS,
    _QUEUE,
    _ROW_FIELDS,
    _STAGE_TYPES,
    _STATE,
    _UNIQUE_KEY,
    _UNIQUE_MODE,
    _compact_insert,
    _enqueue_solo,
)
from impl.store.migrate import check_compat
from impl.store.pgrows import channel_name as channel_name  # re-exported: impl.store.channel_name is public
from impl.store.pgrows import configure_connection, job_from_row, poke_payload, step_from_row
from impl.store.queries import SchemaSQL
from impl.store.results import ResultNotices
from impl.store.tx import Tx as _Tx
from impl.store.worker_store import WORKER_HANDLERS, WorkerOps
from model import ops
from model.rows import TERMINAL, Event, Job, Signal, Step
from model.settle import Member, settle
from model.workflow import check_graph


def _json_text(value: Any) -> str:
    """A validated JobSpec value (model.validate.as_json ran at construction) as the text of its jsonb
    column; the two values nearly every bulk enqueue carries skip the encoder."""
    if value is None:
        return "null"
    if type(value) is dict and not value:
        return "{}"
    return json.dumps(value)


class _Busy:
    """The job's row is locked by another transaction (see PgStore._lock_job)."""


BUSY = _Busy()


class PgStore(WorkerOps):
    """The reference store on PostgreSQL. Thread-safe (connections come from a pool)."""

    supports_transactional_enqueue = True

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "public",
        pool_size: int = 4,
        notify: bool = True,
        call_timeout: float | None = None,
    ) -> None:
        self.q = SchemaSQL(schema)
        self.schema = self.q.schema
        self.notify = notify
        self.call_timeout = call_timeout  # kept so a subclass swapped in (soak fixtures) gets the same deadline
        pool_class: Any = ConnectionPool
        extra: dict[str, Any] = {}
        kwargs: dict[str, Any] = {"autocommit": True}
        if call_timeout:  # a client-side deadline per call, keepalives, connect timeout (impl/store/deadline.py)
            from impl.store.deadline import GuardedPool, Watchdog, connection_defaults

            pool_class, extra = GuardedPool, {"watchdog": Watchdog(call_timeout)}
            # The server ends a transaction stuck behind a stalled path after twice the call deadline,
            # releasing its row locks (see connection_defaults).
            kwargs.update(connection_defaults(conninfo, idle_in_transaction=2 * call_timeout))
        self.pool = pool_class(
            conninfo,
            min_size=1,
            max_size=pool_size,
            kwargs=kwargs,
            configure=configure_connection,
            open=True,
            name="belay-store",
            **extra,
        )
        # §9.2 result notifications after the commit, coalesced (impl/store/results.py).
        self.results = ResultNotices(self.pool, self.q)

    def close(self) -> None:
        # What is pending goes out first — for a second at most: a node stopping with its database gone
        # must not wait on notifications, which polling covers anyway (§9.2 is never load-bearing).
        self.results.close(timeout=1.0)
        self.pool.close()

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, now: datetime | None, conn: psycopg.Connection | None = None) -> Iterator[_Tx]:
        """A transaction of our own, or the caller's open one (which we never commit)."""
        if conn is not None:
            status = conn.info.transaction_status
            if status == pq.TransactionStatus.INERROR:
                raise ops.InvalidInput("the caller's transaction is aborted; roll it back before enqueueing")
            if conn.autocommit and status == pq.TransactionStatus.IDLE:
                raise ops.InvalidInput(
                    "transactional enqueue needs an open transaction on the caller's connection: "
                    "wrap the call in `with conn.transaction():` (the connection is in autocommit mode)"
                )
            with conn.cursor(row_factory=dict_row) as cur:
                tx = _Tx(cur, self.q, now)
                yield tx
                if self.notify:
                    tx.flush_pokes()
                    tx.flush_results()
            return
        with self.pool.connection() as c, c.transaction(), c.cursor(row_factory=dict_row) as cur:
            tx = _Tx(cur, self.q, now)
            yield tx
            if self.notify:
                tx.flush_pokes()
            failpoint("store.before_commit")
        if tx.results and self.notify:  # committed: the jobs are terminal for anyone who reads them now
            self.results.add(tx.results)

    def statement(
        self, name: str | bytes, params: dict, rows: RowFactory[Any] = dict_row, *, binary: bool = False
    ) -> list[Any]:
        """One statement in autocommit (its own implicit transaction): one round trip, no BEGIN.
        `name` names a query, or is the query's bytes (SchemaSQL.qb_take). Rows are dicts unless `rows`
        says otherwise (psycopg.rows.tuple_row on hot paths); `binary` fetches them in binary format
        (claimed job rows: the same values, cheaper to send and to parse)."""
        with self.pool.connection() as c, c.cursor(row_factory=rows, binary=binary) as cur:
            cur.execute(name if isinstance(name, bytes) else self.q.qb(name), params)
            # The result's status, not `cur.description`: that builds a Column object per column (a claim
            # returns 33), which was an eighth of an unbatched drain's Python time (issue 17).
            result = cur.pgresult
            return cur.fetchall() if result is not None and result.status == pq.ExecStatus.TUPLES_OK else []

    def apply(self, op: Any, conn: psycopg.Connection | None = None) -> Any:
        """Apply one operation of the shared vocabulary and return its result value."""
        handler = _HANDLERS.get(type(op))
        if handler is None:
            raise TypeError(f"PgStore does not implement {type(op).__name__}")
        if conn is not None and type(op) not in (ops.Enqueue, ops.EnqueueWorkflow):
            raise ops.InvalidInput(f"{type(op).__name__} cannot run in a caller's transaction; only enqueues can")
        return getattr(self, handler.__name__)(op, conn)  # by name, so a subclass's override is used

    # --- §1 ----------------------------------------------------------------------------------

    def _check_compat(self, op: ops.CheckCompat, conn: Any) -> ops.Compatible:
        with self.pool.connection() as c:
            return check_compat(c, self.schema, known_major=op.known_major, min_version=op.min_version)

    # --- §5 ------------------------------------------------------------------------------------

    def _insert(self, tx: _Tx, rows: list[tuple]) -> list[ops.Inserted | ops.Duplicate]:
        """§5.1 set-based insert ... ON CONFLICT DO NOTHING RETURNING id, then report skipped rows.

        Three round trips whatever the batch size: reserve the ids, insert the rows from one array per
        column, look up every skipped row's holder at once."""
        if not rows:
            return []
        ids = tx.column("next_job_ids", {"n": len(rows)})
        columns = list(zip(*rows, strict=True))
        # Columns with one value across the batch (a bulk enqueue's queue, kind, state, priority, `{}`
        # input and meta, NULLs...) are bound once as scalars; only the others travel per row.
        varying = tuple(i for i, column in enumerate(columns) if column.count(column[0]) != len(column))
        if len(rows) <= _ARRAY_ROWS or len(varying) <= _COMPACT_VARYING:
            inserted = self._insert_compact(tx, ids, columns, varying)
        else:
            inserted = self._insert_staged(tx, ids, rows)
        outcomes: list[ops.Inserted | ops.Duplicate | None] = []
        skipped: list[int] = []
        for pos, (job_id, row) in enumerate(zip(ids, rows, strict=True)):
            if job_id in inserted:
                outcomes.append(ops.Inserted(job_id))
                if row[_STATE] == "ready":
                    tx.pokes.add(row[_QUEUE])
            else:
                outcomes.append(None)
                skipped.append(pos)
        if skipped:
            for holder in self._duplicates(tx, [rows[p] for p in skipped]):
                outcomes[skipped[holder[0]]] = holder[1]
        return outcomes  # type: ignore[return-value]  # every None was replaced by its Duplicate

    @staticmethod
    def _insert_compact(tx: _Tx, ids: list[int], columns: list[tuple], varying: tuple[int, ...]) -> set[int]:
        """The §5.1 insert with the batch's constant columns bound as scalars: one array parameter per varying
        column (the ids always), one value for each other column (`_compact_insert` builds the statement)."""
        params: dict[str, Any] = {"id": ids, "now": tx.now}
        for i, name in enumerate(_ROW_FIELDS):
            if i in varying:
                values = list(columns[i])
                if name in _LIST_FIELDS:  # as JSON text: unnest would flatten a text[][]
                    values = [None if v is None else json.dumps(v) for v in values]
                params[f"v_{name}"] = values
            else:
                params[f"c_{name}"] = columns[i][0]
        return set(tx.column_sql(_compact_insert(tx.q, varying), params))

    @staticmethod
    def _insert_staged(tx: _Tx, ids: list[int], rows: list[tuple]) -> set[int]:
        """A large batch: binary COPY into a session temp table, then one INSERT ... SELECT. Rendering
        thousands of array elements as text costs far more than COPY's C path (measured in bench/enqueue.py)."""
        tx.cur.execute(tx.q.q("stage_jobs_table"))
        batch = ids[0]  # unique within the transaction: the first id reserved for this batch
        with tx.cur.copy(tx.q.q("stage_jobs_copy")) as copy:
            copy.set_types(_STAGE_TYPES)
            for ord_, (job_id, row) in enumerate(zip(ids, rows, strict=True)):
                copy.write_row((batch, ord_, job_id, *row))
        return set(tx.column("insert_staged_jobs", {"batch": batch, "now": tx.now}))

    @staticmethod
    def _duplicates(tx: _Tx, rows: list[tuple]) -> list[tuple[int, ops.Duplicate]]:
        """(index in rows, Duplicate) for each skipped row: the cron slot's owner first, else the key's holder."""
        found = tx.all(
            "duplicate_holders",
            {
                "pos": list(range(len(rows))),
                "unique_key": [r[_UNIQUE_KEY] for r in rows],
                "unique_mode": [r[_UNIQUE_MODE] for r in rows],
                "cron_name": [r[_CRON_NAME] for r in rows],
                "cron_slot": [r[_CRON_SLOT] for r in rows],
            },
        )
        out = []
        for f in found:
            row = rows[f["pos"]]
            if row[_CRON_NAME] is not None and f["cron_id"] is not None:
                out.append((f["pos"], ops.Duplicate(f["cron_id"], "cron")))
            else:
                out.append(
                    (f["pos"], ops.Duplicate(f["unique_id"], "unique" if row[_UNIQUE_KEY] is not None else "cron"))
                )
        return out

    @staticmethod
    def _row(spec: ops.JobSpec, now: datetime, state: str = "ready", wf: tuple = (None, None, None, None)) -> tuple:
        """One row of the insert's fields, in _ROW_FIELDS order; §5.1's required defaults are in the SQL."""
        key = spec.unique_key
        if spec.unique_mode == "window":
            key = ops.window_key(key, now, spec.unique_window)
        workflow_id, wf_name, deps, ignore = wf
        return (
            spec.queue,
            spec.worker,
            _json_text(spec.input),
            _json_text(spec.meta),
            state,
            spec.priority,
            spec.max_attempts,
            spec.scheduled_at or now,
            key,
            spec.unique_mode,
            spec.cron_name,
            spec.cron_slot,
            workflow_id,
            wf_name,
            None if deps is None else list(deps),
            None if ignore is None else list(ignore),
            spec.parent_id,
            spec.budget_usd_micros,
            spec.budget_tokens,
        )

    def _enqueue(self, op: ops.Enqueue, conn: psycopg.Connection | None) -> ops.Enqueued:
        rows = [self._row(spec, op.now) for spec in op.jobs]
        if conn is None and len(rows) == 1 and rows[0][_UNIQUE_KEY] is None and rows[0][_CRON_NAME] is None:
            return ops.Enqueued((self._insert_solo(rows[0], op.now),))
        with self.transaction(op.now, conn) as tx:
            return ops.Enqueued(tuple(self._insert(tx, rows)))

    def _insert_solo(self, row: tuple, now: datetime) -> ops.Inserted:
        """One job no unique index can refuse, inserted and poked in one autocommit statement (_enqueue_solo)."""
        params: dict[str, Any] = {f"c_{name}": value for name, value in zip(_ROW_FIELDS, row, strict=True)}
        params["now"] = now
        params["payload"] = poke_payload(row[_QUEUE]) if self.notify and row[_STATE] == "ready" else None
        with self.pool.connection() as c, c.cursor(row_factory=tuple_row) as cur:
            params["channel"] = channel_name(c.info.dbname, self.schema)
            (job_id, _poked) = cur.execute(_enqueue_solo(self.q), params).fetchone()
        return ops.Inserted(job_id)

    def _enqueue_workflow(self, op: ops.EnqueueWorkflow, conn: psycopg.Connection | None) -> ops.WorkflowEnqueued:
        with self.transaction(op.now, conn) as tx:
            tx.one("lock_workflow", {"workflow_id": op.workflow_id})
            existing = [r["wf_name"] for r in tx.all("workflow_names", {"workflow_id": op.workflow_id})]
            check_graph(op.workflow_id, op.members, existing)
            rows = [
                self._row(
                    m.job,
                    op.now,
                    "held" if m.deps else "ready",
                    (op.workflow_id, m.name, list(m.deps), list(m.ignore)),
                )
                for m in op.members
            ]
            outcomes = self._insert(tx, rows)
            released, doomed = self._settle(tx, op.workflow_id)
            self._notify_parents(tx, [(d["id"], d["parent_id"]) for d in doomed])
            return ops.WorkflowEnqueued(
                op.workflow_id,
                tuple((m.name, o.id) for m, o in zip(op.members, outcomes, strict=True)),
                tuple(sorted(r["id"] for r in released)),
                tuple(sorted(d["id"] for d in doomed)),
            )

    # --- §8.3 settlement and §7 after-terminal steps ---------------------------------------------

    def _settle(self, tx: _Tx, workflow_id: str) -> tuple[list[dict], list[dict]]:
        """Settle one workflow to its fixpoint; the caller holds the workflow lock."""
        rows = tx.all("workflow_members", {"workflow_id": workflow_id})
        verdict = settle(
            Member(r["wf_name"], r["state"], tuple(r["wf_deps"] or ()), tuple(r["wf_ignore"] or ()))
            for r in rows
            if r["wf_name"] is not None
        )
        if verdict.empty:
            return [], []
        by_name = {r["wf_name"]: r["id"] for r in rows}
        released = doomed = []
        if verdict.released:
            released = tx.all("release_held", {"ids": sorted(by_name[n] for n in verdict.released)})
            tx.pokes.update(r["queue"] for r in released)
        if verdict.doomed:
            doomed = tx.all("doom_held", {"ids": sorted(by_name[n] for n in verdict.doomed), "now": tx.now})
        return released, doomed

    def _after_terminal(self, tx: _Tx, terminal: Iterable[dict]) -> None:
        """§7: settle each touched workflow (under its lock), then signal `$children` to parents —
        unconditionally, never gated on a sibling count (race R1)."""
        terminal = list(terminal)
        children = [(t["id"], t["parent_id"]) for t in terminal]
        for workflow_id in sorted({t["workflow_id"] for t in terminal if t["workflow_id"]}):
            tx.one("lock_workflow", {"workflow_id": workflow_id})
            _, doomed = self._settle(tx, workflow_id)
            children.extend((d["id"], d["parent_id"]) for d in doomed)
        failpoint("after_terminal.before_notify")
        self._notify_parents(tx, children)

    def _notify_parents(self, tx: _Tx, children: Iterable[tuple[int, int | None]]) -> None:
        by_parent: dict[int, list[int]] = {}
        for child, parent in children:
            if parent is not None:
                by_parent.setdefault(parent, []).append(child)
        for parent in sorted(by_parent):
            self._deliver(tx, f"job:{parent}", "$children", {"children": sorted(by_parent[parent])})

    # --- §8.1 signals --------------------------------------------------------------------------

    def _deliver(self, tx: _Tx, scope: str, name: str, payload: Any) -> list[int]:
        tx.one("lock_scope", {"scope": scope})
        params = {"scope": scope, "name": name, "payload": Jsonb(payload), "now": tx.now}
        tx.cur.execute(self.q.q("upsert_signal"), params)
        woken = tx.all("wake_awaiters", params)
        tx.pokes.update(r["queue"] for r in woken)
        return sorted(r["id"] for r in woken)

    def _deliver_signal(self, op: ops.DeliverSignal, conn: Any) -> ops.Signalled:
        with self.transaction(op.now) as tx:
            return ops.Signalled(tuple(self._deliver(tx, op.scope, op.name, op.payload)))

    def _steer(self, op: ops.Steer, conn: Any) -> ops.Signalled | ops.NotFound:
        with self.transaction(op.now) as tx:
            if tx.one("job_header", {"id": op.job_id}) is None:
                return ops.NotFound(op.job_id)
            return ops.Signalled(tuple(self._deliver(tx, f"job:{op.job_id}", "$steer", op.payload)))

    def _clear_signal(self, op: ops.ClearSignal, conn: Any) -> ops.Cleared:
        with self.transaction(None) as tx:
            return ops.Cleared(tx.one("clear_signal", {"scope": op.scope, "name": op.name}) is not None)

    # --- §8.6 cancel and retry -------------------------------------------------------------------

    def _lock_job(self, tx: _Tx, job_id: int) -> dict | _Busy | None:
        """Workflow lock first (lock order), then the row lock — without ever waiting on the row while
        holding the workflow lock: an ack holds its running row and then waits for the workflow lock,
        so waiting here would close a cycle. A row someone else holds comes back as BUSY, and the
        caller retries in a fresh transaction (the explorer's cancel_ack scenario)."""
        header = tx.one("job_header", {"id": job_id})
        if header is None:
            return None
        if header["workflow_id"] is not None:
            tx.one("lock_workflow", {"workflow_id": header["workflow_id"]})
        row = tx.one("lock_job_skip_locked", {"id": job_id})
        return BUSY if row is None else row

    def _with_row(self, op: Any, body: Any) -> Any:
        """Run body(tx, row) in a transaction holding the job's locks; retry while the row is busy."""
        for attempt in range(200):
            with self.transaction(op.now) as tx:
                row = self._lock_job(tx, op.job_id)
                if row is None:
                    return ops.NotFound(op.job_id)
                if row is not BUSY:
                    return body(tx, row)
            time.sleep(min(0.001 * 2**attempt, 0.05))  # the holder is mid-transaction: let it finish
        raise RuntimeError(f"job {op.job_id}: its row stayed locked by other transactions for ~10 s")

    def _cancel(self, op: ops.Cancel, conn: Any) -> ops.CancelResult:
        with self.transaction(op.now) as tx:
            # A running job only gets its flag: the row lock alone, no workflow lock (see _lock_job).
            if tx.one("request_cancel", {"id": op.job_id}) is not None:
                return ops.CancelRequested(op.job_id)

        def body(tx: _Tx, row: dict) -> ops.CancelResult:
            if row["state"] in TERMINAL:
                return ops.NotCancellable(op.job_id, row["state"])
            if row["state"] == "running":
                tx.one("request_cancel", {"id": op.job_id})
                return ops.CancelRequested(op.job_id)
            cancelled = tx.all("cancel_parked", {"id": op.job_id, "now": op.now})
            self._after_terminal(tx, cancelled)
            return ops.Cancelled(op.job_id)

        return self._with_row(op, body)

    def _retry(self, op: ops.Retry, conn: Any) -> ops.RetryResult:
        return self._with_row(op, lambda tx, row: self._retry_locked(op, tx, row))

    def _retry_locked(self, op: ops.Retry, tx: _Tx, row: dict) -> ops.RetryResult:
        if row["state"] not in ("failed", "cancelled"):
            return ops.NotRetryable(op.job_id, row["state"])
        if row["wf_deps"]:
            missing = [
                r["name"]
                for r in tx.all("missing_deps", {"deps": list(row["wf_deps"]), "workflow_id": row["workflow_id"]})
            ]
            if missing:
                return ops.DepsGone(op.job_id, tuple(sorted(missing, key=list(row["wf_deps"]).index)))
        # §8.6: dep-bearing members are re-held, then settled, never sent straight to ready.
        params = {"id": op.job_id, "now": op.now, "state": "held" if row["wf_deps"] else "ready"}
        try:
            with tx.cur.connection.transaction():  # a savepoint: a unique clash must not abort the rest
                updated = tx.one("retry_job", params)
        except errors.UniqueViolation:
            holder = tx.one("unique_holder", {"key": row["unique_key"], "mode": "incomplete"})
            return ops.RetryBlocked(op.job_id, holder["id"] if holder else None)
        failpoint("retry.before_settle")
        if updated["state"] == "ready":
            tx.pokes.add(updated["queue"])
        if row["workflow_id"] is not None:
            _, doomed = self._settle(tx, row["workflow_id"])
            self._notify_parents(tx, [(d["id"], d["parent_id"]) for d in doomed])
        return ops.Retried(op.job_id, tx.one("job_state", {"id": op.job_id})["state"])

    # --- runtime CRUD ----------------------------------------------------------------------------

    def _put_queue(self, op: ops.PutQueue, conn: Any) -> ops.QueuePut:
        with self.transaction(op.now) as tx:
            tx.cur.execute(self.q.q("put_queue"), {"name": op.name, "opts": Jsonb(dict(op.opts)), "now": op.now})
            tx.pokes.add(op.name)
        return ops.QueuePut(op.name)

    def _put_cron(self, op: ops.PutCron, conn: Any) -> ops.CronPut:
        with self.transaction(op.now) as tx:
            tx.cur.execute(
                self.q.q("put_cron"),
                {
                    "name": op.name,
                    "expression": op.expression,
                    "worker": op.worker,
                    "input": Jsonb(op.input),
                    "opts": Jsonb(dict(op.opts)),
                    "paused": op.paused,
                    "now": op.now,
                },
            )
        return ops.CronPut(op.name)

    # --- reads -----------------------------------------------------------------------------------

    def _read_job(self, op: ops.ReadJob, conn: Any) -> Job | ops.NotFound:
        rows = self.statement("read_job", {"id": op.job_id})
        return job_from_row(rows[0]) if rows else ops.NotFound(op.job_id)

    def _read_workflow(self, op: ops.ReadWorkflow, conn: Any) -> tuple[Job, ...]:
        with self.transaction(None) as tx:
            return tuple(job_from_row(r) for r in tx.all("read_workflow", {"workflow_id": op.workflow_id}))

    def _read_steps(self, op: ops.ReadSteps, conn: Any) -> tuple[Step, ...]:
        with self.transaction(None) as tx:
            return tuple(step_from_row(r) for r in tx.all("read_steps", {"job_id": op.job_id}))

    def _read_events(self, op: ops.ReadEvents, conn: Any) -> tuple[Event, ...]:
        with self.transaction(None) as tx:
            return tuple(Event(**r) for r in tx.all("read_events", {"job_id": op.job_id}))

    def _read_signals(self, op: ops.ReadSignals, conn: Any) -> tuple[Signal, ...]:
        with self.transaction(None) as tx:
            return tuple(Signal(**r) for r in tx.all("read_signals", {"scopes": list(op.scopes)}))


_HANDLERS = {
    ops.CheckCompat: PgStore._check_compat,
    ops.Enqueue: PgStore._enqueue,
    ops.EnqueueWorkflow: PgStore._enqueue_workflow,
    ops.DeliverSignal: PgStore._deliver_signal,
    ops.Steer: PgStore._steer,
    ops.ClearSignal: PgStore._clear_signal,
    ops.Cancel: PgStore._cancel,
    ops.Retry: PgStore._retry,
    ops.PutQueue: PgStore._put_queue,
    ops.PutCron: PgStore._put_cron,
    ops.ReadJob: PgStore._read_job,
    ops.ReadWorkflow: PgStore._read_workflow,
    ops.ReadSteps: PgStore._read_steps,
    ops.ReadEvents: PgStore._read_events,
    ops.ReadSignals: PgStore._read_signals,
}


_HANDLERS.update(WORKER_HANDLERS)
