"""PostgreSQL's text rendering of jsonb values, for `field->>key` (contract §6 partition keys).

`->>` yields NULL for a missing key or JSON null (COALESCE turns that into ''), the bare string for a
string, and jsonb's canonical text for anything else: numbers in plain decimal notation, booleans as
true/false, objects with ", " / ": " separators and keys ordered by (byte length, bytes).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any


def _number(value: int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = format(Decimal(json.dumps(value)), "f")
    return text


def jsonb_text(value: Any) -> str:
    """The text of a jsonb value as `jsonb::text` prints it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(jsonb_text(v) for v in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {jsonb_text(value[k])}" for k in keys) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def arrow_text(document: Any, key: str) -> str | None:
    """`document->>key`: None (SQL NULL) for a non-object, a missing key or JSON null."""
    if not isinstance(document, dict) or key not in document or document[key] is None:
        return None
    value = document[key]
    return value if isinstance(value, str) else jsonb_text(value)
