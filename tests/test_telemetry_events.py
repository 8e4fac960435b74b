"""Telemetry handlers that declare their events, and the default logger's log records
(impl/telemetry.py; spec/belay-operations.txt "Telemetry"; issue 15: telemetry on costs the runtime
at most 5 % of its throughput, so nothing is built or called for an event no handler takes).

Unit tests call the handlers and `dispatch` directly; one test runs a real Worker on PostgreSQL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from impl import telemetry
from impl.client import Client
from impl.runtime import QueueConfig, Worker, WorkerConfig
from model.queues import QueueOpts
from tests.apps import telemetry_app as app

FAST = {"busy_poll": 0.01, "poll_interval": 0.05, "sweep_interval": 0.1, "queue_refresh": 0.05}
STOP = {"job_id": 812, "kind": "summarize", "worker": "summarize", "queue": "ai", "attempt": 1, "node": "n1"}


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"gave up after {timeout}s waiting for {what}"
        time.sleep(0.02)
    return value


class Recorder:
    """A handler that records what it is called with; `events` as given (None: no attribute)."""

    def __init__(self, events: Any = None) -> None:
        self.seen: list[tuple[str, dict]] = []
        if events is not None:
            self.events = events

    def __call__(self, event: str, meta: dict) -> None:
        self.seen.append((event, meta))

    def names(self) -> set[str]:
        return {e for e, _ in self.seen}


@pytest.fixture
def clean_dispatch() -> Iterator[None]:
    """Tests attach under their own ids; whatever they attached is detached afterwards."""
    before = set(telemetry.attached())
    yield
    for handler_id in set(telemetry.attached()) - before:
        telemetry.detach(handler_id)


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def on_root() -> Iterator[ListHandler]:
    """A handler on the root logger (level NOTSET: it takes whatever reaches it)."""
    handler = ListHandler()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


# --- declared events -------------------------------------------------------------------------------------


def test_dispatch_calls_a_handler_declaring_events_only_for_those_and_a_plain_callable_for_all(clean_dispatch):
    picky, plain = Recorder(frozenset({"job.stop"})), Recorder()
    telemetry.attach("t-picky", picky)
    telemetry.attach("t-plain", plain)
    for event in ("job.start", "claim", "job.stop", "queue.scale"):
        telemetry.dispatch(event, {"n": 1})
    assert [e for e, _ in picky.seen] == ["job.stop"]
    assert [e for e, _ in plain.seen] == ["job.start", "claim", "job.stop", "queue.scale"]


def test_dispatch_takes_the_union_of_what_its_attached_handlers_take_and_nothing_when_none_are(clean_dispatch):
    before = telemetry.attached()
    if before:
        pytest.skip(f"handlers attached by someone else in this process: {before}")
    assert telemetry.silent((telemetry.dispatch,))
    telemetry.attach("t-stop", Recorder({"job.stop"}))
    telemetry.attach("t-claim", Recorder(["claim"]))
    assert telemetry.dispatch.events == {"job.stop", "claim"}
    assert not telemetry.silent((telemetry.dispatch,))
    telemetry.attach("t-all", Recorder())
    assert telemetry.dispatch.events is None and "job.start" in telemetry.taken((telemetry.dispatch,))
    telemetry.detach("t-all")
    telemetry.detach("t-claim")
    assert telemetry.dispatch.events == {"job.stop"}
    telemetry.detach("t-stop")
    assert telemetry.silent((telemetry.dispatch,))


def test_the_events_a_list_of_handlers_takes():
    assert not telemetry.taken(())
    assert set(telemetry.taken((Recorder({"job.stop"}), Recorder({"claim", "job.stop"})))) == {"job.stop", "claim"}
    every = telemetry.taken((Recorder({"job.stop"}), lambda e, m: None))
    assert all(e in every for e in telemetry.EVENTS)


def test_the_shipped_handlers_declare_what_they_use():
    assert telemetry.DefaultLogger().events == {"job.stop", "job.exception", "queue.scale"}
    assert "job.start" not in telemetry.PrometheusMetrics().events
    assert {"job.start", "job.stop", "job.exception"} <= telemetry.OpenTelemetrySpans.events


@pytest.mark.parametrize(
    ("events", "error"),
    [("job.stop", TypeError), (42, TypeError), ({"job.end"}, ValueError), ({"job.stop", "jobs.stop"}, ValueError)],
)
def test_attaching_a_handler_with_malformed_events_is_refused_with_a_clear_error(clean_dispatch, events, error):
    with pytest.raises(error, match="event"):
        telemetry.attach("t-bad", Recorder(events))
    assert "t-bad" not in telemetry.attached()


def _run_ok_and_boom(db_url: str, *sinks: Recorder) -> tuple[int, int]:
    """A worker with `sinks` as its telemetry runs an `ok` and a `boom` job, then stops (a stop
    drains: every event of the two jobs has been emitted when it returns)."""
    config = WorkerConfig(node="enode", queues=(QueueConfig(app.QUEUE, QueueOpts(2, 2)),), **FAST)
    worker = Worker(db_url, app.registry, config, telemetry=sinks).start()
    try:
        with Client(db_url) as client:
            ok, boom = client.enqueue(app.QUEUE, "ok").id, client.enqueue(app.QUEUE, "boom").id
            wait_for(lambda: client.job(ok).terminal and client.job(boom).terminal, 30, "both jobs")
    finally:
        assert worker.stop(grace=5)
    return ok, boom


def test_a_worker_calls_sinks_for_the_events_they_declare_only(db_url):
    stops, claims = Recorder(frozenset({"job.stop"})), Recorder({"claim"})
    ok, _boom = _run_ok_and_boom(db_url, stops, claims)
    assert [(e, m["job_id"], m["state"], m["node"]) for e, m in stops.seen] == [("job.stop", ok, "succeeded", "enode")]
    assert claims.names() == {"claim"}
    exceptions = Recorder(["job.exception"])
    _ok, boom = _run_ok_and_boom(db_url, exceptions)
    assert [(e, m["job_id"], m["state"]) for e, m in exceptions.seen] == [("job.exception", boom, "failed")]


# --- the default logger's records ---------------------------------------------------------------------


def test_the_default_logger_line_for_a_success_a_failure_and_a_job_without_node():
    assert (
        telemetry.format_job_line({**STOP, "state": "succeeded", "duration_ms": 8143})
        == "belay job=812 kind=summarize queue=ai state=succeeded attempt=1 duration=8143ms node=n1"
    )
    assert (
        telemetry.format_job_line({**STOP, "state": "failed", "duration_ms": 3, "error": "Fail: 'x'"})
        == "belay job=812 kind=summarize queue=ai state=failed attempt=1 duration=3ms node=n1 error=\"Fail: 'x'\""
    )
    without = {k: v for k, v in STOP.items() if k not in ("node", "kind")}
    assert (
        telemetry.format_job_line({**without, "state": "ready", "duration_ms": 0})
        == "belay job=812 kind=summarize queue=ai state=ready attempt=1 duration=0ms"
    )
    assert (
        telemetry.format_job_line({**without, "state": "ready", "duration_ms": 0, "error": "E: e"})
        == "belay job=812 kind=summarize queue=ai state=ready attempt=1 duration=0ms error='E: e'"
    )


def test_a_default_logger_record_reaches_a_root_handler_with_its_level_name_message_and_origin(on_root):
    logger = logging.getLogger("belay.test.events.records")
    logger.setLevel(logging.INFO)
    handler = telemetry.DefaultLogger(logging.INFO, logger)
    handler("job.stop", {**STOP, "state": "succeeded", "duration_ms": 5})
    handler("job.exception", {**STOP, "state": "failed", "duration_ms": 6, "error": "Fail: boom"})
    handler("queue.scale", {"queue": "ai", "limit": 8})
    handler("job.start", STOP)
    handler("claim", {"queue": "ai", "node": "n1", "demand": 1, "claimed": 1, "duration_ms": 1.0})
    mine = [r for r in on_root.records if r.name == "belay.test.events.records"]
    assert [(r.levelno, r.getMessage()) for r in mine] == [
        (logging.INFO, "belay job=812 kind=summarize queue=ai state=succeeded attempt=1 duration=5ms node=n1"),
        (
            logging.WARNING,
            "belay job=812 kind=summarize queue=ai state=failed attempt=1 duration=6ms node=n1 error='Fail: boom'",
        ),
        (logging.INFO, "belay queue=ai limit=8"),
    ]
    record = mine[0]
    assert record.levelname == "INFO" and record.filename == "telemetry.py" and record.funcName == "__call__"
    assert record.module == "telemetry" and record.lineno > 0 and record.exc_info is None
    assert logging.Formatter("%(name)s %(levelname)s %(message)s").format(record) == (
        "belay.test.events.records INFO " + record.getMessage()
    )


def test_a_default_logger_on_a_logger_set_to_warning_writes_failures_only(on_root):
    logger = logging.getLogger("belay.test.events.warning")
    logger.setLevel(logging.WARNING)
    handler = telemetry.DefaultLogger(logging.INFO, logger)
    handler("job.stop", {**STOP, "state": "succeeded", "duration_ms": 5})
    handler("queue.scale", {"queue": "ai", "limit": 8})
    handler("job.exception", {**STOP, "state": "failed", "duration_ms": 6, "error": "Fail: boom"})
    mine = [r for r in on_root.records if r.name == "belay.test.events.warning"]
    assert [(r.levelno, r.getMessage().split(" state=")[1].split()[0]) for r in mine] == [(logging.WARNING, "failed")]


def test_a_default_logger_record_goes_through_the_loggers_filters_and_logging_disable(on_root):
    logger = logging.getLogger("belay.test.events.filtered")
    logger.setLevel(logging.INFO)
    dropped = logging.Filter("elsewhere")  # passes only records of the `elsewhere` logger
    logger.addFilter(dropped)
    handler = telemetry.DefaultLogger(logging.INFO, logger)
    try:
        handler("job.stop", {**STOP, "state": "succeeded", "duration_ms": 5})
        assert not [r for r in on_root.records if r.name == logger.name], "the logger's filter drops it"
    finally:
        logger.removeFilter(dropped)
    logging.disable(logging.INFO)
    try:
        handler("job.stop", {**STOP, "state": "succeeded", "duration_ms": 5})
        assert not [r for r in on_root.records if r.name == logger.name], "logging.disable(INFO) silences it"
    finally:
        logging.disable(logging.NOTSET)
    handler("job.stop", {**STOP, "state": "succeeded", "duration_ms": 5})
    assert len([r for r in on_root.records if r.name == logger.name]) == 1


def test_a_default_logger_record_honours_a_custom_log_record_factory(on_root):
    default = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = default(*args, **kwargs)
        record.trace_id = "t-1"  # what e.g. OpenTelemetry's logging instrumentation adds
        return record

    logger = logging.getLogger("belay.test.events.factory")
    logger.setLevel(logging.INFO)
    logging.setLogRecordFactory(factory)
    try:
        telemetry.DefaultLogger(logging.INFO, logger)("job.stop", {**STOP, "state": "succeeded", "duration_ms": 5})
    finally:
        logging.setLogRecordFactory(default)
    (record,) = [r for r in on_root.records if r.name == "belay.test.events.factory"]
    assert record.trace_id == "t-1"
