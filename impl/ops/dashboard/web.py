"""The dashboard app's parts that hold no request state (impl/ops/dashboard/app.py builds the app from them):
the Content-Security-Policy, the template environment and its filters, the errors an action answers
with, the action vocabulary, reading an action's form into an operation (`build`), the connection
settings, and the sentence after an action (`describe`).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import PoolTimeout
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from impl.ops.dashboard import views
from impl.ops.dashboard.queries import (
    COUNT_CAP,
    TERMINAL_CAP,
    JobFilter,
)
from model import ops
from model.rows import STATES, TERMINAL

log = logging.getLogger("belay.dashboard")
HERE = Path(__file__).parent
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
BACK = re.compile(r"/(jobs/[0-9]+)?")
MAX_JOB_ID = 2**63 - 1  # belay_jobs.id is a bigint: a larger id in a path names no job


def utc_now() -> datetime:
    return datetime.now(UTC)


def _num(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _when(value: datetime | None) -> str:
    return "—" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env.filters.update(num=_num, age=_age, when=_when, usd=views.usd, pretty=views.pretty, shown=views.shown_name)
    env.globals.update(BACKLOG_STATES=views.BACKLOG_STATES, backlog=views.backlog)
    env.globals.update(STATES=STATES, TERMINAL=TERMINAL, COUNT_CAP=COUNT_CAP, TERMINAL_CAP=TERMINAL_CAP)
    return env


class Forbidden(Exception):
    def __init__(self, message: str, status: int = 403, who: str = "anonymous") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.who = who


class BadInput(Exception):
    """An action's form could not become an operation (the field it concerns, the reason)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


# The database cannot answer: a connection refused or reset, no pooled connection within the wait, a
# statement over its timeout. Pages answer 503 (a banner, a retry), never a bare 500.
UNAVAILABLE: tuple[type[BaseException], ...] = (psycopg.OperationalError, PoolTimeout, psycopg.errors.QueryCanceled)

TOOLS = {"cancel": "cancel_job", "retry": "retry_job", "signal": "signal", "steer": "steer"}
DESTRUCTIVE = ("cancel", "retry")  # a browser form asks for confirmation first
SUCCESS = (ops.Cancelled, ops.CancelRequested, ops.Retried, ops.Signalled)
STATUS = {ops.NotFound: 404, ops.NotCancellable: 409, ops.NotRetryable: 409, ops.RetryBlocked: 409, ops.DepsGone: 409}


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def dashboard_conninfo(conninfo: str, *, connect_timeout: float, statement_timeout: float) -> str:
    """The conninfo with the dashboard's short timeouts (a value the conninfo sets itself is kept):
    libpq's connect_timeout and a per-session statement_timeout, so a page waits seconds, not minutes."""
    given = conninfo_to_dict(conninfo)
    extra: dict[str, Any] = {}
    if "connect_timeout" not in given:
        extra["connect_timeout"] = max(1, round(connect_timeout))
    if "statement_timeout" not in str(given.get("options", "")):
        extra["options"] = f"{given.get('options', '')} -c statement_timeout={int(statement_timeout * 1000)}".strip()
    return make_conninfo(conninfo, **extra) if extra else conninfo


def wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def job_filter(request: Request) -> tuple[JobFilter, int | None]:
    filters = JobFilter.from_query(request.query_params)
    before = request.query_params.get("before")
    return filters, int(before) if before else None


def payload(text: str, what: str, field: str) -> Any:
    try:
        return json.loads(text) if text.strip() else None
    except ValueError as exc:
        raise BadInput(field, f"{what} must be JSON: {exc}") from None


def build(kind: str, request: Request, form: dict[str, str], now: datetime) -> tuple[Any, dict[str, Any]]:
    """The operation and the authorizer's arguments (the MCP tool's)."""
    if kind == "signal":
        scope, name = form.get("scope", "").strip(), form.get("name", "").strip()
        for field, text in (("scope", scope), ("name", name)):
            if not text:
                raise BadInput("signal", f"a signal needs a {field}: the {field} field is empty")
        value = payload(form.get("payload", ""), "signal payload", "signal")
        try:
            op = ops.DeliverSignal(now, scope, name, value)
        except ops.InvalidInput as exc:
            raise BadInput("signal", " ".join(str(exc).split())) from None
        return op, {"scope": scope, "name": name, "payload": value}
    job_id = request.path_params["job_id"]
    try:
        if kind == "cancel":
            return ops.Cancel(now, job_id), {"job_id": job_id}
        if kind == "retry":
            return ops.Retry(now, job_id), {"job_id": job_id}
        value = payload(form.get("payload", ""), "steer payload", "steer")
        return ops.Steer(now, job_id, value), {"job_id": job_id, "payload": value}
    except ops.InvalidInput as exc:
        raise BadInput(kind, " ".join(str(exc).split())) from None


def security_middleware(audit: Callable[..., None]) -> Callable[[Request, Any], Any]:
    """The app's middleware: its security headers on every response, and the last resort for an error no
    handler expected (`internal_error`), which writes its audit line with the app's `audit`."""

    def internal_error(request: Request, exc: Exception) -> Response:
        """Any error no handler expected: logged with its traceback under a request id, one audit line,
        and a 500 that names the request id — never the traceback or the exception's text."""
        rid = uuid.uuid4().hex[:12]
        log.error("dashboard: request id %s: %s %s failed", rid, request.method, request.url.path, exc_info=exc)
        action = getattr(request.state, "action", "page")
        who = getattr(request.state, "who", None) or "anonymous"
        job_id = request.path_params.get("job_id") if isinstance(request.path_params.get("job_id"), int) else None
        audit(
            request,
            action,
            job_id,
            who,
            500,
            "error",
            f"{type(exc).__name__} (request id {rid})",
            {"path": request.url.path, "request": rid},
        )
        message = f"Internal error (request id {rid}): it was logged; nothing more is known here."
        if wants_json(request) or request.url.path.startswith("/api/"):
            return JSONResponse({"ok": False, "outcome": "error", "message": message}, status_code=500)
        return PlainTextResponse(message, status_code=500)

    async def security_headers(request: Request, call_next):
        try:
            response = await call_next(request)
        except Exception as exc:  # noqa: BLE001 - the last resort: a logged 500, never a traceback
            response = internal_error(request, exc)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    return security_headers


def describe(kind: str, result: Any) -> str:
    """A sentence for the flash message after an action."""
    name = type(result).__name__
    if isinstance(result, ops.Cancelled):
        return f"job {result.job_id} cancelled"
    if isinstance(result, ops.CancelRequested):
        return f"cancel requested for running job {result.job_id} (honoured at its next step boundary)"
    if isinstance(result, ops.NotCancellable):
        return f"job {result.job_id} is already {result.state}: nothing to cancel"
    if isinstance(result, ops.Retried):
        return f"job {result.job_id} retried: now {result.state}"
    if isinstance(result, ops.NotRetryable):
        return f"job {result.job_id} is {result.state}: only failed or cancelled jobs can be retried"
    if isinstance(result, ops.RetryBlocked):
        return f"retry refused: job {result.holder_id} holds the same unique key"
    if isinstance(result, ops.DepsGone):
        return f"retry refused: deps {', '.join(result.missing)} were already pruned"
    if isinstance(result, ops.NotFound):
        return f"job {result.job_id} does not exist"
    if isinstance(result, ops.Signalled):
        woken = ", ".join(map(str, result.woken)) or "none"
        return f"{'steered' if kind == 'steer' else 'signal delivered'}; woke jobs: {woken}"
    return f"{kind}: {name}"
