"""The dashboard's ASGI application (Starlette + Jinja2): pages, live fragments, charts, actions.

`create_app(conninfo, *, token=None, authorizer=None, schema="public", reports_dir="reports", clock=utc_now)`.
Reads go through impl/ops/dashboard/queries.py and the store's read operations; every mutation is one
`PgStore.apply` of the Client SDK's operation (model/ops.py: Retry, Cancel, DeliverSignal, Steer)
with `now` read from the server's clock once per request. Templates autoescape everything; the
Content-Security-Policy allows scripts only from /static, so even a missed escape could not run.

- Live: the tiles, the job list and the job page poll their fragments (/fragments/...) every
  `poll_ms`; the charts poll /api/charts (JSON) and are drawn as SVG by static/app.js.
- Actions answer a form with 303 to the page (a flash message), and a request with
  `Accept: application/json` with JSON and a status code (200 done, 400 bad input, 403 refused,
  404 no such job, 409 not in a state for it, 503 database unreachable). Cancel and retry from a
  browser form ask for confirmation first. Every attempt is one audit line (impl/ops/dashboard/audit.py).
- The database unreachable: each request waits at most `db_wait` seconds for a connection (and a
  connect), each statement at most `statement_timeout`; then pages answer a 503 page that says so
  and retries, fragments a 503 the page's script turns into a banner — never a bare 500.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import psycopg
import psycopg.errors
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from impl.ops.dashboard import auth as a
from impl.ops.dashboard import views
from impl.ops.dashboard.audit import audit_logger, line
from impl.ops.dashboard.queries import (
    CHART_MINUTES,
    ERROR_WINDOW,
    FILTERS,
    INDEXES,
    PAGE_SIZE,
    DashboardQueries,
)
from impl.ops.dashboard.reports import report_routes
from impl.ops.dashboard.web import (
    BACK,
    DESTRUCTIVE,
    HERE,
    MAX_JOB_ID,
    STATUS,
    SUCCESS,
    TOOLS,
    UNAVAILABLE,
    BadInput,
    Forbidden,
    _when,
    build,
    dashboard_conninfo,
    describe,
    environment,
    job_filter,
    security_middleware,
    short,
    snake,
    utc_now,
    wants_json,
)
from impl.ops.shapes import retry_refusal
from impl.store import PgStore
from model import ops

log = logging.getLogger("belay.dashboard")


def create_app(
    conninfo: str,
    *,
    token: str | None = None,
    authorizer: a.Authorizer | None = None,
    schema: str = "public",
    reports_dir: str | Path = "reports",
    clock: Callable[[], datetime] = utc_now,
    poll_ms: int = 1000,
    pool_size: int = 4,
    error_window: int = ERROR_WINDOW,
    sessions: a.Sessions | None = None,
    db_wait: float = 2.0,
    statement_timeout: float = 5.0,
) -> Starlette:
    """The dashboard app. With neither `token` nor `authorizer` it is read-only (actions answer 403).
    `authorizer`: impl/ops/mcp_server.py's contract (see impl/ops/dashboard/auth.py). `sessions`: the login
    sessions (lifetime, idle timeout). `db_wait`: seconds a request waits for the database (a pooled
    connection, a connect) before the page answers 503; `statement_timeout` bounds each statement.
    `error_window`: how many jobs with errors one page of an error-text search examines at most."""
    auth = a.Auth(token, authorizer, sessions)
    queries = DashboardQueries(schema)
    reports = Path(reports_dir)
    templates = Jinja2Templates(env=environment())
    audit_log = audit_logger()
    state: dict[str, Any] = {"down_since": None}
    conninfo = dashboard_conninfo(conninfo, connect_timeout=db_wait, statement_timeout=statement_timeout)

    def store() -> PgStore:
        return state["store"]

    def session_of(request: Request) -> a.Session | None:
        return auth.session(request.cookies.get(a.COOKIE))

    def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        session = session_of(request)
        new_cookie = None
        if session is None and auth.enabled and not auth.needs_login and request.method == "GET":
            new_cookie, session = auth.sessions.create("anonymous")  # authorizer-only: a session for CSRF
        base = {
            "request": request,
            "can_act": session is not None,
            "auth_enabled": auth.enabled,
            "needs_login": auth.needs_login,
            "logged_in": session is not None and session.kind == "token",
            "csrf": session.csrf if session else "",
            "schema": schema,
            "poll_ms": poll_ms,
            "message": request.query_params.get("msg", ""),
            "form_error": None,
            "form_values": {},
        }
        response = templates.TemplateResponse(request, name, {**base, **context}, status_code=status)
        if new_cookie:
            set_session_cookie(response, new_cookie)
        return response

    def set_session_cookie(response: Response, value: str) -> None:
        response.set_cookie(a.COOKIE, value, httponly=True, samesite="strict", path="/", max_age=int(auth.sessions.ttl))

    def mark_up() -> None:
        if state["down_since"] is not None:
            log.warning("dashboard: the database answers again (unreachable since %s)", _when(state["down_since"]))
            state["down_since"] = None

    def read(fn: Callable[[psycopg.Connection], Any]) -> Any:
        with store().pool.connection(timeout=db_wait) as conn:
            out = fn(conn)
        mark_up()
        return out

    # --- reads ---------------------------------------------------------------------------------

    def load_tiles(now: datetime) -> tuple[list, bool]:
        def go(conn: psycopg.Connection) -> tuple[list, bool]:
            indexed = "belay_jobs_dash_queue_state_idx" in queries.index_names(conn)
            return queries.tiles(conn, now, indexed=indexed), indexed

        return read(go)

    def queue_page_context(request: Request) -> dict[str, Any]:
        """The queues, filtered (`q`), sorted (`sort`: name, backlog, failures) and shown as tiles or as
        the compact table (`view`: auto — the table from views.TABLE_FROM queues on —, tiles, table)."""
        now = clock()
        tiles, indexed = load_tiles(now)
        params = request.query_params
        sort = params.get("sort", "name") if params.get("sort") in views.QUEUE_SORTS else "name"
        view = params.get("view", "auto") if params.get("view") in views.QUEUE_VIEWS else "auto"
        text = params.get("q", "")[:200]
        listed = views.queue_listing(tiles, sort, text)
        shown_as = view if view != "auto" else ("table" if len(tiles) >= views.TABLE_FROM else "tiles")
        chosen = {k: v for k, v in (("sort", sort), ("view", view), ("q", text)) if v and v not in ("name", "auto")}
        return {
            "tiles": listed,
            "total": len(tiles),
            "indexed": indexed,
            "now": now,
            "sort": sort,
            "view": view,
            "shown_as": shown_as,
            "filter_text": text,
            "sorts": views.QUEUE_SORTS,
            "views": views.QUEUE_VIEWS,
            "fragment_url": "/fragments/tiles" + (f"?{urlencode(chosen)}" if chosen else ""),
        }

    def index(request: Request) -> Response:
        return render(request, "index.html", queue_page_context(request))

    def tiles_fragment(request: Request) -> Response:
        return render(request, "_tiles.html", queue_page_context(request))

    def charts_json(request: Request) -> Response:
        text = request.query_params.get("minutes", str(CHART_MINUTES))
        if not re.fullmatch(r"[0-9]{1,4}", text) or not 1 <= int(text) <= 24 * 60:
            return JSONResponse({"error": f"minutes must be a whole number from 1 to 1440, got {text!r}"}, 400)
        minutes = int(text)
        return JSONResponse(read(lambda conn: queries.charts(conn, clock(), minutes)))

    def crons_page(request: Request) -> Response:
        now = clock()
        crons = read(lambda conn: queries.crons(conn, now))
        return render(request, "crons.html", {"crons": crons, "now": now})

    def jobs(request: Request, fragment: bool = False) -> Response:
        try:
            filters, before_id = job_filter(request)
        except (ops.InvalidInput, ValueError) as exc:
            return render(request, "error.html", {"title": "Bad filter", "error": str(exc)}, status=400)
        page = read(lambda conn: queries.jobs_page(conn, filters, before_id, window=error_window))
        active = filters.active()
        next_url = f"/jobs?{urlencode({**active, 'before': page.next_before})}" if page.next_before else None
        query = {**active, **({"before": before_id} if before_id is not None else {})}
        return render(
            request,
            "_job_rows.html" if fragment else "jobs.html",
            {
                "rows": page.rows,
                "searched": page.searched,
                "error_window": error_window,
                "filters": active,
                "next_url": next_url,
                "first_url": f"/jobs?{urlencode(active)}",
                "live_url": f"/fragments/jobs?{urlencode(query)}",
                "paged": before_id is not None,
                "page_size": PAGE_SIZE,
                "filter_names": FILTERS,
            },
        )

    def jobs_fragment(request: Request) -> Response:
        return jobs(request, fragment=True)

    def job_context(job_id: int, now: datetime) -> dict[str, Any] | None:
        found = store().apply(ops.ReadJob(job_id))
        if isinstance(found, ops.NotFound):
            return None
        job = found
        steps = store().apply(ops.ReadSteps(job_id))
        events = store().apply(ops.ReadEvents(job_id))
        scopes = [f"job:{job_id}"]
        if job.workflow_id:
            scopes.append(f"wf:{job.workflow_id}")
        if job.await_scope and job.await_scope not in scopes:
            scopes.append(job.await_scope)
        signals = store().apply(ops.ReadSignals(tuple(scopes)))
        children, n_children = read(lambda conn: queries.children(conn, job_id))
        try:
            result = views.preview_envelope(job.result, limit=20_000)
        except Exception as exc:  # noqa: BLE001 - a preview must never take the page down
            result = f"(cannot preview: {exc})"
        return {
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
        }

    def not_found(request: Request, job_id: int) -> Response:
        return render(
            request, "error.html", {"title": "Not found", "error": f"job {job_id} does not exist"}, status=404
        )

    def job_page(request: Request, extra: dict[str, Any] | None = None, status: int = 200) -> Response:
        job_id = request.path_params["job_id"]
        context = job_context(job_id, clock()) if 1 <= job_id <= MAX_JOB_ID else None
        if context is None:
            return not_found(request, job_id)
        return render(request, "job.html", {**context, **(extra or {})}, status=status)

    def job_fragment(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        context = job_context(job_id, clock()) if 1 <= job_id <= MAX_JOB_ID else None
        if context is None:
            return PlainTextResponse(f"job {job_id} does not exist", status_code=404)
        return render(request, "_job_live.html", context)

    def workflow_page(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        members = list(store().apply(ops.ReadWorkflow(workflow_id))) if "\x00" not in workflow_id else []
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

    reports_page, report_file = report_routes(reports, render)

    # --- auth ----------------------------------------------------------------------------------

    def login_form(request: Request) -> Response:
        return render(request, "login.html", {"failed": False})

    async def login(request: Request) -> Response:
        if not auth.needs_login:
            return PlainTextResponse(
                a.READ_ONLY if not auth.enabled else "this dashboard has no token: its authorizer decides each action",
                status_code=403,
            )
        form = await request.form()
        if not auth.token_matches(str(form.get("token", ""))):
            audit(request, "login", None, "anonymous", 403, "refused", "wrong token")
            return render(request, "login.html", {"failed": True}, status=403)
        auth.sessions.end(request.cookies.get(a.COOKIE))  # a login never reuses a session id
        cookie, session = auth.sessions.create("token")
        audit(request, "login", None, session.label, 303, "logged_in", None)
        response = RedirectResponse("/", status_code=303)
        set_session_cookie(response, cookie)
        return response

    async def logout(request: Request) -> Response:
        cookie = request.cookies.get(a.COOKIE)
        session = auth.sessions.get(cookie)
        if session is not None:
            auth.sessions.end(cookie)
            audit(request, "logout", None, session.label, 303, "logged_out", None)
        response = RedirectResponse("/?" + urlencode({"msg": "logged out"}), status_code=303)
        response.delete_cookie(a.COOKIE, path="/")
        return response

    def authenticate(request: Request, form: dict[str, str]) -> tuple[str, bool]:
        """(who, by_form) if the request may try to act; raises Forbidden with the reason."""
        if not auth.enabled:
            raise Forbidden(a.READ_ONLY)
        origin = request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
            raise Forbidden(f"cross-origin request refused (Origin {origin} is not this dashboard)")
        bearer = auth.bearer(request.headers.get("authorization"))
        if bearer is not None and auth.token is not None:
            if auth.token_matches(bearer):
                return "bearer", False
            raise Forbidden("the bearer token does not match the dashboard token", who="bearer (wrong token)")
        cookie = request.cookies.get(a.COOKIE)
        session = auth.session(cookie)
        if session is None:
            if auth.needs_login:
                raise Forbidden(a.SESSION_ENDED if cookie else a.NOT_LOGGED_IN)
            return "anonymous", False  # authorizer-only: the authorizer decides
        if not auth.csrf_ok(session, form.get(a.CSRF_FIELD)):
            raise Forbidden(a.BAD_CSRF, who=session.label)
        return session.label, True

    def audit(
        request: Request,
        action: str,
        job_id: int | None,
        who: str,
        status: int,
        outcome: str,
        detail: str | None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        client = request.client.host if request.client else None
        fields = {"who": who, "client": client, "action": action, "job": job_id, **(extra or {})}
        fields |= {"status": status, "outcome": outcome, "detail": detail}
        audit_log.info("%s", line(fields))

    def action(kind: str) -> Callable[[Request], Any]:
        tool = TOOLS[kind]

        async def endpoint(request: Request) -> Response:
            as_json = wants_json(request)
            form = {k: str(v) for k, v in (await request.form()).items()}
            job_id = request.path_params.get("job_id")
            back = f"/jobs/{job_id}" if job_id is not None else form.get("back", "/")
            if not BACK.fullmatch(back):  # only our own pages: never an open redirect ("//evil", "/\\evil")
                back = "/"
            signal_fields = {"scope": form.get("scope"), "signal": form.get("name")} if kind == "signal" else {}

            def refuse(status: int, outcome: str, message: str, who: str) -> Response:
                audit(request, tool, job_id, who, status, outcome, message, signal_fields)
                if as_json:
                    return JSONResponse(
                        {"ok": False, "action": tool, "job_id": job_id, "outcome": outcome, "message": message},
                        status_code=status,
                    )
                return render(request, "error.html", {"title": "Refused", "error": message}, status=status)

            request.state.action = tool
            try:
                who, by_form = authenticate(request, form)
            except Forbidden as exc:
                return refuse(exc.status, "refused", exc.message, exc.who)
            request.state.who = who
            if job_id is not None and not 1 <= job_id <= MAX_JOB_ID:  # no such job can exist (a bigint id ≥ 1)
                return refuse(404, "not_found", f"job {job_id} does not exist", who)
            now = clock()
            try:
                op, arguments = build(kind, request, form, now)
            except BadInput as exc:
                audit(request, tool, job_id, who, 400, "bad_input", exc.message, signal_fields)
                if as_json:
                    return JSONResponse(
                        {"ok": False, "action": tool, "job_id": job_id, "outcome": "bad_input", "message": exc.message},
                        status_code=400,
                    )
                if back.startswith("/jobs/"):  # the job page again, with what was typed and the error
                    request.scope["path_params"] = {"job_id": int(back.rsplit("/", 1)[1])}
                    return await run_in_threadpool(
                        job_page,
                        request,
                        {"form_error": {"form": exc.field, "message": exc.message}, "form_values": {exc.field: form}},
                        400,
                    )
                return render(
                    request, "error.html", {"title": "Bad input", "error": f"bad input: {exc.message}"}, status=400
                )
            if kind in DESTRUCTIVE and by_form and not as_json and form.get("confirm") != "yes":
                assert job_id is not None  # cancel and retry are job routes
                found = await run_in_threadpool(store().apply, ops.ReadJob(job_id))
                if isinstance(found, ops.NotFound):
                    return not_found(request, job_id)
                return render(request, "confirm.html", {"kind": kind, "job": found})
            info = a.RequestInfo(who, request.client.host if request.client else None, dict(request.headers))
            refusal = await run_in_threadpool(auth.ask_authorizer, tool, arguments, info)
            if refusal is not None:
                return refuse(403, "refused", refusal, who)
            try:
                result = await run_in_threadpool(store().apply, op)
            except UNAVAILABLE as exc:
                down(exc)
                return refuse(
                    503, "db_unavailable", f"the database is unreachable: {short(exc)}; nothing was changed", who
                )
            except ops.InvalidInput as exc:
                return refuse(400, "bad_input", str(exc), who)
            outcome = snake(type(result).__name__)
            status = 200 if isinstance(result, SUCCESS) else STATUS.get(type(result), 409)
            message = describe(kind, result)
            if kind == "retry" and isinstance(result, ops.Retried):  # the Client SDK's refusal rules
                assert job_id is not None
                doomed = await run_in_threadpool(retry_refusal, job_id, result, read_job, read_workflow)
                if doomed is not None:
                    return refuse(409, doomed.kind, str(doomed), who)
            audit(request, tool, job_id, who, status, outcome, message, signal_fields)
            if as_json:
                body = {"ok": status == 200, "action": tool, "job_id": job_id, "outcome": outcome, "message": message}
                if isinstance(result, ops.Signalled):
                    body["woken"] = list(result.woken)
                if isinstance(result, ops.Retried | ops.NotRetryable | ops.NotCancellable):
                    body["state"] = result.state
                return JSONResponse(body, status_code=status)
            return RedirectResponse(f"{back}?{urlencode({'msg': message})}", status_code=303)

        return endpoint

    # --- the database unreachable --------------------------------------------------------------

    def down(exc: BaseException) -> None:
        if state["down_since"] is None:
            state["down_since"] = utc_now()
            log.warning("dashboard: the database is unreachable (%s); pages answer 503 until it is back", short(exc))

    async def unavailable(request: Request, exc: Exception) -> Response:
        down(exc)
        since = state["down_since"]
        message = f"The database is unreachable ({short(exc)})."
        headers = {"Retry-After": "5"}
        if wants_json(request) or request.url.path.startswith("/api/"):
            return JSONResponse(
                {"ok": False, "outcome": "db_unavailable", "message": message, "since": _when(since)},
                status_code=503,
                headers=headers,
            )
        if request.url.path.startswith("/fragments/"):
            return PlainTextResponse(message, status_code=503, headers=headers)
        response = templates.TemplateResponse(
            request,
            "unavailable.html",
            {
                "request": request,
                "message": "",
                "outage": message,
                "since": since,
                "db_down": f"Database unreachable since {_when(since)}: {message} This page retries every 5 seconds.",
                "can_act": False,
                "auth_enabled": auth.enabled,
                "needs_login": auth.needs_login,
                "logged_in": False,
                "csrf": "",
                "schema": schema,
                "form_error": None,
                "form_values": {},
            },
            status_code=503,
        )
        response.headers.update(headers)
        return response

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        state["store"] = PgStore(conninfo, schema=schema, pool_size=pool_size, call_timeout=statement_timeout + 1)
        state["store"].pool.timeout = db_wait  # store calls (ReadJob, the actions) wait as long as pages do
        try:
            try:
                with state["store"].pool.connection(timeout=db_wait) as conn:
                    missing = set(INDEXES) - queries.index_names(conn)
            except UNAVAILABLE as exc:
                down(exc)
            else:
                if missing:
                    log.warning(
                        "dashboard index variants missing (%s): tiles count by full scan; run "
                        "`belay dashboard --create-indexes` for the bounded queries",
                        ", ".join(sorted(missing)),
                    )
            yield
        finally:
            state["store"].close()

    def read_job(job_id: int) -> Any:
        found = store().apply(ops.ReadJob(job_id))
        return None if isinstance(found, ops.NotFound) else found

    def read_workflow(workflow_id: str) -> Any:
        return store().apply(ops.ReadWorkflow(workflow_id))

    security_headers = security_middleware(audit)

    routes = [
        Route("/", index),
        Route("/fragments/tiles", tiles_fragment),
        Route("/fragments/jobs", jobs_fragment),
        Route("/fragments/jobs/{job_id:int}", job_fragment),
        Route("/api/charts", charts_json),
        Route("/crons", crons_page),
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
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=security_headers)],
        exception_handlers={exc: unavailable for exc in UNAVAILABLE},
    )
