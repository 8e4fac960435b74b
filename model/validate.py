"""Input validation shared by the vocabulary (`model/ops.py`), queue options (`model/queues.py`) and
cron (`model/cron.py`): the lowest layer of model/, importing nothing from the project.

"Bad input gets a clear error and changes nothing" (the project's rule): every check raises `InvalidInput` (a
ValueError) with what was wrong. Column limits follow the schema (contract §3): names are bound as
parameters and at most MAX_NAME_BYTES; integers fit their int4/int8 columns; JSON is what jsonb can
store. `model.ops` re-exports these names, so `model.ops.InvalidInput` stays the public spelling.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from cronsim import CronSim, CronSimError

MAX_NAME_BYTES = 255  # queue, worker, scope, signal and member names: data, bound as parameters
INT4_MAX = 2**31 - 1  # integer columns (attempt, max_attempts, priority, seq)
INT8_MAX = 2**63 - 1  # bigint columns (ids, budgets, spend)
SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class InvalidInput(ValueError):
    """An operation was built with input the contract does not allow; nothing was changed."""


def require_aware(value: datetime | None, what: str) -> None:
    if value is None:
        return
    if not isinstance(value, datetime):
        raise InvalidInput(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{what} must be timezone-aware (UTC), got naive {value.isoformat()}")


def require_name(value: Any, what: str) -> None:
    if type(value) is str and value.isascii() and 0 < len(value) <= MAX_NAME_BYTES and "\x00" not in value:
        return  # the common case, decided without encoding (ASCII: one byte per character)
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, got {value!r}")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} is not valid UTF-8 text (it holds a lone surrogate)") from None
    if len(value.encode()) > MAX_NAME_BYTES:
        raise InvalidInput(f"{what} is {len(value.encode())} bytes; the limit is {MAX_NAME_BYTES}")
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain NUL characters")


def _json_text(value: Any, what: str) -> str:
    """The value's JSON text, refused when jsonb could not store it: NaN/Infinity, NUL, lone surrogates."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} holds a string that is not valid UTF-8 (a lone surrogate)") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"{what} must be JSON (dicts, lists, str, int, float, bool, None): {exc}") from None
    if "\\u0000" in text or "\x00" in text:
        raise InvalidInput(f"{what} contains a NUL character, which jsonb cannot store")
    return text


def require_json(value: Any, what: str) -> None:
    """JSON-encodable with no NaN/Infinity (jsonb rejects them), no NUL and valid UTF-8 strings."""
    _json_text(value, what)


def as_json(value: Any, what: str) -> Any:
    """The value as a jsonb column gives it back: validated, then keys made strings and tuples lists
    (a JSON round trip), so the model stores exactly what PostgreSQL would.

    The values that are their own round trip — None, booleans, integers, strings, an empty dict or list —
    skip the encode/decode (bulk enqueue builds thousands of specs with `{}` meta and small inputs); a
    string is still checked for NUL and lone surrogates."""
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return value
    if kind is str:
        if "\x00" in value:
            raise InvalidInput(f"{what} contains a NUL character, which jsonb cannot store")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(f"{what} holds a string that is not valid UTF-8 (a lone surrogate)") from None
        return value
    if (kind is dict or kind is list) and not value:
        return kind()
    return json.loads(_json_text(value, what))


def require_int(value: Any, what: str, *, minimum: int | None = None, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{what} must be >= {minimum}, got {value}")
    if not -(2**63) <= value < 2**63:
        raise InvalidInput(f"{what} does not fit a bigint: {value}")


def validate_schema_name(name: str) -> str:
    """A configurable schema name: ^[A-Za-z_][A-Za-z0-9_]*$, at most 63 bytes, used unquoted."""
    if not isinstance(name, str) or not SCHEMA_NAME.match(name) or len(name.encode()) > 63:
        raise InvalidInput(
            f"schema name {name!r} is invalid: it must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most 63 bytes"
        )
    return name


def minute_slot(at: datetime) -> datetime:
    """A cron slot: the UTC minute containing `at` (§8.5)."""
    return at.astimezone(UTC).replace(second=0, microsecond=0)


def parse_expression(expression: str) -> None:
    """§8.5: refuse a cron expression cronsim cannot read, with its reason."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidInput("cron expression must be a non-empty string like '*/5 * * * *'")
    if len(expression.split()) != 5:  # cronsim also reads a seconds field; cron slots are whole minutes
        raise InvalidInput(
            f"cron expression {expression!r} must have five fields (minute hour day month weekday), "
            "like '*/5 * * * *'; slots are whole UTC minutes"
        )
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError) as exc:
        raise InvalidInput(f"invalid cron expression {expression!r}: {exc}") from None
