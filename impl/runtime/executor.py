"""`_Executor`: a queue's execution threads, and the jobs deferred onto the thread that claimed them.

Jobs an ack group's leader claimed run on that thread one after another (`defer`: no thread woken per
job); a watchdog (impl/runtime/watchdog.py) hands one that waited `defer_handoff` to another thread.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("belay")


class _Executor:
    """The executions' threads of one queue: at most `max_workers` daemon threads, started as work needs
    them, fed by one queue.SimpleQueue. What ThreadPoolExecutor does for this use, without what the
    runtime never reads: a Future per task (a Condition and its lock, taken twice per task) and a
    pure-Python Semaphore to find an idle thread — a tenth of an unbatched drain's GIL time (py-spy,
    issue 33). A thread leaves a token in `_idle` (a C queue too) after each task, as ThreadPoolExecutor
    releases its idle semaphore; `submit` takes one, or starts a thread while below the maximum (the same
    approximation). A task's exception is logged (a Future kept it unread); the runtime's tasks handle
    their own."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max, self._prefix = max_workers, thread_name_prefix
        self._work: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._idle: queue.SimpleQueue[None] = queue.SimpleQueue()
        # Deferred tasks (`defer`): (queued at, fn, args), run by this pool's threads before they take from
        # `_work`; nothing is woken for them (`hand_off_stale` moves those that wait too long to `_work`).
        self._deferred: collections.deque[tuple[float, Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._mine = threading.local()  # set on this pool's threads
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()  # starting threads and shutting down
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._shutdown:
            raise RuntimeError("cannot schedule new work after shutdown")
        self._work.put((fn, args))
        try:
            self._idle.get_nowait()  # an idle thread will take it
        except queue.Empty:
            with self._lock:
                if len(self._threads) < self._max and not self._shutdown:
                    thread = threading.Thread(
                        target=self._run, name=f"{self._prefix}_{len(self._threads)}", daemon=True
                    )
                    self._threads.append(thread)
                    thread.start()

    def mine(self) -> bool:
        """The calling thread is one of this pool's (it takes deferred tasks when its task returns)."""
        return getattr(self._mine, "pool", None) is self

    def defer(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on this pool, waking no thread: a thread of the pool takes deferred tasks, in
        order, each time its task returns, before it would wait for `submit`ted ones. For the caller when
        it is a thread of this pool (`mine`) and has work to hand out (issue 33: the jobs an ack group's
        leader claimed): when they are short, the thread runs them one after another instead of waking a
        thread per job — a wake is a futex call and a thread switch, and in an unbatched drain ten per
        cycle were a sixth of its time. Whoever defers must see that `hand_off_stale` runs every few
        milliseconds while tasks wait, so a long task never holds the others up."""
        if self._shutdown:
            raise RuntimeError("cannot schedule new work after shutdown")
        self._deferred.append((time.monotonic(), fn, args))

    def deferred(self) -> int:
        return len(self._deferred)

    def hand_off_stale(self, older_than: float) -> bool:
        """Submit (wake a thread for) each deferred task that has waited `older_than` seconds: the thread
        that deferred it is still in a long task. True while deferred tasks wait (the caller looks again)."""
        now = time.monotonic()
        while True:
            try:
                queued = self._deferred[0][0]
            except IndexError:
                return False
            if now - queued < older_than:
                return True
            try:
                task = self._deferred.popleft()
            except IndexError:  # a thread of the pool took it meanwhile
                return False
            if self._shutdown:
                return False
            self.submit(task[1], *task[2])

    def _run(self) -> None:
        self._mine.pool = self
        first = True  # a thread starts for the task that started it: that task first, and no idle token
        while True:
            task, deferred = None, None
            if not first:
                with contextlib.suppress(IndexError):
                    deferred = self._deferred.popleft()
            if deferred is not None:
                _, fn, args = deferred
            else:
                # Idle only now, about to wait (ThreadPoolExecutor releases its idle semaphore after each
                # task): a thread that went on to deferred work is busy, and a token given before it would
                # let a handed-off task wait behind that work instead of starting a thread of its own.
                if not first:
                    self._idle.put(None)
                first = False
                task = self._work.get()
                if task is None:  # shut down
                    return
                fn, args = task
            try:
                fn(*args)
            except BaseException:  # a task's own fault (as a Future would keep it): logged, the thread serves on
                log.exception("belay: an execution task failed")
            del task, deferred, fn, args

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more tasks; with `cancel_futures` the queued ones never run; with `wait`, join the threads
        (each finishes the task it runs)."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            self._deferred.clear()
            while True:
                try:
                    self._work.get_nowait()
                except queue.Empty:
                    break
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()
