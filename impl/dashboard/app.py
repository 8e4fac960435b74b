"""The dashboard's ASGI application (Starlette + Jinja2): pages, the live tiles fragment, actions.

`create_app(conninfo, *, token=None, schema="public", reports_dir="reports", clock=utc_now)`.
Reads go through impl/dashboard/queries.py and the store's read operations; every mutation is one
`PgStore.apply` of the Client SDK's operation (model/ops.py: Retry, Cancel, DeliverSignal, Steer)
with `now` read from the server's clock once per request. Templates autoescape everything; the
Content-Security-Policy allows scripts only from /static, so even a missed escape could not run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from impl.dashboard import auth as a
from impl.dashboard import views
from impl.dashboard.queries import (
    COUNT_CAP,
    ERROR_WINDOW,
    FILTERS,
    INDEXES,
    PAGE_SIZE,
    TERMINAL_CAP,
    DashboardQueries,
    JobFilter,
)
from impl.store import PgStore
from model import ops
from model.rows import STATES, TERMINAL

log = logging.getLogger("belay.dashboard")
HERE = Path(__file__).parent
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'"
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
REPORT_FILES = {"report.html", "results.json", "summary.md"}
BACK = re.compile(r"/(jobs/[0-9]+)?")


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
    env.filters.update(num=_num, age=_age, when=_when, usd=views.usd, pretty=views.pretty)
    env.globals.update(STATES=STATES, TERMINAL=TERMINAL, COUNT_CAP=COUNT_CAP, TERMINAL_CAP=TERMINAL_CAP)
    return env


class Forbidden(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def create_app(
    conninfo: str,
    *,
    token: str | None = None,
    schema: str = "public",
    reports_dir: str | Path = "reports",
    clock: Callable[[], datetime] = utc_now,
    poll_ms: int = 1000,
    pool_size: int = 4,
    error_window: int = ERROR_WINDOW,
) -> Starlette:
    """The dashboard app. `token` None makes it read-only (actions answer 403). `error_window`: how
    many jobs with errors one page of an error-text search examines at most."""
    auth = a.Auth(token)
    queries = DashboardQueries(schema)
    reports = Path(reports_dir)
    templates = Jinja2Templates(env=environment())
    state: dict[str, Any] = {}

    def store() -> PgStore:
        return state["store"]

    def session_of(request: Request) -> str | None:
        return auth.session_nonce(request.cookies.get(a.COOKIE))

    def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        nonce = session_of(request)
        base = {
            "request": request,
            "can_act": nonce is not None,
            "auth_enabled": auth.enabled,
            "csrf": auth.csrf_for(nonce) if nonce else "",
            "schema": schema,
            "poll_ms": poll_ms,
            "message": request.query_params.get("msg", ""),
        }
        return templates.TemplateResponse(request, name, {**base, **context}, status_code=status)

    # --- reads ---------------------------------------------------------------------------------

    def load_tiles(now: datetime) -> tuple[list, bool]:
        with store().pool.connection() as conn:
            indexed = "belay_jobs_dash_queue_state_idx" in queries.index_names(conn)
            return queries.tiles(conn, now, indexed=indexed), indexed

    def index(request: Request) -> Response:
        now = clock()
        tiles, indexed = load_tiles(now)
        return render(request, "index.html", {"tiles": tiles, "indexed": indexed, "now": now})

    def tiles_fragment(request: Request) -> Response:
        now = clock()
        tiles, indexed = load_tiles(now)
        return render(request, "_tiles.html", {"tiles": tiles, "indexed": indexed, "now": now})

    def jobs(request: Request) -> Response:
        try:
            filters = JobFilter.from_query(request.query_params)
            before = request.query_params.get("before")
            before_id = int(before) if before else None
        except (ops.InvalidInput, ValueError) as exc:
            return render(request, "error.html", {"title": "Bad filter", "error": str(exc)}, status=400)
        with store().pool.connection() as conn:
            page = queries.jobs_page(conn, filters, before_id, window=error_window)
        active = filters.active()
        next_url = f"/jobs?{urlencode({**active, 'before': page.next_before})}" if page.next_before else None
        return render(
            request,
            "jobs.html",
            {
                "rows": page.rows,
                "searched": page.searched,
                "error_window": error_window,
                "filters": active,
                "next_url": next_url,
                "first_url": f"/jobs?{urlencode(active)}",
                "paged": before_id is not None,
                "page_size": PAGE_SIZE,
                "filter_names": FILTERS,
            },
        )

    def job_page(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        now = clock()
        found = store().apply(ops.ReadJob(job_id))
        if isinstance(found, ops.NotFound):
            return render(
                request, "error.html", {"title": "Not found", "error": f"job {job_id} does not exist"}, status=404
            )
        job = found
        steps = store().apply(ops.ReadSteps(job_id))
        events = store().apply(ops.ReadEvents(job_id))
        scopes = [f"job:{job_id}"]
        if job.workflow_id:
            scopes.append(f"wf:{job.workflow_id}")
        if job.await_scope and job.await_scope not in scopes:
            scopes.append(job.await_scope)
        signals = store().apply(ops.ReadSignals(tuple(scopes)))
        with store().pool.connection() as conn:
            children, n_children = queries.children(conn, job_id)
        try:
            result = views.preview_envelope(job.result, limit=20_000)
        except Exception as exc:  # noqa: BLE001 - a preview must never take the page down
            result = f"(cannot preview: {exc})"
        return render(
            request,
            "job.html",
            {
                "job": job,
                "steps": views.step_rows(job, steps),
                "events": events,
                "signals": signals,
                "scopes": scopes,
                "children": children,
                "n_children": n_children,
                "result": result,
                "timeline": views.timeline(job, now),
                "now": now,
                "over_budget": views.over_budget(
                    job.spent_usd_micros, job.spent_tokens, job.budget_usd_micros, job.budget_tokens
                ),
            },
        )

    def workflow_page(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        members = list(store().apply(ops.ReadWorkflow(workflow_id)))
        if not members:
            return render(
                request,
                "error.html",
                {"title": "Not found", "error": f"workflow {workflow_id!r} has no members"},
                status=404,
            )
        dag = views.workflow_dag(members)
        return render(
            request,
            "workflow.html",
            {"workflow_id": workflow_id, "members": members, "dag": dag, "colours": views.STATE_COLOURS},
        )

    def reports_page(request: Request) -> Response:
        runs: list[dict[str, Any]] = []
        if reports.is_dir():
            for d in sorted(
                (p for p in reports.iterdir() if p.is_dir() and not p.is_symlink()), key=lambda p: p.name, reverse=True
            ):
                results = d / "results.json"
                if not results.is_file() or not RUN_ID.match(d.name):
                    continue
                try:
                    data = json.loads(results.read_text())
                except (OSError, ValueError) as exc:
                    runs.append({"run_id": d.name, "error": f"unreadable results.json: {exc}"})
                    continue
                meta, stats = data.get("meta") or {}, data.get("stats") or {}
                runs.append(
                    {
                        "run_id": d.name,
                        "verdict": data.get("verdict", "?"),
                        "error": None,
                        "duration": meta.get("elapsed_seconds", meta.get("duration")),
                        "worker": meta.get("worker"),
                        "workers": meta.get("workers"),
                        "jobs": stats.get("jobs_in_database", stats.get("jobs_checked")),
                        "faults": {k: v for k, v in (data.get("faults") or {}).items() if v},
                        "has_html": (d / "report.html").is_file(),
                    }
                )
        return render(request, "reports.html", {"runs": runs, "reports_dir": str(reports)})

    def report_file(request: Request) -> Response:
        run, name = request.path_params["run"], request.path_params["name"]
        path = reports / run / name
        if not RUN_ID.match(run) or name not in REPORT_FILES or not path.is_file():
            return PlainTextResponse("no such report file", status_code=404)
        media = {"report.html": "text/html", "results.json": "application/json", "summary.md": "text/plain"}[name]
        response = FileResponse(path, media_type=media)
        response.headers["Content-Security-Policy"] = REPORT_CSP
        return response

    # --- auth ----------------------------------------------------------------------------------

    def login_form(request: Request) -> Response:
        return render(request, "login.html", {"failed": False})

    async def login(request: Request) -> Response:
        if not auth.enabled:
            return PlainTextResponse(a.READ_ONLY, status_code=403)
        form = await request.form()
        if not auth.token_matches(str(form.get("token", ""))):
            return render(request, "login.html", {"failed": True}, status=403)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(a.COOKIE, auth.new_session(), httponly=True, samesite="strict", path="/")
        return response

    async def logout(request: Request) -> Response:
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(a.COOKIE, path="/")
        return response

    async def authorize(request: Request) -> dict[str, str]:
        """The action's form fields if the request may act; raises Forbidden with the reason."""
        if not auth.enabled:
            raise Forbidden(a.READ_ONLY)
        origin = request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
            raise Forbidden(f"cross-origin request refused (Origin {origin} is not this dashboard)")
        form = {k: str(v) for k, v in (await request.form()).items()}
        bearer = auth.bearer(request.headers.get("authorization"))
        if bearer is not None:
            if auth.token_matches(bearer):
                return form
            raise Forbidden("the bearer token does not match the dashboard token")
        nonce = session_of(request)
        if nonce is None:
            raise Forbidden(a.NOT_LOGGED_IN)
        if not auth.csrf_ok(nonce, form.get(a.CSRF_FIELD)):
            raise Forbidden(a.BAD_CSRF)
        return form

    def _payload(text: str, what: str) -> Any:
        try:
            return json.loads(text) if text.strip() else None
        except ValueError as exc:
            raise ops.InvalidInput(f"{what} must be JSON: {exc}") from None

    def action(kind: str) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                form = await authorize(request)
            except Forbidden as exc:
                return PlainTextResponse(exc.message, status_code=403)
            now = clock()
            try:
                if kind == "signal":
                    op: Any = ops.DeliverSignal(
                        now,
                        form.get("scope", ""),
                        form.get("name", ""),
                        _payload(form.get("payload", ""), "signal payload"),
                    )
                    back = form.get("back", "/")
                else:
                    job_id = request.path_params["job_id"]
                    back = f"/jobs/{job_id}"
                    if kind == "cancel":
                        op = ops.Cancel(now, job_id)
                    elif kind == "retry":
                        op = ops.Retry(now, job_id)
                    else:
                        op = ops.Steer(now, job_id, _payload(form.get("payload", ""), "steer payload"))
            except ops.InvalidInput as exc:
                return PlainTextResponse(f"bad input: {exc}", status_code=400)
            result = await run_in_threadpool(store().apply, op)
            log.info("dashboard %s: %r -> %r", kind, op, result)
            if not BACK.fullmatch(back):  # only our own pages: never an open redirect ("//evil", "/\\evil")
                back = "/"
            return RedirectResponse(f"{back}?{urlencode({'msg': describe(kind, result)})}", status_code=303)

        return endpoint

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        state["store"] = PgStore(conninfo, schema=schema, pool_size=pool_size)
        try:
            with state["store"].pool.connection() as conn:
                missing = set(INDEXES) - queries.index_names(conn)
            if missing:
                log.warning(
                    "dashboard index variants missing (%s): tiles count by full scan; run "
                    "`belay dashboard --create-indexes` for the bounded queries",
                    ", ".join(sorted(missing)),
                )
            yield
        finally:
            state["store"].close()

    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    routes = [
        Route("/", index),
        Route("/fragments/tiles", tiles_fragment),
        Route("/jobs", jobs),
        Route("/jobs/{job_id:int}", job_page),
        Route("/jobs/{job_id:int}/cancel", action("cancel"), methods=["POST"]),
        Route("/jobs/{job_id:int}/retry", action("retry"), methods=["POST"]),
        Route("/jobs/{job_id:int}/steer", action("steer"), methods=["POST"]),
        Route("/signals", action("signal"), methods=["POST"]),
        Route("/workflows/{workflow_id:path}", workflow_page),
        Route("/reports", reports_page),
        Route("/reports/{run}/{name}", report_file),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(
        routes=routes, lifespan=lifespan, middleware=[Middleware(BaseHTTPMiddleware, dispatch=security_headers)]
    )


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
