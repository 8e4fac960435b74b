"""§5.1's inserts as statements built in Python: the row's columns (`_ROW_FIELDS`), the set-based insert
of a batch over arrays (`_compact_insert`) and a single enqueue's one autocommit statement with its §9.2
poke (`_enqueue_solo`). Built once per schema and cached; `PgStore` (client_store.py) runs them.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from impl.store.pgrows import channel_name as channel_name  # re-exported: impl.store.channel_name is public

# The insert's per-row fields, in the order PgStore._row builds a row (the id comes separately).
_ROW_FIELDS = (
    "queue",
    "worker",
    "input",
    "meta",
    "state",
    "priority",
    "max_attempts",
    "ready_at",
    "unique_key",
    "unique_mode",
    "cron_name",
    "cron_slot",
    "workflow_id",
    "wf_name",
    "wf_deps",
    "wf_ignore",
    "parent_id",
    "budget_usd_micros",
    "budget_tokens",
)


_STAGE_TYPES = (
    "int8",
    "int4",
    "int8",
    "text",
    "text",
    "text",
    "text",
    "text",
    "int4",
    "int4",
    "timestamptz",
    "text",
    "text",
    "text",
    "timestamptz",
    "text",
    "text",
    "text[]",
    "text[]",
    "int8",
    "int8",
    "int8",
)


_ARRAY_ROWS = 64  # batches up to this size bind arrays; larger ones too when few columns vary, else COPY


_COMPACT_VARYING = 4  # up to this many varying columns, arrays beat COPY into a staging table (bench.enqueue)


_LIST_FIELDS = ("wf_deps", "wf_ignore")


_COMPACT_SQL: dict[tuple[str, tuple[int, ...]], bytes] = {}


def _compact_insert(q: Any, varying: tuple[int, ...]) -> bytes:
    """§5.1's set-based insert for one pattern of varying columns: a varying column comes from
    its array (unnest, in the rows' order), any other column is one parameter for every row. Built once
    per schema and pattern; the same columns, casts, defaults and conflict clause as insert_staged_jobs
    (impl/store/sql/queries.sql), with `attempt=0`, `errors='[]'`, `spent_*=0`, `cancel_requested=false`."""
    key = (q.schema, varying)
    found = _COMPACT_SQL.get(key)
    if found is None:
        found = _COMPACT_SQL[key] = _compact_insert_text(q, varying)
    return found


def _compact_insert_text(q: Any, varying: tuple[int, ...]) -> bytes:
    """`_compact_insert`'s statement, built (uncached)."""
    expr: dict[str, str] = {}
    arrays, names = ["%(id)s::bigint[]"], ["id"]
    for i, name in enumerate(_ROW_FIELDS):
        kind = _STAGE_TYPES[3 + i]
        if i in varying:
            arrays.append(f"%(v_{name})s::text[]" if name in _LIST_FIELDS else f"%(v_{name})s::{kind}[]")
            names.append(name)
            value = f"r.{name}"
            if name in _LIST_FIELDS:
                value = f"CASE WHEN {value} IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text({value}::jsonb)) END"
        else:
            value = f"%(c_{name})s::{kind}"
        expr[name] = f"{value}::jsonb" if name in ("input", "meta") else value
    e = expr
    text = (
        "INSERT INTO {jobs} (id, queue, worker, input, meta, state, priority, attempt, max_attempts, ready_at, "
        "inserted_at, errors, cancel_requested, unique_key, unique_mode, cron_name, cron_slot, workflow_id, wf_name, "
        "wf_deps, wf_ignore, parent_id, budget_usd_micros, budget_tokens, spent_usd_micros, spent_tokens)\n"
        f"SELECT r.id, {e['queue']}, {e['worker']}, {e['input']}, {e['meta']}, {e['state']}, {e['priority']}, 0, "
        f"{e['max_attempts']}, {e['ready_at']}, %(now)s, '[]'::jsonb, false, {e['unique_key']}, {e['unique_mode']}, "
        f"{e['cron_name']}, {e['cron_slot']}, {e['workflow_id']}, {e['wf_name']}, {e['wf_deps']}, {e['wf_ignore']}, "
        f"{e['parent_id']}, {e['budget_usd_micros']}, {e['budget_tokens']}, 0, 0\n"
        f"FROM unnest({', '.join(arrays)}) WITH ORDINALITY AS r({', '.join(names)}, ord)\n"
        "ORDER BY r.ord\nON CONFLICT DO NOTHING\nRETURNING id"
    )
    return sql.SQL(text).format(jobs=q.names["jobs"]).as_bytes(None)


_SOLO_SQL: dict[str, bytes] = {}


_COMPACT_TAIL = (
    b"FROM unnest(%(id)s::bigint[]) WITH ORDINALITY AS r(id, ord)\nORDER BY r.ord\nON CONFLICT DO NOTHING\nRETURNING id"
)


def _enqueue_solo(q: Any) -> bytes:
    """§5.1 for one job that no unique index can refuse (no unique key, no cron slot), and its §9.2 poke,
    as ONE autocommit statement: the compact insert with every column a parameter, its id drawn by
    nextval in the statement (as next_job_ids draws it), and the poke sent from the same statement, so
    delivered only if the row commits. One round trip instead of five (BEGIN, ids, insert, notify,
    COMMIT): the client's single enqueue, issue 33's latency. The final SELECT reads `poke` because
    PostgreSQL runs a SELECT in WITH only if something reads it. Built once per schema."""
    found = _SOLO_SQL.get(q.schema)
    if found is None:
        insert = _compact_insert_text(q, ())
        if not insert.endswith(_COMPACT_TAIL):
            raise RuntimeError("the compact insert no longer ends as _enqueue_solo expects")
        seq = q.names["jobs_seq"].as_bytes(None)
        found = _SOLO_SQL[q.schema] = (
            b"WITH ins AS (\n"
            + insert[: -len(_COMPACT_TAIL)]
            + b"FROM (SELECT nextval("
            + seq
            + b") AS id) AS r\nRETURNING id\n), poke AS (\n"
            + b"    SELECT pg_notify(%(channel)s, %(payload)s) FROM ins WHERE %(payload)s::text IS NOT NULL\n"
            + b")\nSELECT id, (SELECT count(*) FROM poke) AS poked FROM ins"
        )
    return found


_QUEUE, _STATE = _ROW_FIELDS.index("queue"), _ROW_FIELDS.index("state")


_UNIQUE_KEY, _UNIQUE_MODE = _ROW_FIELDS.index("unique_key"), _ROW_FIELDS.index("unique_mode")


_CRON_NAME, _CRON_SLOT = _ROW_FIELDS.index("cron_name"), _ROW_FIELDS.index("cron_slot")
