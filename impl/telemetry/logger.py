"""The default logger (`DefaultLogger`, attached by `attach_default_logger`): it queues a line's fields and
builds the log records on a background thread, handing the GIL on every few records; and the formatters
and batching stream handler `belay worker` logs through.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from impl.telemetry.logfmt import job_line, logfmt_value, parse_logfmt

log = logging.getLogger("belay")


class DefaultLogger:
    """One line per finished job attempt on the `belay` logger (job.exception at WARNING).

    It builds the log record itself (`logger.makeRecord`, then `logger.handle`: the logger's filters,
    its handlers and propagation to its ancestors' handlers work as for any logging call) without the
    stack walk of `logger.log` that looks for the caller, which is always this method: the record names
    this file and `DefaultLogger.__call__` as its origin. Nothing is built when the logger is not
    enabled for the level. The message is a template with its arguments (`job_line`).

    With `background=True` (what `attach_default_logger` and `belay worker` use) the job's thread only
    queues the line's fields, its time and its thread: a `belay-telemetry` thread builds and handles
    the records in batches, every `interval` seconds or when `capacity` lines wait, giving each record
    the time and thread of its event (`created`, `msecs`, `relativeCreated`, `thread`, `threadName`),
    so a formatted line reads as if it had been logged synchronously. The logger's handlers then run on
    that thread, and a log record factory runs there too (without one, and with a logger class that
    keeps Logger.makeRecord, a line's record is a copy of one makeRecord made for the logger and level:
    `_record_maker`). A line at WARNING or above (job.exception)
    is handled at once on the job's thread, after the lines queued before it, so failures are never
    delayed and lines keep their order. `flush()` handles what waits; it runs at interpreter exit
    before logging's own shutdown. Why: building a LogRecord costs the job's thread more than the rest
    of the telemetry together, and with ten executor threads sharing the GIL every microsecond they
    spend is paid several times over (`python -m bench.run telemetry`)."""

    events = frozenset({"job.stop", "job.exception", "queue.scale"})

    def __init__(
        self,
        level: int = logging.INFO,
        logger: logging.Logger | None = None,
        *,
        background: bool = False,
        interval: float = 0.2,
        capacity: int = 1000,
    ) -> None:
        if interval <= 0 or capacity < 1:
            raise ValueError("interval must be positive and capacity at least 1")
        self.level = level
        self.logger = logger or log
        self.background = background
        self.interval = interval
        self.capacity = capacity
        # (level, msg, args, created, thread id, thread name) of lines not yet handled; appends are atomic
        self._pending: collections.deque[tuple[int, str, tuple[Any, ...], float, int, str]] = collections.deque()
        self._flushing = threading.Lock()  # one drainer at a time: records are handled in event order
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._thread_lock = threading.Lock()

    def __call__(self, event: str, meta: dict[str, Any]) -> None:
        if event == "job.stop":
            level = self.level
        elif event == "job.exception":
            level = max(self.level, logging.WARNING)
        elif event == "queue.scale":
            level = self.level
        else:
            return
        logger = self.logger
        if not logger.isEnabledFor(level):
            return
        if event == "queue.scale":
            msg, args = "belay queue=%s limit=%s", (logfmt_value(meta["queue"]), meta["limit"])
        else:
            msg, args = job_line(meta)
        if not self.background:
            logger.handle(logger.makeRecord(logger.name, level, __file__, _RECORD_LINE, msg, args, None, "__call__"))
        elif level < logging.WARNING:
            self._pending.append(
                (level, msg, args, time.time(), threading.get_ident(), threading.current_thread().name)
            )
            if self._thread is None:
                self._start()
            elif len(self._pending) >= self.capacity:
                if not self._wake.is_set():  # once: a set() per line takes the event's lock every time
                    self._wake.set()
                if len(self._pending) >= 2 * self.capacity:  # the thread is far behind: memory stays bounded
                    self.flush()
        else:
            with self._flushing:  # the lines queued before this one first (a drain under way included)
                self._drain()
                logger.handle(
                    logger.makeRecord(logger.name, level, __file__, _RECORD_LINE, msg, args, None, "__call__")
                )

    def flush(self) -> None:
        """Build and handle the queued lines' records now, in order."""
        with self._flushing:
            self._drain()

    def _drain(self, yielding: bool = False) -> None:  # with self._flushing held
        logger = self.logger
        make = _record_maker(logger)
        for level, msg, args, created, thread, thread_name in _taken(self._pending, yielding):
            try:
                record = make(level, msg, args)
                # the event's time and thread, as LogRecord.__init__ would have set them then
                record.relativeCreated -= (record.created - created) * 1000
                record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
                record.thread, record.threadName = thread, thread_name
                logger.handle(record)
            except Exception:  # a filter or handler failed: reported, and the next lines still go out
                with contextlib.suppress(Exception):  # (reporting it may go through the same filter)
                    log.exception("belay default logger: a queued line could not be handled")

    def close(self) -> None:
        """Handle what waits and stop the background thread (`detach` does this; a later line starts it again)."""
        with self._thread_lock:
            thread, self._thread = self._thread, None
            if thread is not None:
                self._stop.set()
                self._wake.set()
                if thread is not threading.current_thread():  # a handler of a queued line may detach it
                    thread.join()
                atexit.unregister(self.flush)
        self.flush()

    def _start(self) -> None:
        with self._thread_lock:
            if self._thread is None:
                _backgrounds.add(self)
                self._stop = threading.Event()
                self._thread = threading.Thread(
                    target=self._loop, args=(self._stop,), name="belay-telemetry", daemon=True
                )
                self._thread.start()
                atexit.register(self.flush)  # before logging.shutdown (registered earlier, so run later)

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._pending:
                with self._flushing:
                    self._drain(yielding=True)


# A background thread hands the GIL on once it has held it this long (seconds). Otherwise a batch of a
# thousand lines holds it for up to the interpreter's switch interval (5 ms) at a time, while the worker's
# ack leader, its result back from PostgreSQL, waits to commit the next group: each job's cycle is serial,
# so the stall is paid by every job in flight. By time, not by count: a hand-on is a system call and
# often a thread switch, and a metric folds in a tenth of a log line's time — handing on every 16 items
# (as before) was most of the metrics thread's CPU (`python -m bench.run telemetry`, issue 33).
_YIELD_AFTER = 0.0001


def _taken(pending: collections.deque[Any], yielding: bool) -> Iterator[Any]:
    """`pending`'s items, popped in order until it is empty; with `yielding` (a background thread), the GIL
    handed on whenever it has been held `_YIELD_AFTER` seconds since the last hand-on."""
    clock = time.perf_counter
    due = clock() + _YIELD_AFTER
    while pending:
        if yielding and clock() >= due:
            time.sleep(0)  # let a job's or the ack leader's thread take the GIL
            due = clock() + _YIELD_AFTER
        yield pending.popleft()


_RECORD_LINE = DefaultLogger.__call__.__code__.co_firstlineno  # the origin the records name


_TEMPLATES: dict[tuple[str, int, int], dict[str, Any]] = {}  # (logger, level, pid) → a record's attributes


def _record_maker(logger: logging.Logger) -> Callable[[int, str, tuple[Any, ...]], logging.LogRecord]:
    """What builds the queued lines' records: `logger.makeRecord`, or — when neither the logger's class nor
    a log record factory replaces it — a copy of one record's attributes made by it for the logger and
    level, with the line's msg and args. LogRecord.__init__ (the source file's name split three ways,
    the process and thread looked up) was most of the background thread's time per line; the attributes
    are those makeRecord sets, and the caller sets the event's time and thread as before."""
    if (
        type(logger).makeRecord is not logging.Logger.makeRecord
        or logging.getLogRecordFactory() is not logging.LogRecord
    ):
        return lambda level, msg, args: logger.makeRecord(
            logger.name, level, __file__, _RECORD_LINE, msg, args, None, "__call__"
        )
    new = functools.partial(object.__new__, logging.LogRecord)
    name, pid = logger.name, os.getpid()  # once per batch: getpid is a system call

    def make(level: int, msg: str, args: tuple[Any, ...]) -> logging.LogRecord:
        key = (name, level, pid)
        template = _TEMPLATES.get(key)
        if template is None:
            made = logger.makeRecord(logger.name, level, __file__, _RECORD_LINE, "", (), None, "__call__")
            template = _TEMPLATES[key] = dict(made.__dict__)
        record = new()
        fields = record.__dict__
        fields.update(template)
        fields["msg"], fields["args"] = msg, args
        return record

    return make


_backgrounds: weakref.WeakSet[DefaultLogger] = weakref.WeakSet()  # those whose thread was started


def flush() -> None:
    """Handle the lines every background default logger holds (atexit does it; `os._exit` does not)."""
    for handler in list(_backgrounds):
        handler.flush()


def _forget_threads_after_fork() -> None:
    """A forked child has none of its parent's threads: a background logger starts its own at its next line."""
    for handler in list(_backgrounds):
        handler._thread, handler._thread_lock, handler._flushing = None, threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_forget_threads_after_fork)


