"""The ASGI application (Starlette): routes, bearer auth, JSON bodies, the claim long poll, and the
background sweeper and pg_notify listener that run for the app's lifetime.

`create_app(conninfo, *, token=None, clock=utc_now, ...)` builds it. The clock is read once per
request, in the handler (and once per long-poll round and sweeper pass, which are entry points of
their own), and passed to the service as `now`; a test injects a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import unquote

from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from impl.http import errors as e
from impl.http import fastpath as fast
from impl.http import hot
from impl.http.base import DEFAULT_PAGE, RUN_STATUSES, TASK_STATES, TASK_STATUSES
from impl.http.errors import ApiError
from impl.http.service import HttpService
from impl.http.state import Belay
from model import ops

log = logging.getLogger("belay.http")
MAX_BODY = hot.MAX_BODY


def utc_now() -> datetime:
    return datetime.now(UTC)


# --- request plumbing ------------------------------------------------------------------------------


async def json_body(request: Request, *, optional: bool = False) -> Any:
    return hot.parse_json(await request.body(), optional=optional)


def path(request: Request, key: str) -> str:
    """A path parameter; see `_EncodedSlashes` for why it is unquoted here."""
    return unquote(request.path_params[key])


def _belay(request: Request) -> Belay:
    return request.scope["belay"]


def _authorize(request: Request) -> None:
    hot.check_token(_belay(request).token, request.method, request.headers.get("authorization", ""))


Handler = Callable[[Request, HttpService, datetime], Awaitable[Response]]


def endpoint(*handlers: tuple[str, Handler]) -> Callable[[Request], Awaitable[Response]]:
    """One route's methods: authorize, read the clock once, dispatch."""
    table = dict(handlers)

    async def dispatch(request: Request) -> Response:
        _authorize(request)
        belay = _belay(request)
        handler = table.get(request.method) or table["GET"]  # HEAD is GET without a body
        return await handler(request, belay.service, belay.clock())

    return dispatch


def ok(body: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status)


call = hot.call


# --- handlers ------------------------------------------------------------------------------------


