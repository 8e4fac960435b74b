"""Row mapping and wake-up payloads shared by the Postgres store modules (contract §9.2)."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from model.rows import JOB_COLUMNS, Job, Step


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


def step_from_row(row: dict[str, Any]) -> Step:
    return Step(**{**row, "value": bytes(row["value"])})


def listen_for_pokes(
    conninfo: str,
    schema: str,
    stopped: threading.Event,
    on_poke: Callable[[str | None], None] | None,
    what: str = "listener",
    *,
    on_payload: Callable[[str | None], None] | None = None,
) -> None:
    """The pg_notify accelerator (§9.2), never load-bearing: LISTEN on the channel, call
    `on_poke(queue)` for each poke payload, and `on_poke(None)` after every (re)connect so anything
    missed while disconnected is polled now. Reconnects with backoff until `stopped` is set.
    `on_payload` instead receives every raw payload (and None after each (re)connect)."""
    if on_payload is None:
        assert on_poke is not None, "give on_poke or on_payload"

        def on_payload(payload: str | None) -> None:
            if payload is None:
                on_poke(None)
            else:
                queue = poked_queue(payload)
                if queue is not None:
                    on_poke(queue)

    log = logging.getLogger("belay")
    delay = 0.1
    failing = False  # log the first failure of an outage and the reconnect, not every attempt
    while not stopped.is_set():
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
                channel = channel_name(conn.info.dbname, schema)
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                if failing:
                    log.info("belay %s: reconnected", what)
                delay, failing = 0.1, False
                on_payload(None)
                while not stopped.is_set():
                    for note in conn.notifies(timeout=0.5):
                        on_payload(note.payload)
        except Exception as exc:  # noqa: BLE001 - lossy by assumption: polling is the floor
            if not stopped.is_set():
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                (log.debug if failing else log.warning)("belay %s: %s; reconnecting with backoff", what, first)
                failing = True
                stopped.wait(delay)
                delay = min(delay * 2, 5.0)


def poked_queue(payload: str) -> str | None:
    """The queue of a poke payload {"t":"p","q":...}; None for anything else."""
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if isinstance(data, dict) and data.get("t") == "p" and isinstance(data.get("q"), str):
        return data["q"]
    return None
