"""The dashboard's reads: named blocks from impl/store/sql/dashboard.sql, composed for one schema.

Reads only. Tiles are bounded (a loose index scan plus capped counts, when the dashboard index
variant exists), the job list is keyset-paginated on id, and every filter is one fixed SQL fragment
(`dash_where_*`) joined with AND through psycopg.sql — user input only ever travels as a parameter.
A search by error text examines a bounded window per page (ERROR_WINDOW jobs with errors below the
cursor); a window with fewer matches than a page reports how far it searched, and the next page's
cursor continues below it, so every match stays reachable by keyset.
`ensure_indexes` creates the optional index variants of impl/store/sql/dashboard_indexes.sql.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from cronsim import CronSim, CronSimError
from psycopg import sql
from psycopg.rows import dict_row

from impl.store.queries import SchemaSQL
from model.ops import InvalidInput
from model.rows import STATES, TERMINAL
from model.validate import minute_slot, parse_expression

_BLOCK = re.compile(r"^-- ([a-z_]+) --\n", re.MULTILINE)
COUNT_CAP = 10_000  # a tile shows a live state's exact count up to this, then "10,000+"
TERMINAL_CAP = 1_000  # ... and a terminal state's up to this (history; "finished, last minute" is the live figure)
PAGE_SIZE = 50
# The job list's error-text search examines at most this many jobs with errors per page (the newest
# below the page's cursor): a bounded cost per request however rare the text (bench/dashboard.py).
ERROR_WINDOW = 5_000
FILTERS = ("queue", "state", "kind", "workflow", "parent", "error")
CHART_MINUTES = 60  # the charts cover the last hour, one bar per minute
TERMINAL_ORDER = ("succeeded", "failed", "cancelled")
INDEXES = ("belay_jobs_dash_queue_state_idx", "belay_jobs_dash_state_idx", "belay_jobs_dash_errors_idx")


def _blocks(filename: str) -> dict[str, str]:
    text = resources.files("impl.store").joinpath("sql", filename).read_text(encoding="utf-8")
    parts = _BLOCK.split(text)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=False):
        lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("--")]
        out[name] = "\n".join(lines).strip()
    return out


@cache
def dashboard_blocks() -> dict[str, str]:
    return _blocks("dashboard.sql")


@cache
def index_blocks() -> dict[str, str]:
    return _blocks("dashboard_indexes.sql")


@dataclass(frozen=True)
class JobFilter:
    """The job list's filters; None means "any". Validated at construction (clear errors)."""

    queue: str | None = None
    state: str | None = None
    kind: str | None = None
    workflow: str | None = None
    parent: int | None = None
    error: str | None = None  # text searched in errors[].error / errors[].detail

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> JobFilter:
        values: dict[str, Any] = {}
        for name in FILTERS:
            raw = params.get(name)
            if raw is None or raw.strip() == "":
                continue
            values[name] = raw.strip()
        if "parent" in values:
            try:
                values["parent"] = int(values["parent"])
            except ValueError:
                raise InvalidInput(f"parent must be a job id (an integer), got {values['parent']!r}") from None
        return cls(**values)

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in STATES:
            raise InvalidInput(f"state must be one of {', '.join(STATES)}; got {self.state!r}")
        for name in ("queue", "kind", "workflow", "error"):
            value = getattr(self, name)
            if value is not None and ("\x00" in value or len(value) > 255):
                raise InvalidInput(f"{name} filter must be at most 255 characters without NUL")

    def active(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FILTERS if getattr(self, name) is not None}


