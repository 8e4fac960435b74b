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
