"""The drain's hot path (issue 17) keeps the contract: wire contract §6 (claims), §7 (fenced acks, one
transaction each), §9.2 (result notifications).

The fast paths — claim rows decoded as tuples straight into `Job`, jsonb's `[]`/`{}`/`null` without
json.loads, `Flag` instead of threading.Event, the one-statement succeed of a job with no after-terminal
duties, result notifications built in SQL — must be indistinguishable from the slow ones they replace.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import psycopg
import pytest

from impl.flag import Flag
from impl.store import PgStore
from impl.store.pgrows import (
    FastJsonbBinaryLoader,
    FastJsonbLoader,
    channel_name,
    configure_connection,
    job_from_row,
    job_from_tuple,
    poked_queue,
    result_payload,
)
from model import ops
from model import worker_ops as w
from model.envelope import decode
from model.rows import JOB_COLUMNS, Job

TTL = timedelta(seconds=30)


def _claim_one(store: PgStore, now, queue: str = "q") -> Job:
    (job,) = store.apply(w.Claim(now, queue, "n1", 1, TTL)).jobs
    return job


def _listen(db_url: str) -> psycopg.Connection:
    listener = psycopg.connect(db_url, autocommit=True)
    listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel_name(listener.info.dbname))))
    return listener


def test_a_job_built_from_a_claim_tuple_equals_the_dataclass_built_one(store, conn, now):
    store.apply(
        ops.EnqueueWorkflow(
            now,
            "wf",
            (
                ops.WorkflowMember("a", ops.JobSpec("q", "k", {"x": [1, 2]}, meta={"m": 1})),
                ops.WorkflowMember("b", ops.JobSpec("q", "k"), deps=("a",), ignore=("failed",)),
            ),
        )
    )
    conn.execute("UPDATE belay_jobs SET result = '\\x6e756c6c', errors = '[{\"attempt\": 1}]'")
    rows = conn.execute(
        psycopg.sql.SQL("SELECT {} FROM belay_jobs ORDER BY id").format(
            psycopg.sql.SQL(", ").join(map(psycopg.sql.Identifier, JOB_COLUMNS))
        )
    ).fetchall()
    for row in rows:
        expected = dict(zip(JOB_COLUMNS, row, strict=True))
        for column in ("wf_deps", "wf_ignore"):
            expected[column] = None if expected[column] is None else tuple(expected[column])
        built = job_from_tuple(row)
        assert built == Job(**expected)
        assert {c: getattr(built, c) for c in JOB_COLUMNS} == expected  # the same values, field by field
        assert type(built.wf_deps) is type(expected["wf_deps"]) and type(built.result) is bytes
        assert job_from_row(dict(zip(JOB_COLUMNS, row, strict=True))) == built
        with pytest.raises(AttributeError):
            built.state = "x"  # type: ignore[misc]  # still frozen


def test_a_claim_row_fetched_in_binary_is_the_row_fetched_as_text(store, conn, now):
    """Claims fetch their rows in binary (issue 33): every column — jsonb, bytea, text[], timestamptz with
    its zone, bigint, bool — decodes to what the text format gives, so the Job is the same."""
    store.apply(
        ops.EnqueueWorkflow(
            now,
            "wf",
            (
                ops.WorkflowMember("a", ops.JobSpec("q", "k", {"x": [1, 2.5, "é"], "n": None}, meta={"m": {}})),
                ops.WorkflowMember("b", ops.JobSpec("q", "k", []), deps=("a",), ignore=("failed", "cancelled")),
            ),
        )
    )
    store.apply(ops.Enqueue(now, (ops.JobSpec("q", "k", "plain", priority=3, budget_usd_micros=7),)))
    conn.execute(
        'UPDATE belay_jobs SET result = \'\\x00ff6e756c6c\', errors = \'[{"attempt": 1, "detail": "ü"}]\', '
        "lease_until = now(), started_at = now(), cancel_requested = true WHERE worker = 'k' AND id % 2 = 0"
    )
    conn.commit()
    query = psycopg.sql.SQL("SELECT {} FROM belay_jobs ORDER BY id").format(
        psycopg.sql.SQL(", ").join(map(psycopg.sql.Identifier, JOB_COLUMNS))
    )
    configure_connection(conn)
    text = [job_from_tuple(r) for r in conn.cursor().execute(query).fetchall()]
    binary = [job_from_tuple(r) for r in conn.cursor(binary=True).execute(query).fetchall()]
    assert len(text) == 3 and binary == text
    for a, b in zip(text, binary, strict=True):
        for column in JOB_COLUMNS:
            x, y = getattr(a, column), getattr(b, column)
            assert type(x) is type(y) and x == y, column
            if hasattr(x, "utcoffset"):
                assert x.utcoffset() == y.utcoffset(), column


JSONB_TEXTS = ("[]", "{}", "null", "[1]", '{"a": {}}', "1", '""', "true", '"é"', "[ ]", "1234", '"ab"', '{"k": null}')


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_the_fast_jsonb_loader_returns_what_json_loads_returns(conn, binary):
    conn.adapters.register_loader("jsonb", FastJsonbBinaryLoader if binary else FastJsonbLoader)
    for text in JSONB_TEXTS:
        first, second = conn.cursor(binary=binary).execute("SELECT %s::jsonb, %s::jsonb", (text, text)).fetchone()
        expected = json.loads(conn.execute("SELECT %s::jsonb::text", (text,)).fetchone()[0])
        assert first == expected and type(first) is type(expected), text
        if isinstance(first, (list, dict)):
            assert first is not second  # a fresh object per value: job code may mutate its input


def test_a_flag_behaves_like_a_threading_event():
    flag = Flag()
    assert not flag.is_set() and flag.wait(0.01) is False
    flag.set()
    assert flag.is_set() and flag.wait(0) is True and flag.wait() is True
    flag.clear()
    assert not flag.is_set() and flag.wait(0.01) is False
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(flag.wait(10)))
    waiter.start()
    deadline = time.monotonic() + 5
    while flag._event is None and time.monotonic() < deadline:  # the waiter is blocked on the Event now
        time.sleep(0.001)
    flag.set()
    waiter.join(5)
    assert woke == [True]
    fresh = Flag()
    fresh.set()  # set before anyone waited: the Event made by the first wait starts set
    assert fresh.wait(0) is True


def test_a_plain_succeed_is_one_fenced_statement_that_notifies_its_result(db_url, store, conn, now):
    (inserted,) = store.apply(ops.Enqueue(now, (ops.JobSpec("q", "k"),))).outcomes
    job = _claim_one(store, now)
    listener = _listen(db_url)
    try:
        stale = store.apply(w.Ack(now, job.id, job.attempt + 1, w.Succeed({"v": 1})))
        assert stale == w.Stale(job.id, job.attempt + 1)
        assert conn.execute("SELECT state FROM belay_jobs WHERE id = %s", (job.id,)).fetchone()[0] == "running"
        acked = store.apply(w.Ack(now, job.id, job.attempt, w.Succeed({"v": 1})))
        assert acked == w.Acked(job.id, "succeeded")
        state, result = conn.execute("SELECT state, result FROM belay_jobs WHERE id = %s", (job.id,)).fetchone()
        assert (state, decode(bytes(result))) == ("succeeded", {"v": 1})
        notes = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
        assert notes == [result_payload(inserted.id)] == [f'{{"t":"r","id":{inserted.id}}}']
        again = store.apply(w.Ack(now, job.id, job.attempt, w.Succeed(None)))
        assert again == w.Stale(job.id, job.attempt), "a second ack of the same attempt is stale"
    finally:
        listener.close()


def test_a_workflow_members_succeed_still_settles_its_workflow_in_the_same_transaction(store, conn, now):
    ids = dict(
        store.apply(
            ops.EnqueueWorkflow(
                now,
                "wf",
                (
                    ops.WorkflowMember("a", ops.JobSpec("q", "k")),
                    ops.WorkflowMember("b", ops.JobSpec("q", "k"), deps=("a",)),
                ),
            )
        ).ids
    )
    job = _claim_one(store, now)
    assert job.id == ids["a"]
    assert store.apply(w.Ack(now, job.id, job.attempt, w.Succeed(None))) == w.Acked(job.id, "succeeded")
    assert conn.execute("SELECT state FROM belay_jobs WHERE id = %s", (ids["b"],)).fetchone()[0] == "ready"


def test_ack_many_notifies_each_terminal_result_once(db_url, store, now):
    store.apply(ops.Enqueue(now, tuple(ops.JobSpec("q", "k") for _ in range(3))))
    jobs = store.apply(w.Claim(now, "q", "n1", 3, TTL)).jobs
    listener = _listen(db_url)
    try:
        done = store.apply(w.AckMany(now, tuple(w.Ack(now, j.id, j.attempt, w.Succeed(j.id)) for j in jobs)))
        assert [r.state for r in done.results] == ["succeeded"] * 3
        notes = sorted(n.payload for n in listener.notifies(timeout=2, stop_after=3))
        assert notes == sorted(result_payload(j.id) for j in jobs)
    finally:
        listener.close()


def test_the_listener_skips_result_payloads_and_reads_pokes():
    assert poked_queue(result_payload(7)) is None
    assert poked_queue('{"t":"p","q":"mail"}') == "mail"
    assert poked_queue('{"t": "p", "q": "mail"}') == "mail"  # another SDK's spacing
    assert poked_queue("not json") is None


@pytest.mark.parametrize("same", [True, False], ids=["one result and time", "each its own"])
def test_a_batched_succeed_stores_each_jobs_own_result_and_time_fenced_on_its_own_attempt(store, conn, now, same):
    """AckMany binds one result and one time when the acks share them, arrays otherwise: either way each
    row gets its own ack's value and time, and a stale attempt in the batch changes nothing."""
    store.apply(ops.Enqueue(now, tuple(ops.JobSpec("q", "k") for _ in range(5))))
    jobs = store.apply(w.Claim(now, "q", "n1", 5, TTL)).jobs
    at = [now + timedelta(seconds=1 if same else i) for i in range(5)]
    values = [None if same else {"i": i} for i in range(5)]
    stale = jobs[2]
    acks = [w.Ack(at[i], j.id, j.attempt + (1 if j is stale else 0), w.Succeed(values[i])) for i, j in enumerate(jobs)]
    result = store.apply(w.AckMany(now + timedelta(seconds=1), tuple(acks)))
    assert result.results == tuple(
        w.Stale(j.id, j.attempt + 1) if j is stale else w.Acked(j.id, "succeeded") for j in jobs
    )
    rows = dict(
        (r[0], r[1:])
        for r in conn.execute("SELECT id, state, result, finished_at, attempt FROM belay_jobs ORDER BY id")
    )
    for i, j in enumerate(jobs):
        state, stored, finished, attempt = rows[j.id]
        if j is stale:
            assert (state, stored, finished, attempt) == ("running", None, None, 1), "the stale ack changed its row"
        else:
            assert (state, decode(stored), finished, attempt) == ("succeeded", values[i], at[i], 1)
