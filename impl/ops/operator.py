"""Day-2 operations (spec/belay-operations.txt "Day-2 tooling"): the one surface behind the `belay`
operator commands (impl/ops/cli_ops.py) and the MCP server (impl/ops/mcp_server.py).

    Belay.stats / list_jobs / retry_job / cancel_job / pause_queue / steps / events / Replay.dry_run

Reads use the named queries of impl/store/sql/ops.sql and the store's read operations; every mutation is
an operation of the shared vocabulary (model/ops.py) applied through the Client SDK with `now` from
the caller's clock, so the CLI, the MCP server and a Python program change the database in exactly
the same way. Results are plain JSON-able dicts (what `--json` prints and MCP tools return).

Queue pause (contract §8.6: "Pause is SDK-local (stop claiming)"): this toolkit's extension is the
key `paused` in a queue's belay_queues options. Every reference node (the worker runtime and the
HTTP API) reconciles the row — merged key by key over its static options — within its queue
refresh interval and stops claiming from a paused queue; running jobs finish. Foreign SDKs may
ignore the key: for them a pause has no effect (use their own pause), and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from impl.client import Client, utc_now
from impl.ops.shapes import Refused, attempts_json, event_json, job_json, plain, retry_refusal, step_json
from model import ops
from model import worker_ops as w
from model.cron import CronDef
from model.queues import QueueOpts
from model.rows import STATES, CronRow, Event, Job, Step

RETENTION_DEFAULTS = {"succeeded": 86400, "failed": 7 * 86400, "cancelled": 7 * 86400}


SIGNAL_TTL_DEFAULT = 7 * 86400


@dataclass(frozen=True)
class Page:
    jobs: tuple[Job, ...]
    next_after: int | None  # pass as `after` for the next page; None on the last page


class Operator:
    """The day-2 surface over one database. `clock` supplies `now` for every mutation."""

    def __init__(self, conninfo: str, *, schema: str = "public", clock: Callable[[], datetime] = utc_now) -> None:
        self.conninfo = conninfo
        self.schema = schema
        self.clock = clock
        self.client = Client(conninfo, schema=schema, clock=clock, pool_size=2)
        self.store = self.client.store

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Operator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, name: str, params: dict | None = None) -> list[dict]:
        with self.store.transaction(None) as tx:
            return tx.all(name, params or {})

    # --- reads ---------------------------------------------------------------------------------------

    def stats(self) -> dict[str, dict[str, int]]:
        """Belay.stats: {queue: {state: count}} (states with no jobs are left out)."""
        out: dict[str, dict[str, int]] = {}
        for r in self._rows("ops_stats"):
            out.setdefault(r["queue"], {})[r["state"]] = r["n"]
        return out

    def list_jobs(
        self,
        *,
        states: Iterable[str] = (),
        queue: str | None = None,
        kind: str | None = None,
        workflow_id: str | None = None,
        parent_id: int | None = None,
        error: str | None = None,
        limit: int = 50,
        after: int | None = None,
    ) -> Page:
        """Belay.list_jobs: newest first; `after` continues from the previous page's `next_after`.
        `parent_id`: children of that job; `error`: text (case-insensitive) in any recorded error's
        class or detail."""
        from impl.store.pgrows import job_from_row

        states = tuple(states)
        bad = sorted(set(states) - set(STATES))
        if bad:
            raise Refused("invalid", f"unknown state {', '.join(bad)}; states are {', '.join(STATES)}")
        if not 1 <= limit <= 1000:
            raise Refused("invalid", f"limit must be between 1 and 1000, got {limit}")
        rows = self._rows(
            "ops_jobs_page",
            {
                "after": after,
                "states": list(states) or None,
                "queue": queue,
                "kind": kind,
                "workflow_id": workflow_id,
                "parent_id": parent_id,
                "error": None if not error else "%" + _like_escape(error) + "%",
                "limit": limit,
            },
        )
        jobs = tuple(job_from_row(r) for r in rows)
        return Page(jobs, jobs[-1].id if len(jobs) == limit else None)

    def job(self, job_id: int) -> Job:
        job = self.client.job(job_id)
        if job is None:
            raise Refused("not_found", f"job {job_id} does not exist (it may have been pruned)")
        return job

    def steps(self, job_id: int) -> tuple[Step, ...]:
        self.job(job_id)
        return self.client.steps(job_id)

    def events(self, job_id: int, after: int = 0) -> tuple[Event, ...]:
        self.job(job_id)
        return tuple(Event(**r) for r in self._rows("ops_events_after", {"job_id": job_id, "after": after}))

    def children(self, job_id: int) -> tuple[Job, ...]:
        from impl.store.pgrows import job_from_row

        return tuple(job_from_row(r) for r in self._rows("ops_children", {"parent_id": job_id}))

    def workflow(self, workflow_id: str) -> tuple[Job, ...]:
        jobs = self.client.workflow(workflow_id)
        if not jobs:
            raise Refused("not_found", f"workflow {workflow_id!r} has no jobs")
        return jobs

    def journal(self, job_id: int) -> dict[str, Any]:
        """`belay jobs show`: the job with its journal — attempts and errors, steps with costs,
        events, children, and the signals in its own scope (job:<id>) and the scope it awaits."""
        job = self.job(job_id)
        steps = self.client.steps(job_id)
        scopes = [f"job:{job_id}"]
        if job.await_scope and job.await_scope not in scopes:
            scopes.append(job.await_scope)
        return {
            "job": job_json(job, full=True),
            "attempts": attempts_json(job),
            "steps": [step_json(s) for s in steps],
            "cost": {"usd_micros": sum(s.usd_micros for s in steps), "tokens": sum(s.tokens for s in steps)},
            "events": [event_json(e) for e in self.client.events(job_id)],
            "children": [job_json(c) for c in self.children(job_id)],
            "signals": [
                {"scope": s.scope, "name": s.name, "payload": plain(s.payload), "inserted_at": plain(s.inserted_at)}
                for s in self.client.signals(*scopes)
            ],
        }

    def queues(self, name: str | None = None) -> list[dict[str, Any]]:
        """`belay queue show`: belay_queues rows with the options a reference node would run with
        (over default static options) and each queue's job counts."""
        rows = self._rows("ops_queue_rows", {"name": name})
        stats = self.stats()
        if name is not None and not rows and name not in stats:
            raise Refused("not_found", f"queue {name!r} has no belay_queues row and no jobs")
        names = [name] if name is not None else sorted({r["name"] for r in rows} | set(stats))
        by_name = {r["name"]: r for r in rows}
        out = []
        for n in names:
            row = by_name.get(n)
            opts = row["opts"] if row else {}
            out.append(
                {
                    "name": n,
                    "opts": plain(opts),
                    "paused": bool(opts.get("paused", False)),
                    "updated_at": plain(row["updated_at"]) if row else None,
                    "counts": stats.get(n, {}),
                }
            )
        return out

    # --- mutations (the Client SDK's operations) ---------------------------------------------------------

    def retry(self, job_id: int) -> dict[str, Any]:
        result = self.client.retry(job_id)
        refusal = retry_refusal(job_id, result, self.client.job, self.client.workflow)
        if refusal is not None:
            raise refusal
        assert isinstance(result, ops.Retried)
        return {"job_id": job_id, "retried": True, "state": result.state}

    def cancel(self, job_id: int) -> dict[str, Any]:
        result = self.client.cancel(job_id)
        if isinstance(result, ops.Cancelled):
            return {"job_id": job_id, "cancelled": True, "state": "cancelled"}
        if isinstance(result, ops.CancelRequested):
            return {
                "job_id": job_id,
                "cancelled": False,
                "state": "running",
                "cancel_requested": True,
                "note": "the job is running: it stops at its next step boundary",
            }
        if isinstance(result, ops.NotFound):
            raise Refused("not_found", f"job {job_id} does not exist")
        if isinstance(result, ops.NotCancellable):
            raise Refused("not_cancellable", f"job {job_id} is already {result.state}; nothing was changed")
        raise AssertionError(result)  # pragma: no cover

    def signal(self, scope: str, name: str, payload: Any = None) -> dict[str, Any]:
        try:
            result = self.client.signal(scope, name, payload)
        except ops.InvalidInput as exc:
            raise Refused("invalid", str(exc)) from None
        return {"scope": scope, "name": name, "woken": list(result.woken)}

    def steer(self, job_id: int, payload: Any) -> dict[str, Any]:
        try:
            result = self.client.steer(job_id, payload)
        except ops.InvalidInput as exc:
            raise Refused("invalid", str(exc)) from None
        if isinstance(result, ops.NotFound):
            raise Refused("not_found", f"job {job_id} does not exist")
        return {"job_id": job_id, "steered": True, "woken": list(result.woken)}

    def _queue_row(self, name: str) -> dict[str, Any] | None:
        rows = self._rows("ops_queue_rows", {"name": name})
        return dict(rows[0]["opts"]) if rows else None

    def put_queue(self, name: str, opts: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a queue's options; its pause state is kept unless `opts` names `paused`."""
        opts = dict(opts)
        current = self._queue_row(name)
        if "paused" not in opts and current and current.get("paused"):
            opts["paused"] = True
        return self._put(name, opts)

    def merge_queue(self, name: str, opts: Mapping[str, Any]) -> dict[str, Any]:
        """Merge `opts` over a queue's current options key by key; a key given as None is removed.
        Keys not named (the pause state among them) are kept."""
        merged = self._queue_row(name) or {}
        for key, value in opts.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return self._put(name, merged)

    def pause(self, name: str, *, create: bool = False) -> dict[str, Any]:
        """Pause a queue (its other options kept). A queue with neither a belay_queues row nor jobs is
        refused as a likely typo unless `create` (a queue whose jobs have not arrived yet)."""
        return self._set_paused(name, True, create)

    def resume(self, name: str) -> dict[str, Any]:
        return self._set_paused(name, False, False)

    def _set_paused(self, name: str, paused: bool, create: bool) -> dict[str, Any]:
        row = self._queue_row(name)
        if row is None and not create and not self._rows("ops_queue_has_jobs", {"name": name})[0]["found"]:
            raise Refused(
                "not_found",
                f"queue {name!r} has no belay_queues row and no jobs (a typo?); nothing was changed — "
                f"`belay queue pause {name} --create` pauses it anyway, `belay queue put {name}` creates it",
            )
        opts = row or {}
        if paused:
            opts["paused"] = True
        else:
            opts.pop("paused", None)
        return self._put(name, opts)

    def delete_queue(self, name: str) -> dict[str, Any]:
        """Remove a queue's belay_queues row: nodes run it on their static options again (its jobs stay)."""
        rows = self._rows("ops_delete_queue", {"name": name})
        if not rows:
            raise Refused("not_found", f"queue {name!r} has no belay_queues row; nothing was changed")
        return {"name": name, "deleted": True, "opts": plain(rows[0]["opts"])}

    def _put(self, name: str, opts: dict[str, Any]) -> dict[str, Any]:
        try:
            QueueOpts.parse(opts)
            self.store.apply(ops.PutQueue(self.clock(), name, opts))
        except ops.InvalidInput as exc:
            raise Refused("invalid", f"queue {name!r}: {exc}; nothing was changed") from None
        return {"name": name, "opts": plain(opts), "paused": bool(opts.get("paused", False))}

    # --- crons (§8.5): belay_crons rows merged over the static crons of an app's registry -----------------

    def crons(self, name: str | None = None, *, static: Sequence[CronDef] = (), slots: int = 3) -> list[dict[str, Any]]:
        """`belay cron list`: every cron — belay_crons rows merged by name over `static` (the crons
        declared beside an app's kinds, `Registry.static_crons()`) — with its next `slots` due UTC
        minute slots (none while paused) and the last job it fired."""
        from model.cron import effective_crons

        rows = {r["name"]: CronRow(**r) for r in self._rows("ops_cron_rows", {"name": name})}
        declared = {c.name: c for c in static if name is None or c.name == name}
        if name is not None and not rows and not declared:
            raise Refused(
                "not_found",
                f"cron {name!r} has no belay_crons row"
                + ("" if static else " (a cron declared in an app's registry is listed with --app MODULE)"),
            )
        live = {c.name: c for c in effective_crons(declared.values(), rows.values())}
        now = self.clock()
        out = []
        for n in sorted(set(rows) | set(declared)):
            row, cron = rows.get(n), live.get(n)
            shown = cron or (
                CronDef(n, row.expression, row.worker, row.input, **_cron_opts(row.opts)) if row else declared[n]
            )
            last = self._rows("ops_cron_last_fired", {"name": n})
            out.append(
                {
                    "name": n,
                    "expression": shown.expression,
                    "kind": shown.worker,
                    "queue": shown.queue,
                    "input": plain(shown.input),
                    "priority": shown.priority,
                    "max_attempts": shown.max_attempts,
                    "paused": cron is None,
                    "source": ("row over static" if n in declared else "row") if row else "static",
                    "updated_at": plain(row.updated_at) if row else None,
                    "next_slots": [] if cron is None else [plain(s) for s in next_slots(shown.expression, now, slots)],
                    "last_fired": (
                        {"job_id": last[0]["id"], "state": last[0]["state"], "slot": plain(last[0]["cron_slot"])}
                        if last
                        else None
                    ),
                }
            )
        return out

    def put_cron(
        self,
        name: str,
        expression: str,
        kind: str,
        input: Any = None,
        opts: Mapping[str, Any] | None = None,
        *,
        paused: bool | None = None,
    ) -> dict[str, Any]:
        """Create or replace a belay_crons row (merged over a static cron of the same name by every
        node); its pause state is kept unless `paused` is given."""
        current = self._rows("ops_cron_rows", {"name": name})
        keep = bool(current[0]["paused"]) if current else False
        try:
            self.client.put_cron(
                name, expression, kind, input, opts=dict(opts or {}), paused=keep if paused is None else paused
            )
        except ops.InvalidInput as exc:
            raise Refused("invalid", f"cron {name!r}: {exc}; nothing was changed") from None
        return self.crons(name)[0]

    def set_cron_paused(self, name: str, paused: bool, *, static: Sequence[CronDef] = ()) -> dict[str, Any]:
        """Pause (or resume) a cron: its row's `paused`; a static cron without a row gets a row that
        copies it (a paused row silences the static cron on every node)."""
        rows = self._rows("ops_cron_rows", {"name": name})
        if rows:
            r = CronRow(**rows[0])
            expression, kind, input, opts = r.expression, r.worker, r.input, dict(r.opts)
        else:
            found = [c for c in static if c.name == name]
            if not found:
                raise Refused(
                    "not_found",
                    f"cron {name!r} has no belay_crons row"
                    + ("" if static else " (to pause a cron declared in an app's registry, pass --app MODULE)")
                    + "; nothing was changed",
                )
            c = found[0]
            expression, kind, input = c.expression, c.worker, c.input
            opts = {"queue": c.queue, "priority": c.priority, "max_attempts": c.max_attempts}
        return self.put_cron(name, expression, kind, input, opts, paused=paused) | (
            {} if rows else {"source": "row over static"}
        )

    def delete_cron(self, name: str) -> dict[str, Any]:
        """Remove a belay_crons row (a static cron of the same name, if any, fires again)."""
        if not self._rows("ops_delete_cron", {"name": name}):
            raise Refused("not_found", f"cron {name!r} has no belay_crons row; nothing was changed")
        return {"name": name, "deleted": True}

    # --- retention ---------------------------------------------------------------------------------------

    def prune(
        self,
        retention: Mapping[str, int | None] | None = None,
        signal_ttl: int | None = SIGNAL_TTL_DEFAULT,
        *,
        dry_run: bool = True,
        batch: int = 500,
    ) -> dict[str, Any]:
        """§8.7 retention now. Dry-run: what a prune at `now` would delete (jobs per state with their
        steps and events, signals past TTL, rate windows); otherwise prune in batches until done."""
        retention = dict(RETENTION_DEFAULTS if retention is None else retention)
        now = self.clock()
        try:
            op = w.Prune(now, retention, signal_ttl, batch)
        except ops.InvalidInput as exc:
            raise Refused("invalid", str(exc)) from None

        def before(state: str) -> datetime | None:
            keep = retention.get(state)
            return None if keep is None else now - timedelta(seconds=keep)

        if dry_run:
            rows = self._rows("ops_prune_preview", {s + "_before": before(s) for s in RETENTION_DEFAULTS})
            other = self._rows(
                "ops_prune_preview_other",
                {
                    "signals_before": None if signal_ttl is None else now - timedelta(seconds=signal_ttl),
                    "rate_before": now - timedelta(days=1),
                },
            )[0]
            return {
                "dry_run": True,
                "now": plain(now),
                "retention": retention,
                "signal_ttl": signal_ttl,
                "jobs": {r["state"]: r["jobs"] for r in rows},
                "steps": sum(r["steps"] for r in rows),
                "events": sum(r["events"] for r in rows),
                "signals": other["signals"],
                "rate_windows": other["rate"],
            }
        jobs: list[int] = []
        signals = rate = 0
        while True:
            pruned = self.store.apply(op)
            jobs.extend(pruned.jobs)
            signals += pruned.signals
            rate += pruned.rate_windows
            if len(pruned.jobs) < batch:
                break
        return {
            "dry_run": False,
            "now": plain(now),
            "retention": retention,
            "signal_ttl": signal_ttl,
            "pruned_jobs": len(jobs),
            "signals": signals,
            "rate_windows": rate,
        }


def next_slots(expression: str, now: datetime, n: int) -> list[datetime]:
    """The next `n` UTC minute slots of `expression` after the minute of `now`."""
    from cronsim import CronSim

    from model.validate import minute_slot

    it = CronSim(expression, minute_slot(now))
    return [next(it).astimezone(UTC) for _ in range(n)]


def _cron_opts(opts: Mapping[str, Any]) -> dict[str, Any]:
    return {k: opts[k] for k in ("queue", "priority", "max_attempts") if k in opts}


def _like_escape(text: str) -> str:
    """A LIKE pattern matching `text` literally (backslash is PostgreSQL's default escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def stats_reader(store: Any) -> Callable[[], dict[str, dict[str, int]]]:
    """Queue depth from a PgStore (the Prometheus gauge reads it at scrape time)."""

    def read() -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        with store.transaction(None) as tx:
            for r in tx.all("ops_stats"):
                out.setdefault(r["queue"], {})[r["state"]] = r["n"]
        return out

    return read
