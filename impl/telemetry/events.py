"""The events and their handlers: `EVENTS`, `attach`/`detach`, `dispatch` (what the runtime calls), and a
handler's declared `events` (`taken`, `takes`, `silent`). A handler that raises is logged and skipped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Container, Iterable
from typing import Any

from impl.telemetry.logger import DefaultLogger

log = logging.getLogger("belay")


Handler = Callable[[str, dict[str, Any]], None]


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
