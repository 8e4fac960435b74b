"""Telemetry (spec/belay-operations.txt "Telemetry"): the runtime's events, one small interface.

A handler is any callable `handler(event, meta)`. The runtime (`impl.runtime.Worker`) calls its
`telemetry` handlers synchronously on the thread where the event happened; by default that is
`dispatch`, which fans out to the handlers attached here (process-wide, like Elixir's :telemetry):

    from impl import telemetry
    telemetry.attach_default_logger()              # belay job=812 kind=summarize queue=ai state=succeeded ...
    telemetry.attach("mine", lambda event, meta: ...)

Events and their metadata (durations in milliseconds):

| event           | meta                                                                              |
|-----------------|-----------------------------------------------------------------------------------|
| `job.start`     | job_id, kind, worker (= kind), queue, attempt, node                                |
| `job.stop`      | … + state (the ack's outcome: succeeded, ready, failed, cancelled, parked, stale), duration_ms |
| `job.exception` | … + state, duration_ms, error (the job code raised; state says what the ack made of it) |
| `claim`         | queue, node, demand, claimed, duration_ms (one claim round)                       |
| `ack.stale`     | job_id, attempt (a fenced ack was rejected: the job was reclaimed)                |
| `lease.lost`    | job_id, attempt, node                                                             |
| `reclaim`       | node, retried, failed (counts of one sweeper pass that reclaimed something)       |
| `queue.scale`   | queue, limit (adaptive concurrency changed a queue's per-node limit)              |

Optional integrations (extras `otel` and `prometheus`): `OpenTelemetrySpans` (one span per job
attempt) and `PrometheusMetrics` (claim latency, jobs by outcome, stale acks, lease losses,
reclaims, queue depth; served by `belay worker --metrics-port`).

A handler may declare the events it takes with an `events` attribute (a collection of the names
above, e.g. `events = frozenset({"job.stop", "job.exception"})`): it is then called for those
events only, and the runtime does not even build the metadata of an event that no handler takes
(a handler without the attribute takes every event). `DefaultLogger` takes job.stop, job.exception
and queue.scale; `PrometheusMetrics` everything but job.start and queue.scale; `OpenTelemetrySpans`
the three job events. `attach` reads the attribute once, when the handler is attached; the
runtime's own `telemetry=` handlers are read at every event.

Cost (issue 15: telemetry on within 5 % of off, `python -m bench.run telemetry`): job.start runs on
the job's executor thread; job.stop and job.exception of a single-job kind run once its ack has
committed, on the thread that led that group commit (impl.runtime.AckGroup.ack_then), before the
group's next commit — so each microsecond spent there is paid by every ack of the queue waiting
behind it. The shipped handlers therefore do little there: the attached default logger
queues its line's fields and builds the log records on a background thread (`DefaultLogger`,
`background=True`), and `PrometheusMetrics` queues job endings and claim latencies and adds them
to its metrics when they are collected (`fold`) or, once `capacity` wait, on a thread of its own.
Both background threads hand the GIL on every few records, so a batch never holds the ack leader up for a
whole switch interval.

A handler that raises is logged and skipped: telemetry never breaks the worker.
"""

from __future__ import annotations

import atexit
import bisect
import collections
import contextlib
import functools
import logging
import math
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Container, Iterable, Iterator
from typing import Any

Handler = Callable[[str, dict[str, Any]], None]

log = logging.getLogger("belay")

EVENTS = frozenset(
    {"job.start", "job.stop", "job.exception", "claim", "ack.stale", "lease.lost", "reclaim", "queue.scale"}
)


