"""Issue 27: the committed-history capture across PostgreSQL crash-restarts, at chosen points.

Each test drives the capture's polls by hand (no thread: the order of polls, commits, lost replies and
crashes is fixed) on its own embedded cluster (wal_level = logical), crash-restarts it the way the
soak's nemesis does (`cluster.crash()`: SIGKILL of the postmaster and every backend, wait until all
are gone; `cluster.restart()`: crash recovery), captures the rest, and replays the history against
the final snapshot.

`consume_mode="get"` is the pre-issue-27 consumer (pg_logical_slot_get_binary_changes), kept in the
capture only for these tests: a poll whose reply never reaches the client loses its transactions for
good, although the server executed it — the slot was confirmed, and saved to disk, inside the call.
The default `"peek"` consumer (peek, write + fsync, then pg_replication_slot_advance) loses nothing at
any of these points."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from impl.client import Client
from impl.store import PgStore
from impl.store.snapshot import snapshot
from model import worker_ops as w
from soak.judges.replay import replay
from soak.record.capture import Capture, parse_lsn, read_transactions
from tests.logical import logical_cluster, logical_url  # noqa: F401  (fixtures: cluster, url)


class LostReply(psycopg.OperationalError):
    """The server executed the poll, the client never got the rows (connection died mid-reply)."""


@pytest.fixture
def db(url):
    """A fresh database on the module's cluster (crash-restarts affect the whole cluster: tests run in
    sequence, each crash is waited for)."""
    return url


def crash_restart(cluster) -> None:
    cluster.crash()  # kill -9 of the postmaster and its backends; returns once every pid is gone
    cluster.restart()  # crash recovery


def enqueue(url: str, n: int, tag: str) -> list[int]:
    ids = []
    for _ in range(5):
        try:
            with Client(url) as client:
                while len(ids) < n:
                    ids.append(client.enqueue("q", "k", {"tag": tag, "i": len(ids)}).id)
            return ids
        except psycopg.OperationalError:  # the server is still recovering
            time.sleep(0.3)
    raise AssertionError("could not enqueue")


def poll(cap: Capture) -> str:
    """One poll as the capture thread does it: a psycopg error means reconnect and retry later."""
    try:
        cap._poll_once()
        return "ok"
    except psycopg.Error as exc:
        cap._disconnect(exc)
        return type(exc).__name__


def fail_once_at(cap: Capture, point: str, commit_first: str | None = None) -> None:
    """The next poll dies at `point`. With `commit_first`, a writer commits right after the poll logged
    its running-transactions record (as the soak's workers do all the time): that commit flushes the
    record, so the poll decodes it."""

    def hook(p: str) -> None:
        if p == "logged" and commit_first:
            enqueue(commit_first, 1, "concurrent")
        if p == point:
            cap.fault = None
            raise LostReply(f"planted: the connection died at {point}")

    cap.fault = hook


def finish(cap: Capture, url: str, initial):
    cap.drain()
    with psycopg.connect(url, autocommit=True) as c:
        final = snapshot(c)
    stats = dict(cap.stats)
    txs = list(read_transactions(cap.path))
    return replay(txs, initial, final, stats), txs, final


def open_capture(url: str, tmp_path, mode: str, **kw) -> tuple[Capture, object]:
    cap = Capture.open(url, tmp_path / f"{mode}.bin", f"crash_{mode}", poll_s=0.05, consume_mode=mode, **kw)
    with psycopg.connect(url, autocommit=True) as c:
        initial = snapshot(c)
    return cap, initial


def slot_confirmed(url: str, slot: str) -> int:
    with psycopg.connect(url, autocommit=True) as c:
        return parse_lsn(
            c.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name=%s", (slot,)
            ).fetchone()[0]
        )


@pytest.mark.parametrize("mode", ["get", "peek"])
def test_a_poll_whose_reply_is_lost_then_a_crash_restart(cluster, db, tmp_path, mode):
    """The deterministic repro: commits, a poll the server executes but whose reply is lost, a real
    crash-restart, more commits, the rest captured. 'get' (the old consumer) shows the gap — the lost
    poll's jobs are missing from the replay although the final database holds them; 'peek' has none."""
    cap, initial = open_capture(db, tmp_path, mode)
    try:
        assert poll(cap) == "ok"
        lost = enqueue(db, 20, "before")
        fail_once_at(cap, "fetched", commit_first=db)
        assert poll(cap) == "LostReply"
        crash_restart(cluster)
        after = enqueue(db, 10, "after")
        result, txs, final = finish(cap, db, initial)
    finally:
        assert cap.close()
    assert set(lost + after) <= set(final.jobs)
    captured = {tx.commit_lsn for tx in txs}
    assert len(captured) == len(txs)
    if mode == "get":
        missing = [d for d in result.snapshot_diff if "missing from the replay" in d]
        assert len(missing) == 21 and result.verdict == "unknown", (result.line(), result.snapshot_diff[:3])
        assert set(lost) < set(result.tainted) and len(result.tainted) == 21  # the gap's jobs, and only they
    else:
        assert result.matches_snapshot, result.snapshot_diff[:5]
        assert result.verdict == "valid", result.line()
        assert cap.stats["redelivered"] == 0  # the lost reply consumed nothing: the rows came once, later


def test_the_old_consumer_loses_the_reply_even_without_a_crash(cluster, db, tmp_path):
    """get_changes confirms inside the server: a reply lost on a live server is gone too (no crash
    needed) — the in-memory slot moved past it."""
    cap, initial = open_capture(db, tmp_path, "get")
    try:
        lost = enqueue(db, 5, "x")
        fail_once_at(cap, "fetched")
        assert poll(cap) == "LostReply"
        enqueue(db, 3, "y")
        result, _, _ = finish(cap, db, initial)
    finally:
        assert cap.close()
    assert sorted(result.tainted) == sorted(lost), result.snapshot_diff[:5]
    assert result.verdict == "unknown" and not result.findings


@pytest.mark.parametrize("concurrent_commit", [True, False])
def test_what_the_server_persisted_before_the_lost_reply(cluster, db, tmp_path, concurrent_commit):
    """The lead's hypothesis, checked against PostgreSQL 16: LogicalConfirmReceivedLocation saves the slot
    to disk at once when a candidate restart point has become valid. get_changes confirms at its end;
    if it decoded a running-transactions record past the old confirmed position — the one the poll's own
    pg_log_standby_snapshot() logged, once a concurrent commit flushed it — the confirm at the end of
    the call finds that candidate valid and fsyncs the slot with its new confirmed position: the crash
    keeps it, the lost reply's transactions are gone. With no commit between the log and the get, the
    record is not yet flushed, only an older one is decoded and the slot is saved with its old confirmed
    position: the crash rolls the in-memory advance back and the transactions come again. (The bgwriter's
    own record every 15 s could land in the sub-second window too: rare.)"""
    cap, initial = open_capture(db, tmp_path, "get")
    try:
        assert poll(cap) == "ok"
        enqueue(db, 3, "warm")
        assert poll(cap) == "ok"
        before = slot_confirmed(db, cap.slot)
        lost = enqueue(db, 10, "lost")
        fail_once_at(cap, "fetched", commit_first=db if concurrent_commit else None)
        assert poll(cap) == "LostReply"
        moved = slot_confirmed(db, cap.slot)
        crash_restart(cluster)
        persisted = slot_confirmed(db, cap.slot)
        result, _, _ = finish(cap, db, initial)
    finally:
        assert cap.close()
    assert moved > before  # in memory the server consumed the lost reply either way
    if concurrent_commit:
        assert persisted == moved, "the slot was not saved inside the call"
        assert set(lost) < set(result.tainted) and len(result.tainted) == 11, result.tainted
    else:
        assert persisted < moved, "the slot was saved with its new position"
        assert result.verdict == "valid" and result.matches_snapshot, (result.line(), result.snapshot_diff[:3])


@pytest.mark.parametrize("point", ["fetched", "written", "advanced"])
def test_the_peek_consumer_loses_nothing_when_a_crash_follows_any_point_of_a_poll(cluster, db, tmp_path, point):
    """The connection dies at a point of the poll, then the server crash-restarts: before the write the
    rows come again; after the write but before the advance they come again and are dropped by commit
    LSN; after the advance (which the crash may or may not have persisted) the same."""
    cap, initial = open_capture(db, tmp_path, "peek")
    try:
        assert poll(cap) == "ok"
        first = enqueue(db, 15, "a")
        fail_once_at(cap, point, commit_first=db)
        assert poll(cap) == "LostReply"
        crash_restart(cluster)
        enqueue(db, 5, "b")
        result, txs, final = finish(cap, db, initial)
    finally:
        assert cap.close()
    assert set(first) <= set(final.jobs)
    assert [t.commit_lsn for t in txs] == sorted({t.commit_lsn for t in txs})
    assert result.verdict == "valid" and result.matches_snapshot, (result.line(), result.snapshot_diff[:3])
    if point == "written":
        assert cap.stats["redelivered"] >= 15, cap.stats  # written, not acked: delivered again, dropped


def test_in_flight_transactions_at_the_crash_and_commits_during_polls(cluster, db, tmp_path):
    """Transactions open at the crash (rolled back by recovery: never in the history nor the final
    state), a writer committing through the crash (commits whose acknowledgement the crash ate are
    replayed at recovery), and polls running all along on a thread: the history ends in the final
    snapshot."""
    cap, initial = open_capture(db, tmp_path, "peek")
    cap.start()
    acked: list[int] = []
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            try:
                with Client(db) as client:
                    while not stop.is_set():
                        acked.append(client.enqueue("q", "k", {"n": len(acked)}).id)
            except Exception:  # noqa: BLE001 - the server is down: reconnect
                time.sleep(0.05)

    t = threading.Thread(target=writer, daemon=True)
    try:
        t.start()
        deadline = time.monotonic() + 60
        while cap.stats["transactions"] < 30:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        open_tx = psycopg.connect(db)
        open_tx.execute("INSERT INTO belay_queues (name, opts, updated_at) VALUES ('never-committed', '{}', now())")
        open_tx.execute("UPDATE belay_jobs SET priority = 7 WHERE id = %s", (acked[0],))  # uncommitted
        with PgStore(db) as store:  # a claim just before the crash
            store.apply(w.Claim(datetime.now(UTC), "q", "n1", 5, timedelta(seconds=30)))
        crash_restart(cluster)
        open_tx.close()
        before = len(acked)
        while len(acked) < before + 30:
            assert time.monotonic() < deadline + 60
            time.sleep(0.05)
        stop.set()
        t.join()
        cap.stop()
        with psycopg.connect(db, autocommit=True) as c:
            final = snapshot(c)
        result = replay(read_transactions(cap.path), initial, final, dict(cap.stats))
    finally:
        stop.set()
        assert cap.close()
    assert "never-committed" not in final.queues and final.jobs[acked[0]].priority != 7
    assert set(acked) <= set(final.jobs)
    assert result.verdict == "valid" and result.matches_snapshot, (result.line(), result.snapshot_diff[:3])


@pytest.mark.parametrize("how", ["dropped", "advanced"])
def test_a_slot_lost_or_moved_behind_the_captures_back_is_a_recorded_gap(cluster, db, tmp_path, how):
    """The capture checks the slot before each peek: gone, or confirmed past what we acknowledged
    (someone else consumed), is recorded as a lost range; the replay taints what the final snapshot shows
    it missed and says unknown, with no finding."""
    cap, initial = open_capture(db, tmp_path, "peek")
    try:
        enqueue(db, 5, "seen")
        assert poll(cap) == "ok"
        missed = enqueue(db, 4, "missed")
        with psycopg.connect(db, autocommit=True) as c:
            if how == "dropped":
                c.execute("SELECT pg_drop_replication_slot(%s)", (cap.slot,))
            else:
                c.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (cap.slot,))
        enqueue(db, 2, "later")
        result, _, _ = finish(cap, db, initial)
    finally:
        assert cap.close()
    assert len(cap.stats["lost_ranges"]) == 1, cap.stats
    _, hi = cap.stats["lost_ranges"][0]
    assert (hi is None) == (how == "dropped")
    assert result.verdict == "unknown" and not result.findings, result.line()
    assert set(missed) <= set(result.tainted)
    assert "without us" in result.why


