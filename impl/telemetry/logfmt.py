"""logfmt: quoting a value so that it cannot forge a field (`logfmt_value`), parsing a line back
(`parse_logfmt`), and the job line the default logger writes (`job_line`, `format_job_line`).
"""

from __future__ import annotations

import re
from typing import Any

# Lines are logfmt (issue 29): `key=value`, a value bare when it is printable ASCII without space, `"`,
# `=` or backslash, else in double quotes with `\\`, `\"`, `\n`, `\r`, `\t` and `\uXXXX` (`\UXXXXXXXX`)
# escapes for every other non-printable character (U+2028 too), so a kind, queue, node or error can
# never end a line or forge a field: `parse_logfmt` reads every line back to exactly its fields.
_BARE = re.compile(r"[!#-<>-\[\]-~]+")


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


_UNESCAPES = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}


def logfmt_value(value: object) -> str:
    """One logfmt value: bare when it can be, else quoted and escaped (see above)."""
    text = value if isinstance(value, str) else str(value)
    if _BARE.fullmatch(text):
        return text
    return '"' + "".join(_escape(c) for c in text) + '"'


# The logfmt form of the names a job line repeats (kind, queue, state, node) — the regex match was most of
# building a line on the job's thread. Bounded: cleared when full (names are few; an error is not cached).
_NAMES: dict[str, str] = {}


_NAMES_MAX = 4096


def _name(value: object) -> str:
    if type(value) is not str:
        return logfmt_value(value)
    text = _NAMES.get(value)
    if text is None:
        if len(_NAMES) >= _NAMES_MAX:
            _NAMES.clear()
        text = _NAMES[value] = logfmt_value(value)
    return text


def _escape(c: str) -> str:
    found = _ESCAPES.get(c)
    if found is not None:
        return found
    if c.isprintable():
        return c
    return f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"


_TOKEN = re.compile(r'([!#-<>-\[\]-~]+)=(?:([!#-<>-\[\]-~]+)|"((?:[^"\\]|\\.)*)")(?: |$)')


_UNESCAPE = re.compile(r"\\(?:u([0-9a-f]{4})|U([0-9a-f]{8})|(.))", re.DOTALL)


def parse_logfmt(text: str) -> dict[str, str]:
    """The fields of a logfmt text written by `logfmt_value` (`key=value` separated by one space),
    values as strings; ValueError for anything it would not write (or a key twice)."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or (m.end() == len(text) and text.endswith(" ")):
            raise ValueError(f"not logfmt at column {pos}: {text[pos : pos + 40]!r}")
        key, bare, quoted = m.groups()
        if key in out:
            raise ValueError(f"key {key!r} twice")
        out[key] = bare if bare is not None else _UNESCAPE.sub(_unescape, quoted)
        pos = m.end()
    return out


def _unescape(m: re.Match[str]) -> str:
    short, long, char = m.groups()
    if short or long:
        return chr(int(short or long, 16))
    if char not in _UNESCAPES:
        raise ValueError(f"unknown escape \\{char}")
    return _UNESCAPES[char]


_JOB_LINE = "belay job=%s kind=%s queue=%s state=%s attempt=%s duration=%sms"


_JOB_LINES = {  # (has a node, has an error) → the line's template
    (False, False): _JOB_LINE,
    (True, False): _JOB_LINE + " node=%s",
    (False, True): _JOB_LINE + " error=%s",
    (True, True): _JOB_LINE + " node=%s error=%s",
}


def job_line(meta: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """The default logger's line for a job event as a %-template and its arguments (a logging call's
    `msg` and `args`: the handler that writes the record renders it). Every text is logfmt-quoted."""
    node, error = meta.get("node"), meta.get("error")
    args: tuple[Any, ...] = (
        meta["job_id"],
        _name(meta.get("kind", meta.get("worker"))),
        _name(meta["queue"]),
        _name(meta["state"]),
        meta["attempt"],
        meta["duration_ms"],
    )
    if node:
        args += (_name(node),)
    if error:
        args += (logfmt_value(error),)
    return _JOB_LINES[bool(node), bool(error)], args


def format_job_line(meta: dict[str, Any]) -> str:
    """`belay job=812 kind=summarize queue=ai state=succeeded attempt=1 duration=8143ms node=n1`."""
    template, args = job_line(meta)
    return template % args
