"""Zombie stops: SIGSTOPs that make duplicate paid step writes happen (issue 11; I4, contract §8.2).

A `slow` attempt frozen inside its paid `nap` step comes back, after SIGCONT, as a zombie: its lease
is gone, yet it journals `nap` (steps are not fenced). That write is a *duplicate* — and must add no
spend (§8.2) — only when a later attempt of the job executes `nap` too. So when a SIGSTOP freezes `slow`
attempts in their `nap`, the nemesis (soak/nemesis.py) keeps the stop going past its usual length until
each such job has been reclaimed and claimed again by another node and has stayed running there for a
moment (the later attempt is inside its own `nap`), or has ended; then it SIGCONTs, and waits until the
later attempts have finished their `nap` too (their `pre_ack` observation), or a cap. Throughout that
window no PostgreSQL crash may happen (a crash breaks the connections both writers hold: their step
writes would fail instead of colliding) — the zombie stop holds the nemesis's `db_lock` — and the nodes
running the later attempts are spared from kill -9 and SIGTERM (`spare`).

This module only chooses and times stops; whether a duplicate write happened is decided by the checker
from the database alone (soak/coverage.py `duplicate_step_writes`), never from these intentions.
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
TERMINAL = ("succeeded", "failed", "cancelled")
SETTLE_S = 1.0  # a later attempt seen running this long has read the journal and is in its own `nap`


def slow_in_nap(url: str) -> dict[str, list[tuple[int, int]]]:
    """Node → the `slow` attempts it runs that are inside their `nap` step (begin journaled, nap not)."""
    out: dict[str, list[tuple[int, int]]] = {}
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=2) as c:
            for node, job_id, attempt in c.execute(SLOW_IN_NAP, (datetime.now(UTC),)):
                out.setdefault(node, []).append((int(job_id), int(attempt)))
    except psycopg.Error:
        return {}
    return out


def _later_attempts(url: str, held: list[tuple[int, int]]) -> dict[int, tuple[str, int, str | None, bool]] | None:
    """Job → (state, attempt, leased_by, a later attempt than the held one wrote its pre_ack)."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=2) as c:
            rows = c.execute(
                "SELECT j.id, j.state, j.attempt, j.leased_by, (SELECT max(o.attempt) FROM soak_observations o "
                "WHERE o.job_id = j.id AND o.phase = 'pre_ack') FROM belay_jobs j WHERE j.id = ANY(%s)",
                ([j for j, _ in held],),
            ).fetchall()
    except psycopg.Error:
        return None
    mine = dict(held)
    return {r[0]: (r[1], r[2], r[3], r[4] is not None and r[4] > mine[r[0]]) for r in rows}


def _settled(rows: dict, held: list[tuple[int, int]], *, after_cont: bool) -> bool:
    for job_id, attempt in held:
        state, now_attempt, _node, later_pre_ack = rows.get(job_id, ("gone", attempt, None, False))
        if state in TERMINAL or state == "gone":
            continue
        if after_cont and later_pre_ack:
            continue
        if after_cont or not (state == "running" and now_attempt > attempt):
            return False
    return True


def hold(
    url: str,
    held: list[tuple[int, int]],
    halt: threading.Event,
    spare: set[str],
    *,
    least: float,
    most: float,
    after_cont: bool,
) -> str:
    """Wait at least `least` seconds, then until the held jobs have moved on — while stopped: each one ended
    or running at a later attempt (seen so for SETTLE_S); after the SIGCONT: each one ended or its later
    attempt wrote its `pre_ack` — at most `most` seconds or until `halt`. Keeps `spare` = the nodes running
    the later attempts. Returns why the wait ended: "moved_on", "cap" or "halt"."""
    t0 = time.monotonic()
    if halt.wait(least):
        return "halt"
    since: float | None = None
    while True:
        now = time.monotonic()
        if now - t0 >= most:
            return "cap"
        rows = _later_attempts(url, held)
        if rows is not None:
            spare.clear()
            spare.update(
                r[2] for j, a in held if (r := rows.get(j)) and r[0] == "running" and r[1] > a and r[2] is not None
            )
        if rows is not None and _settled(rows, held, after_cont=after_cont):
            since = since if since is not None else now
            if after_cont or now - since >= SETTLE_S:
                return "moved_on"
        else:
            since = None
        if halt.wait(0.25):
            return "halt"


__all__ = ["hold", "slow_in_nap"]
