"""`belay` command line: migrate, status, db (an embedded PostgreSQL), smoke, worker, serve; the day-2
commands (stats, jobs, steps, events, retry, cancel, signal, steer, queue, prune, replay, mcp) are in
impl/ops/cli_ops.py.

Entry point only: this is where environment variables and the system clock are read.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import click
import psycopg

from impl.ops.failures import (
    EXIT_FAILURE,
    ToolError,
    check_database,
    debug_requested,
    describe_database_error,
    wait_for_database,
)
from impl.ops.lifecycle import interrupt_on_signals
from impl.provision import ClusterConfig, EmbeddedCluster, Provisioned, ProvisionError, provision, redact
from impl.store.migrate import IncompatibleSchema, check_compat, migrate
from model.ops import InvalidInput, validate_schema_name

URL_HELP = "PostgreSQL URL (default: $BELAY_DATABASE_URL; without either, an embedded throwaway cluster)"


@contextmanager
def _database(url: str | None) -> Iterator[Provisioned]:
    env = dict(os.environ)
    if url:
        env["BELAY_DATABASE_URL"] = url
    provisioned = provision(env)
    try:
        yield provisioned
    finally:
        provisioned.close()


def _schema(value: str) -> str:
    try:
        return validate_schema_name(value)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc)) from None


def _record_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Remember the database URL a command was given, so a failure message can name it (redacted)."""
    if value:
        ctx.meta["belay.url"] = value
    return value


def _track_urls(group: click.Group) -> None:
    """Every `--database-url` option of every command (also ones added later) records its value."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _track_urls(command)
        for param in command.params:
            if param.name == "database_url" and not getattr(param, "_belay_tracked", False):
                inner = param.callback

                def callback(ctx: click.Context, p: click.Parameter, v: object, inner=inner) -> object:
                    v = inner(ctx, p, v) if inner else v
                    return _record_url(ctx, p, v)

                param.callback = callback
                param._belay_tracked = True  # type: ignore[attr-defined]  # a marker on click's Parameter


class _Belay(click.Group):
    """The `belay` group: failures become one clear line on stderr and exit 1 (usage errors exit 2,
    as click does); a traceback only with `--debug` or BELAY_DEBUG=1."""

    def main(self, *args, **kwargs):
        _track_urls(self)
        return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            if ctx.meta.get("belay.debug") or debug_requested():
                raise
            url = ctx.meta.get("belay.url") or os.environ.get("BELAY_DATABASE_URL")
            if isinstance(exc, ToolError):
                message = str(exc)
            elif isinstance(exc, (psycopg.Error, IncompatibleSchema, ProvisionError)):
                message = describe_database_error(exc, url)
            else:
                message = (
                    f"unexpected {type(exc).__name__}: {redact(str(exc)).strip().splitlines()[0] if str(exc).strip() else ''}"
                    "\n  rerun with --debug (or BELAY_DEBUG=1) for the traceback"
                )
            click.echo(f"belay: error: {message}", err=True)
            ctx.exit(EXIT_FAILURE)


@click.group(
    cls=_Belay,
    epilog="Exit codes: 0 ok; 1 a failure, not found or refused; 2 usage; 3 `belay replay` found a divergence.",
)
@click.option("--debug", is_flag=True, default=False, help="show tracebacks (also BELAY_DEBUG=1)")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Belay: verify a Postgres-backed durable job queue."""
    ctx.meta["belay.debug"] = debug
    if not (debug or debug_requested()):
        # The pool logs every failed background connect; a command reports its failure once, itself.
        import logging

        logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)


# A TCP port: 1..65535, checked as a usage error (exit 2) before anything is announced or bound.
PORT = click.IntRange(1, 65535)


JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="machine-readable JSON output")


def _echo_json(data: object) -> None:
    import json

    click.echo(json.dumps(data, indent=2))


