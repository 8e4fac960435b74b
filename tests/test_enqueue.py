"""§5 enqueueing: batch insert, the required defaults, uniqueness modes, duplicates, transactional
enqueue and the pg_notify wake-up, and bad input refused with nothing changed."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest

from impl.store import PgStore, channel_name
from model import ops
from model.ops import Duplicate, Enqueue, Inserted, InvalidInput, JobSpec


def count(conn) -> int:
    return conn.execute("SELECT count(*) FROM belay_jobs").fetchone()[0]


def test_a_new_row_gets_the_contract_defaults(store, conn, now):
    result = store.apply(Enqueue(now, (JobSpec("q", "w", {"a": [1, 2]}, meta={"m": True}, priority=3),)))
    assert result.outcomes == (Inserted(1),)
    job = store.apply(ops.ReadJob(1))
    assert (job.state, job.attempt, job.errors, job.spent_usd_micros, job.spent_tokens) == ("ready", 0, [], 0, 0)
    assert job.cancel_requested is False
    assert job.ready_at == now and job.inserted_at == now
    assert (job.input, job.meta, job.priority, job.max_attempts) == ({"a": [1, 2]}, {"m": True}, 3, 20)
    assert job.lease_until is None and job.started_at is None and job.finished_at is None


def test_a_scheduled_job_is_ready_at_its_scheduled_time(store, now):
    later = now + timedelta(hours=1)
    store.apply(Enqueue(now, (JobSpec("q", "w", scheduled_at=later),)))
    job = store.apply(ops.ReadJob(1))
    assert job.state == "ready" and job.ready_at == later and job.inserted_at == now


def test_a_batch_is_one_insert_and_reports_each_row_in_order(store, now):
    specs = (
        JobSpec("q", "w", {"i": 0}),
        JobSpec("q", "w", {"i": 1}, unique_key="k"),
        JobSpec("q", "w", {"i": 2}, unique_key="k"),
        JobSpec("r", "w", {"i": 3}),
    )
    result = store.apply(Enqueue(now, specs))
    # The skipped row still consumed its id from the bigserial sequence (as a VALUES default would).
    assert result.outcomes == (Inserted(1), Inserted(2), Duplicate(2, "unique"), Inserted(4))
    assert [store.apply(ops.ReadJob(i)).input for i in (1, 2, 4)] == [{"i": 0}, {"i": 1}, {"i": 3}]


def test_incomplete_uniqueness_dedupes_only_while_the_holder_is_live(store, conn, now):
    first = store.apply(Enqueue(now, (JobSpec("q", "w", unique_key="k"),))).outcomes[0]
    again = store.apply(Enqueue(now, (JobSpec("q", "w", unique_key="k"),))).outcomes[0]
    assert again == Duplicate(first.id, "unique")
    assert store.apply(ops.Cancel(now, first.id)) == ops.Cancelled(first.id)
    later = store.apply(Enqueue(now, (JobSpec("q", "w", unique_key="k"),))).outcomes[0]
    assert isinstance(later, Inserted)
    # The holder reported is the newest row with the key (ORDER BY id DESC LIMIT 1).
    assert store.apply(Enqueue(now, (JobSpec("q", "w", unique_key="k"),))).outcomes[0] == Duplicate(later.id, "unique")


def test_window_uniqueness_embeds_the_bucket_in_the_key(store, now):
    spec = JobSpec("q", "w", unique_key="report", unique_mode="window", unique_window=3600)
    first = store.apply(Enqueue(now, (spec,))).outcomes[0]
    job = store.apply(ops.ReadJob(first.id))
    bucket = int(now.timestamp()) // 3600
    assert job.unique_key == f"report@{bucket}"
    # Same bucket: a duplicate even after the holder went terminal.
    store.apply(ops.Cancel(now, first.id))
    same = store.apply(Enqueue(now + timedelta(minutes=59), (spec,))).outcomes[0]
    assert same == Duplicate(first.id, "unique")
    # Next bucket: a new job.
    nxt = store.apply(Enqueue(now + timedelta(hours=1), (spec,))).outcomes[0]
    assert isinstance(nxt, Inserted)
    assert store.apply(ops.ReadJob(nxt.id)).unique_key == f"report@{bucket + 1}"


def test_always_uniqueness_dedupes_forever(store, now):
    spec = JobSpec("q", "w", unique_key="once", unique_mode="always")
    first = store.apply(Enqueue(now, (spec,))).outcomes[0]
    store.apply(ops.Cancel(now, first.id))
    later = store.apply(Enqueue(now + timedelta(days=400), (spec,))).outcomes[0]
    assert later == Duplicate(first.id, "unique")


def test_a_cron_slot_inserts_once_and_reports_the_holder(store, now):
    spec = JobSpec("q", "w", cron_name="nightly", cron_slot=now)
    first = store.apply(Enqueue(now, (spec,))).outcomes[0]
    assert store.apply(Enqueue(now, (spec, spec))).outcomes == (Duplicate(first.id, "cron"),) * 2
    other = store.apply(Enqueue(now, (JobSpec("q", "w", cron_name="nightly", cron_slot=now + timedelta(minutes=1)),)))
    assert isinstance(other.outcomes[0], Inserted)


@pytest.mark.parametrize(
    "spec",
    [
        JobSpec("q", "w", unique_key="race"),
        JobSpec("q", "w", unique_key="race", unique_mode="window", unique_window=60),
        JobSpec("q", "w", unique_key="race", unique_mode="always"),
        JobSpec("q", "w", cron_name="race", cron_slot=ops.minute_slot(ops.EPOCH + timedelta(days=20000))),
    ],
    ids=["incomplete", "window", "always", "cron"],
)
def test_two_connections_racing_the_same_key_insert_exactly_one_row(db_url, now, spec):
    """Both transactions are open and have inserted before either commits."""
    stores = [PgStore(db_url, pool_size=1) for _ in range(2)]
    conns = [psycopg.connect(db_url) for _ in range(2)]
    results: list = [None, None]
    barrier = threading.Barrier(2)
    try:
        # A holds its insert uncommitted; B's ON CONFLICT DO NOTHING must wait for A's outcome.
        results[0] = stores[0].apply(Enqueue(now, (spec,)), conn=conns[0])

        def second() -> None:
            barrier.wait()
            results[1] = stores[1].apply(Enqueue(now, (spec,)), conn=conns[1])

        t = threading.Thread(target=second)
        t.start()
        barrier.wait()
        _wait_for_lock_wait(db_url)
        conns[0].commit()
        t.join(10)
        conns[1].commit()
    finally:
        for c in conns:
            c.close()
        for s in stores:
            s.close()
    with psycopg.connect(db_url) as c:
        assert count(c) == 1
    assert isinstance(results[0].outcomes[0], Inserted)
    assert isinstance(results[1].outcomes[0], Duplicate)
    assert results[1].outcomes[0].id == results[0].outcomes[0].id


def _wait_for_lock_wait(db_url: str, timeout: float = 10.0) -> None:
    """Poll pg_stat_activity until some backend waits on a lock (never sleep-and-hope)."""
    import time

    deadline = time.monotonic() + timeout
    with psycopg.connect(db_url, autocommit=True) as c:
        while time.monotonic() < deadline:
            waiting = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()[0]
            if waiting:
                return
            time.sleep(0.005)
    raise AssertionError("the second inserter never waited on the first one's lock")


def test_many_threads_inserting_one_incomplete_key_leave_one_live_holder(db_url, now):
    store = PgStore(db_url, pool_size=8)
    barrier = threading.Barrier(8)
    outcomes = []

    def run() -> None:
        barrier.wait()
        outcomes.append(store.apply(Enqueue(now, (JobSpec("q", "w", unique_key="hot"),))).outcomes[0])

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    inserted = [o for o in outcomes if isinstance(o, Inserted)]
    assert len(inserted) == 1
    assert all(o == Duplicate(inserted[0].id, "unique") for o in outcomes if isinstance(o, Duplicate))


def test_transactional_enqueue_rolled_back_leaves_nothing_and_sends_no_notification(db_url, store, now):
    with psycopg.connect(db_url, autocommit=True) as listener, psycopg.connect(db_url) as caller:
        channel = channel_name(listener.info.dbname)
        listener.execute(f'LISTEN "{channel}"')
        caller.execute("CREATE TEMP TABLE t (x int)")
        caller.execute("INSERT INTO t VALUES (1)")
        result = store.apply(Enqueue(now, (JobSpec("q", "w"),)), conn=caller)
        assert isinstance(result.outcomes[0], Inserted)
        caller.rollback()
        assert list(listener.notifies(timeout=0.3)) == []
        assert count(listener) == 0


def test_transactional_enqueue_commits_with_the_caller_and_notifies_once_per_queue(db_url, store, now):
    with psycopg.connect(db_url, autocommit=True) as listener, psycopg.connect(db_url) as caller:
        channel = channel_name(listener.info.dbname)
        listener.execute(f'LISTEN "{channel}"')
        specs = (JobSpec("a", "w"), JobSpec("a", "w"), JobSpec("b", "w"))
        store.apply(Enqueue(now, specs), conn=caller)
        with psycopg.connect(db_url) as other:
            assert count(other) == 0  # not visible before the caller commits
        assert list(listener.notifies(timeout=0.2)) == []
        caller.commit()
        notes = list(listener.notifies(timeout=1.0, stop_after=2))
        assert sorted(n.payload for n in notes) == ['{"t":"p","q":"a"}', '{"t":"p","q":"b"}']
        assert all(n.channel == channel for n in notes)
        assert count(listener) == 3


def test_transactional_enqueue_refuses_an_autocommit_connection_without_a_transaction(db_url, store, now):
    with psycopg.connect(db_url, autocommit=True) as c:
        with pytest.raises(InvalidInput, match="open transaction"):
            store.apply(Enqueue(now, (JobSpec("q", "w"),)), conn=c)
        with c.transaction():
            store.apply(Enqueue(now, (JobSpec("q", "w"),)), conn=c)
        assert count(c) == 1


def test_notify_channel_is_sanitized_from_the_database_name():
    assert channel_name("my-db.prod") == "belay_my_db_prod"
    assert channel_name("app", "tenant") == "belay_app_tenant"


def test_names_with_quotes_and_semicolons_are_data(store, now):
    evil = "q'; DROP TABLE belay_jobs; --"
    job_id = store.apply(Enqueue(now, (JobSpec(evil, 'w"x', {"k": "'; --"}, unique_key=evil),))).ids[0]
    job = store.apply(ops.ReadJob(job_id))
    assert (job.queue, job.worker, job.unique_key) == (evil, 'w"x', evil)
    store.apply(ops.DeliverSignal(now, evil, "n'; --", {"x": 1}))
    assert store.apply(ops.ReadSignals((evil,)))[0].name == "n'; --"


# --- bad input: a clear error, nothing changed ---------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"priority": -1}, "priority must be >= 0"),
        ({"priority": True}, "priority must be an integer"),
        ({"max_attempts": 0}, "max_attempts must be >= 1"),
        ({"input": {"s": {1, 2}}}, "input must be JSON"),
        ({"input": float("nan")}, "input must be JSON"),
        ({"input": b"bytes"}, "input must be JSON"),
        ({"meta": ["not", "an", "object"]}, "meta must be a JSON object"),
        ({"unique_key": "k", "unique_mode": "sometimes"}, "unique_mode must be one of"),
        ({"unique_key": "k", "unique_mode": "window"}, "needs unique_window"),
        ({"unique_key": "k", "unique_mode": "window", "unique_window": 0}, "unique_window must be >= 1"),
        ({"unique_key": "k", "unique_window": 60}, "only meaningful with unique_mode 'window'"),
        ({"unique_mode": "always"}, "needs a unique_key"),
        ({"cron_name": "c"}, "cron_name and cron_slot go together"),
        ({"budget_usd_micros": -5}, "budget_usd_micros must be >= 0"),
        ({"scheduled_at": __import__("datetime").datetime(2026, 1, 1)}, "timezone-aware"),
    ],
)
def test_bad_job_specs_are_refused_with_a_clear_error(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        JobSpec("q", "w", **kwargs)


@pytest.mark.parametrize("queue", ["", None, "x" * 256, "nul\x00byte"])
def test_bad_queue_names_are_refused(queue):
    with pytest.raises(InvalidInput, match="queue"):
        JobSpec(queue, "w")


def test_an_empty_batch_is_refused(now):
    with pytest.raises(InvalidInput, match="at least one job"):
        Enqueue(now, ())


def test_a_naive_now_is_refused():
    from datetime import datetime

    with pytest.raises(InvalidInput, match="now must be timezone-aware"):
        Enqueue(datetime(2026, 1, 1), (JobSpec("q", "w"),))


def test_queue_options_are_validated_and_unknown_ones_refused(store, conn, now):
    store.apply(
        ops.PutQueue(
            now,
            "ai",
            {
                "limit": {"min": 2, "max": 50},
                "global_limit": 10,
                "rate": {"allowed": 100, "period": 60, "estimate": 2},
                "partition": {"field": "input", "key": "tenant"},
            },
        )
    )
    assert conn.execute("SELECT opts->'limit'->>'max' FROM belay_queues WHERE name = 'ai'").fetchone()[0] == "50"
    for bad, message in [
        ({"global_limt": 5}, r"unknown queue options \['global_limt'\]"),
        ({"limit": -1}, "limit must be >= 1"),
        ({"limit": {"min": 5, "max": 2}}, "exceeds limit.max"),
        ({"rate": {"allowed": 10}}, "rate needs 'period'"),
        ({"rate": {"allowed": 10, "period": 60, "burst": 3}}, "unknown rate options"),
        ({"partition": {"field": "headers", "key": "t"}}, "partition.field"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            ops.PutQueue(now, "ai", bad)
    assert conn.execute("SELECT count(*) FROM belay_queues").fetchone()[0] == 1


def test_cron_rows_are_validated(store, conn, now):
    store.apply(ops.PutCron(now, "nightly", "0 3 * * *", "report", {"x": 1}, {"queue": "batch"}))
    assert conn.execute("SELECT expression, paused FROM belay_crons").fetchall() == [("0 3 * * *", False)]
    with pytest.raises(InvalidInput, match="invalid cron expression"):
        ops.PutCron(now, "bad", "61 * * * *", "w")
    with pytest.raises(InvalidInput, match="unknown cron options"):
        ops.PutCron(now, "bad", "* * * * *", "w", opts={"queu": "x"})


def test_one_call_enqueues_a_hundred_thousand_jobs_with_duplicates_reported_in_place(store, conn, now):
    """No batch-size limit (the old VALUES form failed above 2,520 rows: 65,535 bind parameters)."""
    n = 100_000
    specs = [JobSpec(queue="bulk", worker="noop", input={"i": i}) for i in range(n)]
    specs[500] = JobSpec(queue="bulk", worker="noop", unique_key="k", unique_mode="always")
    specs[99_000] = JobSpec(queue="bulk", worker="noop", unique_key="k", unique_mode="always")
    result = store.apply(Enqueue(now, tuple(specs)))
    assert len(result.outcomes) == n
    holder = result.outcomes[500]
    assert isinstance(holder, Inserted)
    assert result.outcomes[99_000] == Duplicate(holder.id, "unique")
    ids = [o.id for o in result.outcomes if isinstance(o, Inserted)]
    assert ids == sorted(ids) and len(ids) == n - 1
    assert conn.execute("SELECT count(*) FROM belay_jobs WHERE queue = 'bulk'").fetchone()[0] == n - 1
    row = conn.execute("SELECT input, state, attempt, errors FROM belay_jobs WHERE id = %s", (ids[-1],)).fetchone()
    assert row == ({"i": n - 1}, "ready", 0, [])


def test_a_workflow_of_ten_thousand_members_enqueues_in_one_call(store, conn, now):
    from model.ops import EnqueueWorkflow, WorkflowMember

    members = [WorkflowMember("m0", JobSpec(queue="wf", worker="noop"))]
    members += [
        WorkflowMember(f"m{i}", JobSpec(queue="wf", worker="noop"), deps=(f"m{i - 1}",), ignore=("failed",))
        for i in range(1, 10_000)
    ]
    result = store.apply(EnqueueWorkflow(now, "big", tuple(members)))
    assert len(result.ids) == 10_000
    states = dict(
        conn.execute("SELECT state, count(*) FROM belay_jobs WHERE workflow_id = 'big' GROUP BY 1").fetchall()
    )
    assert states == {"ready": 1, "held": 9_999}
    deps, ignore = conn.execute("SELECT wf_deps, wf_ignore FROM belay_jobs WHERE wf_name = 'm7'").fetchone()
    assert deps == ["m6"] and ignore == ["failed"]


def _batch(shape: str, n: int, now) -> list[JobSpec]:
    """Bulk batches whose columns vary in different ways: the compact insert binds a column that is the
    same in every row once, and a batch with many varying columns goes through the COPY staging path."""
    if shape == "constant":  # every column the same in each row, none at its default
        return [
            JobSpec(
                "bulk",
                "noop",
                {"x": 1},
                {"m": 1},
                2,
                3,
                now + timedelta(seconds=5),
                budget_usd_micros=7,
                budget_tokens=8,
            )
            for _ in range(n)
        ]
    if shape == "few-varying":  # input, priority, scheduled_at vary: arrays for those three
        return [
            JobSpec("bulk", "noop", {"i": i % 7}, priority=i % 3, scheduled_at=now + timedelta(seconds=i % 5))
            for i in range(n)
        ]
    # everything a spec can vary at once (more varying columns than the compact insert takes)
    return [
        JobSpec(
            f"bulk{i % 2}",
            f"kind{i % 3}",
            [i] if i % 4 else None,
            {"m": i % 5} if i % 2 else {},
            priority=i % 4,
            max_attempts=1 + i % 6,
            scheduled_at=now + timedelta(seconds=i % 9),
            unique_key=None if i % 3 else f"u{i % 50}",
            unique_mode=None if i % 3 else ("always" if i % 2 else "window"),
            unique_window=None if i % 3 or i % 2 else 3600,
            budget_usd_micros=i if i % 2 else None,
            budget_tokens=None if i % 2 else i,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("shape", ["constant", "few-varying", "many-varying"])
def test_a_bulk_batch_stores_every_column_as_the_model_does_whatever_varies(store, conn, now, shape):
    from impl.store.snapshot import snapshot
    from model.store import ModelStore

    model = ModelStore()
    for op in (Enqueue(now, tuple(_batch(shape, 300, now))), Enqueue(now, tuple(_batch(shape, 70, now)))):
        assert store.apply(op) == model.apply(op)
    assert snapshot(conn).jobs == model.state.jobs


def test_a_single_enqueue_is_one_statement_that_pokes_its_queue_once(db_url, store, now, monkeypatch):
    """Issue 33: one job with no unique key or cron slot goes in as one autocommit statement
    (impl.store.client_store._enqueue_solo), its poke sent from that statement, as the transaction path sends it (a
    scheduled job's row is `ready` too, and pokes); the ids follow the sequence as that path's do."""
    import impl.store.client_store as store_module

    executed = []
    real = store_module._enqueue_solo
    monkeypatch.setattr(store_module, "_enqueue_solo", lambda q: executed.append(q.schema) or real(q))
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{channel_name(listener.info.dbname)}"')
        first = store.apply(Enqueue(now, (JobSpec("a", "w", input={"n": 1}),))).outcomes[0]
        assert [n.payload for n in listener.notifies(timeout=1.0, stop_after=1)] == ['{"t":"p","q":"a"}']
        later = store.apply(Enqueue(now, (JobSpec("b", "w", scheduled_at=now + timedelta(hours=1)),))).outcomes[0]
        assert [n.payload for n in listener.notifies(timeout=1.0, stop_after=1)] == ['{"t":"p","q":"b"}']
        keyed = store.apply(Enqueue(now, (JobSpec("a", "w", unique_key="k"),))).outcomes[0]  # transaction path
        assert [n.payload for n in listener.notifies(timeout=1.0, stop_after=1)] == ['{"t":"p","q":"a"}']
        assert executed == ["public", "public"], "the keyed job takes the transaction path"
        assert isinstance(first, Inserted) and (later.id, keyed.id) == (first.id + 1, first.id + 2)
        row = listener.execute("SELECT queue, worker, input, state, attempt FROM belay_jobs WHERE id = %s", (first.id,))
        assert row.fetchone() == ("a", "w", {"n": 1}, "ready", 0)
        late = listener.execute("SELECT state, ready_at FROM belay_jobs WHERE id = %s", (later.id,)).fetchone()
        assert late == ("ready", now + timedelta(hours=1))
        assert list(listener.notifies(timeout=0.2)) == [], "one poke per enqueue"
