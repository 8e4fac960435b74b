"""An embedded PostgreSQL cluster this process runs itself: its life cycle (README, "Where PostgreSQL
comes from", step 3; the soak's crash nemesis and failover build on it).

* `start()`: find the binaries and lay out the cluster dir (impl/provision/binaries.py), give it its
  data, launch postgres and wait until it accepts connections. initdb runs once per bindir+version
  into ``<cache>/template-<hash>/``; each new cluster is a ``shutil.copytree`` of it (faster than
  initdb). Data checksums are on.
* ``fsync`` is on by default. Never turn it off for soak runs: a crash test is meaningless when the
  server is allowed to lie about durability. (`crash()` kills processes, so the OS page cache survives
  either way; fsync matters for the real-power-loss story the soak certifies.)
* `stop()` is a fast shutdown; `crash()` SIGKILLs the postmaster (and, by default, every backend) and
  waits until all those processes are really gone (impl/provision/processes.py); `restart()` starts
  again on the same data dir and port, crash recovery running if needed.
* `_prepare()`, `_chown()` and `_run()` are also used by soak/faults/failover.py to build a streaming standby
  with ``pg_basebackup`` into a cluster's data dir before `start()`.
* Clusters still running at normal interpreter exit are stopped (and throwaway ones removed).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from impl.provision.binaries import (
    NOBODY_GID,
    NOBODY_UID,
    ProvisionError,
    _chown_tree,
    _default_cache_dir,
    _ensure_cache_dir,
    _is_root,
    _locate_pg_bindir,
    _publish_atomically,
    _usable_bindir,
    _world_traversable,
    pg_version,
)
from impl.provision.processes import (
    _become_subreaper,
    _kill_postmaster,
    _make_sure_gone,
    _proc_start_time,
    _procs_with_cwd,
    _reap_stale_clusters,
    _wait_gone,
)

START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


@dataclass(frozen=True)
class ClusterConfig:
    """How to run an `EmbeddedCluster`.

    ``fsync`` defaults to on; never turn it off for soak runs (crash results would be
    meaningless). ``port=None`` picks a free TCP port on 127.0.0.1. ``keep_template``: build (once
    per bindir+version) and reuse a cached initdb'd template data dir; False runs a fresh initdb.
    ``cache_dir=None`` means ``<tmp>/belay-pg-u<uid>``; ``base_dir=None`` means a throwaway dir
    under ``<cache>/clusters`` that `destroy()` (and interpreter exit) removes.
    """

    bindir: Path | None = None
    port: int | None = None
    fsync: bool = True
    extra_settings: Mapping[str, Any] = field(default_factory=dict)
    keep_template: bool = True
    cache_dir: Path | None = None
    base_dir: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ClusterConfig:
        """Config from ``BELAY_PG_BINDIR`` (other fields from *overrides*)."""
        env = os.environ if env is None else env
        if env.get("BELAY_PG_BINDIR") and "bindir" not in overrides:
            overrides["bindir"] = Path(env["BELAY_PG_BINDIR"])
        return cls(**overrides)


_LIVE: dict[int, EmbeddedCluster] = {}
_LIVE_LOCK = threading.Lock()


def _atexit_cleanup() -> None:
    with _LIVE_LOCK:
        clusters = list(_LIVE.values())
    for c in clusters:
        if c._owner_pid != os.getpid():  # a forked child must not stop its parent's cluster
            continue
        with contextlib.suppress(Exception):
            if c._owns_base:
                c.destroy()
            else:
                c.stop()


atexit.register(_atexit_cleanup)


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(eq=False)
class EmbeddedCluster:
    """A throwaway PostgreSQL cluster this process runs itself (see module docstring)."""

    config: ClusterConfig = field(default_factory=ClusterConfig)

    bindir: Path | None = field(default=None, init=False)
    version: str | None = field(default=None, init=False)
    bindir_source: str = field(default="", init=False)
    base_dir: Path | None = field(default=None, init=False)
    _port: int | None = field(default=None, init=False, repr=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _owns_base: bool = field(default=False, init=False, repr=False)
    _owner_pid: int = field(default_factory=os.getpid, init=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    timings: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    # ---- paths and properties

    @property
    def data_dir(self) -> Path:
        self._require_prepared()
        return self.base_dir / "data"  # type: ignore[operator]

    @property
    def socket_dir(self) -> Path:
        self._require_prepared()
        return self.base_dir / "sock"  # type: ignore[operator]

    @property
    def log_path(self) -> Path:
        return self.data_dir / "belay-postgres.log"

    @property
    def port(self) -> int:
        if self._port is None:
            raise ProvisionError("cluster has no port yet: call start() first")
        return self._port

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def socket_url(self) -> str:
        q = urllib.parse.urlencode({"host": str(self.socket_dir), "port": str(self.port)}, safe="/")
        return f"postgresql://postgres@/postgres?{q}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running else None  # type: ignore[union-attr]

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _require_prepared(self) -> None:
        if self.base_dir is None:
            raise ProvisionError("cluster has no directory yet: call start() first")

    # ---- lifecycle

    def __enter__(self) -> EmbeddedCluster:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def _as_nobody(self) -> bool:
        return _is_root()

    def _spawn_kwargs(self) -> dict[str, Any]:
        if self._as_nobody():
            return {"user": NOBODY_UID, "group": NOBODY_GID, "extra_groups": []}
        return {}

    def _chown(self, path: Path, recursive: bool = False) -> None:
        if self._as_nobody():
            if recursive:
                _chown_tree(path, NOBODY_UID, NOBODY_GID)
            else:
                os.chown(path, NOBODY_UID, NOBODY_GID)

    def _prepare(self) -> None:
        """Find binaries and lay out the cluster dir (once)."""
        if self.base_dir is not None:
            return
        cfg = self.config
        cache = _ensure_cache_dir(Path(cfg.cache_dir) if cfg.cache_dir else _default_cache_dir())
        bindir, source = _locate_pg_bindir(cfg.bindir)
        self.version = pg_version(bindir)
        self.bindir = _usable_bindir(bindir, cache)
        self.bindir_source = source
        self._cache = cache
        if cfg.base_dir is not None:
            base = Path(cfg.base_dir)
            base.mkdir(mode=0o755, parents=True, exist_ok=True)
            self._owns_base = False
        else:
            clusters = cache / "clusters"
            clusters.mkdir(mode=0o755, exist_ok=True)
            _reap_stale_clusters(clusters)
            base = Path(tempfile.mkdtemp(prefix="cluster-", dir=clusters))
            self._owns_base = True
            (base / "owner.json").write_text(json.dumps({"pid": os.getpid(), "start": _proc_start_time(os.getpid())}))
        os.chmod(base, 0o755)
        if _is_root() and not _world_traversable(base):
            raise ProvisionError(
                f"cluster dir {base} is not traversable by user nobody, who runs postgres when "
                "we are root: use a base_dir under a world-traversable folder such as /tmp"
            )
        if len(str(base / "sock" / ".s.PGSQL.65535")) > 107:
            raise ProvisionError(
                f"socket path under {base} exceeds the 107-byte unix socket limit: pass a shorter "
                "ClusterConfig(cache_dir=...) or base_dir"
            )
        _register(self)
        (base / "sock").mkdir(mode=0o755, exist_ok=True)
        self._chown(base / "sock")
        self.base_dir = base

    def _run(self, cmd: list[str], what: str) -> None:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd="/", **self._spawn_kwargs())
        if out.returncode != 0:
            raise ProvisionError(f"{what} failed (exit {out.returncode}): {(out.stderr or out.stdout).strip()[-2000:]}")

    def _initdb(self, target: Path) -> None:
        target.mkdir(mode=0o700)
        self._chown(target)
        self._run(
            [
                str(self.bindir / "initdb"),  # type: ignore[operator]
                "-D",
                str(target),
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--locale=C",
                "--data-checksums",
                "--no-instructions",
            ],
            f"initdb into {target}",
        )

    def _template(self) -> Path:
        """The cached template data dir for this bindir+version, built once (atomically)."""
        key = hashlib.sha256(
            f"{self.bindir}\0{self.version}\0uid={NOBODY_UID if self._as_nobody() else os.getuid()}"
            "\0C-UTF8-checksums-v1".encode()
        ).hexdigest()[:12]
        final = self._cache / f"template-{key}"
        if (final / "PG_VERSION").exists() and (final / "global" / "pg_control").exists():
            return final
        _publish_atomically(final, self._initdb)
        return final

    def _init_data(self) -> None:
        data = self.data_dir
        if (data / "PG_VERSION").exists():
            return
        if data.exists():
            shutil.rmtree(data)
        t0 = time.perf_counter()
        if self.config.keep_template:
            template = self._template()
            t1 = time.perf_counter()
            shutil.copytree(template, data, symlinks=True)
            self._chown(data, recursive=True)
            os.chmod(data, 0o700)
            self.timings["template_build_s"] = t1 - t0
            self.timings["template_copy_s"] = time.perf_counter() - t1
        else:
            self._initdb(data)
            self.timings["initdb_s"] = time.perf_counter() - t0

    def _settings(self) -> dict[str, str]:
        s: dict[str, Any] = {
            "fsync": "on" if self.config.fsync else "off",
            "max_connections": 200,
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.socket_dir),
            "port": self.port,
            "logging_collector": "off",
            "log_line_prefix": "%m [%p] ",
        }
        s.update(self.config.extra_settings)
        return {k: str(v) for k, v in s.items()}

    def start(self) -> EmbeddedCluster:
        """initdb if needed, start postgres, wait until it accepts connections."""
        with self._lock:
            if self.running:
                return self
            t0 = time.perf_counter()
            self._prepare()
            self._init_data()
            auto_port = self.config.port is None and self._port is None
            for attempt in range(5):
                if self._port is None:
                    self._port = self.config.port if self.config.port is not None else _free_port()
                try:
                    self._launch_and_wait()
                    break
                except _PortInUse:
                    if not auto_port or attempt == 4:
                        raise ProvisionError(
                            f"port {self._port} on 127.0.0.1 is in use: pick another "
                            "ClusterConfig(port=...) or leave it None to pick a free one"
                        ) from None
                    self._port = None
            self.timings["start_s"] = time.perf_counter() - t0
            return self

    def _launch_and_wait(self) -> None:
        cmd = [str(self.bindir / "postgres"), "-D", str(self.data_dir)]  # type: ignore[operator]
        for k, v in self._settings().items():
            cmd += ["-c", f"{k}={v}"]
        _become_subreaper()
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/",
                start_new_session=True,  # terminal Ctrl-C goes to us; we stop postgres cleanly
                **self._spawn_kwargs(),
            )
        deadline = time.monotonic() + START_TIMEOUT
        pidfile = self.data_dir / "postmaster.pid"
        last_err: Exception | None = None
        while True:
            if self._proc.poll() is not None:
                tail = self._log_tail(since=log_offset)
                self._proc = None
                if "Address already in use" in tail or "could not bind" in tail:
                    raise _PortInUse(tail)
                raise ProvisionError(f"postgres exited during start (see {self.log_path}); log tail:\n{tail}")
            ready = False
            with contextlib.suppress(OSError):
                lines = pidfile.read_text().splitlines()
                ready = len(lines) >= 8 and lines[7].strip() == "ready"
            if ready:
                try:
                    with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                        conn.execute("SELECT 1")
                    return
                except psycopg.OperationalError as exc:
                    last_err = exc
            if time.monotonic() > deadline:
                self._kill_all(wait_children=True)
                raise ProvisionError(
                    f"postgres did not accept connections within {START_TIMEOUT:.0f}s "
                    f"(last error: {last_err}); log tail ({self.log_path}):\n"
                    f"{self._log_tail(since=log_offset)}"
                )
            time.sleep(0.01)

    def _log_tail(self, since: int = 0, lines: int = 30) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Fast shutdown (SIGINT): roll back open transactions, checkpoint, exit; then wait."""
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGQUIT)  # immediate shutdown
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        self._kill_all(wait_children=False)
            _wait_gone(self._procs_in_data_dir(), timeout)
            self._proc = None

    def crash(self, *, kill_children: bool = True, timeout: float = 30.0) -> None:
        """SIGKILL the postmaster (and by default every backend) and wait until all are gone.

        With ``kill_children=False`` only the postmaster is killed and we wait for its children
        to notice and exit by themselves. Either way, on return no process of this cluster is
        alive, so `restart()` can start at once (crash recovery runs then).
        """
        with self._lock:
            if not self.running:
                raise ProvisionError("crash() needs a running cluster: call start() first")
            self._kill_all(wait_children=not kill_children, timeout=timeout)

    def _procs_in_data_dir(self) -> list[int]:
        if self.base_dir is None:
            return []
        return _procs_with_cwd(self.data_dir)

    def _kill_all(self, *, wait_children: bool, timeout: float = 30.0) -> None:
        proc = self._proc
        if proc is None:
            return
        children = _kill_postmaster(proc, kill_children=not wait_children)
        self._proc = None
        _make_sure_gone(set(children) | set(self._procs_in_data_dir()), timeout)

    def restart(self) -> EmbeddedCluster:
        """Start again on the same data dir and port (stopping first if running)."""
        with self._lock:
            if self.running:
                self.stop()
            t0 = time.perf_counter()
            self.start()
            self.timings["restart_s"] = time.perf_counter() - t0
            return self

    def destroy(self) -> None:
        """Stop (or kill, if stopping fails) and remove the cluster's files."""
        with self._lock:
            try:
                self.stop()
            except Exception:  # noqa: BLE001 -- whatever made stopping fail, killing is the fallback
                self._kill_all(wait_children=False)
            _unregister(self)
            if self.base_dir is None:
                return
            if self._owns_base:
                shutil.rmtree(self.base_dir, ignore_errors=True)
            else:
                shutil.rmtree(self.base_dir / "data", ignore_errors=True)
                shutil.rmtree(self.base_dir / "sock", ignore_errors=True)
            self.base_dir = None
            self._port = None if self.config.port is None else self._port


class _PortInUse(Exception):
    pass


def _register(c: EmbeddedCluster) -> None:
    with _LIVE_LOCK:
        _LIVE[id(c)] = c


def _unregister(c: EmbeddedCluster) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(id(c), None)
