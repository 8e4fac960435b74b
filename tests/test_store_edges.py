"""Store-layer edges no other test pinned down, found by planting bugs in impl/store (the `store_*` mutants of
properties/mutants/hunts.py): each test states the contract behaviour the surviving bug broke, as an explicit
sequence run against both stores (the model is the oracle; PostgreSQL must agree with it)."""

from __future__ import annotations

from datetime import UTC, datetime

from impl.store import PgStore
from model import ops
from model import worker_ops as w
from properties.conformance.support import (
    MIN,
    TTL,
    S,
    claim,
    expect,
    insert,
    signal,
)
from properties.test_mutants_regressions import model_and_pg_store  # noqa: F401  (the fixture `store`)

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_a_signal_exactly_at_its_ttl_is_kept(store):
    """§8.7 "prune signals past TTL": past means inserted_at < now - ttl; a signal exactly ttl old stays."""
    store.apply(ops.DeliverSignal(T0, "s1", "go", {"n": 1}))
    pruned = store.apply(w.Prune(T0 + MIN, {}, signal_ttl=60))
    expect(pruned.signals, 0, "a signal inserted exactly signal_ttl ago is not past its TTL")
    expect(signal(store, "s1", "go") is not None, True, "the signal is still readable")
    pruned = store.apply(w.Prune(T0 + MIN + S, {}, signal_ttl=60))
    expect(pruned.signals, 1, "one second later it is past its TTL")


def test_a_partitioned_claim_keeps_the_first_started_at(store):
    """§6 claim update, also on a partitioned queue (claim_update, not claim_plain): started_at =
    COALESCE(started_at, $now) — a retry after a reclaim keeps the first attempt's start."""
    opts = {"limit": 2, "partition": {"field": "input", "key": "t"}}
    job_id = insert(store, T0, input={"t": "x"})
    (first,) = claim(store, T0 + S, opts=opts)
    expect((first.id, first.started_at), (job_id, T0 + S), "setup: attempt 1 starts at T0 + 1 s")
    reclaimed = store.apply(w.Reclaim(T0 + S + TTL, w.Backoff(1, 2, 20)))
    expect(reclaimed, w.Reclaimed((job_id,), ()), "setup: attempt 1's lease expired, retried")
    (again,) = claim(store, T0 + 10 * MIN, opts=opts)
    expect((again.id, again.attempt, again.started_at), (job_id, 2, T0 + S), "attempt 2 keeps the first started_at")


def test_a_plain_claim_skips_a_row_another_transaction_holds(db_url):
    """§6 plain claim: "… FOR UPDATE SKIP LOCKED". A ready row locked by another transaction (a claimer mid-
    statement, an operator's cancel holding the row) is skipped, not waited for: the claim returns the next
    ready job at once."""
    import threading

    import psycopg

    with PgStore(db_url) as store:
        first = insert(store, T0)
        second = insert(store, T0)
        got: list = []
        with psycopg.connect(db_url) as holder:
            holder.execute("SELECT id FROM belay_jobs WHERE id = %s FOR UPDATE", (first,))
            thread = threading.Thread(target=lambda: got.append(claim(store, T0 + S, demand=1)), daemon=True)
            thread.start()
            thread.join(5)
            blocked = thread.is_alive()
            holder.rollback()  # release the row either way, so the claim (and the fixture) can finish
        thread.join(10)
        expect(blocked, False, "the claim did not wait for the locked row")
        expect([j.id for j in got[0]], [second], "the claim took the next ready job")


def test_a_small_claim_takes_the_earliest_due_awaiting_job(store):
    """§6 claim order among awaiting jobs whose deadline passed: ready_at ASC. With more due jobs than the
    claim's demand, the earliest deadline is taken first (each half of the plain claim's candidate scan must
    keep the claim order under its own LIMIT)."""
    from properties.conformance.support import claim_job, park

    late = claim_job(store, T0, insert(store, T0))
    early = claim_job(store, T0, insert(store, T0))
    park(store, T0, late, "s1", "go", deadline=T0 + 20 * S)
    park(store, T0, early, "s1", "go", deadline=T0 + 10 * S)
    expect([j.id for j in claim(store, T0 + MIN, demand=1)], [early.id], "the earliest due deadline first")


def test_a_partitioned_claim_takes_an_awaiting_job_due_exactly_now(store):
    """§4/§6 predicate C: an awaiting job is claimable once ready_at <= now — on a partitioned queue too
    (claim_partitioned spells C itself)."""
    from properties.conformance.support import claim_job, park

    opts = {"limit": 2, "partition": {"field": "input", "key": "t"}}
    job = claim_job(store, T0, insert(store, T0, input={"t": "x"}))
    park(store, T0, job, "s1", "go", deadline=T0 + 10 * S)
    expect([j.id for j in claim(store, T0 + 10 * S, opts=opts)], [job.id], "due at exactly now: claimed")
