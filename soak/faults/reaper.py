"""Reap orphaned worker processes that were re-parented to the harness (issue 13: bounded long runs).

The harness is a child subreaper (impl/provision/processes.py makes it one, so PostgreSQL's processes come back
to it after a kill -9). A worker runs as `/bin/sh -c CMD`; when the nemesis kills the whole process
group, the shell can die before its child, which is then re-parented to the harness and, never
waited for, stays a zombie. Over an hour of kill -9 every few seconds that is hundreds of zombies —
PIDs leaking without bound. `reap_orphans` waits for the exited children of this process that belong
to one of the worker process groups (and are not a `Popen` the harness waits for itself).
"""

from __future__ import annotations

import os


def _stat(pid: str) -> tuple[str, int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2 :].split()
    return rest[0], int(rest[1]), int(rest[2])  # state, ppid, pgrp


def reap_orphans(pgids: set[int], exclude: set[int]) -> int:
    """waitpid() every zombie child of ours in one of `pgids`, except the pids in `exclude`."""
    me, reaped = os.getpid(), 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for name in entries:
        if not name.isdigit() or int(name) in exclude:
            continue
        st = _stat(name)
        if st is None or st[1] != me or st[0] != "Z" or st[2] not in pgids:
            continue
        try:
            os.waitpid(int(name), os.WNOHANG)
            reaped += 1
        except ChildProcessError:
            pass
    return reaped
