"""§6 admission against a concurrent lease renewal, on a real database (issue 27: the two-hour soak of
seed 2028 was INVALID by trace validation: queue soak-global, global_limit 2, ended with four live leases).

A renewal may extend a lease that has expired but was not yet reclaimed (the contract's renewal checks
only `state = 'running' AND leased_by`). The queue's advisory lock serializes claims against claims, not
against renewals: a claim that counted an expired lease as free, and then committed after a renewal that
revived it, admitted more than the limit — a claim the model refuses in commit order. The claim now locks
the queue's running rows whose lease has expired at its `now` before counting, so the renewal either
commits before the count (which then sees it) or waits for the claim's commit. A live lease is not locked:
its renewal only extends it, so it changes no count, and it must not wait for the claim (each claim
locking every running row made every renewal and ack of a limited queue queue behind the claims).

Each test forces the schedule with the `claim.after_admission` failpoint and then checks the outcome
against the model applied in the order the two transactions committed. The broken variant (the claim
without the row lock) is xfail(strict): the test is seen failing on it in every run. A partitioned claim
takes the same lock (its per-key count is the claim statement's own CTE, so the window is inside one
statement and no failpoint can hold it open: no forced schedule here).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from impl.store import PgStore
from impl.store.failpoints import Pause
from impl.store.queries import SchemaSQL
from model import ops
from model import worker_ops as w
from model.queues import QueueOpts
from model.store import ModelStore
from tests.test_forced_interleavings import NOW, Client, blocked_or_parked, reached

TTL = timedelta(seconds=10)


class _NoRunningLockSQL(SchemaSQL):
    def q(self, name: str, **extra: sql.Composable) -> sql.Composed:
        if name == "lock_running":
            return sql.SQL("SELECT 1 AS no_lock")
        return super().q(name, **extra)


class ClaimWithoutRunningLock(PgStore):
    """The claim before the fix: advisory lock, count of live leases, claim — no lock on the counted rows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.q = _NoRunningLockSQL(self.schema)


def _variants() -> list:
    return [
        pytest.param(PgStore, id="belay"),
        pytest.param(
            ClaimWithoutRunningLock,
            id="no_running_lock",
            marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason="the claim races the renewal"),
        ),
    ]


def _race(db_url: str, claimer_class: type[PgStore], opts: QueueOpts, specs: tuple[ops.JobSpec, ...]) -> None:
    """n1 holds the first job; its lease expires; n2's claim counts at `later` and stops after its count;
    n1 renews meanwhile; n2 goes on. The claim's and the renewal's answers must be the model's in the order
    the two committed."""
    model, held = _one_lease_held(db_url, opts, len(specs))
    later = NOW + TTL + timedelta(seconds=2)  # n1's lease has expired; no sweeper ran
    claim = w.Claim(later, "q", "n2", len(specs), TTL, opts)
    renew = w.Renew(later, "n1", (held.id,), later + TTL)
    seen, claimed, renewed = _stopped_then(db_url, ("claimer", claimer_class, claim), ("renewer", renew))
    renew_first = "finished" in seen  # it committed while the claim was still open
    order = (renew, claim) if renew_first else (claim, renew)
    expected = {type(op): model.apply(op) for op in order}
    assert {j.id for j in claimed.jobs} == {j.id for j in expected[w.Claim].jobs}, (
        f"{seen}; the claim admitted {[j.id for j in claimed.jobs]}, the model in commit order "
        f"{[j.id for j in expected[w.Claim].jobs]}"
    )
    assert renewed.kept == expected[w.Renew].kept


def _stopped_then(db_url: str, first: tuple[str, type[PgStore], Any], second: tuple[str, Any]) -> tuple[str, Any, Any]:
    """`first` (name, store class, operation) runs until it stops after its admission count
    (`claim.after_admission`); then `second` (name, operation) runs until it waits on a lock, or finishes;
    then `first` goes on. What the observer saw of `second`, and both results."""
    (name_a, cls_a, op_a), (name_b, op_b) = first, second
    a, b = Client(db_url, name_a, cls_a), Client(db_url, name_b)
    try:
        with (
            Pause("claim.after_admission", thread=name_a) as paused,
            psycopg.connect(db_url, autocommit=True) as obs,
        ):
            a.start(lambda st: st.apply(op_a) if not callable(op_a) else op_a(st))
            reached(paused, a)
            b.start(lambda st: st.apply(op_b) if not callable(op_b) else op_b(st))
            seen = blocked_or_parked(obs, b)
            paused.release()
            got_a, got_b = a.join(), b.join()
        assert a.error is None and b.error is None, (a.error, b.error)
        return seen, got_a, got_b
    finally:
        a.close()
        b.close()


