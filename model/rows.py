"""Row types: the observable state of a Belay database, as frozen data (contract §3).

Both the model and the Postgres store return these. Every field is a column named by the contract
or by docs/decisions.md's §3 column table; nothing here depends on column order, so unknown columns added
by newer migrations are simply not read (contract §1).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

# §4: the eight states; the last three are terminal.
STATES = ("ready", "running", "awaiting", "held", "paused", "succeeded", "failed", "cancelled")
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
INCOMPLETE = frozenset(STATES) - TERMINAL
UNIQUE_MODES = ("incomplete", "window", "always")


@dataclass(frozen=True)
class Job:
    """One belay_jobs row."""

    id: int
    queue: str
    worker: str  # the kind: a registry name each SDK maps to code
    input: Any
    meta: Any
    state: str
    priority: int
    attempt: int
    max_attempts: int
    ready_at: datetime | None
    inserted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_until: datetime | None
    leased_by: str | None
    errors: list[dict[str, Any]]  # [{attempt, at, error, detail}]
    result: bytes | None  # §2 envelope
    cancel_requested: bool
    unique_key: str | None
    unique_mode: str | None
    cron_name: str | None
    cron_slot: datetime | None
    workflow_id: str | None
    wf_name: str | None
    wf_deps: tuple[str, ...] | None
    wf_ignore: tuple[str, ...] | None
    parent_id: int | None
    await_scope: str | None
    await_name: str | None
    budget_usd_micros: int | None
    budget_tokens: int | None
    spent_usd_micros: int
    spent_tokens: int

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


@dataclass(frozen=True)
class Step:
    """One belay_steps row: a journaled step value (§8.2); immutable once written."""

    job_id: int
    seq: int
    name: str
    value: bytes
    usd_micros: int
    tokens: int
    inserted_at: datetime


@dataclass(frozen=True)
class Event:
    """One belay_events row: the append-only stream a job emits."""

    job_id: int
    seq: int
    payload: Any
    inserted_at: datetime


@dataclass(frozen=True)
class Signal:
    """One belay_signals row: upsert-latest, persistent until cleared or pruned (§8.1)."""

    scope: str
    name: str
    payload: Any
    inserted_at: datetime


@dataclass(frozen=True)
class RateWindow:
    """One belay_rate row: a sliding-window counter (§6)."""

    bucket: str
    window_start: datetime
    count: int


@dataclass(frozen=True)
class QueueRow:
    """One belay_queues row: runtime queue options reconciled by every node."""

    name: str
    opts: Any
    updated_at: datetime


@dataclass(frozen=True)
class CronRow:
    """One belay_crons row: a dynamic cron that merges over static config by name (§8.5)."""

    name: str
    expression: str
    worker: str
    input: Any
    opts: Any
    paused: bool
    updated_at: datetime


def column_names(row_type: type) -> tuple[str, ...]:
    """The columns a row type reads, in declaration order (used to build explicit SELECT lists)."""
    return tuple(f.name for f in fields(row_type))


JOB_COLUMNS = column_names(Job)
