"""`belay` command line: migrate, status, db (an embedded PostgreSQL), smoke.

Entry point only: this is where environment variables and the system clock are read.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import click
import psycopg

from impl.migrate import IncompatibleSchema, check_compat, migrate
from impl.provision import ClusterConfig, EmbeddedCluster, Provisioned, provision, redact
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


@click.group()
def main() -> None:
    """Belay: verify a Postgres-backed durable job queue."""


@main.command("migrate")
@click.option("--database-url", envvar="BELAY_DATABASE_URL", required=True, help="PostgreSQL URL ($BELAY_DATABASE_URL)")
@click.option("--schema", default="public", show_default=True, callback=lambda c, p, v: _schema(v))
def migrate_cmd(database_url: str, schema: str) -> None:
    """Apply migrations 1–3 (idempotent; safe to run from several nodes at once)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        applied = migrate(conn, schema)
        compat = check_compat(conn, schema)
    done = f"applied {', '.join(map(str, applied))}" if applied else "already current"
    click.echo(f"{redact(database_url)} schema {schema}: {done}; version {compat.version}, contract major {compat.contract_major}")


@main.command("status")
@click.option("--database-url", default=None, help=URL_HELP)
@click.option("--schema", default="public", show_default=True, callback=lambda c, p, v: _schema(v))
def status_cmd(database_url: str | None, schema: str) -> None:
    """Schema version, contract major, provisioning used, and job counts per queue and state."""
    with _database(database_url or os.environ.get("BELAY_DATABASE_URL")) as db:
        click.echo(f"provisioning: {db.kind} — {db.reason}")
        click.echo(f"database: {redact(db.url)}")
        with psycopg.connect(db.url, autocommit=True) as conn:
            try:
                compat = check_compat(conn, schema)
            except IncompatibleSchema as exc:
                click.echo(f"schema {schema}: {exc}")
                sys.exit(2)
            click.echo(f"schema {schema}: migration version {compat.version}, contract major {compat.contract_major}")
            rows = conn.execute(
                psycopg.sql.SQL("SELECT queue, state, count(*) FROM {} GROUP BY 1, 2 ORDER BY 1, 2").format(
                    psycopg.sql.Identifier(schema, "belay_jobs")
                )
            ).fetchall()
        for queue, state, n in rows:
            click.echo(f"  {queue:<20} {state:<10} {n}")
        if not rows:
            click.echo("  no jobs")


@main.command("db")
@click.option("--port", type=int, default=None, help="TCP port on 127.0.0.1 (default: a free one)")
@click.option("--migrate/--no-migrate", "do_migrate", default=True, show_default=True)
def db_cmd(port: int | None, do_migrate: bool) -> None:
    """Start an embedded PostgreSQL, print its URL, and keep it running until Ctrl-C / SIGTERM."""
    cluster = EmbeddedCluster(ClusterConfig.from_env(port=port))
    started = time.monotonic()
    cluster.start()
    try:
        if do_migrate:
            with psycopg.connect(cluster.url, autocommit=True) as conn:
                migrate(conn)
        click.echo(f"embedded PostgreSQL ready in {time.monotonic() - started:.2f}s")
        click.echo(cluster.url, err=False)
        click.echo(f"export BELAY_DATABASE_URL='{cluster.url}'", err=True)
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.destroy()


@main.command("worker")
@click.option("--app", required=True, help="MODULE[:ATTR] exposing a Registry (default attribute: registry)")
@click.option("--queues", envvar="BELAY_QUEUES", default=None,
              help="comma-separated queues to run (default: every queue of the registry's kinds)")
