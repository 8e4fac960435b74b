"""Cron expressions and due minute slots (contract §8.5), via the cronsim library.

Pure: the caller supplies `now`; slots are UTC-truncated minutes. The expression syntax check
(`parse_expression`) lives in model/validate.py, below the vocabulary that uses it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cronsim import CronSim

from model.ops import JobSpec
from model.rows import CronRow
from model.validate import minute_slot, parse_expression


@dataclass(frozen=True)
class CronDef:
    """A static cron definition (dynamic belay_crons rows merge over these by name)."""

    name: str
    expression: str
    worker: str
    input: Any = None
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 20

    def __post_init__(self) -> None:
        parse_expression(self.expression)  # a bad static expression fails at configuration, not in every sweep


def due_slots(expression: str, after: datetime, now: datetime) -> list[datetime]:
    """Minute slots s with after < s <= now that match the expression (UTC), ascending."""
    start = minute_slot(after)
    it = CronSim(expression, start.replace(tzinfo=UTC))
    slots = []
    end = minute_slot(now)
    for slot in it:
        if slot > end:
            break
        slots.append(slot.astimezone(UTC))
    return slots


def slot_matches(expression: str, slot: datetime) -> bool:
    """Whether the UTC minute `slot` is a firing time of the expression."""
    prev = slot - timedelta(minutes=1)
    return due_slots(expression, prev, slot) == [slot]


def effective_crons(static: Iterable[CronDef], rows: Iterable[CronRow]) -> list[CronDef]:
    """Dynamic belay_crons rows merge over static config by name; paused rows are skipped (§8.5)."""
    merged: dict[str, CronDef | None] = {c.name: c for c in static}
    for row in rows:
        if row.paused:
            merged[row.name] = None
            continue
        o = row.opts
        merged[row.name] = CronDef(
            row.name,
            row.expression,
            row.worker,
            row.input,
            o.get("queue", "default"),
            o.get("priority", 0),
            o.get("max_attempts", 20),
        )
    return [c for _, c in sorted(merged.items()) if c is not None]


def cron_plan(
    static: Iterable[CronDef],
    rows: Iterable[CronRow],
    since: datetime,
    now: datetime,
    queues: frozenset[str] | None = None,
) -> list[tuple[Any, ...]]:
    """(cron, slot) for every due minute slot in (since, now] of every effective cron, by name then slot;
    with `queues`, only the crons whose jobs go to one of those queues."""
    return [
        (c, slot)
        for c in effective_crons(static, rows)
        if queues is None or c.queue in queues
        for slot in due_slots(c.expression, since, now)
    ]


def cron_job(cron: CronDef, slot: datetime) -> JobSpec:
    """The job one cron slot inserts; the (cron_name, cron_slot) unique index makes it exactly-once."""
    return JobSpec(
        cron.queue,
        cron.worker,
        {} if cron.input is None else cron.input,
        priority=cron.priority,
        max_attempts=cron.max_attempts,
        cron_name=cron.name,
        cron_slot=slot,
    )