class SecondCachingFormatter(logging.Formatter):
    """A logging.Formatter whose `asctime` renders the date and time once per second: the records of a
    batch share their second, and `time.strftime(localtime(...))` was half of formatting a job line (the
    `belay-log-flush` thread's work, which shares the GIL with the job threads). With a `datefmt`, or a
    subclass that changes the converter or the formats, it formats exactly as logging.Formatter does."""

    _cached: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None or not self.default_msec_format:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        cached_second, text = self._cached
        if cached_second != second:
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._cached = (second, text)  # one tuple: a reader on another thread sees a whole pair
        return self.default_msec_format % (text, record.msecs)


_JSON_INTS = {"job": "job", "attempt": "attempt", "limit": "limit", "duration": "duration_ms"}


class JsonLinesFormatter(logging.Formatter):
    """`belay worker --log-format json`: one JSON object a line — time, level, logger, and for the
    default logger's lines (`belay job=…`, `belay queue=…`) their fields (`event`: job or queue.scale;
    job, attempt, limit and duration_ms as numbers), for any other record its `message`."""

    def format(self, record: logging.LogRecord) -> str:
        import json

        message = record.getMessage()
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
        }
        fields = None
        if message.startswith(("belay job=", "belay queue=")):
            try:
                fields = parse_logfmt(message[len("belay ") :])
            except ValueError:
                fields = None
        if fields is None:
            out["message"] = message
        else:
            out["event"] = "job" if "job" in fields else "queue.scale"
            for key, value in fields.items():
                name = _JSON_INTS.get(key)
                number = value.removesuffix("ms") if key == "duration" else value
                out[name or key] = int(number) if name and number.isdigit() else value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out)  # ASCII: U+2028 and friends escaped too, one line a record