class _Every:
    """The events taken by a handler that declares none: all of them."""

    def __contains__(self, event: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "EVERY_EVENT"


EVERY_EVENT: Container[str] = _Every()


def declared_events(handler: Handler) -> frozenset[str] | None:
    """The events `handler` declares with its `events` attribute (None: it declares none, so it takes
    every event). A string, a non-string name or a name the runtime never emits is refused."""
    events = getattr(handler, "events", None)
    if events is None:
        return None
    if isinstance(events, str) or not isinstance(events, Iterable):
        raise TypeError(f"a telemetry handler's events must be a collection of event names, not {events!r}")
    names = frozenset(events)
    unknown = sorted(str(e) for e in names - EVENTS)
    if unknown:
        raise ValueError(f"unknown telemetry events {unknown}; the runtime emits {sorted(EVENTS)}")
    return names


def taken(handlers: Iterable[Handler]) -> Container[str]:
    """The events at least one of `handlers` takes (`EVERY_EVENT` when one declares none): the runtime
    builds an event's metadata only when the event is in here."""
    if type(handlers) is tuple and len(handlers) == 1:  # the runtime's default: `dispatch` alone
        events = getattr(handlers[0], "events", None)
        if events is None:
            return EVERY_EVENT
        if type(events) is frozenset:
            return events
    out: frozenset[str] = frozenset()
    for handler in handlers:
        events = getattr(handler, "events", None)
        if events is None:
            return EVERY_EVENT
        out = out.union(events)
    return out


def takes(handler: Handler, event: str) -> bool:
    """Whether `handler` is called for `event` (its `events` attribute, when it has one)."""
    events = getattr(handler, "events", None)
    return events is None or event in events


_lock = threading.Lock()
# (id, handler, its declared events or None), copy-on-write: dispatch reads it without the lock
_handlers: tuple[tuple[str, Handler, frozenset[str] | None], ...] = ()


class _Dispatch:
    """`dispatch(event, meta)`: call every attached handler that takes the event (the runtime's
    default telemetry). Its `events` are those some attached handler takes, kept up to date by
    `attach`/`detach`."""

    events: frozenset[str] | None = frozenset()

    def __call__(self, event: str, meta: dict[str, Any]) -> None:
        for handler_id, handler, events in _handlers:
            if events is not None and event not in events:
                continue
            try:
                handler(event, meta)
            except Exception:
                log.exception("belay telemetry handler %r failed on %s", handler_id, event)

    def __repr__(self) -> str:
        return "impl.telemetry.dispatch"


dispatch = _Dispatch()


def _set_handlers(handlers: tuple[tuple[str, Handler, frozenset[str] | None], ...]) -> None:  # with _lock held
    global _handlers
    union: frozenset[str] | None = frozenset()
    for _hid, _handler, events in handlers:
        union = None if union is None or events is None else union | events
    _handlers = handlers
    dispatch.events = union


def attach(handler_id: str, handler: Handler) -> None:
    """Attach a process-wide handler under a unique id (refused if the id is taken). Its `events`
    attribute, if any, is read now: see the module docstring."""
    events = declared_events(handler)
    with _lock:
        if any(h[0] == handler_id for h in _handlers):
            raise ValueError(f"a telemetry handler is already attached as {handler_id!r}; detach it first")
        _set_handlers((*_handlers, (handler_id, handler, events)))


def detach(handler_id: str) -> bool:
    """Detach a handler; False when none was attached under that id. A `DefaultLogger` is closed (its
    queued lines handled, its background thread stopped)."""
    with _lock:
        kept = tuple(h for h in _handlers if h[0] != handler_id)
        gone = [h[1] for h in _handlers if h[0] == handler_id]
        _set_handlers(kept)
    for handler in gone:
        if isinstance(handler, DefaultLogger):
            handler.close()
    return bool(gone)


def attached() -> tuple[str, ...]:
    return tuple(h[0] for h in _handlers)


def silent(handlers: Iterable[Handler]) -> bool:
    """True when emitting to `handlers` does nothing: none given, or only handlers that take no
    event (`dispatch` with nothing attached) — the runtime then builds no per-job metadata (issue 17)."""
    return not taken(handlers)


# --- the default logger -----------------------------------------------------------------------------


# Lines are logfmt (issue 29): `key=value`, a value bare when it is printable ASCII without space, `"`,
# `=` or backslash, else in double quotes with `\\`, `\"`, `\n`, `\r`, `\t` and `\uXXXX` (`\UXXXXXXXX`)
# escapes for every other non-printable character (U+2028 too), so a kind, queue, node or error can
# never end a line or forge a field: `parse_logfmt` reads every line back to exactly its fields.
_BARE = re.compile(r"[!#-<>-\[\]-~]+")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPES = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}