@main.command("migrate")
@click.option("--database-url", envvar="BELAY_DATABASE_URL", required=True, help="PostgreSQL URL ($BELAY_DATABASE_URL)")
@click.option("--schema", default="public", show_default=True, callback=lambda c, p, v: _schema(v))
@JSON_OPTION
def migrate_cmd(database_url: str, schema: str, as_json: bool) -> None:
    """Apply migrations 1–3, then the jobs table's autovacuum parameters (idempotent; safe from several nodes)."""
    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
        applied = migrate(conn, schema)
        compat = check_compat(conn, schema)
    if as_json:
        return _echo_json(
            {
                "schema": schema,
                "applied": list(applied),
                "version": compat.version,
                "contract_major": compat.contract_major,
            }
        )
    done = f"applied {', '.join(map(str, applied))}" if applied else "already current"
    click.echo(
        f"{redact(database_url)} schema {schema}: {done}; version {compat.version}, contract major {compat.contract_major}"
    )


@main.command("status")
@click.option("--database-url", default=None, help=URL_HELP)
@click.option("--schema", default="public", show_default=True, callback=lambda c, p, v: _schema(v))
@JSON_OPTION
def status_cmd(database_url: str | None, schema: str, as_json: bool) -> None:
    """Schema version, contract major, provisioning used (and where its URL came from), and job counts
    per queue and state."""
    env_url = os.environ.get("BELAY_DATABASE_URL")
    source = "--database-url" if database_url else "BELAY_DATABASE_URL" if env_url else None
    with _database(database_url or env_url) as db:
        reason = (
            f"{source} is set" if source == "BELAY_DATABASE_URL" else "given by --database-url" if source else db.reason
        )
        with psycopg.connect(db.url, autocommit=True, connect_timeout=5) as conn:
            try:
                compat = check_compat(conn, schema)
            except IncompatibleSchema as exc:
                raise ToolError(f"schema {schema} at {redact(db.url)}: {exc}") from None
            rows = conn.execute(
                psycopg.sql.SQL("SELECT queue, state, count(*) FROM {} GROUP BY 1, 2 ORDER BY 1, 2").format(
                    psycopg.sql.Identifier(schema, "belay_jobs")
                )
            ).fetchall()
        if as_json:
            jobs: dict[str, dict[str, int]] = {}
            for queue, state, n in rows:
                jobs.setdefault(queue, {})[state] = n
            return _echo_json(
                {
                    "provisioning": db.kind,
                    "source": source or db.kind,
                    "reason": reason,
                    "database": redact(db.url),
                    "schema": schema,
                    "version": compat.version,
                    "contract_major": compat.contract_major,
                    "jobs": jobs,
                }
            )
        click.echo(f"provisioning: {db.kind} — {reason}")
        click.echo(f"database: {redact(db.url)}")
        click.echo(f"schema {schema}: migration version {compat.version}, contract major {compat.contract_major}")
        for queue, state, n in rows:
            click.echo(f"  {queue:<20} {state:<10} {n}")
        if not rows:
            click.echo("  no jobs")


