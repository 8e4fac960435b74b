"""An embedded cluster's processes: finding them in /proc, crashing them, reaping what is left.

`EmbeddedCluster.crash()` (impl/provision/cluster.py) is `_kill_postmaster` then `_make_sure_gone`:
the postmaster is frozen (SIGSTOP, so no new backend is forked while we list its children), its
children are listed, it is SIGKILLed (and, by default, every child too), and we wait until every one
of those processes — and any other process whose cwd is the data dir — is really gone, so `restart()`
never meets "shared memory block still in use"; crash recovery then runs automatically on start.

Linux only (/proc, prctl). This process makes itself a child subreaper before it starts a postmaster
(`_become_subreaper`), so orphaned backends come back to it and are reaped here instead of lingering
as zombies. Leftover cluster dirs of dead owner processes (e.g. after kill -9 of the harness) are
reaped the next time a cluster is created (`_reap_stale_clusters`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from impl.provision.binaries import ProvisionError

# --------------------------------------------------------------------------- /proc


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


# --------------------------------------------------------------------------- crash


def _wait_gone(pids: Iterable[int], timeout: float) -> bool:
    """Wait until none of *pids* is alive (reaping the zombies we inherited); False on timeout."""
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


def _kill_postmaster(proc: subprocess.Popen[bytes], *, kill_children: bool) -> list[int]:
    """SIGKILL the postmaster *proc* (and its children if *kill_children*); wait for the postmaster.

    Returns the children it had, which the caller must still wait for (`_make_sure_gone`).
    """
    pid = proc.pid
    children: list[int] = []
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)  # freeze: no new backend is forked while we list
        children = _children_of(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if kill_children:
        for c in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(c, signal.SIGKILL)
    proc.wait()
    return children


def _make_sure_gone(leftovers: set[int], timeout: float) -> None:
    """Wait *timeout* s for *leftovers* to exit, then SIGKILL them; raise if any survives 10 s more."""
    if not _wait_gone(leftovers, timeout):
        for c in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(c, signal.SIGKILL)
        if not _wait_gone(leftovers, 10):
            raise ProvisionError(
                f"postgres processes {sorted(p for p in leftovers if _pid_alive(p))} outlived "
                "their postmaster; kill them before restarting"
            )


# --------------------------------------------------------------------------- clusters of dead owners


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