def logfmt_value(value: object) -> str:
    """One logfmt value: bare when it can be, else quoted and escaped (see above)."""
    text = value if isinstance(value, str) else str(value)
    if _BARE.fullmatch(text):
        return text
    return '"' + "".join(_escape(c) for c in text) + '"'


# The logfmt form of the names a job line repeats (kind, queue, state, node) — the regex match was most of
# building a line on the job's thread. Bounded: cleared when full (names are few; an error is not cached).
_NAMES: dict[str, str] = {}
_NAMES_MAX = 4096


def _name(value: object) -> str:
    if type(value) is not str:
        return logfmt_value(value)
    text = _NAMES.get(value)
    if text is None:
        if len(_NAMES) >= _NAMES_MAX:
            _NAMES.clear()
        text = _NAMES[value] = logfmt_value(value)
    return text


def _escape(c: str) -> str:
    found = _ESCAPES.get(c)
    if found is not None:
        return found
    if c.isprintable():
        return c
    return f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"


_TOKEN = re.compile(r'([!#-<>-\[\]-~]+)=(?:([!#-<>-\[\]-~]+)|"((?:[^"\\]|\\.)*)")(?: |$)')
_UNESCAPE = re.compile(r"\\(?:u([0-9a-f]{4})|U([0-9a-f]{8})|(.))", re.DOTALL)


