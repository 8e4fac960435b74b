"""The dashboard's audit trail: one logfmt line per action attempt — who, what, which job, outcome.

    belay.dashboard.audit who=token-session:3f9a01bc client=127.0.0.1 action=cancel_job job=812 status=200 \
        outcome=cancelled detail="job 812 cancelled"

Written to the logger `belay.dashboard.audit` at INFO. `audit_logger()` makes sure that logger is
emitted: when nothing configured it (no handler of its own), it gets a stderr handler at INFO and stops
propagating — so `belay dashboard` always prints its audit lines, and an application that configures
the logger itself keeps full control. Values are logfmt-quoted by the telemetry logger's function
(impl/telemetry/logfmt.py logfmt_value: a value with a space, `=`, a quote, a backslash or any non-printable
character — a final newline too — is written in double quotes with escapes), so a job's kind or a
signal's name cannot forge a field or a line: every line parses back to its fields (`parse`,
tests/test_logfmt_quoting.py over arbitrary text).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from impl.telemetry import logfmt_value, parse_logfmt

LOGGER = "belay.dashboard.audit"


def quote(value: Any) -> str:
    """One logfmt value, quoted by the telemetry logger's own function (impl/telemetry/logfmt.py logfmt_value:
    one quoting rule for every logfmt line Belay writes); None is the empty value."""
    return logfmt_value("" if value is None else value)


def line(fields: dict[str, Any]) -> str:
    return " ".join(f"{k}={quote(v)}" for k, v in fields.items() if v is not None)


# The fields of one line (the inverse of `line` for its values); ValueError if it is not one.
parse = parse_logfmt


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
