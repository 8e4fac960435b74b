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


@main.command("smoke")
def smoke_cmd() -> None:
    """Migrate, enqueue, read back on a throwaway database: the foundation's end-to-end check."""
    from impl.smoke import run

    sys.exit(run(click.echo))


if __name__ == "__main__":
    main()