def parse_logfmt(text: str) -> dict[str, str]:
    """The fields of a logfmt text written by `logfmt_value` (`key=value` separated by one space),
    values as strings; ValueError for anything it would not write (or a key twice)."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or (m.end() == len(text) and text.endswith(" ")):
            raise ValueError(f"not logfmt at column {pos}: {text[pos : pos + 40]!r}")
        key, bare, quoted = m.groups()
        if key in out:
            raise ValueError(f"key {key!r} twice")
        out[key] = bare if bare is not None else _UNESCAPE.sub(_unescape, quoted)
        pos = m.end()
    return out


def _unescape(m: re.Match[str]) -> str:
    short, long, char = m.groups()
    if short or long:
        return chr(int(short or long, 16))
    if char not in _UNESCAPES:
        raise ValueError(f"unknown escape \\{char}")
    return _UNESCAPES[char]


_JOB_LINE = "belay job=%s kind=%s queue=%s state=%s attempt=%s duration=%sms"
_JOB_LINES = {  # (has a node, has an error) → the line's template
    (False, False): _JOB_LINE,
    (True, False): _JOB_LINE + " node=%s",
    (False, True): _JOB_LINE + " error=%s",
    (True, True): _JOB_LINE + " node=%s error=%s",
}


def job_line(meta: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """The default logger's line for a job event as a %-template and its arguments (a logging call's
    `msg` and `args`: the handler that writes the record renders it). Every text is logfmt-quoted."""
    node, error = meta.get("node"), meta.get("error")
    args: tuple[Any, ...] = (
        meta["job_id"],
        _name(meta.get("kind", meta.get("worker"))),
        _name(meta["queue"]),
        _name(meta["state"]),
        meta["attempt"],
        meta["duration_ms"],
    )
    if node:
        args += (_name(node),)
    if error:
        args += (logfmt_value(error),)
    return _JOB_LINES[bool(node), bool(error)], args


def format_job_line(meta: dict[str, Any]) -> str:
    """`belay job=812 kind=summarize queue=ai state=succeeded attempt=1 duration=8143ms node=n1`."""
    template, args = job_line(meta)
    return template % args


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


default_logger: Handler = DefaultLogger()


def attach_default_logger(
    level: int | str = logging.INFO, *, handler_id: str = "belay-default-logger", background: bool = True
) -> DefaultLogger:
    """Belay.Telemetry.attach_default_logger: one structured line per job attempt, at `level`, its
    records built on a background thread unless `background=False` (see `DefaultLogger`)."""
    if isinstance(level, str):
        level = logging.getLevelName(level.upper())
        if not isinstance(level, int):
            raise ValueError("level must be a logging level name such as 'info' or a number")
    detach(handler_id)
    handler = DefaultLogger(level, background=background)
    attach(handler_id, handler)
    return handler


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


# --- OpenTelemetry spans (extra: otel) ---------------------------------------------------------------------


class OpenTelemetrySpans:
    """One span per job attempt (`belay.job <kind>`), from job.start to job.stop/job.exception, with
    the job's metadata as attributes; an exception ending marks the span as an error. Uses the
    global tracer provider unless one is given (configure the SDK and exporter as usual, e.g. with
    `opentelemetry-instrument belay worker ...`)."""

    events = frozenset({"job.start", "job.stop", "job.exception"})

    def __init__(self, tracer_provider: Any = None) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise RuntimeError("OpenTelemetry spans need the otel extra: pip install 'belay-toolkit[otel]'") from exc
        self._trace = trace
        self.tracer = trace.get_tracer("belay", tracer_provider=tracer_provider)
        self.spans: dict[tuple[int, int], Any] = {}
        self.lock = threading.Lock()

    @staticmethod
    def _attributes(meta: dict[str, Any]) -> dict[str, Any]:
        out = {f"belay.{k}": v for k, v in meta.items() if isinstance(v, (str, int, float, bool)) and k != "error"}
        return out

    def __call__(self, event: str, meta: dict[str, Any]) -> None:
        if event == "job.start":
            span = self.tracer.start_span(f"belay.job {meta.get('kind')}", attributes=self._attributes(meta))
            with self.lock:
                self.spans[(meta["job_id"], meta["attempt"])] = span
        elif event in ("job.stop", "job.exception"):
            with self.lock:
                span = self.spans.pop((meta["job_id"], meta["attempt"]), None)
            if span is None:
                return
            span.set_attributes(self._attributes(meta))
            if event == "job.exception":
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, meta.get("error")))
            span.end()


def attach_opentelemetry(tracer_provider: Any = None, *, handler_id: str = "belay-otel") -> OpenTelemetrySpans:
    handler = OpenTelemetrySpans(tracer_provider)
    detach(handler_id)
    attach(handler_id, handler)
    return handler


# --- Prometheus metrics (extra: prometheus) -----------------------------------------------------------------


class PrometheusMetrics:
    """Prometheus metrics in their own registry (so several workers in one process never clash):

    belay_jobs_total{queue,kind,outcome}        finished job attempts by ack outcome
    belay_job_duration_seconds{queue,kind}      job attempt durations (histogram)
    belay_claim_latency_seconds{queue}          claim round latency (histogram)
    belay_stale_acks_total / belay_lease_losses_total / belay_reclaims_total{outcome}
    belay_queue_depth{queue,state}              job counts read from the database at scrape time
                                                (when a depth source is given)

    A job's ending and a claim round's latency are only queued on the thread that reports them (the
    prometheus_client calls take locks and cost the job's thread more than the rest of its telemetry);
    they are added to the metrics in one go by `fold()`, which every collection of the registry (a
    scrape, `exposition()`) runs first, and which a `belay-metrics` thread runs when `capacity`
    observations wait.
    """

    events = frozenset({"job.stop", "job.exception", "claim", "ack.stale", "lease.lost", "reclaim"})

    def __init__(self, depth: Callable[[], dict[str, dict[str, int]]] | None = None, *, capacity: int = 1000) -> None:
        try:
            import prometheus_client as p
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise RuntimeError(
                "Prometheus metrics need the prometheus extra: pip install 'belay-toolkit[prometheus]'"
            ) from exc
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        # (queue, kind, outcome, duration_ms) of a job ending, (queue, duration_ms) of a claim round
        self._pending: collections.deque[tuple[Any, ...]] = collections.deque()  # appends are atomic
        self._folding = threading.Lock()
        self.registry = p.CollectorRegistry()
        # Job endings and claim latencies are counted here, in plain lists, and read by a collector at a
        # scrape (`_Folded`): prometheus_client's Histogram.observe takes a lock per bucket and the sum
        # (~7 µs an observation here), which made folding most of the telemetry's cost per job.
        self._ended: dict[tuple[Any, Any, Any], int] = {}  # (queue, kind, outcome) → finished attempts
        self._durations: dict[tuple[Any, Any], list[float]] = {}  # (queue, kind) → per-bucket counts + sum
        self._claims: dict[Any, list[float]] = {}  # queue → per-bucket counts + sum
        self._duration_bounds = tuple(p.Histogram.DEFAULT_BUCKETS)  # a Histogram's own default buckets
        self.registry.register(_Folded(self))
        self.stale_acks = p.Counter("belay_stale_acks", "Acks rejected by the attempt fence", registry=self.registry)
        self.lease_losses = p.Counter("belay_lease_losses", "Leases this node lost", registry=self.registry)
        self.reclaims = p.Counter(
            "belay_reclaims", "Expired leases reclaimed by this node's sweeper", ["outcome"], registry=self.registry
        )
        self.depth = depth
        if depth is not None:
            self.registry.register(_DepthCollector(depth))
        self._folder: threading.Thread | None = None  # started at the first `capacity` observations
        self._wake = threading.Event()

    def __call__(self, event: str, meta: dict[str, Any]) -> None:
        if event == "job.stop" or event == "job.exception":
            kind = meta.get("kind", meta.get("worker"))
            self._pending.append((meta["queue"], kind, meta["state"], meta["duration_ms"]))
            if len(self._pending) >= self.capacity:
                self._full()
        elif event == "claim":
            self._pending.append((meta["queue"], meta["duration_ms"]))
            if len(self._pending) >= self.capacity:
                self._full()
        elif event == "ack.stale":
            self.stale_acks.inc()
        elif event == "lease.lost":
            self.lease_losses.inc()
        elif event == "reclaim":
            if meta.get("retried"):
                self.reclaims.labels("retried").inc(meta["retried"])
            if meta.get("failed"):
                self.reclaims.labels("failed").inc(meta["failed"])

    def _full(self) -> None:
        """`capacity` observations wait: a `belay-metrics` thread folds them, so the thread reporting
        them — since issue 33 often the ack leader, whose every moment delays the jobs in flight — does
        not. Only when that thread is far behind (4 × capacity) does the reporting thread fold itself."""
        if len(self._pending) >= 4 * self.capacity:
            self.fold()
            return
        if self._folder is None:
            with self._folding:
                if self._folder is None:
                    self._folder = threading.Thread(target=self._fold_loop, name="belay-metrics", daemon=True)
                    self._folder.start()
        if not self._wake.is_set():
            self._wake.set()  # once: a set() per observation takes the event's lock every time

    def _fold_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self.fold(yielding=True)

    def fold(self, yielding: bool = False) -> None:
        """Add the queued job endings and claim latencies to the metrics."""
        with self._folding:
            for item in _taken(self._pending, yielding):
                if len(item) == 4:
                    queue, kind, outcome, duration_ms = item
                    key = (queue, kind, outcome)
                    self._ended[key] = self._ended.get(key, 0) + 1
                    _observe(self._durations, (queue, kind), self._duration_bounds, duration_ms / 1000)
                else:
                    _observe(self._claims, item[0], _CLAIM_BOUNDS, item[1] / 1000)

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Serve /metrics on addr:port from a daemon thread; returns the server (call .shutdown())."""
        import prometheus_client as p

        server, _thread = p.start_http_server(port, addr=addr, registry=self.registry)
        return server

    def exposition(self) -> str:
        import prometheus_client as p

        return p.generate_latest(self.registry).decode()


_CLAIM_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, math.inf)


