"""Row mapping and wake-up payloads shared by the Postgres store modules (contract §9.2)."""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import JsonbBinaryLoader, JsonbLoader

from model.rows import JOB_COLUMNS, Job, Step


@functools.cache
def channel_name(dbname: str, schema: str = "public") -> str:
    """§9.2: belay_<database name sanitized to [A-Za-z0-9_]> (a non-default schema is appended so
    two deployments sharing one database never cross-talk)."""
    base = "belay_" + re.sub(r"[^A-Za-z0-9_]", "_", dbname)
    return base if schema == "public" else f"{base}_{schema}"


def poke_payload(queue: str) -> str:
    return json.dumps({"t": "p", "q": queue}, separators=(",", ":"))


def result_payload(job_id: int) -> str:
    """{"t":"r","id":<id>} (the SQL block notify_results builds the same text from ids)."""
    return json.dumps({"t": "r", "id": job_id}, separators=(",", ":"))


_new_job = functools.partial(object.__new__, Job)


def job_from_tuple(values: Sequence[Any]) -> Job:
    """A Job from a row of `{job_columns}` in JOB_COLUMNS order (the claim's hot path).

    Equal to `Job(**dict(zip(JOB_COLUMNS, values)))` with the array and bytea columns normalised, but
    filled in one dict update: a frozen dataclass's __init__ sets each of the 33 fields through
    object.__setattr__, which was a tenth of a batched drain's CPU (issue 17). Job has no
    __post_init__, so nothing is skipped (tests/test_runtime.py compares the two)."""
    job = _new_job()
    fields = job.__dict__
    fields.update(zip(JOB_COLUMNS, values, strict=True))
    for column in ("wf_deps", "wf_ignore"):
        if fields[column] is not None:
            fields[column] = tuple(fields[column])
    if fields["result"] is not None:
        fields["result"] = bytes(fields["result"])
    return job


def job_from_row(row: dict[str, Any]) -> Job:
    return job_from_tuple([row[c] for c in JOB_COLUMNS])


# The values a fresh job row's jsonb columns hold, decoded without json.loads: a new object each time (job
# code may mutate its input), as json.loads returns.
_SMALL_JSON: dict[bytes, Callable[[], Any]] = {b"[]": list, b"{}": dict, b"null": type(None)}


class FastJsonbLoader(JsonbLoader):
    """psycopg's jsonb loader with the values a fresh job row holds (`[]`, `{}`, `null`) decoded without
    json.loads: claims parse three jsonb columns per row (issue 17). Every other value goes to the
    loader's `loads` (json.loads unless psycopg.types.json.set_json_loads replaced it) — decoded from
    UTF-8 first when it is json.loads, which given bytes sniffs for UTF-16/32 (never what PostgreSQL
    sends) and then decodes them as UTF-8 just the same — so the result is always what json.loads
    returns (a new object each time)."""

    def load(self, data: Any) -> Any:
        if len(data) <= 4 and (make := _SMALL_JSON.get(bytes(data))) is not None:
            return make()
        if self.loads is json.loads:
            return json.loads(str(data, "utf-8"))
        return super().load(data)


class FastJsonbBinaryLoader(JsonbBinaryLoader):
    """FastJsonbLoader for jsonb in binary format (a version byte, 1, then the text): claim rows are fetched
    in binary (issue 33: PostgreSQL's text output of a claimed row's 33 columns, and psycopg's parse of
    it, cost more than the binary forms — a one-thread loop of 10-job group commits ran ~10% faster).
    Returns what psycopg's own binary loader returns (which raises for another version byte)."""

    def load(self, data: Any) -> Any:
        versioned = data[:1] == b"\x01"
        if versioned and len(data) <= 5 and (make := _SMALL_JSON.get(bytes(data[1:]))) is not None:
            return make()
        if versioned and self.loads is json.loads:
            return json.loads(str(data[1:], "utf-8"))
        return super().load(data)


def configure_connection(conn: psycopg.Connection) -> None:
    """A store connection's adapters: the fast jsonb loaders, text and binary (same values as psycopg's own)."""
    conn.adapters.register_loader("jsonb", FastJsonbLoader)
    conn.adapters.register_loader("jsonb", FastJsonbBinaryLoader)


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
    wanted: Callable[[], bool] | None = None,
    want: threading.Event | None = None,
) -> None:
    """The pg_notify accelerator (§9.2), never load-bearing: LISTEN on the channel, call
    `on_poke(queue)` for each poke payload, and `on_poke(None)` after every (re)connect so anything
    missed while disconnected is polled now. Reconnects with backoff until `stopped` is set.
    `on_payload` instead receives every raw payload (and None after each (re)connect).

    With `wanted` (and `want`, an Event set whenever `wanted` may have turned true): while `wanted()` is
    false the connection does not listen (UNLISTEN; a worker whose every queue has all its slots taken has
    no use for a poke, and the channel it shares with result notifications carries one per completed
    job: receiving them cost a busy node 10-15 µs of CPU per job); once it turns true again (or every
    0.5 s) the connection LISTENs and calls `on_payload(None)`, so a poke missed meanwhile is polled."""
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
                channel = sql.Identifier(channel_name(conn.info.dbname, schema))
                conn.execute(sql.SQL("LISTEN {}").format(channel))
                if failing:
                    log.info("belay %s: reconnected", what)
                delay, failing = 0.1, False
                on_payload(None)
                while not stopped.is_set():
                    if wanted is not None and not wanted():
                        conn.execute(sql.SQL("UNLISTEN {}").format(channel))
                        _until_wanted(wanted, want, stopped)
                        conn.execute(sql.SQL("LISTEN {}").format(channel))
                        on_payload(None)  # what was poked meanwhile: polled now
                        continue
                    for note in conn.notifies(timeout=0.5):
                        on_payload(note.payload)
                        if wanted is not None and not wanted():
                            break  # (a batch's remaining notifications go with it: polled on the re-LISTEN)
        except Exception as exc:  # noqa: BLE001 - lossy by assumption: polling is the floor
            if not stopped.is_set():
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                (log.debug if failing else log.warning)("belay %s: %s; reconnecting with backoff", what, first)
                failing = True
                stopped.wait(delay)
                delay = min(delay * 2, 5.0)


def _until_wanted(wanted: Callable[[], bool], want: threading.Event | None, stopped: threading.Event) -> None:
    """Return once `wanted()` is true (checked whenever `want` is set, and every 0.5 s) or `stopped` is set."""
    while not stopped.is_set():
        if want is not None:
            want.clear()  # before the check: a set() after it wakes the wait below
        if wanted():
            return
        if want is not None:
            want.wait(0.5)
        else:
            stopped.wait(0.5)


def poked_queue(payload: str) -> str | None:
    """The queue of a poke payload {"t":"p","q":...}; None for anything else."""
    if payload.startswith('{"t":"r",'):
        # A result notification in its canonical form: a node listening with the accelerator receives
        # one per completed job on the shared channel; parsing each was a quarter of a drain's CPU.
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if isinstance(data, dict) and data.get("t") == "p" and isinstance(data.get("q"), str):
        return data["q"]
    return None
