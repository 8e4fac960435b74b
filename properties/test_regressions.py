"""Shrunk counterexamples worth keeping: each found by the model-vs-PostgreSQL state machine, fixed,
and pinned here as an explicit sequence run against both stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from impl.store import PgStore
from model import ops
from model import worker_ops as w
from model.ops import JobSpec
from model.store import ModelStore

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.fixture(params=["model", "pg"])
def store(request, db_url):
    if request.param == "model":
        yield ModelStore()
    else:
        with PgStore(db_url) as pg:
            yield pg


def test_a_duplicate_names_the_holder_in_the_index_it_conflicted_with(store):
    """Found by the state machine: a batch whose skipped 'always' row was followed, in the same
    statement, by an 'incomplete' row with the same key. PostgreSQL looks holders up after the whole
    statement, so 'newest row with the key' named the incomplete row (5), not the conflicting holder."""
    first = store.apply(ops.Enqueue(T0, (JobSpec("a", "echo", unique_key="k1", unique_mode="always"),)))
    assert first.outcomes == (ops.Inserted(1),)
    batch = store.apply(
        ops.Enqueue(
            T0,
            (
                JobSpec("a", "echo"),
                JobSpec("a", "echo", unique_key="k1", unique_mode="always"),
                JobSpec("a", "echo", unique_key="k1", unique_mode="incomplete"),
            ),
        )
    )
    assert batch.outcomes == (ops.Inserted(2), ops.Duplicate(1, "unique"), ops.Inserted(4))


def test_retention_keeps_a_workflow_dep_until_its_dependents_settle(store):
    """Found by the invariant machine (I1): pruning a finished dep while a dependent was still held left
    the dependent held forever. Retention now skips members of a workflow that is still settling."""
    wf = store.apply(
        ops.EnqueueWorkflow(
            T0,
            "wf",
            (
                ops.WorkflowMember("a", JobSpec("q", "echo")),
                ops.WorkflowMember("b", JobSpec("q", "echo")),
                ops.WorkflowMember("c", JobSpec("q", "echo"), deps=("a", "b")),
            ),
        )
    )
    ids = dict(wf.ids)
    claimed = {j.wf_name: j for j in store.apply(w.Claim(T0, "q", "n", 2)).jobs}
    store.apply(w.Ack(T0, claimed["a"].id, 1, w.Succeed(None)))
    pruned = store.apply(w.Prune(T0 + timedelta(hours=1), {"succeeded": 60}))
    assert pruned.jobs == ()  # c is still held: a must stay
    store.apply(w.Ack(T0, claimed["b"].id, 1, w.Succeed(None)))
    assert store.apply(ops.ReadJob(ids["c"])).state == "ready"


def test_claim_takes_a_foreign_null_ready_at_row_first(db_url):
    """The state machine's shortest trace against a model broken to order NULLS LAST (kept as the
    example of a planted model bug): seed two jobs, let a foreign SDK leave job 2's ready_at NULL,
    claim one. §6: ready_at ASC NULLS FIRST, so job 2 comes first on both stores."""
    from dataclasses import replace
    from types import MappingProxyType

    import psycopg

    from model.queues import QueueOpts

    model = ModelStore()
    with PgStore(db_url) as pg, psycopg.connect(db_url, autocommit=True) as conn:
        for store in (model, pg):
            store.apply(ops.Enqueue(T0, (JobSpec("a", "echo"), JobSpec("a", "echo"))))
        model.state = replace(
            model.state, jobs=MappingProxyType({**model.state.jobs, 2: replace(model.state.jobs[2], ready_at=None)})
        )
        conn.execute("UPDATE belay_jobs SET ready_at = NULL WHERE id = 2")
        opts = QueueOpts.parse({"global_limit": 2})
        for store in (model, pg):
            claimed = store.apply(w.Claim(T0, "a", "n1", 1, timedelta(seconds=10), opts))
            assert [j.id for j in claimed.jobs] == [2]


def test_a_prune_batch_never_exceeds_its_limit(store):
    """Found by the state machine in CI, flakily (it depended on the plan PostgreSQL chose): with the
    batch as `DELETE … WHERE id IN (SELECT … LIMIT 1 FOR UPDATE SKIP LOCKED)` the subquery could be
    rescanned and a batch of limit 1 deleted two jobs. The batch is now a materialized locking CTE."""
    store.apply(ops.Enqueue(T0, (JobSpec("a", "echo"),)))
    wf = dict(
        store.apply(
            ops.EnqueueWorkflow(
                T0,
                "wf",
                (
                    ops.WorkflowMember("m0", JobSpec("a", "echo")),
                    ops.WorkflowMember("m1", JobSpec("b", "echo"), deps=("m0",)),
                ),
            )
        ).ids
    )
    store.apply(ops.Cancel(T0, wf["m0"]))  # m0 cancelled, m1 doomed: both terminal
    retention = {"succeeded": 0, "failed": 0, "cancelled": 0}
    first = store.apply(w.Prune(T0 + timedelta(seconds=1), retention, 60, 1))
    assert first.jobs == (wf["m0"],)
    assert store.apply(w.Prune(T0 + timedelta(seconds=1), retention, 60, 1)).jobs == (wf["m1"],)