@main.command("db")
@click.option("--port", type=PORT, default=None, help="TCP port on 127.0.0.1 (default: a free one)")
@click.option("--migrate/--no-migrate", "do_migrate", default=True, show_default=True)
def db_cmd(port: int | None, do_migrate: bool) -> None:
    """Start an embedded PostgreSQL, print its URL, and keep it running until Ctrl-C / SIGTERM."""
    cluster = EmbeddedCluster(ClusterConfig.from_env(port=port))
    started = time.monotonic()
    # SIGINT, SIGTERM and SIGHUP stop the cluster, even mid-start, whatever disposition was inherited: a
    # background job of a non-interactive shell starts with SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler of its own (issue 32). A second signal during the cleanup is ignored.
    interrupt_on_signals((signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
    try:
        cluster.start()
        if do_migrate:
            with psycopg.connect(cluster.url, autocommit=True) as conn:
                migrate(conn)
        click.echo(f"embedded PostgreSQL ready in {time.monotonic() - started:.2f}s")
        click.echo(cluster.url, err=False)
        click.echo(f"export BELAY_DATABASE_URL='{cluster.url}'", err=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.destroy()


@main.command("worker")
@click.option("--app", required=True, help="MODULE[:ATTR] exposing a Registry (default attribute: registry)")
@click.option(
    "--queues",
    envvar="BELAY_QUEUES",
    default=None,
    help="comma-separated queues to run, exactly these, each with --limit; only their crons fire "
    "(default: every queue of the registry's kinds)",
)
@click.option("--database-url", envvar="BELAY_DATABASE_URL", required=True, help="PostgreSQL URL ($BELAY_DATABASE_URL)")
@click.option("--node", envvar="BELAY_NODE", default=None, help="node id ($BELAY_NODE; default: random)")
@click.option("--lease-ttl", envvar="BELAY_LEASE_TTL", type=float, default=30.0, show_default=True)
@click.option("--limit", type=int, default=10, show_default=True, help="per-queue concurrency (max)")
@click.option("--min-limit", type=int, default=None, help="adaptive concurrency floor (default: --limit)")
@click.option("--shutdown-grace", type=float, default=15.0, show_default=True)
@click.option("--notify/--no-notify", default=True, show_default=True, help="the pg_notify accelerator")
@click.option("--schema", default="public", show_default=True, callback=lambda c, p, v: _schema(v))
@click.option(
    "--exit-on-unreachable",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="give up (exit 1) once the database has been unreachable this long (default: keep trying)",
)
@click.option("--metrics-port", type=PORT, default=None, help="serve Prometheus metrics on 127.0.0.1:PORT/metrics")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="address for --metrics-port")
@click.option(
    "--otel/--no-otel",
    default=False,
    show_default=True,
    help="OpenTelemetry spans per job attempt (global tracer provider)",
)
@click.option(
    "--log-format",
    type=click.Choice(["logfmt", "json"]),
    envvar="BELAY_LOG_FORMAT",
    default="logfmt",
    show_default=True,
    help="job lines as logfmt (quoted: every line parses back to its fields) or one JSON object a line",
)
def worker_cmd(
    app: str,
    queues: str | None,
    database_url: str,
    node: str | None,
    lease_ttl: float,
    limit: int,
    min_limit: int | None,
    shutdown_grace: float,
    notify: bool,
    schema: str,
    exit_on_unreachable: float | None,
    metrics_port: int | None,
    metrics_host: str,
    otel: bool,
    log_format: str,
) -> None:
    """Run a worker node until SIGTERM/SIGINT/SIGHUP (stop claiming, drain within the grace, exit).

    A daemon: when the database is unreachable at start or goes away later, the node keeps trying
    with backoff and logs one line per change (unreachable / reachable again), not one per attempt.
    """
    import logging

    from impl.runtime import QueueConfig, Termination, Worker, WorkerConfig
    from impl.runtime.faults import RetryPolicy
    from impl.telemetry import BatchingStreamHandler, JsonLinesFormatter, SecondCachingFormatter
    from impl.worker import Registry, import_app
    from model.queues import QueueOpts

    # One job line per attempt at INFO, written in batches (warnings at once): see BatchingStreamHandler.
    lines = BatchingStreamHandler()
    lines.setFormatter(
        JsonLinesFormatter()
        if log_format == "json"
        else SecondCachingFormatter("%(asctime)s %(levelname)s %(message)s")
    )
    logging.basicConfig(level=logging.INFO, handlers=[lines])
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)  # the node logs outages itself, once
    module_name, _, attr = app.partition(":")
    try:
        registry = getattr(import_app(module_name), attr or "registry")
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"cannot load {app}: {exc}", param_hint="--app") from None
    if not isinstance(registry, Registry):
        raise click.BadParameter(f"{app} is not an impl.worker.Registry", param_hint="--app")
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else sorted(registry.queues())
    opts = QueueOpts.parse({"limit": {"min": min_limit or limit, "max": limit}})
    config_kwargs = {"node": node} if node else {}
    # A daemon never gives up on a transient fault by itself; --exit-on-unreachable is the user's limit.
    config = WorkerConfig(
        queues=tuple(QueueConfig(n, opts) for n in names),
        exclusive_queues=bool(queues),  # --queues A: claim from A only, fire only A's crons
        lease_ttl=lease_ttl,
        shutdown_grace=shutdown_grace,
        notify=notify,
        retry=RetryPolicy(max_elapsed=float("inf")),
        **config_kwargs,
    )
    termination = Termination()
    if not wait_for_database(database_url, schema, termination, exit_on_unreachable):
        sys.exit(EXIT_FAILURE if not termination.received else 0)
    from impl import telemetry

    telemetry.attach_default_logger()
    if otel:
        telemetry.attach_opentelemetry()
    worker = Worker(database_url, registry, config, schema=schema)
    if metrics_port is not None:
        from impl.ops.operator import stats_reader

        metrics = telemetry.attach_prometheus(stats_reader(worker.store))
        metrics.serve(metrics_port, metrics_host)
        click.echo(f"belay worker metrics at http://{metrics_host}:{metrics_port}/metrics", err=True)
    worker.start()
    click.echo(f"belay worker {config.node} running queues {', '.join(names)}", err=True)
    while not termination.received:
        if exit_on_unreachable is not None and worker.connectivity.down_for() > exit_on_unreachable:
            click.echo(
                f"belay worker {config.node}: the database has been unreachable for more than "
                f"{exit_on_unreachable:g}s (--exit-on-unreachable); stopping",
                err=True,
            )
            worker.stop(grace=0)
            telemetry.flush()  # the default logger's queued lines, before os._exit skips atexit
            logging.shutdown()
            os._exit(EXIT_FAILURE)
        time.sleep(0.1)
    drained = worker.stop()
    click.echo(f"belay worker {config.node} stopped ({'drained' if drained else 'grace expired'})", err=True)
    if not drained:
        # Jobs that outlived the grace are abandoned: their leases expire and another node retries them.
        # Their executor threads cannot be interrupted, so leave without joining them.
        telemetry.flush()  # the default logger's queued lines, before os._exit skips atexit
        logging.shutdown()
        os._exit(0)