def test_an_advance_lost_by_the_crash_is_redone_from_the_redelivered_transactions(cluster, db, tmp_path):
    """Without a logged running-transactions record in the advanced range, pg_replication_slot_advance
    only marks the slot dirty: a crash right after rolls it back to its last saved position. The next
    peeks return only transactions already written (no new commits follow): they are dropped by commit
    LSN and the slot is advanced past them again — else every peek, and the final drain, would return
    them forever."""
    cap, initial = open_capture(db, tmp_path, "peek", log_snapshot=False)
    try:
        assert poll(cap) == "ok"
        enqueue(db, 5, "a")
        assert poll(cap) == "ok"
        acked = cap.acked
        crash_restart(cluster)
        assert slot_confirmed(db, cap.slot) < acked, "the crash kept the advance: the scenario did not happen"
        done = threading.Event()
        t = threading.Thread(target=lambda: (cap.drain(timeout=20), done.set()), daemon=True)
        t.start()
        t.join(timeout=30)
        assert done.is_set(), "the drain never ended: redeliveries never advanced the slot"
        assert cap.stats["redelivered"] >= 5 and slot_confirmed(db, cap.slot) >= acked
        with psycopg.connect(db, autocommit=True) as c:
            final = snapshot(c)
        result = replay(read_transactions(cap.path), initial, final, dict(cap.stats))
    finally:
        cap._halt.set()
        assert cap.close()
    assert result.verdict == "valid" and result.matches_snapshot, result.line()


