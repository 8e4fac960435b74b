"""impl.runtime._Executor: the executions' threads of one queue (issue 33: ThreadPoolExecutor without the
Future and Semaphore the runtime never reads). It must keep what the runtime relies on from a pool."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from impl.runtime import _Executor


def test_tasks_run_concurrently_up_to_the_maximum_on_lazily_started_threads():
    pool = _Executor(3, "belay-t")
    assert pool._threads == [], "no thread before there is work"
    gate, started, names = threading.Event(), threading.Semaphore(0), []

    def task(i: int) -> None:
        names.append(threading.current_thread().name)
        started.release()
        gate.wait(5)

    for i in range(5):
        pool.submit(task, i)
    for _ in range(3):
        assert started.acquire(timeout=5), "three tasks run at once"
    assert not started.acquire(timeout=0.2), "never more than max_workers at once"
    assert len(pool._threads) == 3
    gate.set()
    for _ in range(2):
        assert started.acquire(timeout=5), "the queued tasks run once threads free up"
    pool.shutdown(wait=True)
    assert len(pool._threads) == 3 and all(n.startswith("belay-t_") for n in names)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(task, 9)


def test_an_idle_thread_is_reused_rather_than_a_new_one_started():
    pool = _Executor(4, "belay-t")
    done = threading.Semaphore(0)
    for _ in range(20):
        pool.submit(done.release)
        assert done.acquire(timeout=5)
        time.sleep(0.005)  # the thread is back waiting (its idle token given)
    assert len(pool._threads) == 1
    pool.shutdown()


def test_a_failing_task_is_logged_and_its_thread_serves_on(caplog):
    pool = _Executor(1, "belay-t")
    done = threading.Event()

    def boom() -> None:
        raise ValueError("task fault")

    with caplog.at_level(logging.ERROR, logger="belay"):
        pool.submit(boom)
        pool.submit(done.set)
        assert done.wait(5), "the next task ran on the same thread"
    assert "an execution task failed" in caplog.text and "task fault" in caplog.text
    pool.shutdown()


def test_shutdown_with_cancel_drops_the_queued_tasks_and_waits_for_the_running_one():
    pool = _Executor(1, "belay-t")
    gate, ran = threading.Event(), []

    def first() -> None:
        gate.wait(5)
        ran.append("first")

    pool.submit(first)
    pool.submit(lambda: ran.append("queued"))
    time.sleep(0.05)
    threading.Timer(0.1, gate.set).start()
    pool.shutdown(wait=True, cancel_futures=True)
    assert ran == ["first"], "the running task finished; the queued one never ran"


def _defer_from_a_pool_thread(pool: _Executor, tasks: list) -> None:
    """Defer `tasks` as the runtime does: from a task running on one of the pool's threads."""
    deferred = threading.Event()

    def on_pool() -> None:
        assert pool.mine()
        for task in tasks:
            pool.defer(task)
        deferred.set()

    pool.submit(on_pool)
    assert deferred.wait(5)


def test_deferred_tasks_run_in_order_on_the_thread_that_deferred_them_waking_no_other():
    """Issue 33: the jobs an ack group's leader claimed run on its thread, one after another, when they are
    short; no other thread is started or woken for them."""
    pool = _Executor(4, "belay-t")
    ran: list[tuple[int, str]] = []
    done = threading.Event()
    tasks = [lambda i=i: ran.append((i, threading.current_thread().name)) for i in range(5)]
    _defer_from_a_pool_thread(pool, [*tasks, done.set])
    assert done.wait(5)
    assert [i for i, _ in ran] == [0, 1, 2, 3, 4]
    assert len({name for _, name in ran}) == 1 and len(pool._threads) == 1
    assert not pool.mine(), "the test's thread is not the pool's"
    pool.shutdown()