async def list_queues(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(await call(s.list_queues, now))


async def create_queue(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(await call(s.create_queue, now, await json_body(request)), 201)


async def delete_queue(request: Request, s: HttpService, now: datetime) -> Response:
    await call(s.delete_queue, now, path(request, "queue_name"))
    return Response(status_code=204)


async def queue_stats(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(await call(s.queue_stats, now, path(request, "queue_name")))


async def create_task(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(await call(s.create_task, now, path(request, "queue_name"), await json_body(request)), 201)


async def claim_tasks(request: Request, s: HttpService, now: datetime) -> Response:
    """claimTasks (the long poll: impl/http/hot.py `claim`); without a long poll HotRoutes answers it."""
    body = await json_body(request)
    return ok(await hot.claim(_belay(request), now, path(request, "queue_name"), body, request.is_disconnected))


def _page_query(request: Request, statuses: tuple[str, ...]) -> tuple[str | None, int]:
    """The status filter and limit of a listing's query string (400 for bad values)."""
    q = request.query_params
    status = q.get("status")
    if status is not None and status not in statuses:
        raise e.bad(f"status must be one of {', '.join(statuses)}")
    limit = DEFAULT_PAGE
    if q.get("limit") is not None:
        try:
            limit = int(q["limit"])
        except ValueError:
            raise e.bad("limit must be an integer") from None
        if limit < 1:
            raise e.bad(f"limit must be at least 1, got {limit}")
    return status, limit


async def list_runs(request: Request, s: HttpService, now: datetime) -> Response:
    status, limit = _page_query(request, RUN_STATUSES)
    q = request.query_params
    return ok(await call(s.list_runs, now, q.get("task_id"), status, q.get("cursor"), limit))


async def list_tasks(request: Request, s: HttpService, now: datetime) -> Response:
    status, limit = _page_query(request, TASK_STATUSES)
    q = request.query_params
    queue = q.get("queue_name", q.get("queue"))  # `queue`: the name this server read before the clients'
    state = q.get("state")
    if state is not None and state not in TASK_STATES:
        raise e.bad(f"state must be one of {', '.join(TASK_STATES)}")
    return ok(await call(s.list_tasks, now, queue, status, q.get("cursor"), limit, q.get("task_name"), state))


async def complete_run(request: Request, s: HttpService, now: datetime) -> Response:
    """completeRun (impl/http/hot.py `complete`); HotRoutes answers it without Starlette."""
    run, body = path(request, "run_id"), await json_body(request, optional=True)
    return ok(await hot.complete(_belay(request), now, run, body))


async def fail_run(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(await call(s.fail, now, path(request, "run_id"), await json_body(request)))


async def schedule_run(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(await call(s.schedule, now, path(request, "run_id"), await json_body(request)))


async def wait_for_event(request: Request, s: HttpService, now: datetime) -> Response:
    status, body = await call(s.wait_for_event, now, path(request, "run_id"), await json_body(request))
    return ok(body, status)


async def set_checkpoint(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(
        await call(
            s.set_checkpoint, now, path(request, "task_id"), path(request, "step_name"), await json_body(request)
        )
    )


async def get_checkpoint(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(await call(s.get_checkpoint, now, path(request, "task_id"), path(request, "step_name")))


async def emit_event(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(await call(s.emit, now, await json_body(request)), 201)


async def create_workflow_run(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(await call(s.create_workflow_run, now, await json_body(request)), 201)


async def update_workflow_run(request: Request, s: HttpService, now: datetime) -> Response:
    return ok(await call(s.update_workflow_run, now, path(request, "workflow_run_id"), await json_body(request)))


async def openapi_json(request: Request) -> Response:
    belay = _belay(request)
    return ok(belay.documents[belay.token is not None])


# --- errors ----------------------------------------------------------------------------------------


async def api_error(request: Request, exc: ApiError) -> Response:
    return hot.error_response(exc, request.method, request.url.path)


async def http_error(request: Request, exc: HTTPException) -> Response:
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "HTTP_ERROR")
    message = {404: f"no route for {request.url.path}", 405: f"{request.method} is not allowed here"}.get(
        exc.status_code, str(exc.detail)
    )
    return JSONResponse({"error": message, "code": code}, status_code=exc.status_code, headers=exc.headers)


async def invalid_input(request: Request, exc: ops.InvalidInput) -> Response:
    return hot.error_response(exc, request.method, request.url.path)


async def unexpected(request: Request, exc: Exception) -> Response:
    return hot.error_response(exc, request.method, request.url.path)


class _EncodedSlashes:
    """Route on the raw path (`hot.routing_path`) so a name holding '/' (sent as %2F) stays one path
    segment; handlers unquote parameters once (`path`). Also puts the app's Belay in the scope
    (`_belay`: one dict lookup per request)."""

    def __init__(self, app: Any, belay: Belay) -> None:
        self.app = app
        self.belay = belay

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if raw:
                scope = dict(scope, path=hot.routing_path(raw), belay=self.belay)
            else:
                scope = dict(scope, belay=self.belay)
        await self.app(scope, receive, send)


class BelayApp(Starlette):
    """The Starlette app behind its hot routes: every request goes to `hot` (impl/http/hot.py), which
    answers claimTasks and completeRun itself and hands the rest to Starlette."""

    hot: hot.HotRoutes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.hot(scope, receive, send)


def create_app(
    conninfo: str,
    *,
    token: str | None = None,
    clock: Callable[[], datetime] = utc_now,
    schema: str = "public",
    pool_size: int = 16,
    poll_interval: float = 0.5,
    sweep_interval: float | None = 1.0,
    notify: bool = True,
    node: str = "http",
    max_long_poll: float | None = None,
    completion_batching: dict[str, int] | None = None,
) -> BelayApp:
    """The Belay HTTP API on `conninfo`. `token`: bearer token required by mutating requests;
    `sweep_interval` None disables the background sweeper (tests call `app.state.belay.sweep_once`);
    `notify` enables the pg_notify accelerator for long polls; `poll_interval` is their floor;
    `max_long_poll` caps a long poll's hold in seconds (None: as the request asks, 5..30);
    `completion_batching`: CompletionBatcher's max_batch / max_in_flight (impl/http/fastpath.py).
    claimTasks without a long poll and completeRun are answered by `app.hot` (impl/http/hot.py) in
    front of the Starlette routes; `app.hot.enabled = False` sends them through Starlette too."""
    completion_batching = completion_batching or {}
    belay = Belay(
        conninfo,
        schema=schema,
        token=token,
        clock=clock,
        pool_size=pool_size,
        poll_interval=poll_interval,
        sweep_interval=sweep_interval,
        notify=notify,
        node=node,
        max_long_poll=max_long_poll,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        belay.waker.loop = asyncio.get_running_loop()
        await run_in_threadpool(belay.open)
        await run_in_threadpool(belay.service._channel)  # resolved once, before the loop needs it
        belay.async_pool = AsyncConnectionPool(
            conninfo, min_size=1, max_size=pool_size, open=False, kwargs={"autocommit": True}, name="belay-http-loop"
        )
        await belay.async_pool.open()
        q = belay.service.store.q
        belay.completions = fast.CompletionBatcher(
            belay.async_pool, q.q("http_complete_batch"), q.q("http_complete_solo"), **completion_batching
        )
        try:
            yield
        finally:
            belay.stopped.set()
            belay.waker.poke(None)
            if belay.completions.batches:
                log.info(
                    "belay http: %d runs completed in %d coalesced statements",
                    belay.completions.completed,
                    belay.completions.batches,
                )
            belay.completions = None
            await belay.async_pool.close()
            await run_in_threadpool(belay.close)

    v1 = "/api/v1"
    routes = [
        Route(f"{v1}/queues", endpoint(("GET", list_queues), ("POST", create_queue)), methods=["GET", "POST"]),
        Route(f"{v1}/queues/{{queue_name}}", endpoint(("DELETE", delete_queue)), methods=["DELETE"]),
        Route(f"{v1}/queues/{{queue_name}}/stats", endpoint(("GET", queue_stats)), methods=["GET"]),
        Route(f"{v1}/queues/{{queue_name}}/tasks", endpoint(("POST", create_task)), methods=["POST"]),
        Route(f"{v1}/queues/{{queue_name}}/tasks/claim", endpoint(("POST", claim_tasks)), methods=["POST"]),
        Route(f"{v1}/runs", endpoint(("GET", list_runs)), methods=["GET"]),
        Route(f"{v1}/tasks", endpoint(("GET", list_tasks)), methods=["GET"]),  # extension (openapi.py)
        Route(f"{v1}/runs/{{run_id}}/complete", endpoint(("POST", complete_run)), methods=["POST"]),
        Route(f"{v1}/runs/{{run_id}}/fail", endpoint(("POST", fail_run)), methods=["POST"]),
        Route(f"{v1}/runs/{{run_id}}/schedule", endpoint(("POST", schedule_run)), methods=["POST"]),
        Route(f"{v1}/runs/{{run_id}}/wait-for-event", endpoint(("POST", wait_for_event)), methods=["POST"]),
        Route(
            f"{v1}/tasks/{{task_id}}/checkpoints/{{step_name}}",
            endpoint(("PUT", set_checkpoint), ("GET", get_checkpoint)),
            methods=["PUT", "GET"],
        ),
        Route(f"{v1}/events", endpoint(("POST", emit_event)), methods=["POST"]),
        Route(f"{v1}/workflow-runs", endpoint(("POST", create_workflow_run)), methods=["POST"]),
        Route(f"{v1}/workflow-runs/{{workflow_run_id}}", endpoint(("PATCH", update_workflow_run)), methods=["PATCH"]),
        Route(f"{v1}/openapi.json", openapi_json, methods=["GET"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
    ]
    app = BelayApp(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            ApiError: api_error,
            HTTPException: http_error,
            ops.InvalidInput: invalid_input,
            Exception: unexpected,
        },
    )
    app.state.belay = belay
    app.add_middleware(_EncodedSlashes, belay=belay)
    app.hot = hot.HotRoutes(partial(Starlette.__call__, app), belay)
    return app
