"""Identifiers of the HTTP API and the opaque runs cursor (pure; no I/O).

A task is a belay_jobs row and a run is one attempt of it, so ids encode exactly that:

    task_<job id>            run_<job id>_<attempt>            wfr_<32 hex>            evt_<opaque>

The run id carries the attempt the §7 fence compares (`WHERE id AND state='running' AND attempt`),
so a stale or foreign run id can never match the live row. An id that does not parse names no
resource: callers answer 404, never 500.
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass
from datetime import datetime

from model.ops import INT4_MAX, INT8_MAX

_TASK = re.compile(r"task_([1-9][0-9]{0,18})")
_RUN = re.compile(r"run_([1-9][0-9]{0,18})_([1-9][0-9]{0,9})")
_WFR = re.compile(r"wfr_[0-9a-f]{32}")
_CURSOR = re.compile(r"[0-9a-f]{24}")
CURSOR_PATTERN = "^[0-9a-f]{24}$"


@dataclass(frozen=True, order=True)
class RunRef:
    """One attempt of one job."""

    job_id: int
    attempt: int

    def __str__(self) -> str:
        return run_id(self.job_id, self.attempt)


def task_id(job_id: int) -> str:
    return f"task_{job_id}"


def run_id(job_id: int, attempt: int) -> str:
    return f"run_{job_id}_{attempt}"


def parse_task(text: str) -> int | None:
    """The job id of `task_<id>`, or None when the text names no possible task."""
    m = _TASK.fullmatch(text) if isinstance(text, str) else None
    if m is None or int(m.group(1)) > INT8_MAX:
        return None
    return int(m.group(1))


def parse_run(text: str) -> RunRef | None:
    """(job id, attempt) of `run_<id>_<attempt>`, or None when the text names no possible run."""
    m = _RUN.fullmatch(text) if isinstance(text, str) else None
    if m is None or int(m.group(1)) > INT8_MAX or int(m.group(2)) > INT4_MAX:
        return None
    return RunRef(int(m.group(1)), int(m.group(2)))


def new_workflow_run_id() -> str:
    return f"wfr_{uuid.uuid4().hex}"


def is_workflow_run_id(text: str) -> bool:
    return isinstance(text, str) and _WFR.fullmatch(text) is not None


def event_id(name: str, at: datetime) -> str:
    """Events are upsert-latest signal rows (PK scope, name): one emission is (name, inserted_at)."""
    raw = f"{at.isoformat()}|{name}".encode()
    return "evt_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def encode_cursor(ref: RunRef) -> str:
    """An opaque position in the runs listing's (task, attempt) order: 24 hex digits. Stable under
    inserts, because new runs only ever append to a task and new tasks get higher ids; every string
    of the documented form is a position (one past the last task is simply an empty page)."""
    return f"{ref.job_id:016x}{ref.attempt:08x}"


def decode_cursor(text: str) -> RunRef | None:
    if not isinstance(text, str) or _CURSOR.fullmatch(text) is None:
        return None
    return RunRef(min(int(text[:16], 16), INT8_MAX), int(text[16:], 16))
