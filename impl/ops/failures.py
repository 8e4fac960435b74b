"""Failing like a tool: one clear line for the failures people meet first, and the exit codes.

Entry points (`belay …`, `soak/run.sh`) turn the errors of the database layer into a message that
says what failed, for which URL (password redacted) and what to try, and exit 1; usage errors exit 2.
A traceback is printed only when `--debug` or `BELAY_DEBUG=1` asks for one.

`check_database` is the pre-flight every server-like command runs before it binds a port or starts
work: connect with a short timeout, then (optionally) the §1 compatibility check; `wait_for_database` is
`belay worker`'s patient version of it (the database may come up after the worker).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping

import click
import psycopg

from impl.provision import ProvisionError, redact
from model.ops import IncompatibleSchema

EXIT_FAILURE = 1  # the command ran and failed (database unreachable, not found, refused)
EXIT_USAGE = 2  # the command line itself was wrong
CONNECT_TIMEOUT = 5  # seconds: a pre-flight fails fast instead of hanging on a black-holed address


class ToolError(Exception):
    """An expected failure with a message written for people (exit 1, no traceback)."""


def debug_requested(env: Mapping[str, str] | None = None) -> bool:
    """`BELAY_DEBUG=1` (or true/yes) asks for tracebacks."""
    value = (os.environ if env is None else env).get("BELAY_DEBUG", "")
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _first_line(text: str) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def describe_database_error(exc: BaseException, url: str | None) -> str:
    """One or two lines for a failure to reach or use the database at *url*."""
    where = redact(url) if url else "the database"
    text = str(exc)
    low = text.lower()
    if isinstance(exc, IncompatibleSchema):
        return f"incompatible Belay schema at {where}: {_first_line(text)}"
    if isinstance(exc, psycopg.ProgrammingError) and (
        "connection info string" in low or "invalid dsn" in low or "uri" in low or "invalid connection option" in low
    ):
        return (
            f"malformed database URL {where}: {_first_line(redact(text))}\n"
            "  expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
        )
    if isinstance(exc, psycopg.OperationalError):
        if "password authentication failed" in low or "no password supplied" in low:
            return (
                f"cannot log in to {where}: the server refused the user name or password\n"
                "  check the credentials in the URL (or PGPASSWORD / ~/.pgpass)"
            )
        m = re.search(r'database "([^"]+)" does not exist', text)
        if m:
            return (
                f"database {m.group(1)!r} does not exist on the server of {where}\n"
                f"  create it first (createdb {m.group(1)}) or fix the database name in the URL"
            )
        m = re.search(r'role "([^"]+)" does not exist', text)
        if m:
            return f"cannot log in to {where}: role {m.group(1)!r} does not exist on that server"
        if "connection refused" in low:
            return (
                f"cannot connect to {where}: connection refused\n"
                "  is PostgreSQL running there and listening on that host and port?"
            )
        if "timeout" in low or "timed out" in low:
            return (
                f"cannot connect to {where}: no answer within the timeout\n"
                "  check the host and port, and any firewall between here and the server"
            )
        if "could not translate host name" in low or "name or service not known" in low or "nodename nor" in low:
            return f"cannot connect to {where}: unknown host name\n  check the host part of the URL"
        if "no such file or directory" in low and ("socket" in low or ".s.pgsql" in low):
            return (
                f"cannot connect to {where}: no PostgreSQL socket there\n"
                "  is the server running? (or give a TCP URL: postgresql://USER@127.0.0.1:5432/DB)"
            )
        detail = _first_line(redact(text)).removeprefix("connection failed: ")
        return f"cannot connect to {where}: {detail}"
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return f"permission denied at {where}: {_first_line(redact(text))}"
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return (
            f"the Belay tables are missing at {where}: {_first_line(redact(text))}\n"
            "  run `belay migrate --database-url URL` first"
        )
    if isinstance(exc, psycopg.Error):
        return f"database error at {where}: {_first_line(redact(text))}"
    if isinstance(exc, ProvisionError):
        return f"cannot provision PostgreSQL: {_first_line(redact(text))}"
    return f"{type(exc).__name__}: {_first_line(redact(text))}"


def check_database(url: str, *, schema: str | None = "public", timeout: float = CONNECT_TIMEOUT) -> None:
    """Connect to *url* within *timeout* seconds and run the §1 check on *schema* (None: connect only).

    Raises ToolError with the described failure; returns quietly when the database is usable."""
    from impl.store.migrate import check_compat

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=max(int(timeout), 1)) as conn:
            if schema is not None:
                check_compat(conn, schema)
    except (psycopg.Error, IncompatibleSchema) as exc:
        raise ToolError(describe_database_error(exc, url)) from exc


def wait_for_database(url: str, schema: str, termination, give_up_after: float | None) -> bool:
    """Block until the database answers the §1 check; one line when it does not, one when it does.

    False when a signal arrived or `give_up_after` seconds passed (the reason already printed). A
    schema of another contract major or too old a migration is not weather: it fails at once."""
    started = time.monotonic()
    delay, reported = 0.5, False
    while not termination.received:
        try:
            check_database(url, schema=schema)
        except ToolError as exc:
            cause = exc.__cause__
            # A database still being created or migrated heals by waiting (deploy order); a malformed
            # URL or a schema of another contract major or an older migration does not.
            not_yet_migrated = isinstance(cause, IncompatibleSchema) and "no Belay schema" in str(cause)
            if not (isinstance(cause, psycopg.OperationalError) or not_yet_migrated):
                raise
            message = str(exc)
            waited = time.monotonic() - started
            if give_up_after is not None and waited >= give_up_after:
                click.echo(
                    f"belay: error: {message.splitlines()[0]}; gave up after {waited:.0f}s (--exit-on-unreachable)",
                    err=True,
                )
                return False
            if not reported:
                click.echo(
                    f"belay worker: waiting for the database: {message.splitlines()[0]} (retrying with backoff)",
                    err=True,
                )
                reported = True
            end = time.monotonic() + delay
            while time.monotonic() < end and not termination.received:
                time.sleep(0.05)
            delay = min(delay * 2, 10.0)
            continue
        if reported:
            click.echo(f"belay worker: database reachable after {time.monotonic() - started:.1f}s", err=True)
        return True
    return False