def _one_lease_held(db_url: str, opts: QueueOpts, jobs: int) -> tuple[ModelStore, Any]:
    """`jobs` jobs on queue q and n1's claim of the first at NOW, on the database and in the model."""
    model = ModelStore()
    specs = tuple(ops.JobSpec("q", "k", {"i": i}) for i in range(jobs))
    with PgStore(db_url, pool_size=1, notify=False) as s:
        enq = ops.Enqueue(NOW, specs)
        s.apply(enq)
        model.apply(enq)
        first = w.Claim(NOW, "q", "n1", 1, TTL, opts)
        [held] = s.apply(first).jobs
        model.apply(first)
    return model, held


@pytest.mark.parametrize("claimer_class", _variants())
def test_a_global_limit_claim_and_a_renewal_reviving_an_expired_lease_commit_in_the_models_order(db_url, claimer_class):
    opts = QueueOpts(global_limit=1)
    _race(db_url, claimer_class, opts, tuple(ops.JobSpec("q", "k", {"i": i}) for i in range(3)))


def test_a_live_leases_renewal_and_ack_do_not_wait_for_a_global_limit_claim(db_url):
    """n1 holds a live lease; n2's claim stops after its count. n1's renewal and its ack finish while the
    claim is still open (they change no count the claim read), and the claim then admits what the model
    admits after them."""
    opts = QueueOpts(global_limit=2)
    model, held = _one_lease_held(db_url, opts, 3)
    later = NOW + timedelta(seconds=2)  # n1's lease is live
    claim = w.Claim(later, "q", "n2", 3, TTL, opts)
    renew = w.Renew(later, "n1", (held.id,), later + TTL)
    ack = w.Ack(later, held.id, held.attempt, w.Succeed(None))
    seen, claimed, (renewed, acked) = _stopped_then(
        db_url, ("claimer", PgStore, claim), ("other", lambda st: (st.apply(renew), st.apply(ack)))
    )
    assert "finished" in seen, f"{seen}: a live lease's renewal and ack waited for the claim"
    assert renewed == model.apply(renew) and acked == model.apply(ack)
    # The claim counted n1's live lease (its count preceded the ack): one slot of two was free.
    assert [j.id for j in claimed.jobs] == [j.id for j in model.apply(w.Claim(later, "q", "n2", 1, TTL, opts)).jobs]


def test_an_ack_group_and_claim_on_a_global_limit_queue_and_another_claim_commit_in_the_models_order(db_url):
    """Issue 54: a group of acks and the claim of the slots they free, on a queue with a global limit, in one
    transaction (AckClaim). Its claim counts under the queue's advisory lock, taken before the acks: n1 acks
    its one job and claims two while the limit is 2; it stops after its count, with the rows not yet
    claimed. n2's claim must wait for n1's commit — a claim that counted meanwhile would see n1's acked job
    still running and none of n1's new leases, admit one, and leave three live leases — and both must
    answer what the model answers in that order."""
    opts = QueueOpts(global_limit=2)
    model, held = _one_lease_held(db_url, opts, 5)
    later = NOW + timedelta(seconds=2)  # n1's lease is live
    acks = w.AckMany(later, (w.Ack(later, held.id, held.attempt, w.Succeed(None)),))
    group = w.AckClaim(acks, w.Claim(later, "q", "n1", 2, TTL, opts))
    claim = w.Claim(later, "q", "n2", 2, TTL, opts)
    seen, grouped, claimed = _stopped_then(db_url, ("grouper", PgStore, group), ("claimer", claim))
    order = (claim, group) if "finished" in seen else (group, claim)  # the order the two committed
    expected = {type(op): model.apply(op) for op in order}
    assert grouped == expected[w.AckClaim], f"{seen}: {grouped} against the model's {expected[w.AckClaim]}"
    assert [j.id for j in claimed.jobs] == [j.id for j in expected[w.Claim].jobs], (
        f"{seen}: the claim took {[j.id for j in claimed.jobs]}, the model in commit order "
        f"{[j.id for j in expected[w.Claim].jobs]}"
    )
    with psycopg.connect(db_url, autocommit=True) as c:
        live = c.execute(
            "SELECT count(*) FROM belay_jobs WHERE queue = 'q' AND state = 'running' AND lease_until > %s",
            (later,),
        ).fetchone()
    assert live is not None and live[0] <= 2, f"{live[0]} live leases on a queue limited to 2"
    assert "waits on a lock" in seen, f"{seen}: the other claim did not wait for the group's admission"