def like_pattern(text: str) -> str:
    """A LIKE pattern matching `text` literally anywhere (escapes \\, % and _)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


@dataclass(frozen=True)
class SearchedWindow:
    """How far a page of an error-text search looked, when it found fewer matches than a page."""

    size: int  # the window: at most this many jobs with errors are examined per page
    below: int | None  # the page's cursor (None: from the newest job)
    examined: int  # jobs with errors examined (== size unless the search reached the oldest)
    lowest: int | None  # the lowest id examined (None: no job with errors below `below`)
    more: bool  # jobs with errors remain below `lowest`: the search continues there


@dataclass(frozen=True)
class JobsPage:
    """One page of the job list and the cursor (`before`) of the next one (None: nothing below)."""

    rows: list[dict]
    next_before: int | None
    searched: SearchedWindow | None = None  # set when an error-text window ended the page


_WINDOW_COLUMNS = ("examined", "lowest", "more")


@dataclass(frozen=True)
class Tile:
    """One queue tile."""

    queue: str
    counts: dict[str, int]  # state -> count (capped at COUNT_CAP when `capped`)
    capped: frozenset[str]  # states whose count reached the cap ("at least")
    opts: dict[str, Any] = field(default_factory=dict)
    finished_last_minute: int = 0
    oldest_ready_age: float | None = None  # seconds; None: no due ready job


class DashboardQueries:
    """The dashboard's SQL for one schema."""

    def __init__(self, schema: str = "public") -> None:
        self.sql = SchemaSQL(schema)
        self.schema = self.sql.schema

    def q(self, name: str, **extra: sql.Composable) -> sql.Composed:
        return sql.SQL(dashboard_blocks()[name]).format(**self.sql.names, **extra)

    def _all(
        self, conn: psycopg.Connection, name: str, params: dict | None = None, **extra: sql.Composable
    ) -> list[dict]:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self.q(name, **extra), params or {})
            return cur.fetchall()

    # --- indexes ------------------------------------------------------------------------------

    def index_names(self, conn: psycopg.Connection) -> set[str]:
        return {r["name"] for r in self._all(conn, "dash_index_names", {"schema": self.schema})}

    def ensure_indexes(self, conn: psycopg.Connection) -> list[str]:
        """Create the missing index variants (CONCURRENTLY: `conn` must be in autocommit); an INVALID
        leftover of an interrupted build is dropped and rebuilt. Returns the names created."""
        if not conn.autocommit:
            raise InvalidInput("ensure_indexes needs an autocommit connection (CREATE INDEX CONCURRENTLY)")
        present = self.index_names(conn)
        created = []
        for name, body in index_blocks().items():
            if name in present:
                continue
            conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(self.schema, name)))
            conn.execute(sql.SQL(body).format(**self.sql.names))
            created.append(name)
        return created

    # --- tiles --------------------------------------------------------------------------------

    def tiles(
        self,
        conn: psycopg.Connection,
        now: datetime,
        *,
        indexed: bool,
        cap: int = COUNT_CAP,
        terminal_cap: int = TERMINAL_CAP,
    ) -> list[Tile]:
        """Every queue that has jobs or a belay_queues row, with counts, options and freshness."""
        if indexed:
            pairs = self._all(conn, "dash_pair_counts", {"cap": cap, "terminal_cap": terminal_cap})
        else:
            pairs = self._all(conn, "dash_pair_counts_scan")
        counts: dict[str, dict[str, int]] = {}
        capped: dict[str, set[str]] = {}
        for r in pairs:
            counts.setdefault(r["queue"], {})[r["state"]] = r["n"]
            if indexed and r["n"] >= (terminal_cap if r["state"] in TERMINAL else cap):
                capped.setdefault(r["queue"], set()).add(r["state"])
        opts = {r["name"]: r["opts"] for r in self._all(conn, "dash_queue_rows")}
        finished = {
            r["queue"]: r["n"] for r in self._all(conn, "dash_finished_since", {"since": now - timedelta(minutes=1)})
        }
        oldest = {r["queue"]: r["oldest"] for r in self._all(conn, "dash_oldest_ready", {"now": now})}
        names = sorted(set(counts) | set(opts))
        return [
            Tile(
                queue=name,
                counts=counts.get(name, {}),
                capped=frozenset(capped.get(name, ())),
                opts=opts.get(name) or {},
                finished_last_minute=finished.get(name, 0),
                oldest_ready_age=(now - oldest[name]).total_seconds() if oldest.get(name) else None,
            )
            for name in names
        ]

    # --- job list -----------------------------------------------------------------------------

    def jobs_page_query(
        self, filters: JobFilter, before: int | None, *, window: int = ERROR_WINDOW
    ) -> tuple[sql.Composed, dict[str, Any]]:
        """The page's query and its parameters (without `limit`). With an error-text filter it is the
        bounded dash_jobs_error_window: the cursor bounds the window, the filters pick within it."""
        params: dict[str, Any] = dict(filters.active())
        fragments = [f"dash_where_{name}" for name in FILTERS if name in params]
        cursor = []
        if before is not None:
            params["before"] = before
            cursor.append("dash_where_before")

        def conj(names: list[str]) -> sql.Composable:
            blocks = dashboard_blocks()
            return sql.SQL(" AND ").join(
                sql.SQL(blocks[f]).format(**self.sql.names) for f in names or ["dash_where_true"]
            )

        if "error" not in params:
            return self.q("dash_jobs_page", where=conj(cursor + fragments)), params
        if window < 1:
            raise InvalidInput(f"the error-text search window must be at least 1 job, got {window}")
        params["error"] = like_pattern(params["error"])
        params["window"] = window
        return self.q("dash_jobs_error_window", below=conj(cursor), where=conj(fragments)), params

    def jobs_page(
        self,
        conn: psycopg.Connection,
        filters: JobFilter,
        before: int | None = None,
        limit: int = PAGE_SIZE,
        *,
        window: int = ERROR_WINDOW,
    ) -> JobsPage:
        """One page, newest first. Without error text: up to `limit` matching jobs below `before`.
        With error text: up to `limit` matches among the newest `window` jobs with errors below
        `before` — when the window holds fewer, the page says how far it searched, and its cursor
        continues the search below the window."""
        query, params = self.jobs_page_query(filters, before, window=window)
        params["limit"] = limit + 1  # one more row tells whether a next page exists
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, params)
            rows = cur.fetchall()
        if "error" not in params:
            more = len(rows) > limit
            rows = rows[:limit]
            return JobsPage(rows, rows[-1]["id"] if more and rows else None)
        head = rows[0]  # the window's figures (on every row; alone on a window without matches)
        matches = [{k: v for k, v in r.items() if k not in _WINDOW_COLUMNS} for r in rows if r["id"] is not None]
        if len(matches) > limit:  # a full page inside the window: the next page starts below its last row
            matches = matches[:limit]
            return JobsPage(matches, matches[-1]["id"])
        searched = SearchedWindow(
            size=window, below=before, examined=head["examined"], lowest=head["lowest"], more=head["more"]
        )
        return JobsPage(matches, head["lowest"] if head["more"] else None, searched)

    # --- job page -----------------------------------------------------------------------------

    def children(self, conn: psycopg.Connection, job_id: int, limit: int = 200) -> tuple[list[dict], int]:
        rows = self._all(conn, "dash_children", {"id": job_id, "limit": limit})
        total = rows and len(rows) == limit and self._all(conn, "dash_children_count", {"id": job_id})[0]["n"]
        return rows, total or len(rows)

    # --- charts -------------------------------------------------------------------------------

    def charts(self, conn: psycopg.Connection, now: datetime, minutes: int = CHART_MINUTES) -> dict[str, Any]:
        """Per queue, over the `minutes` whole UTC minutes ending with the current one: jobs finished
        per minute by outcome, and first-attempt claim latency per minute (n, p50, p95, max in ms).
        JSON-ready: minutes as ISO strings, one array entry per minute (None: no claim that minute)."""
        if not 1 <= minutes <= 24 * 60:
            raise InvalidInput(f"a chart covers 1 to 1440 minutes, got {minutes}")
        end = int(now.timestamp() // 60) + 1  # exclusive: the current minute is the last bar
        start = end - minutes
        since, until = datetime.fromtimestamp(start * 60, UTC), datetime.fromtimestamp(end * 60, UTC)
        params = {"since": since, "until": until}
        rows = self._all(conn, "dash_charts", params)
        finished = [r for r in rows if r["kind"] == "finished"]
        latency = [r for r in rows if r["kind"] == "latency"]
        queues: dict[str, dict[str, Any]] = {}

        def series(queue: str) -> dict[str, Any]:
            if queue not in queues:
                queues[queue] = {
                    "finished": {s: [0] * minutes for s in TERMINAL_ORDER},
                    "claim_latency_ms": {k: [None] * minutes for k in ("p50", "p95", "max")} | {"n": [0] * minutes},
                }
            return queues[queue]

        for r in finished:
            series(r["queue"])["finished"][r["state"]][r["minute"] - start] = r["n"]
        for r in latency:
            lat = series(r["queue"])["claim_latency_ms"]
            i = r["minute"] - start
            lat["n"][i] = r["n"]
            lat["p50"][i], lat["p95"][i], lat["max"][i] = (round(float(r[k]), 1) for k in ("p50", "p95", "worst"))
        for q in queues.values():
            q["totals"] = {s: sum(q["finished"][s]) for s in TERMINAL_ORDER} | {
                "claimed": sum(q["claim_latency_ms"]["n"])
            }
        return {
            "now": now.astimezone(UTC).isoformat(),
            "since": since.isoformat(),
            "until": until.isoformat(),
            "minutes": [datetime.fromtimestamp((start + i) * 60, UTC).isoformat() for i in range(minutes)],
            "outcomes": list(TERMINAL_ORDER),
            "queues": dict(sorted(queues.items())),
        }

    # --- crons --------------------------------------------------------------------------------

    def crons(self, conn: psycopg.Connection, now: datetime, upcoming: int = 3) -> list[CronView]:
        """Every belay_crons row (expression, next slots, last fired job, paused), then the cron names
        that fired jobs without a belay_crons row (static configuration)."""
        out = []
        for r in self._all(conn, "dash_crons"):
            slots, error = next_slots(r["expression"], now, upcoming)
            out.append(
                CronView(
                    r["name"],
                    "belay_crons",
                    r["expression"],
                    r["worker"],
                    (r["opts"] or {}).get("queue", "default"),
                    bool(r["paused"]),
                    slots,
                    error,
                    r["last_id"],
                    r["last_state"],
                    r["last_slot"],
                    r["updated_at"],
                )
            )
        known = {c.name for c in out}
        for r in self._all(conn, "dash_cron_names_fired", {"limit": 200}):
            if r["name"] in known:
                continue
            out.append(
                CronView(
                    r["name"],
                    "static",
                    None,
                    r["worker"],
                    r["queue"],
                    False,
                    [],
                    None,
                    r["last_id"],
                    r["last_state"],
                    r["last_slot"],
                    None,
                )
            )
        return out


@dataclass(frozen=True)
class CronView:
    """One row of the crons page."""

    name: str
    source: str  # "belay_crons" | "static" (fired jobs, no belay_crons row: a worker's configuration)
    expression: str | None
    worker: str | None
    queue: str | None
    paused: bool
    next_slots: list[datetime]
    error: str | None  # the expression cannot be read
    last_id: int | None
    last_state: str | None
    last_slot: datetime | None
    updated_at: datetime | None


def next_slots(expression: str, now: datetime, n: int) -> tuple[list[datetime], str | None]:
    """The next `n` minute slots after the current minute (model/cron.py's reading: UTC minutes)."""
    try:
        parse_expression(expression)
        it = CronSim(expression, minute_slot(now))
        return [next(it).astimezone(UTC) for _ in range(n)], None
    except (InvalidInput, CronSimError, StopIteration) as exc:
        return [], str(exc) or type(exc).__name__