def test_an_advance_whose_reply_is_lost_is_not_a_lost_range(cluster, db, tmp_path):
    """The server executes pg_replication_slot_advance, the reply is lost, a checkpoint saves the slot and
    the server crash-restarts: the slot is now ahead of the advance the capture knows of, over
    transactions it had already written. Issue 27: a default soak's capture recorded exactly this as a
    lost range ("the slot passed 0/1DDE058..0/1DE57F0 without us", the file holding all four of its
    transactions) and its history verdict was unknown. Nothing was lost: no range, verdict valid."""
    cap, initial = open_capture(db, tmp_path, "peek")
    try:
        assert poll(cap) == "ok"
        enqueue(db, 6, "a")
        fail_once_at(cap, "advance_executed")
        assert poll(cap) == "LostReply"
        with psycopg.connect(db, autocommit=True) as c:
            c.execute("CHECKPOINT")  # the advanced slot is saved: the crash keeps it
        crash_restart(cluster)
        assert slot_confirmed(db, cap.slot) > cap.acked, "the crash lost the advance: the scenario did not happen"
        enqueue(db, 3, "b")
        result, _, _ = finish(cap, db, initial)
    finally:
        assert cap.close()
    assert cap.stats["lost_ranges"] == [], cap.stats
    assert result.verdict == "valid" and result.matches_snapshot, result.line()
