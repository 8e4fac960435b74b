"""The HTTP API's operations over the Belay tables: every write is a PgStore operation of the shared
vocabulary, or a transaction composed from its named queries (impl/store/sql/*.sql, http.sql).

Mapping (see impl/http/__init__.py for the route table):
  queue        a belay_queues row (its optional `cleanup` policy in opts)
  task         a belay_jobs row: task_name = worker, params = input, headers = meta, max_attempts kept,
               the rest journaled as the `$http:task` step (impl/http/tasks.py)
  run          one attempt: run_<job>_<attempt>; every run write is §7-fenced on (id, running, attempt)
  checkpoint   versioned steps `$checkpoint:<name>#<n>` of the task (impl/http/checkpoints.py): PUT
               journals the next version, GET reads the latest; written only by the task's live run
  event        a signal in the one API-wide scope `http:events`, delivered under the scope lock
  workflow run a record (signal row in scope `http:workflow-runs`); its tasks share workflow_id

Every method takes `now`: the request handler reads the clock once and passes it down (clock rule).
Expected failures raise `ApiError` (the spec's Error schema); bad input never reaches the store.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from impl.http import errors as e
from impl.http import sql as http_sql
from impl.http.base import DEFAULT_TTL, EVENT_SCOPE, SweepReport, cleanup_policy
from impl.http.errors import iso
from impl.http.runs import RunOps
from impl.http.workflow_runs import WorkflowOps
from model import worker_ops as w


class HttpService(RunOps, WorkflowOps):
    """The operations behind the routes; thread-safe (the store's pool hands out connections).

    The groups live beside it: the base and its helpers (impl/http/base.py), tasks and runs
    (impl/http/runs.py), checkpoints, events and workflow runs (impl/http/workflow_runs.py); here are
    the queues and the sweeper."""

    # --- queues -------------------------------------------------------------------------------------

    @staticmethod
    def _queue_json(row: dict) -> dict:
        return {"name": row["name"], "created_at": iso(row["updated_at"]), "cleanup": cleanup_policy(row["opts"])}

    def list_queues(self, now: datetime) -> dict:
        return {"queues": [self._queue_json(r) for r in self.store.statement("http_queue_list", {})]}

    def create_queue(self, now: datetime, body: Any) -> dict:
        body = e.obj(body)
        name = e.string(body, "name", required=True, name=True)
        opts: dict[str, Any] = {}
        if "cleanup" in body:
            cleanup = e.obj(body["cleanup"], "cleanup")
            opts["cleanup"] = {
                "task_ttl_seconds": e.integer(cleanup, "task_ttl_seconds", minimum=0, default=DEFAULT_TTL),
                "event_ttl_seconds": e.integer(cleanup, "event_ttl_seconds", minimum=0, default=DEFAULT_TTL),
            }
        row = self._one("http_queue_insert", {"name": name, "opts": Jsonb(opts), "now": now})
        if row is None:
            raise e.conflict(f"queue {name!r} already exists", "QUEUE_EXISTS")
        self.on_ready(name)
        return self._queue_json(row)

    def delete_queue(self, now: datetime, name: str) -> None:
        if "\x00" in name:
            raise self._no_such_queue(name)
        with self.store.transaction(now) as tx:
            if tx.one("http_queue_lock", {"name": name}) is None:
                raise e.not_found(f"queue {name!r} does not exist", "QUEUE_NOT_FOUND")
            pinned = tx.one("http_queue_pinned", {"name": name})["n"]
            if pinned:
                raise e.conflict(
                    f"queue {name!r} still has {pinned} task(s) that are not finished (or belong "
                    "to a workflow still running): nothing was deleted",
                    "QUEUE_NOT_EMPTY",
                )
            ids = [r["id"] for r in tx.all("http_queue_purge", {"name": name})]
            if ids:
                tx.cur.execute(self.store.q.q("prune_steps"), {"ids": ids})
                tx.cur.execute(self.store.q.q("prune_events"), {"ids": ids})
            tx.cur.execute(self.store.q.q("http_queue_delete"), {"name": name})

    def queue_stats(self, now: datetime, name: str) -> dict:
        self._queue(name)
        row = self._one("http_queue_stats", {"name": name, "now": now})
        oldest = row["oldest_pending"]
        return {
            "queue_name": name,
            "pending_runs": row["pending"],
            "claimed_runs": row["claimed"],
            "completed_runs": row["completed"],
            "oldest_pending_run_age_seconds": None if oldest is None else max((now - oldest).total_seconds(), 0.0),
        }

    # --- the sweeper --------------------------------------------------------------------------------

    def sweep_once(self, now: datetime, *, batch: int = 500) -> SweepReport:
        """Reclaim expired claims (claimable again at once, or failed when attempts are spent), cancel
        tasks past their start/execution deadlines, and apply every queue's cleanup policy."""
        report = SweepReport()
        while True:  # the contract's §6 reclaim, of HTTP tasks only (impl/http/sql.py expired_http)
            retried, failed = self._reclaim_http(now, batch)
            report.requeued += retried
            report.failed += failed
            if len(retried) + len(failed) < batch:
                break
        if report.requeued or report.failed:
            self.on_ready(None)
        for row in self.store.statement("http_timed_out", {"now": now, "limit": batch}):
            if self.cancel_task(now, row["id"], row["reason"], state=row["state"], attempt=row["attempt"]):
                report.timed_out.append(row["id"])
        policies = [(r["name"], cleanup_policy(r["opts"])) for r in self.store.statement("http_queue_list", {})]
        for queue, policy in policies:
            if policy["task_ttl_seconds"]:
                report.pruned_tasks += self._prune_tasks(now, queue, policy["task_ttl_seconds"], batch)
        ttls = [p["event_ttl_seconds"] for _, p in policies] or [DEFAULT_TTL]
        if 0 not in ttls:  # events are API-wide: kept while any queue's policy still wants them
            with self.store.transaction(now) as tx:
                report.pruned_events = tx.cur.execute(
                    self.store.q.q("http_prune_events"),
                    {"scope": EVENT_SCOPE, "before": now - timedelta(seconds=max(ttls))},
                ).rowcount
        return report

    def _reclaim_http(self, now: datetime, batch: int) -> tuple[list[int], list[int]]:
        """One §6 reclaim pass (contract §6: "Any node reclaims expirees: select running AND
        lease_until <= $now FOR UPDATE SKIP LOCKED, then per row apply outcome retry (attempt < max) or
        failed with error {"error":"lease_expired"} — including full §7 settlement"), over the HTTP
        tasks only: the rows and outcomes are the contract's (reclaim_many, the worker's statement),
        ready at once (no backoff). (requeued, failed) ids."""
        with self.store.transaction(now) as tx:
            expired = tx.cur.execute(
                http_sql.query("expired_http", self.store.schema), {"now": now, "node": self.node, "limit": batch}
            ).fetchall()
            if not expired:
                return [], []
            base = w.error_entry(0, now, "lease_expired", None)
            del base["attempt"]
            rows = tx.all(
                "reclaim_many",
                {"ids": [r["id"] for r in expired], "ready_ats": [now] * len(expired), "base": Jsonb(base), "now": now},
            )
            rows.sort(key=lambda r: r["id"])
            retried = [r for r in rows if r["state"] == "ready"]
            failed = [r for r in rows if r["state"] == "failed"]
            tx.pokes.update(r["queue"] for r in retried)
            self.store._terminal(tx, failed)
        return [r["id"] for r in retried], [r["id"] for r in failed]

    def _prune_tasks(self, now: datetime, queue: str, ttl: int, batch: int) -> list[int]:
        pruned: list[int] = []
        while True:
            with self.store.transaction(now) as tx:
                ids = [
                    r["id"]
                    for r in tx.all(
                        "http_prune_tasks", {"queue": queue, "limit": batch, "before": now - timedelta(seconds=ttl)}
                    )
                ]
                if ids:
                    tx.cur.execute(self.store.q.q("prune_steps"), {"ids": ids})
                    tx.cur.execute(self.store.q.q("prune_events"), {"ids": ids})
            pruned += ids
            if len(ids) < batch:
                return pruned
