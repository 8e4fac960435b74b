"""The runtime's commonest group commit, model vs PostgreSQL (issue 33): an AckClaim whose acks all
succeed runs as ONE statement (`ack_claim_solo`), and falls back to the transaction when an acked row is
a workflow member or a child (its after-terminal steps come before the claim, as the model orders them).

The stateful machine (properties/stateful.py) reaches this statement only when its random outcomes
happen to be all succeeds; a rule of its own shifts the derandomized `ci` profile's reach of a dozen
other statements below their floors. So this comparison drives it directly: every example builds a
small world the same way on both stores — plain jobs at three priorities (some scheduled ahead), a
parent with a spawned child, a workflow — claims some, lets time pass (a lease may expire and another
node reclaim: stale acks), then applies one all-succeed AckClaim with per-ack values and times, and
requires equal results and equal snapshots of every table. properties/statements.py lists the statement
here (ELSEWHERE)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.store import PgStore
from impl.store.snapshot import snapshot
from model import ops
from model import worker_ops as w
from model.ops import JobSpec, WorkflowMember
from model.store import ModelStore
from properties.stateful import PROFILE, RESET_SQL, T0, TABLES, small_json

TTL = timedelta(seconds=30)


@pytest.fixture
def stores(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn, PgStore(db_url) as pg:
        yield conn, pg


def _both(model: ModelStore, pg: PgStore, conn: psycopg.Connection, op: Any) -> Any:
    def outcome(fn):
        try:
            return fn()
        except ops.InvalidInput as exc:  # the same refusal on both sides
            return ("refused", type(exc).__name__)

    expected = outcome(lambda: model.apply(op))
    actual = outcome(lambda: pg.apply(op))
    assert expected == actual, f"{type(op).__name__} results differ:\n model: {expected}\n pg:    {actual}"
    state = snapshot(conn)
    for table in TABLES:
        mine, theirs = getattr(model.state, table), getattr(state, table)
        assert mine == theirs, f"after {op!r}: table {table} differs:\n model: {mine}\n pg:    {theirs}"
    return expected


def test_the_statement_runs_and_falls_back_for_a_child(db_url):
    """Both branches are taken: a plain group commits as one statement (the transaction path is never
    entered), a group with a child's ack is refused by the statement (`blocked`, nothing written) and
    committed by the transaction, which wakes the parent before the claim takes it."""
    with psycopg.connect(db_url, autocommit=True) as conn, PgStore(db_url) as pg:
        conn.execute(RESET_SQL)
        model = ModelStore()
        calls: list[str] = []
        solo, tx = pg._ack_claim_solo, pg.transaction

        def spy_solo(op):
            out = solo(op)
            calls.append("solo" if out is not None else "blocked")
            return out

        def spy_tx(*a, **k):
            calls.append("transaction")
            return tx(*a, **k)

        pg._ack_claim_solo, pg.transaction = spy_solo, spy_tx
        both = lambda op: _both(model, pg, conn, op)  # noqa: E731
        parent = both(ops.Enqueue(T0, (JobSpec("a", "parent", {}, priority=0),))).outcomes[0].id
        both(ops.Enqueue(T0, tuple(JobSpec("a", "echo", {"i": i}, priority=1) for i in range(3))))
        (p,) = both(w.Claim(T0, "a", "n1", 1, TTL)).jobs
        assert p.id == parent
        kid = both(w.Spawn(T0, parent, "kids", (JobSpec("a", "kid", {}, priority=0),))).child_ids[0]
        both(w.AwaitChildren(T0, parent, p.attempt))
        plain = both(w.Claim(T0, "a", "n1", 1, TTL)).jobs  # the child (priority 0) first
        assert [j.id for j in plain] == [kid]
        one = both(w.Claim(T0, "a", "n1", 1, TTL)).jobs
        calls.clear()
        done = both(w.AckClaim(w.AckMany(T0, (w.Ack(T0, one[0].id, 1, w.Succeed(1)),)), w.Claim(T0, "a", "n1", 1, TTL)))
        assert calls == ["solo"] and len(done.claimed.jobs) == 1, calls
        calls.clear()
        done = both(w.AckClaim(w.AckMany(T0, (w.Ack(T0, kid, 1, w.Succeed(2)),)), w.Claim(T0, "a", "n1", 1, TTL)))
        assert calls == ["blocked", "transaction"], calls
        assert [j.id for j in done.claimed.jobs] == [parent]  # woken by its child's ack, then claimed
        # (the third plain job is still ready: the deferring statement claimed nothing; the snapshots agree)


world = st.fixed_dictionaries(
    {
        "plain": st.lists(
            st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=6
        ),  # (priority, scheduled ahead)
        "parent": st.booleans(),
        "workflow": st.booleans(),
        "first_claim": st.integers(1, 6),
        "expire": st.booleans(),  # the first claim's leases expire; another node reclaims (stale acks)
        "reclaim": st.integers(1, 6),
        "ack_count": st.integers(1, 6),
        "values": st.lists(small_json, min_size=6, max_size=6),
        "spread": st.booleans(),  # each ack its own time
        "demand": st.integers(1, 4),
        "later": st.sampled_from([timedelta(seconds=1), timedelta(seconds=45)]),  # past the scheduled ones?
    }
)


@settings(
    max_examples=60 if PROFILE in ("ci", "mutants") else 25,
    deadline=None,
    derandomize=PROFILE == "ci",
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # the stores are reset in every example
)
@given(world)
def test_an_all_succeed_group_commit_matches_the_model(stores, world):
    conn, pg = stores
    conn.execute(RESET_SQL)
    model = ModelStore()
    now = T0

    def both(op: Any) -> Any:
        return _both(model, pg, conn, op)

    specs = tuple(
        JobSpec("a", "echo", {"i": i}, priority=p, scheduled_at=T0 + timedelta(seconds=40) if ahead else None)
        for i, (p, ahead) in enumerate(world["plain"])
    )
    both(ops.Enqueue(now, specs))
    if world["parent"]:
        parent = both(ops.Enqueue(now, (JobSpec("a", "parent", {}, priority=0),))).outcomes[0].id
        claimed = both(w.Claim(now, "a", "n1", 1, TTL)).jobs
        if claimed and claimed[0].id == parent:
            both(w.Spawn(now, parent, "kids", (JobSpec("a", "kid", {}, priority=0),)))
            both(w.AwaitChildren(now, parent, claimed[0].attempt))
    if world["workflow"]:
        members = (
            WorkflowMember("m1", JobSpec("a", "echo", {}, priority=0)),
            WorkflowMember("m2", JobSpec("a", "echo", {}, priority=0), deps=("m1",)),
        )
        both(ops.EnqueueWorkflow(now, "wf", members))
    held = both(w.Claim(now, "a", "n1", world["first_claim"], TTL)).jobs
    if world["expire"] and held:
        now += TTL + timedelta(seconds=1)
        both(w.Reclaim(now))  # their retries are due after the backoff: past it, node n2 takes them
        now += timedelta(hours=1)
        both(w.Claim(now, "a", "n2", world["reclaim"], TTL))
    now += world["later"]
    picked = held[: world["ack_count"]]
    if not picked:
        return
    acks = tuple(
        w.Ack(now - timedelta(milliseconds=i if world["spread"] else 0), job.id, job.attempt, w.Succeed(value))
        for i, (job, value) in enumerate(zip(picked, world["values"], strict=False))
    )
    both(w.AckClaim(w.AckMany(now, acks), w.Claim(now, "a", "n1", world["demand"], TTL)))