def test_a_deferred_task_that_waits_behind_a_long_one_is_handed_to_another_thread():
    """A long deferred task must not hold the others up: `hand_off_stale`, called by the runtime's watchdog
    every few milliseconds, submits those that waited `older_than` — they then run concurrently with it."""
    pool = _Executor(4, "belay-t")
    release, started = threading.Event(), {}
    watching = threading.Event()

    def watchdog() -> None:
        while not watching.is_set():
            pool.hand_off_stale(0.005)
            time.sleep(0.002)

    def long() -> None:
        started["long"] = time.monotonic()
        release.wait(5)

    def short(i: int) -> None:
        started[i] = time.monotonic()

    watcher = threading.Thread(target=watchdog)
    watcher.start()
    try:
        _defer_from_a_pool_thread(pool, [long, lambda: short(1), lambda: short(2)])
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not {1, 2} <= started.keys():
            time.sleep(0.005)
        assert {1, 2} <= started.keys(), "the tasks deferred behind a long one waited for it"
        assert not release.is_set()
        assert pool.deferred() == 0
    finally:
        release.set()
        watching.set()
        watcher.join()
        pool.shutdown()


def test_hand_off_stale_leaves_fresh_deferred_tasks_to_their_thread():
    pool = _Executor(2, "belay-t")
    pool._mine.pool = pool  # this thread stands in for the pool's own
    ran = threading.Event()
    pool.defer(ran.set)
    assert pool.hand_off_stale(60) is True, "a fresh deferred task is left where it is (and still waits)"
    assert pool.deferred() == 1 and not ran.is_set() and pool._threads == []
    assert pool.hand_off_stale(0) is False
    assert ran.wait(5) and pool.deferred() == 0
    pool.shutdown(cancel_futures=True)


def test_shutdown_with_cancel_drops_deferred_tasks_too():
    pool = _Executor(1, "belay-t")
    pool._mine.pool = pool
    ran = threading.Event()
    pool.defer(ran.set)
    pool.shutdown(cancel_futures=True)
    assert pool.deferred() == 0 and not ran.wait(0.1)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.defer(ran.set)


def test_the_hand_off_watchdog_looks_while_work_waits_then_a_while_longer_then_sleeps_until_armed():
    """impl.runtime._Watchdog: it looks every tick while `look()` says something waits, and for QUIET_TICKS
    quiet looks after (re-arming it after every group commit was a wake per commit), then sleeps without a
    timer; `arm()` starts it again."""
    from impl.runtime import _Watchdog

    waiting, looks = [3], []

    def look() -> bool:
        looks.append(waiting[0])
        waiting[0] = max(0, waiting[0] - 1)
        return looks[-1] > 0

    dog = _Watchdog("belay-t-watch", 0.001, look)
    try:
        dog.arm()
        deadline = time.monotonic() + 10
        while dog._armed and time.monotonic() < deadline:
            time.sleep(0.005)
        assert not dog._armed, "it never went to sleep"
        quiet = len(looks) - 3
        # a busy queue's commits come a millisecond or so apart: it must outlast a few of their gaps
        assert quiet >= max(20, _Watchdog.QUIET_TICKS), f"asleep after {quiet} quiet looks"
        settled = len(looks)
        time.sleep(0.05)
        assert len(looks) == settled, "it kept looking while disarmed"
        waiting[0] = 1
        dog.arm()
        deadline = time.monotonic() + 10
        while len(looks) == settled and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(looks) > settled, "arm() did not wake it"
    finally:
        dog.stop()


def test_a_thread_that_went_on_to_deferred_work_is_not_counted_idle_when_a_task_is_handed_off():
    """The pool counts a thread idle (a token `submit` takes instead of starting a thread) only when it waits
    for work: one that finished its task and went on to a long deferred task is busy, so the one task handed
    off behind it must get a thread of its own, not wait for that long task."""
    pool = _Executor(4, "belay-t")
    release, started = threading.Event(), threading.Event()
    _defer_from_a_pool_thread(pool, [lambda: release.wait(5), started.set])
    try:
        time.sleep(0.05)  # the pool's thread has taken the long deferred task
        assert pool.deferred() == 1
        assert pool.hand_off_stale(0) is False
        assert started.wait(2), "the handed-off task waited for the long one"
    finally:
        release.set()
        pool.shutdown()