class BatchingStreamHandler(logging.StreamHandler):
    """A logging handler that writes lines in batches — the handler `belay worker` logs through.

    The stdlib `StreamHandler` formats, writes and flushes every record under its lock, on the
    caller's thread: one line per job is then a lock that the executor threads queue on plus one or
    two system calls per job (about 10 % of a no-op job's throughput here: `python -m bench.run
    telemetry --unbatched-log`). This handler only queues the record on the caller's thread (its
    message rendered there, so later changes to its arguments do not show); a flusher thread formats
    and writes the queued records together, with one flush, every `interval` seconds or when
    `capacity` records wait. A record at `flush_level` (WARNING) or above is written at once, after
    the records queued before it, so warnings are never delayed and keep their order.
    `flush()`/`close()` (and so `logging.shutdown()`) write what is waiting; a process killed with
    SIGKILL loses at most the last `interval` seconds of INFO lines."""

    def __init__(
        self,
        stream: Any = None,
        *,
        interval: float = 0.2,
        capacity: int = 1000,
        flush_level: int = logging.WARNING,
    ) -> None:
        super().__init__(stream)
        if interval <= 0 or capacity < 1:
            raise ValueError("interval must be positive and capacity at least 1")
        self.interval = interval
        self.capacity = capacity
        self.flush_level = flush_level
        self._pending: collections.deque[logging.LogRecord] = collections.deque()  # appends are atomic
        self._wake = threading.Event()
        self._stop_flusher = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="belay-log-flush", daemon=True)
        self._flusher.start()

    def handle(self, record: logging.LogRecord) -> bool:
        if not self.filter(record):
            return False
        try:
            record.msg, record.args = record.getMessage(), None  # rendered now, formatted by the flusher
            if record.exc_info and not record.exc_text:
                record.exc_text = self.formatter.formatException(record.exc_info) if self.formatter else None
        except Exception:  # noqa: BLE001 - logging's own contract: report and carry on
            self.handleError(record)
            return False
        self._pending.append(record)
        if record.levelno >= self.flush_level:
            self.flush()
        elif len(self._pending) >= self.capacity and not self._wake.is_set():
            self._wake.set()  # once: a set() per record takes the event's lock every time
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self.handle(record)

    def _write(self, yielding: bool = False) -> None:  # with self.lock held
        lines = []
        for record in _taken(self._pending, yielding):
            try:
                lines.append(self.format(record))
            except Exception:  # noqa: BLE001
                self.handleError(record)
        if lines:
            self.stream.write(self.terminator.join(lines) + self.terminator)
        if self.stream and hasattr(self.stream, "flush"):
            self.stream.flush()

    def flush(self, yielding: bool = False) -> None:
        """Format and write what waits; with `yielding` (the flusher thread) handing the GIL on as the
        background threads above do (`_taken`): a batch formatted in one go held it for up to the
        interpreter's switch interval while an execution's thread, its group commit back, waited."""
        self.acquire()
        try:
            with contextlib.suppress(OSError, ValueError):  # a stream closed at exit: nothing to write to
                self._write(yielding)
        finally:
            self.release()

    def _flush_loop(self) -> None:
        while not self._stop_flusher.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._pending:
                self.flush(yielding=True)

    def close(self) -> None:
        self._stop_flusher.set()
        self._wake.set()
        self.flush()
        super().close()
