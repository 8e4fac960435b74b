"""Row mapping and wake-up payloads shared by the Postgres store modules (contract §9.2)."""
from __future__ import annotations

import json
import re
from typing import Any

from model.rows import JOB_COLUMNS, Job


def channel_name(dbname: str, schema: str = "public") -> str:
    """§9.2: belay_<database name sanitized to [A-Za-z0-9_]> (a non-default schema is appended so
    two deployments sharing one database never cross-talk)."""
    base = "belay_" + re.sub(r"[^A-Za-z0-9_]", "_", dbname)
    return base if schema == "public" else f"{base}_{schema}"


def poke_payload(queue: str) -> str:
    return json.dumps({"t": "p", "q": queue}, separators=(",", ":"))


def result_payload(job_id: int) -> str:
    return json.dumps({"t": "r", "id": job_id}, separators=(",", ":"))


def job_from_row(row: dict[str, Any]) -> Job:
    values = {c: row[c] for c in JOB_COLUMNS}
    for c in ("wf_deps", "wf_ignore"):
        if values[c] is not None:
            values[c] = tuple(values[c])
    if values["result"] is not None:
        values["result"] = bytes(values["result"])
    return Job(**values)
