"""§9.2 result notifications are sent after the terminal write commits, many per statement
(impl/store/results.py).

The contract: "9.2 pg_notify (optional): ... Payloads: ... result {"t":"r","id":<job_id>}" and "(the NOTIFY
commit lock punishes chattiness)". What the store must keep: every job made terminal gets its notification,
exactly its id; none arrives before the write it announces is visible; acks that commit while a send is in
flight share the next statement; a failed send never fails the ack.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import psycopg

from impl.store import PgStore
from impl.store.failpoints import arm, disarm
from impl.store.pgrows import channel_name, result_payload
from impl.store.results import BATCH, ResultNotices
from model import ops
from model import worker_ops as w

TTL = timedelta(seconds=30)


def _listen(db_url: str) -> psycopg.Connection:
    listener = psycopg.connect(db_url, autocommit=True)
    listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel_name(listener.info.dbname))))
    return listener


def _payloads(listener: psycopg.Connection, n: int, timeout: float = 5.0) -> list[str]:
    return [x.payload for x in listener.notifies(timeout=timeout, stop_after=n)]


def _claimed(store: PgStore, now, n: int, **spec) -> list:
    store.apply(ops.Enqueue(now, tuple(ops.JobSpec("q", "k", **spec) for _ in range(n))))
    return list(store.apply(w.Claim(now, "q", "n1", n, TTL)).jobs)


def test_a_failed_jobs_notification_arrives_only_after_its_transaction_commits(db_url, store, conn, now):
    """The transaction path (a last attempt's error makes the job failed: §7 after-terminal steps run):
    while the ack's transaction waits to commit, no notification may reach a listener; after it, exactly one."""
    (job,) = _claimed(store, now, 1, max_attempts=1)
    listener = _listen(db_url)
    seen_before_commit: list[str] = []

    def before_commit(_: str) -> None:
        seen_before_commit.extend(_payloads(listener, 1, timeout=0.5))

    arm("store.before_commit", before_commit)
    try:
        acked = store.apply(w.Ack(now, job.id, job.attempt, w.Fail("boom", None, None)))
    finally:
        disarm("store.before_commit", before_commit)
    try:
        assert acked == w.Acked(job.id, "failed")
        assert seen_before_commit == [], "a result notification was sent before its terminal write committed"
        assert _payloads(listener, 1) == [result_payload(job.id)]
        assert conn.execute("SELECT state FROM belay_jobs WHERE id = %s", (job.id,)).fetchone()[0] == "failed"
    finally:
        listener.close()


def test_acks_that_commit_during_a_send_share_the_next_statement(db_url, store, now, monkeypatch):
    jobs = _claimed(store, now, 21)
    listener = _listen(db_url)
    sending, release = threading.Event(), threading.Event()
    real_send = store.results._send

    def held_send(ids: list[int]) -> None:
        if not sending.is_set():
            sending.set()
            assert release.wait(10)
        real_send(ids)

    monkeypatch.setattr(store.results, "_send", held_send)
    try:
        first, rest = jobs[0], jobs[1:]
        assert store.apply(w.Ack(now, first.id, first.attempt, w.Succeed(None))) == w.Acked(first.id, "succeeded")
        assert sending.wait(10)
        for j in rest:  # one fenced autocommit statement each (ack_succeed_solo)
            assert store.apply(w.Ack(now, j.id, j.attempt, w.Succeed(None))) == w.Acked(j.id, "succeeded")
        release.set()
        assert store.results.flush(10)
        assert (store.results.sent, store.results.statements, store.results.dropped) == (21, 2, 0)
        assert sorted(_payloads(listener, 21)) == sorted(result_payload(j.id) for j in jobs)
    finally:
        release.set()
        listener.close()


def test_a_group_commit_notifies_each_acked_job_once(db_url, store, now):
    """AckClaim of succeeds (the one-statement group commit, ack_claim_solo) hands its acked ids on."""
    jobs = _claimed(store, now, 5)
    store.apply(ops.Enqueue(now, (ops.JobSpec("q", "k"),)))
    listener = _listen(db_url)
    try:
        done = store.apply(
            w.AckClaim(
                w.AckMany(now, tuple(w.Ack(now, j.id, j.attempt, w.Succeed(None)) for j in jobs)),
                w.Claim(now, "q", "n1", 1, TTL),
            )
        )
        assert [r.state for r in done.acked.results] == ["succeeded"] * 5 and len(done.claimed.jobs) == 1
        assert store.results.flush(10)
        assert sorted(_payloads(listener, 5)) == sorted(result_payload(j.id) for j in jobs)
        assert _payloads(listener, 1, timeout=0.3) == [], "the claimed job is not terminal: no notification"
    finally:
        listener.close()


def test_notifications_that_keep_coming_wait_for_the_gap_and_go_together(db_url):
    """Under throughput (the previous statement carried more than one notification) one statement per
    `gap`: the 19 handed over one by one within the gap after a statement of two share the next one. One at
    a time (a client awaiting each job before the next) each goes at once."""
    listener = _listen(db_url)
    with PgStore(db_url) as s:
        notices = ResultNotices(s.pool, s.q, gap=60.0)
        try:
            for i in (1, 2):  # one per statement: never held back by the gap
                notices.add([i])
                assert notices.flush(10)
            assert notices.statements == 2
            notices.add([3, 4])
            assert notices.flush(10)
            for i in range(5, 24):
                notices.add([i])
            time.sleep(0.2)
            assert notices.statements == 3, "the gap after a statement of two did not hold the next back"
            notices.gap = 0.0  # end the wait (the next check of the gap sees it)
            with notices._cv:
                notices._cv.notify_all()
            assert notices.flush(10)
            assert (notices.sent, notices.statements) == (23, 4)
            assert sorted(_payloads(listener, 23)) == sorted(result_payload(i) for i in range(1, 24))
        finally:
            notices.close()
            listener.close()


def test_more_than_a_batch_goes_out_in_batches(db_url, store):
    listener = _listen(db_url)
    try:
        ids = list(range(1, 2 * BATCH + 501))
        store.results.add(ids)
        assert store.results.flush(30)
        assert (store.results.sent, store.results.statements) == (len(ids), 3)
        assert sorted(_payloads(listener, len(ids), timeout=30)) == sorted(result_payload(i) for i in ids)
    finally:
        listener.close()


def test_close_sends_what_is_pending(db_url):
    listener = _listen(db_url)
    try:
        with PgStore(db_url) as s:
            s.results.add(range(1, 11))
        assert sorted(_payloads(listener, 10)) == sorted(result_payload(i) for i in range(1, 11))
    finally:
        listener.close()


def test_a_failed_send_is_dropped_and_logged_never_raised(db_url, caplog):
    s = PgStore(db_url)
    notices = ResultNotices(s.pool, s.q)
    s.pool.close()
    with caplog.at_level(logging.WARNING, logger="belay.store"):
        notices.add([1, 2, 3])  # the caller (an ack that already committed) must not see the failure
        assert notices.flush(30)
    assert (notices.sent, notices.dropped) == (0, 3)
    assert any("not sent" in r.getMessage() for r in caplog.records)
    notices.close()


def test_without_the_accelerator_nothing_is_sent(db_url, now):
    with PgStore(db_url, notify=False) as s:
        (job,) = _claimed(s, now, 1)
        listener = _listen(db_url)
        try:
            assert s.apply(w.Ack(now, job.id, job.attempt, w.Succeed(None))) == w.Acked(job.id, "succeeded")
            assert s.results.flush(5)
            assert s.results.sent == 0
            assert _payloads(listener, 1, timeout=0.5) == []
        finally:
            listener.close()


def test_adding_nothing_starts_no_thread(db_url):
    with PgStore(db_url) as s:
        s.results.add([])
        assert s.results._thread is None
