"""Zombie stops: SIGSTOPs that make duplicate paid step writes happen (issue 11; I4, contract §8.2).

A `slow` attempt frozen inside its paid `nap` step comes back, after SIGCONT, as a zombie: its lease
is gone, yet it journals `nap` (steps are not fenced). That write is a *duplicate* — which must add no
spend (§8.2) — when another attempt of the job has executed `nap` too. So when a SIGSTOP freezes `slow`
attempts in their `nap`, the nemesis (soak/faults/nemesis.py) keeps the node stopped until each of those jobs
has had its `nap` journaled by a later attempt (reclaimed, claimed by another node, slept, wrote) or has
ended — at most a cap — and only then SIGCONTs: every zombie then writes a step that is already
journaled. The frozen zombie is the safe party (a stopped process neither exits nor is killed); the
later attempts may die and be replaced, the stop simply lasts until one of them wrote.

For the zombie's write to reach the database, its connections must survive the stop: a zombie stop
holds the nemesis's `db_lock` (no PostgreSQL crash) from the SIGSTOP until shortly after the SIGCONT,
and the zombie's node is spared from kill -9 for that moment (`spare`). While the node is stopped, kill -9
spares the nodes running the later attempts (`spare`, filled as they are seen) but goes on elsewhere
(issue 27: skipping every kill during a hold delivered half the kills asked for); SIGTERM drains go on
(they let running jobs finish). While a hold lasts the driver enqueues no job that kills its own worker
(flaky `exit`, costed `crash_at_crossing`: soak/workload/driver.py `exits_paused`) — such an exit on a later
attempt's node restarts its lease-and-nap wait, and a default run's hold ran out at the cap with no
duplicate write. One zombie stop at a time, and after one the next waits twice as long as
it held (soak/faults/nemesis.py), so holds do not starve the crash-restarts of their rate. A
zombie stop may outlast the faults phase by at most OVERRUN_S (the phase ends when its last fault ends).

This module only chooses and times stops; whether duplicate writes happened is decided by the checker
from the database alone (soak/judges/coverage.py `duplicate_step_writes`), never from these intentions.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import psycopg

SLOW_IN_NAP = (
    "SELECT leased_by, id, attempt FROM belay_jobs WHERE state = 'running' AND worker = 'slow' "
    "AND lease_until > %s AND EXISTS (SELECT 1 FROM belay_steps s WHERE s.job_id = belay_jobs.id "
    "AND s.name = 'begin') AND NOT EXISTS (SELECT 1 FROM belay_steps s WHERE s.job_id = belay_jobs.id "
    "AND s.name = 'nap')"
)
HELD = (
    "SELECT j.id, j.state, j.attempt, j.leased_by, EXISTS (SELECT 1 FROM belay_steps s WHERE s.job_id = j.id "
    "AND s.name = 'nap') FROM belay_jobs j WHERE j.id = ANY(%s)"
)
TERMINAL = ("succeeded", "failed", "cancelled")
AFTER_RESTART_S = 5.0  # a zombie stop starts no sooner after a PostgreSQL restart (broken connections recycled)
AFTER_CONT_S = 2.0  # the zombies write right after the SIGCONT; no crash or kill of their node before
OVERRUN_S = 25.0  # how long a zombie stop may outlast the faults phase (Nemesis.stop_all joins for 30 s)


def slow_in_nap(url: str) -> dict[str, list[tuple[int, int]]] | None:
    """Node → the `slow` attempts it runs that are inside their `nap` step (begin journaled, nap not);
    None when the database cannot be read (down: nothing is known)."""
    out: dict[str, list[tuple[int, int]]] = {}
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=2) as c:
            for node, job_id, attempt in c.execute(SLOW_IN_NAP, (datetime.now(UTC),)):
                out.setdefault(node, []).append((int(job_id), int(attempt)))
    except psycopg.Error:
        return None
    return out


def settled(rows: dict[int, tuple[str, int, str | None, bool]], held: list[tuple[int, int]]) -> bool:
    """Has each held job ended, or had its `nap` journaled? (Selected while `nap` was not journaled and its
    attempt is frozen, so a `nap` row now was written by a later attempt.)"""
    for job_id, _attempt in held:
        state, _now_attempt, _node, nap = rows.get(job_id, ("gone", 0, None, False))
        if not (nap or state in TERMINAL or state == "gone"):
            return False
    return True


def later_nodes(rows: dict[int, tuple[str, int, str | None, bool]], held: list[tuple[int, int]]) -> set[str]:
    """The nodes running later attempts of the held jobs."""
    out = set()
    for job_id, attempt in held:
        state, now_attempt, node, _nap = rows.get(job_id, ("gone", 0, None, False))
        if state == "running" and now_attempt > attempt and node:
            out.add(node)
    return out


def hold(url: str, held: list[tuple[int, int]], halt: threading.Event, spare: set[str], *, most: float) -> str:
    """Keep the node stopped until `settled` (then "journaled"), at most `most` seconds ("cap"), and at most
    OVERRUN_S after `halt` ("halt"). Meanwhile `spare` is not empty (no kill -9 at all: the other nodes must
    reclaim, claim and run the later attempts) and names the nodes running them."""
    spare.add("(zombie stop)")
    t0 = time.monotonic()
    halted_at: float | None = None
    while True:
        now = time.monotonic()
        if now - t0 >= most:
            return "cap"
        if halt.is_set():
            halted_at = halted_at if halted_at is not None else now
            if now - halted_at >= OVERRUN_S:
                return "halt"
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=2) as c:
                rows = {r[0]: (r[1], r[2], r[3], r[4]) for r in c.execute(HELD, ([j for j, _ in held],))}
        except psycopg.Error:
            rows = None
        if rows is not None:
            spare.update(later_nodes(rows, held))
            if settled(rows, held):
                return "journaled"
        time.sleep(0.25)


__all__ = ["AFTER_CONT_S", "AFTER_RESTART_S", "OVERRUN_S", "hold", "later_nodes", "settled", "slow_in_nap"]