def _check_port(host: str, port: int) -> None:
    """Fail with one line (exit 1) when host:port cannot be bound — before uvicorn, whose startup
    failure exits 3, the code `belay replay` reserves for a divergence."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ToolError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            in_use = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise ToolError(f"cannot listen on {host}:{port}: {in_use}; choose another --port") from None


@contextmanager
def _serving(host: str, port: int) -> Iterator[None]:
    """uvicorn's own startup failure (a bind lost to a race after `_check_port`) is exit 1 too."""
    try:
        yield
    except SystemExit as exc:
        if exc.code == 3:
            raise ToolError(f"cannot listen on {host}:{port} (the server failed to start; see above)") from None
        raise


@main.command("smoke")
def smoke_cmd() -> None:
    """Migrate, enqueue, read back: the foundation's end-to-end check, on a throwaway database.

    With $BELAY_DATABASE_URL it runs in a throwaway schema of that database (belay_smoke_<random>,
    dropped afterwards): nothing is written into the real schema. Without it, on an embedded
    throwaway cluster."""
    from impl.ops.smoke import run

    sys.exit(run(click.echo))


@main.command("serve")
@click.option("--database-url", envvar="BELAY_DATABASE_URL", required=True, help="PostgreSQL URL ($BELAY_DATABASE_URL)")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="address to bind; anything but loopback needs a token"
)
@click.option("--port", type=PORT, default=8080, show_default=True)
@click.option(
    "--token",
    envvar="BELAY_HTTP_TOKEN",
    default=None,
    help="bearer token required by mutating requests ($BELAY_HTTP_TOKEN)",
)
@click.option("--schema", default="public", show_default=True, callback=lambda c, p, v: _schema(v))
@click.option(
    "--migrate/--no-migrate", "do_migrate", default=False, show_default=True, help="apply migrations 1-3 before serving"
)
@click.option(
    "--sweep-interval",
    type=float,
    default=1.0,
    show_default=True,
    help="seconds between sweeper passes (reclaim, timeouts, cleanup)",
)
@click.option("--notify/--no-notify", default=True, show_default=True, help="the pg_notify accelerator for long polls")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="server processes sharing the port (for machines with idle cores)",
)
@click.option("--access-log/--no-access-log", default=False, show_default=True, help="log every request")
def serve_cmd(
    database_url: str,
    host: str,
    port: int,
    token: str | None,
    schema: str,
    do_migrate: bool,
    sweep_interval: float,
    notify: bool,
    workers: int,
    access_log: bool,
) -> None:
    """Serve the Durable Execution HTTP API at /api/v1 (OpenAPI document at /openapi.json)."""
    from impl.http.server import BindRefused, check_bind, serve

    try:
        check_bind(host, token or None)
    except BindRefused as exc:
        raise click.UsageError(str(exc)) from None
    if do_migrate:
        with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
            migrate(conn, schema)
    check_database(database_url, schema=schema)  # before binding: fail in seconds, not after a pool timeout
    _check_port(host, port)
    click.echo(
        f"belay serve: http://{host}:{port}/api/v1 ({'bearer token required' if token else 'no token: loopback only'}"
        f", {workers} process{'es' if workers > 1 else ''})",
        err=True,
    )
    with _serving(host, port):
        serve(
            database_url,
            host,
            port,
            workers=workers,
            access_log=access_log,
            token=token or None,
            schema=schema,
            sweep_interval=sweep_interval,
            notify=notify,
        )


