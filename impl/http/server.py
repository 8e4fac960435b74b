"""Running the API: the bind rule and a uvicorn server (used by `belay serve`, tests and bench).

Without a bearer token anyone who can reach the port can claim, complete and delete, so a server with
no token binds loopback only (`check_bind`).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


class BindRefused(ValueError):
    """The server was asked to listen beyond loopback without a token."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    if token is None and not is_loopback(host):
        raise BindRefused(
            f"refusing to bind {host}: with no bearer token configured the server binds loopback only "
            "(127.0.0.1, ::1, localhost). Set a token (--token / $BELAY_HTTP_TOKEN) to listen elsewhere."
        )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def running(app: Any, host: str = "127.0.0.1", port: int | None = None, *, token: str | None = None) -> Iterator[str]:
    """Serve `app` with uvicorn on a thread for the duration of the block; yields the base URL."""
    check_bind(host, token)
    port = port or free_port(host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="belay-http-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the HTTP server did not start (see its log)")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# --- `belay serve`: one process, or several sharing the port ------------------------------------------

_ENV = "BELAY_HTTP_SERVE"  # the serve options, as JSON, handed to each worker process


def app_from_env() -> Any:
    """The app factory a worker process of a multi-process `belay serve` calls (uvicorn imports it by
    name in each process): the options `serve` put in the environment — an entry point, so it may read
    the environment."""
    import json
    import os

    from impl.http.app import create_app

    options = json.loads(os.environ[_ENV])
    return create_app(options.pop("conninfo"), **options)


def serve(conninfo: str, host: str, port: int, *, workers: int = 1, access_log: bool = False, **options: Any) -> None:
    """Serve the API with uvicorn until interrupted: in this process (workers=1), or in `workers`
    processes that share the listening socket, each with its own pool, sweeper and listener (sweepers
    are safe side by side: Reclaim, timeouts and cleanup lock with SKIP LOCKED or fence; a claim long
    poll in one process is woken through pg_notify by work made ready in another). uvicorn uses its C
    HTTP parser (httptools) and uvloop when they are installed; the access log is off unless asked
    for (it costs a log record per request)."""
    import json
    import os

    check_bind(host, options.get("token"))
    # No X-Forwarded-* rewriting (the API never reads the client address) and no Server header: less
    # work per request on both ends.
    settings: dict[str, Any] = dict(
        host=host, port=port, log_level="info", access_log=access_log, proxy_headers=False, server_header=False
    )
    if workers <= 1:
        from impl.http.app import create_app

        uvicorn.run(create_app(conninfo, **options), **settings)
        return
    os.environ[_ENV] = json.dumps({"conninfo": conninfo, **options})
    uvicorn.run("impl.http.server:app_from_env", factory=True, workers=workers, **settings)
