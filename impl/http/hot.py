"""The API's two hot routes served straight from ASGI — claimTasks (without a long poll) and
completeRun — and the request handling they share with the Starlette routes (impl/http/app.py).

A worker's loop is one claim per `limit` runs and one completeRun per run, so these two requests are
nearly all of the traffic; profiled at claim limit 10, Starlette's middleware, routing, Request and
Response objects cost about a tenth of the server's CPU per task. `HotRoutes` sits in front of the
Starlette app and answers exactly these requests itself: it computes the routing path the way the
app's `_EncodedSlashes` does, matches the two routes' patterns, and runs the same functions as the
Starlette handlers (`check_token`, `parse_json`, `claim`, `complete`; errors through `error_response`,
the app's exception handlers' mapping) — so status codes, the Error schema on every failure and the
§7 fences are the Starlette routes' own. Anything else (other routes or methods, a trailing slash, a
claim with `long_poll_seconds`, which waits anyway and needs disconnect detection) goes to the
Starlette app unchanged, with the body it already read replayed.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, unquote_to_bytes

import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from impl.http import errors as e
from impl.http.errors import ApiError
from impl.http.ids import run_id
from model import ops

if TYPE_CHECKING:
    from impl.http.service import HttpService
    from impl.http.state import Belay

log = logging.getLogger("belay.http")
MAX_BODY = 16 * 1024 * 1024
V1 = "/api/v1"
CLAIM_PATH = re.compile(f"^{V1}/queues/([^/]+)/tasks/claim$")  # Starlette's pattern for {queue_name}
COMPLETE_PATH = re.compile(f"^{V1}/runs/([^/]+)/complete$")


# --- shared by the Starlette routes and the hot routes -------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(raw: bytes, *, optional: bool = False) -> Any:
    """A request body as JSON (400 for anything else; 413 over MAX_BODY)."""
    if len(raw) > MAX_BODY:
        raise ApiError(413, "PAYLOAD_TOO_LARGE", f"request body is over {MAX_BODY} bytes")
    if not raw.strip():
        if optional:
            return {}  # an omitted optional body is an empty object; a literal `null` is not
        raise e.bad("request body is required (a JSON object)")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise e.bad(f"request body is not valid JSON: {exc}") from None


def check_token(token: str | None, method: str, given: str) -> None:
    """Mutating requests need `Authorization: Bearer <token>` when the server has a token (401)."""
    if token is None or method not in ("POST", "PUT", "PATCH", "DELETE"):
        return
    scheme, _, credentials = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(credentials.strip().encode(), token.encode()):
        raise ApiError(
            401,
            "UNAUTHORIZED",
            "a bearer token is required for this request",
            {"WWW-Authenticate": 'Bearer realm="belay"'},
        )


def routing_path(raw: bytes) -> str:
    """The path routes match: each raw segment decoded, then '%' and '/' re-escaped, so a name holding
    '/' (sent as %2F) stays one segment; parameters are unquoted once by their handler."""
    raw = raw.split(b"?", 1)[0]
    if b"%" not in raw:
        return raw.decode("utf-8", errors="replace")  # nothing escaped: the decoded path as given
    segments = [unquote_to_bytes(s).decode("utf-8", errors="replace") for s in raw.split(b"/")]
    return "/".join(s.replace("%", "%25").replace("/", "%2F") for s in segments)


def error_response(exc: Exception, method: str, path: str) -> JSONResponse:
    """The Error schema answer to a request that raised `exc` (the app's exception handlers)."""
    if isinstance(exc, ApiError):
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)
    if isinstance(exc, ops.InvalidInput):
        return JSONResponse({"error": str(exc), "code": e.VALIDATION_ERROR}, status_code=400)
    if isinstance(exc, psycopg.OperationalError):
        log.warning("belay http: database unavailable: %s", exc)
        return JSONResponse(
            {"error": "the database is unavailable; retry", "code": "DATABASE_UNAVAILABLE"},
            status_code=503,
            headers={"Retry-After": "1"},
        )
    log.error("belay http: unexpected error on %s %s", method, path, exc_info=exc)
    return JSONResponse({"error": "internal error", "code": "INTERNAL_ERROR"}, status_code=500)


def _service(belay: Belay) -> HttpService:
    if belay.service is None:
        raise RuntimeError("the app is not serving (its lifespan has not started)")
    return belay.service


