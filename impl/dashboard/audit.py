"""The dashboard's audit trail: one logfmt line per action attempt — who, what, which job, outcome.

    belay.dashboard.audit who=token-session:3f9a01bc client=127.0.0.1 action=cancel_job job=812 status=200 \
        outcome=cancelled detail="job 812 cancelled"

Written to the logger `belay.dashboard.audit` at INFO. `audit_logger()` makes sure that logger is
emitted: when nothing configured it (no handler of its own), it gets a stderr handler at INFO and stops
propagating — so `belay dashboard` always prints its audit lines, and an application that configures
the logger itself keeps full control. Values are logfmt-quoted (a value with a space, `=`, a quote,
a backslash or a control character is written in double quotes with escapes), so a job's kind or a
signal's name cannot forge a field or a line: every line parses back to its fields (`parse`).
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

LOGGER = "belay.dashboard.audit"
_BARE = re.compile(r"^[A-Za-z0-9_.:/@+\-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(value: Any) -> str:
    text = "" if value is None else str(value)
    if text and _BARE.match(text):
        return text
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def line(fields: dict[str, Any]) -> str:
    return " ".join(f"{k}={quote(v)}" for k, v in fields.items() if v is not None)


_TOKEN = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|[^ ]*)(?: |$)')
_UNESCAPE = {'"': '"', "\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def parse(text: str) -> dict[str, str]:
    """The fields of one line (the inverse of `line` for its values); raises ValueError if it is not one."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"not a logfmt line at {pos}: {text!r}")
        key, raw = m.group(1), m.group(2)
        if raw.startswith('"'):
            body, value, i = raw[1:-1], [], 0
            while i < len(body):
                if body[i] == "\\":
                    nxt = body[i + 1]
                    if nxt == "u":
                        value.append(chr(int(body[i + 2 : i + 6], 16)))
                        i += 6
                        continue
                    value.append(_UNESCAPE[nxt])
                    i += 2
                else:
                    value.append(body[i])
                    i += 1
            out[key] = "".join(value)
        else:
            out[key] = raw
        pos = m.end()
    return out


def audit_logger() -> logging.Logger:
    log = logging.getLogger(LOGGER)
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    if log.level == logging.NOTSET or log.level > logging.INFO:
        log.setLevel(logging.INFO)
    return log
