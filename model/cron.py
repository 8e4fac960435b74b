"""Cron expressions and due minute slots (contract §8.5), via the cronsim library.

Pure: the caller supplies `now`; slots are UTC-truncated minutes.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from cronsim import CronSim, CronSimError

from model.ops import InvalidInput, minute_slot


def parse_expression(expression: str) -> None:
    """Refuse an expression cronsim cannot read, with its reason."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidInput("cron expression must be a non-empty string like '*/5 * * * *'")
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=timezone.utc))
    except (CronSimError, ValueError) as exc:
        raise InvalidInput(f"invalid cron expression {expression!r}: {exc}") from None


def due_slots(expression: str, after: datetime, now: datetime) -> list[datetime]:
    """Minute slots s with after < s <= now that match the expression (UTC), ascending."""
    start = minute_slot(after)
    it = CronSim(expression, start.replace(tzinfo=timezone.utc))
    slots = []
    end = minute_slot(now)
    for slot in it:
        if slot > end:
            break
        slots.append(slot.astimezone(timezone.utc))
    return slots


def slot_matches(expression: str, slot: datetime) -> bool:
    """Whether the UTC minute `slot` is a firing time of the expression."""
    prev = slot - timedelta(minutes=1)
    return due_slots(expression, prev, slot) == [slot]