async def call(fn: Callable, *args: Any) -> Any:
    return await run_in_threadpool(fn, *args)


async def claim(
    belay: Belay, now: datetime, queue: str, body: Any, is_disconnected: Callable[[], Awaitable[bool]]
) -> dict:
    """claimTasks: with long_poll_seconds, hold the request until a claim returns work or the time is
    up, re-claiming when woken (pg_notify or a local poke) and at least every poll_interval (the floor);
    `is_disconnected` is asked between rounds."""
    body = e.obj(body)
    limit = e.integer(body, "limit", minimum=1, maximum=None, required=True)
    claim_timeout = e.integer(body, "claim_timeout", minimum=1, required=True)
    long_poll: float | None = e.integer(body, "long_poll_seconds", minimum=5, maximum=30)
    if long_poll and belay.max_long_poll is not None:
        long_poll = min(long_poll, belay.max_long_poll)
    s = _service(belay)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (long_poll or 0)
    pool = belay.async_pool
    while True:
        seen = belay.waker.seen(queue)
        tasks = None if pool is None else await s.claim_fast(now, queue, limit, claim_timeout, pool, call)
        if tasks is None:
            tasks = await call(s.claim, now, queue, limit, claim_timeout)
        remaining = deadline - loop.time()
        if tasks or remaining <= 0 or belay.stopped.is_set():
            return {"tasks": tasks}
        await belay.waker.wait(queue, seen, min(remaining, belay.poll_interval))
        if await is_disconnected():
            return {"tasks": []}
        now = belay.clock()


async def complete(belay: Belay, now: datetime, run: str, body: Any) -> dict:
    """completeRun: the coalesced one-statement path (impl/http/fastpath.py) for a live run of a plain
    task; everything it does not settle takes the service's full path (409, 404, the Ack)."""
    s = _service(belay)
    completions = belay.completions
    if completions is not None:
        params = s.completion_params(now, run, body)
        if params is not None and await completions.complete(params):
            return {"run_id": run_id(params["id"], params["attempt"]), "status": "completed"}
    return await call(partial(s.complete, fast_tried=completions is not None), now, run, body)


# --- the ASGI front ----------------------------------------------------------------------------------


async def _never_disconnected() -> bool:
    return False  # only asked during a long poll, which the hot route hands to the Starlette app


class HotRoutes:
    """ASGI: answers `POST .../tasks/claim` (no long poll) and `POST .../complete` itself; passes every
    other request to `app`. `enabled` False passes everything (tests compare both ways); `served`
    counts the requests answered here."""

    def __init__(self, app: Any, belay: Belay) -> None:
        self.app = app
        self.belay = belay
        self.enabled = True
        self.served = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if not self.enabled or scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        raw = scope.get("raw_path")
        path = routing_path(raw) if raw else scope["path"]
        is_claim = False
        match = COMPLETE_PATH.match(path)
        if match is None:
            match = CLAIM_PATH.match(path)
            is_claim = True
        if match is None:
            await self.app(scope, receive, send)
            return
        belay = self.belay
        try:
            given = ""
            for key, value in scope["headers"]:
                if key == b"authorization":
                    given = value.decode("latin-1")
                    break
            check_token(belay.token, "POST", given)
            now = belay.clock()
            chunks, more = [], True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client went away: nobody to answer
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            raw_body = b"".join(chunks)
            if is_claim:
                body = parse_json(raw_body)
                if isinstance(body, dict) and "long_poll_seconds" in body:
                    await self.app(scope, _replay(raw_body, receive), send)
                    return
                answer = await claim(belay, now, unquote(match.group(1)), body, _never_disconnected)
            else:
                answer = await complete(belay, now, unquote(match.group(1)), parse_json(raw_body, optional=True))
            response = JSONResponse(answer)
        except Exception as exc:  # noqa: BLE001 - every failure is answered with the Error schema
            response = error_response(exc, "POST", path)
        self.served += 1
        await response(scope, receive, send)


def _replay(body: bytes, receive: Any) -> Callable[[], Awaitable[dict]]:
    """A receive that hands over the already-read body first, then the connection's own messages."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def again() -> dict:
        if pending:
            return pending.pop()
        return await receive()

    return again