# --- day-2 commands (impl/ops/cli_ops.py, impl/ops/cli_queues.py): stats, jobs, steps, events, retry, cancel, signal, steer, queue,
# prune, replay, mcp ---
from impl.ops.cli_ops import register as _register_ops  # noqa: E402
from impl.ops.cli_queues import register as _register_queues  # noqa: E402

_register_ops(main)
_register_queues(main)


# --- belay dashboard (issue 14; impl/ops/dashboard/) ------------------------------------------------
@main.command("dashboard")
@click.option("--database-url", envvar="BELAY_DATABASE_URL", required=True, help="PostgreSQL URL ($BELAY_DATABASE_URL)")
@click.option("--schema", default="public", show_default=True, callback=lambda c, p, v: _schema(v))
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="address to bind; anything but loopback needs a token"
)
@click.option("--port", type=PORT, default=4004, show_default=True)
@click.option(
    "--token",
    envvar="BELAY_DASHBOARD_TOKEN",
    default=None,
    help="token that enables actions ($BELAY_DASHBOARD_TOKEN); without it the dashboard is read-only",
)
@click.option("--reports", "reports_dir", default="reports", show_default=True, help="soak reports directory")
@click.option(
    "--create-indexes",
    is_flag=True,
    default=False,
    help="first create the dashboard's optional index variants (CREATE INDEX CONCURRENTLY)",
)
@click.option(
    "--authorizer",
    default=None,
    help="MODULE:CALLABLE called as authorizer(tool, arguments) before each action (belay mcp's contract)",
)
def dashboard_cmd(
    database_url: str,
    schema: str,
    host: str,
    port: int,
    token: str | None,
    reports_dir: str,
    create_indexes: bool,
    authorizer: str | None,
) -> None:
    """Serve the operator's dashboard: queue tiles, jobs, workflows, actions, soak reports."""
    import uvicorn

    from impl.ops.dashboard import create_app
    from impl.ops.dashboard.auth import BindRefused, check_bind
    from impl.ops.dashboard.queries import DashboardQueries
    from impl.ops.mcp_server import load_authorizer

    try:
        guard = load_authorizer(authorizer) if authorizer else None
    except (ValueError, ImportError, AttributeError) as exc:
        raise click.UsageError(f"--authorizer {authorizer}: {exc}") from None
    try:
        check_bind(host, token or None, guard)
    except BindRefused as exc:
        raise click.UsageError(str(exc)) from None
    check_database(database_url, schema=schema)  # before binding: fail in seconds with one clear line
    _check_port(host, port)
    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
        if create_indexes:
            created = DashboardQueries(schema).ensure_indexes(conn)
            click.echo(f"dashboard indexes: {'created ' + ', '.join(created) if created else 'all present'}", err=True)
    app = create_app(database_url, token=token or None, authorizer=guard, schema=schema, reports_dir=reports_dir)
    click.echo(
        f"belay dashboard: http://{host}:{port}/ "
        f"({'actions need the token' if token else 'actions by the authorizer' if guard else 'read-only: no token'})",
        err=True,
    )
    with _serving(host, port):
        uvicorn.run(app, host=host, port=port, log_level="info")


if __name__ == "__main__":
    main()
