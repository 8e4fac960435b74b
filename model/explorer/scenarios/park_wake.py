"""Await park vs signal delivery (contract §7 "Await park-and-wake", §8.1, §11.9).

Waiters W1…Wn are running jobs that await the signal (s, n): the §7 park checks for the signal row and
parks ready if it is there, awaiting otherwise. A deliverer D delivers (s, n) at the same time: upsert
the signal row, then wake every job awaiting it.

Variants:
  correct  both sides take pg_advisory_xact_lock(hashtext('belay_sig:' || scope)) first
           (impl/store/worker_store.py `_park`, impl/store/client_store.py `_deliver`).
  broken   neither takes the scope lock. The park's check runs before the delivery commits (signal
           absent), the delivery's wake runs before the park commits (the row is still 'running' in its
           view, so it does not match and is not even waited for): the waiter parks awaiting beside a
           present signal, and no one will ever wake it.
"""

from __future__ import annotations

from model.explorer.program import Actor, Program
from model.explorer.protocols import Db, Sql
from model.explorer.scenarios.common import assemble, awaiters_eventually_run, no_lost_wakeup
from model.explorer.search import Scenario

VARIANTS = ("correct", "broken")
SCOPE = "belay_sig:s"
SIGNAL = "sig(s,n)"

HYPOTHESES = {
    "correct": """Serialising park and delivery on the scope lock, with the persistent signal row, makes
        lost wake-ups impossible: no reachable state has a waiter awaiting beside the delivered signal,
        and every waiter eventually runs.""",
    "broken": """Without the scope lock a waiter can check for the signal before it is delivered and park
        after the delivery's wake has run: a lost wake-up (awaiting while the signal row exists).""",
}


def waiter(s: Sql, name: str, *, locked: bool) -> Actor:
    """A running job's await ack (§7 park rule), then — once woken — its next claim."""
    p = Program()
    s.park(p, name, SIGNAL, SCOPE if locked else None)
    p.commit()
    s.claim(p, name)
    return p.build(name)


def deliverer(s: Sql, waiters: list[str], *, locked: bool) -> Actor:
    """§8.1 DeliverSignal."""
    p = Program()
    s.deliver(p, SIGNAL, SCOPE if locked else None, waiters)
    p.commit()
    return p.build("D")


def scenario(variant: str = "correct", size: int = 1) -> Scenario:
    """`size` waiters (1 or 2) and one deliverer."""
    if variant not in VARIANTS:
        raise ValueError(f"park_wake variants are {VARIANTS}, not {variant!r}")
    locked = variant == "correct"
    waiters = [f"W{i}" for i in range(1, size + 1)]
    db = Db()
    for w in waiters:
        db.job(w, "running")
    db.signal(SIGNAL)
    db.lock(SCOPE)
    s = Sql(db)
    ws = [waiter(s, w, locked=locked) for w in waiters]
    return assemble(
        name="park_wake",
        variant=variant,
        size=size,
        db=db,
        actors=[*ws, deliverer(s, waiters, locked=locked)],
        title="Await park vs signal delivery, with and without the scope lock",
        hypothesis=HYPOTHESES[variant],
        invariants=[no_lost_wakeup(waiters, SIGNAL)],
        liveness=[awaiters_eventually_run(*ws)],
        expect="valid" if locked else "invalid",
    )