def _observe(table: dict[Any, list[float]], key: Any, bounds: tuple[float, ...], value: float) -> None:
    """One observation into a histogram's row: its bucket's count (the first bound ≥ value, as
    prometheus_client's `le`) and the sum, the row's last element."""
    row = table.get(key)
    if row is None:
        row = table[key] = [0.0] * (len(bounds) + 1)
    row[bisect.bisect_left(bounds, value)] += 1
    row[-1] += value


class _Folded:
    """The collector of a PrometheusMetrics' job endings and claim latencies: it folds the queued
    observations in, then yields belay_jobs_total, belay_job_duration_seconds and
    belay_claim_latency_seconds (cumulative buckets, count and sum, as prometheus_client's Histogram)."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        m = self.metrics
        m.fold()
        with m._folding:  # a consistent copy: the folding thread may add to the rows meanwhile
            ended = dict(m._ended)
            durations = {k: list(v) for k, v in m._durations.items()}
            claims = {k: list(v) for k, v in m._claims.items()}
        jobs = CounterMetricFamily(
            "belay_jobs", "Finished job attempts by ack outcome", labels=["queue", "kind", "outcome"]
        )
        for (queue, kind, outcome), n in sorted(ended.items(), key=repr):
            jobs.add_metric([str(queue), str(kind), str(outcome)], n)
        yield jobs
        duration = HistogramMetricFamily("belay_job_duration_seconds", "Job attempt duration", labels=["queue", "kind"])
        for (queue, kind), row in sorted(durations.items(), key=repr):
            duration.add_metric([str(queue), str(kind)], _buckets(m._duration_bounds, row), row[-1])
        yield duration
        claim = HistogramMetricFamily("belay_claim_latency_seconds", "Claim round latency", labels=["queue"])
        for queue, row in sorted(claims.items(), key=repr):
            claim.add_metric([str(queue)], _buckets(_CLAIM_BOUNDS, row), row[-1])
        yield claim


def _buckets(bounds: tuple[float, ...], row: list[float]) -> list[tuple[str, float]]:
    """Cumulative (le, count) pairs, the bounds written as prometheus_client writes them."""
    from prometheus_client.utils import floatToGoString

    total, out = 0.0, []
    for bound, n in zip(bounds, row, strict=False):
        total += n
        out.append((floatToGoString(bound), total))
    return out


class _DepthCollector:
    """belay_queue_depth{queue,state}, read from the database when scraped (a failed read yields nothing)."""

    def __init__(self, depth: Callable[[], dict[str, dict[str, int]]]) -> None:
        self.read = depth

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        gauge = GaugeMetricFamily("belay_queue_depth", "Jobs per queue and state", labels=["queue", "state"])
        try:
            stats = self.read()
        except Exception as exc:  # noqa: BLE001 - a scrape during an outage reports no depth
            log.warning("belay metrics: queue depth unavailable: %s", exc)
            stats = {}
        for queue, states in sorted(stats.items()):
            for state, n in sorted(states.items()):
                gauge.add_metric([queue, state], n)
        yield gauge


def attach_prometheus(
    depth: Callable[[], dict[str, dict[str, int]]] | None = None, *, handler_id: str = "belay-prometheus"
) -> PrometheusMetrics:
    handler = PrometheusMetrics(depth)
    detach(handler_id)
    attach(handler_id, handler)
    return handler