@click.option("--database-url", envvar="BELAY_DATABASE_URL", required=True, help="PostgreSQL URL ($BELAY_DATABASE_URL)")
@click.option("--node", envvar="BELAY_NODE", default=None, help="node id ($BELAY_NODE; default: random)")
@click.option("--lease-ttl", envvar="BELAY_LEASE_TTL", type=float, default=30.0, show_default=True)
@click.option("--limit", type=int, default=10, show_default=True, help="per-queue concurrency (max)")
@click.option("--min-limit", type=int, default=None, help="adaptive concurrency floor (default: --limit)")
@click.option("--shutdown-grace", type=float, default=15.0, show_default=True)
@click.option("--notify/--no-notify", default=True, show_default=True, help="the pg_notify accelerator")
@click.option("--schema", default="public", show_default=True, callback=lambda c, p, v: _schema(v))
def worker_cmd(app: str, queues: str | None, database_url: str, node: str | None, lease_ttl: float, limit: int,
               min_limit: int | None, shutdown_grace: float, notify: bool, schema: str) -> None:
    """Run a worker node until SIGTERM/SIGINT (stop claiming, drain within the grace, exit)."""
    import importlib
    import logging

    from impl.runtime import QueueConfig, Termination, Worker, WorkerConfig
    from impl.worker import Registry
    from model.queues import QueueOpts

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    module_name, _, attr = app.partition(":")
    registry = getattr(importlib.import_module(module_name), attr or "registry")
    if not isinstance(registry, Registry):
        raise click.BadParameter(f"{app} is not an impl.worker.Registry", param_hint="--app")
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else sorted(registry.queues())
    opts = QueueOpts.parse({"limit": {"min": min_limit or limit, "max": limit}})
    config_kwargs = {"node": node} if node else {}
    config = WorkerConfig(queues=tuple(QueueConfig(n, opts) for n in names), lease_ttl=lease_ttl,
                          shutdown_grace=shutdown_grace, notify=notify, **config_kwargs)
    termination = Termination()
    worker = Worker(database_url, registry, config, schema=schema).start()
    click.echo(f"belay worker {config.node} running queues {', '.join(names)}", err=True)
    termination.wait()
    drained = worker.stop()
    click.echo(f"belay worker {config.node} stopped ({'drained' if drained else 'grace expired'})", err=True)
    if not drained:
        # Jobs that outlived the grace are abandoned: their leases expire and another node retries them.
        # Their executor threads cannot be interrupted, so leave without joining them.
        logging.shutdown()
        os._exit(0)


@main.command("smoke")
def smoke_cmd() -> None:
    """Migrate, enqueue, read back on a throwaway database: the foundation's end-to-end check."""
    from impl.smoke import run

    sys.exit(run(click.echo))


@main.command("serve")
@click.option("--database-url", envvar="BELAY_DATABASE_URL", required=True, help="PostgreSQL URL ($BELAY_DATABASE_URL)")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to bind; anything but loopback needs a token")
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--token", envvar="BELAY_HTTP_TOKEN", default=None,
              help="bearer token required by mutating requests ($BELAY_HTTP_TOKEN)")
@click.option("--schema", default="public", show_default=True, callback=lambda c, p, v: _schema(v))
@click.option("--migrate/--no-migrate", "do_migrate", default=False, show_default=True,
              help="apply migrations 1-3 before serving")
@click.option("--sweep-interval", type=float, default=1.0, show_default=True,
              help="seconds between sweeper passes (reclaim, timeouts, cleanup)")
@click.option("--notify/--no-notify", default=True, show_default=True, help="the pg_notify accelerator for long polls")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="server processes sharing the port (for machines with idle cores)")
@click.option("--access-log/--no-access-log", default=False, show_default=True, help="log every request")
def serve_cmd(database_url: str, host: str, port: int, token: str | None, schema: str, do_migrate: bool,
              sweep_interval: float, notify: bool, workers: int, access_log: bool) -> None:
    """Serve the Durable Execution HTTP API at /api/v1 (OpenAPI document at /openapi.json)."""
    from impl.http.server import BindRefused, check_bind, serve

    try:
        check_bind(host, token or None)
    except BindRefused as exc:
        raise click.UsageError(str(exc)) from None
    if do_migrate:
        with psycopg.connect(database_url, autocommit=True) as conn:
            migrate(conn, schema)
    click.echo(f"belay serve: http://{host}:{port}/api/v1 ({'bearer token required' if token else 'no token: loopback only'}"
               f", {workers} process{'es' if workers > 1 else ''})", err=True)
    serve(database_url, host, port, workers=workers, access_log=access_log, token=token or None, schema=schema,
          sweep_interval=sweep_interval, notify=notify)


if __name__ == "__main__":
    main()
