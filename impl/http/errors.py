"""The spec's Error schema ({error, code}) and the request validation that produces its 400s.

Every failure the API reports is an `ApiError`: a status, a machine-readable code and a sentence.
Validation mirrors the OpenAPI request schemas (plus the served overlay's bounds, impl/http/openapi.py)
and refuses bad input with 400 before any store operation runs — bad input is never a 500.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, overload

VALIDATION_ERROR = "VALIDATION_ERROR"
NOT_FOUND = "NOT_FOUND"
CONFLICT = "CONFLICT"
INT32_MAX = 2**31 - 1  # the overlay's bound for counts and seconds (integer columns, datetime range)
MAX_NAME_CHARS = 63  # names: the store allows 255 UTF-8 bytes, and 63 characters always fit in that


class ApiError(Exception):
    """An HTTP error answered with the spec's Error schema."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def body(self) -> dict[str, str]:
        return {"error": self.message, "code": self.code}


def bad(message: str) -> ApiError:
    return ApiError(400, VALIDATION_ERROR, message)


def not_found(message: str, code: str = NOT_FOUND) -> ApiError:
    return ApiError(404, code, message)


def conflict(message: str, code: str = CONFLICT) -> ApiError:
    return ApiError(409, code, message)


# --- JSON-schema-shaped checks ----------------------------------------------------------------


def obj(value: Any, what: str = "request body") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(f"{what} must be a JSON object")
    return value


@overload
def string(body: dict, key: str, *, required: Literal[True], name: bool = False) -> str: ...
@overload
def string(body: dict, key: str, *, required: bool = False, name: bool = False) -> str | None: ...
def string(body: dict, key: str, *, required: bool = False, name: bool = False) -> str | None:
    """A string field (null is not a string: no field of the spec is nullable); `name` adds the name
    rule of `check_name`."""
    if key not in body:
        if required:
            raise bad(f"{key} is required")
        return None
    value = body[key]
    if not isinstance(value, str):
        raise bad(f"{key} must be a string")
    if name:
        check_name(value, key)
    return value


def check_name(value: str, what: str) -> str:
    """1..63 characters (JSON Schema counts characters; at up to 4 bytes each they always fit the
    store's 255-byte names), valid UTF-8, no NUL."""
    if not value:
        raise bad(f"{what} must not be empty")
    if len(value) > MAX_NAME_CHARS:
        raise bad(f"{what} is {len(value)} characters; the limit is {MAX_NAME_CHARS}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise bad(f"{what} is not valid UTF-8") from None
    if size > 255:
        raise bad(f"{what} is {size} bytes of UTF-8; the limit is 255")
    if "\x00" in value:
        raise bad(f"{what} must not contain NUL characters")
    return value


@overload
def integer(
    body: dict,
    key: str,
    *,
    minimum: int,
    maximum: int | None = INT32_MAX,
    required: Literal[True],
    default: int | None = None,
) -> int: ...
@overload
def integer(
    body: dict, key: str, *, minimum: int, maximum: int | None = INT32_MAX, required: bool = False, default: int
) -> int: ...
@overload
def integer(
    body: dict,
    key: str,
    *,
    minimum: int,
    maximum: int | None = INT32_MAX,
    required: bool = False,
    default: int | None = None,
) -> int | None: ...
def integer(
    body: dict,
    key: str,
    *,
    minimum: int,
    maximum: int | None = INT32_MAX,
    required: bool = False,
    default: int | None = None,
) -> int | None:
    """A JSON Schema integer (an integral float such as 5.0 counts; a boolean does not); `maximum`
    None accepts any size (the caller clamps)."""
    if key not in body:
        if required:
            raise bad(f"{key} is required")
        return default
    value = body[key]
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(f"{key} must be an integer")
    if maximum is None:
        if value < minimum:
            raise bad(f"{key} must be at least {minimum}, got {value}")
    elif value < minimum or value > maximum:
        raise bad(f"{key} must be between {minimum} and {maximum}, got {value}")
    return value


@overload
def number(body: dict, key: str, *, minimum: float, required: Literal[True]) -> float: ...
@overload
def number(body: dict, key: str, *, minimum: float, required: bool = False) -> float | None: ...
def number(body: dict, key: str, *, minimum: float, required: bool = False) -> float | None:
    if key not in body:
        if required:
            raise bad(f"{key} is required")
        return None
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(f"{key} must be a finite number")
    if value < minimum:
        raise bad(f"{key} must be >= {minimum}, got {value}")
    return value


def string_map(body: dict, key: str) -> dict[str, str] | None:
    """An object whose values are all strings (the spec's `additionalProperties: {type: string}`)."""
    if key not in body:
        return None
    value = body[key]
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise bad(f"{key} must be an object of strings")
    return value


_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
_MIN = datetime.min.replace(tzinfo=UTC)
_MAX = datetime.max.replace(tzinfo=UTC)


def parse_datetime(value: Any, what: str) -> datetime:
    """An RFC 3339 date-time (OpenAPI `format: date-time`) as an aware UTC datetime. Leap seconds
    clamp to :59; instants outside Python's range clamp to its ends (they still order correctly)."""
    m = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise bad(f"{what} must be an RFC 3339 date-time such as 2026-02-14T10:10:00Z")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or ".0")[1:7].ljust(6, "0"))
    zone = m.group(8)
    if zone in ("Z", "z"):
        offset = timedelta(0)
    else:
        sign = 1 if zone[0] == "+" else -1
        oh, om = int(zone[1:3]), int(zone[4:6])
        if oh > 23 or om > 59:
            raise bad(f"{what} has an invalid UTC offset {zone}")
        offset = sign * timedelta(hours=oh, minutes=om)
    try:
        local = datetime(max(year, 1), month, day, hour, minute, min(second, 59), micro)
    except ValueError as exc:
        raise bad(f"{what} is not a valid date-time: {exc}") from None
    if year == 0:
        return _MIN
    try:
        return (local - offset).replace(tzinfo=UTC)
    except OverflowError:
        return _MIN if offset > timedelta(0) else _MAX


def iso(at: datetime | None) -> str | None:
    """A datetime as RFC 3339 in UTC with a Z suffix."""
    if at is None:
        return None
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")
