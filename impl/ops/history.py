"""A job's history (`belay replay ID` without --app; "what did it actually do?"): its attempts and errors,
the journal in order (steps with values and costs, `$sleep:` and `$spawn:` entries), children, events,
the signals it awaits, and its outcome — plus a timeline of all of these by time. Everything is read in
one READ ONLY, REPEATABLE READ transaction (`_Snapshot`, which the replay (replay.py) reads too).
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from impl.ops.shapes import attempts_json, event_json, job_json, plain, step_json
from impl.store.pgrows import job_from_row, step_from_row
from impl.store.queries import SchemaSQL
from model.envelope import decode
from model.rows import Event, Job, Signal, Step

SLEEP, SPAWN = "$sleep:", "$spawn:"


class ReplayError(Exception):
    """The replay could not run (unknown job, unknown kind, no registry); nothing was read or written."""


class _Snapshot:
    """One READ ONLY, REPEATABLE READ transaction: every read of a replay sees the same state, and
    PostgreSQL refuses any write on it."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self.q = SchemaSQL(schema)
        self.conn = psycopg.connect(conninfo, row_factory=dict_row, application_name="belay-replay")
        self.conn.read_only = True
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.lock = threading.Lock()

    def rows(self, name: str, params: dict) -> list[dict]:
        with self.lock:
            return self.conn.execute(self.q.q(name), params).fetchall()

    def close(self) -> None:
        self.conn.rollback()
        self.conn.close()

    def job(self, job_id: int) -> Job | None:
        rows = self.rows("read_job", {"id": job_id})
        return job_from_row(rows[0]) if rows else None

    def steps(self, job_id: int) -> list[Step]:
        return [step_from_row(r) for r in self.rows("read_steps", {"job_id": job_id})]

    def events(self, job_id: int) -> list[Event]:
        return [Event(**r) for r in self.rows("read_events", {"job_id": job_id})]

    def children(self, job_id: int) -> list[Job]:
        return [job_from_row(r) for r in self.rows("ops_children", {"parent_id": job_id})]

    def signals(self, *scopes: str) -> list[Signal]:
        return [Signal(**r) for r in self.rows("read_signals", {"scopes": list(scopes)})]

    def signal(self, scope: str, name: str) -> Signal | None:
        return next((s for s in self.signals(scope) if s.name == name), None)


def _entry(step: Step) -> dict[str, Any]:
    out = step_json(step)
    if step.name.startswith(SLEEP):
        out.update(type="sleep", sleep=step.name[len(SLEEP) :], until=out["value"])
    elif step.name.startswith(SPAWN):
        out.update(type="spawn", spawn=step.name[len(SPAWN) :], children=out["value"])
    else:
        out["type"] = "step"
    return out


def _history(snap: _Snapshot, job: Job) -> dict[str, Any]:
    steps = snap.steps(job.id)
    events = snap.events(job.id)
    children = snap.children(job.id)
    scopes = [f"job:{job.id}"] + ([job.await_scope] if job.await_scope and job.await_scope != f"job:{job.id}" else [])
    signals = snap.signals(*scopes)
    outcome: dict[str, Any] = {"state": job.state, "finished_at": plain(job.finished_at)}
    if job.state == "succeeded":
        outcome["result"] = plain(decode(job.result))
    elif job.errors:
        outcome["last_error"] = plain(job.errors[-1])
    if job.state == "awaiting":
        outcome["awaiting"] = {"scope": job.await_scope, "name": job.await_name, "deadline": plain(job.ready_at)}
    timeline: list[tuple[datetime, int, str]] = [(job.inserted_at, 0, "inserted")]
    if job.started_at:
        timeline.append((job.started_at, 1, "first claimed (attempt 1)"))
    for s in steps:
        e = _entry(s)
        what = {
            "sleep": f"slept {e.get('sleep')!r} until {e.get('until')}",
            "spawn": f"spawned {e.get('spawn')!r}: children {e.get('children')}",
        }.get(
            e["type"],
            f"step {s.name!r} = {_short(e['value'])}"
            + (f" (cost {s.usd_micros} µ$, {s.tokens} tokens)" if s.usd_micros or s.tokens else ""),
        )
        timeline.append((s.inserted_at, 2, f"#{s.seq} {what}"))
    for ev in events:
        timeline.append((ev.inserted_at, 3, f"event {ev.seq}: {_short(plain(ev.payload))}"))
    for sig in signals:
        timeline.append((sig.inserted_at, 4, f"signal {sig.name!r} in {sig.scope!r}: {_short(plain(sig.payload))}"))
    for err in job.errors or []:
        try:
            at = datetime.fromisoformat(str(err.get("at")))
        except ValueError:
            continue
        detail = err.get("detail")  # often `Class: message` already: the class is printed once (issue 29)
        head = "" if isinstance(detail, str) and detail.startswith(f"{err.get('error')}:") else f"{err.get('error')}: "
        timeline.append((at, 5, f"attempt {err.get('attempt')} error {head}{_short(detail)}"))
    if job.finished_at:
        timeline.append((job.finished_at, 6, f"finished: {job.state}"))
    timeline.sort(key=lambda t: (t[0], t[1]))
    return {
        "job": job_json(job, full=True),
        "attempts": attempts_json(job),
        "journal": [_entry(s) for s in steps],
        "cost": {"usd_micros": sum(s.usd_micros for s in steps), "tokens": sum(s.tokens for s in steps)},
        "sleeps": [_entry(s) for s in steps if s.name.startswith(SLEEP)],
        "children": [job_json(c) for c in children],
        "events": [event_json(e) for e in events],
        "signals": [
            {"scope": s.scope, "name": s.name, "payload": plain(s.payload), "inserted_at": plain(s.inserted_at)}
            for s in signals
        ],
        "outcome": outcome,
        "timeline": [{"at": plain(at), "what": what} for at, _, what in timeline],
    }


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def history(conninfo: str, job_id: int, *, schema: str = "public") -> dict[str, Any]:
    """What the job did, from the database alone (see the module docstring)."""
    snap = _Snapshot(conninfo, schema)
    try:
        job = snap.job(job_id)
        if job is None:
            raise ReplayError(f"job {job_id} does not exist (it may have been pruned)")
        return _history(snap, job)
    finally:
        snap.close()
