"""Telemetry handlers that declare their events, and the default logger's log records
(impl/telemetry/; spec/belay-operations.txt "Telemetry"; issue 15: telemetry on costs the runtime
at most 5 % of its throughput, so nothing is built or called for an event no handler takes).

Unit tests call the handlers and `dispatch` directly; one test runs a real Worker on PostgreSQL.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from impl import telemetry
from impl.client import Client
from impl.runtime import QueueConfig, Worker, WorkerConfig
from impl.telemetry import logger as telemetry_logger
from impl.testing import wait_for
from model.queues import QueueOpts
from tests.apps import telemetry_app as app

ROOT = Path(__file__).resolve().parents[1]
FAST = {"busy_poll": 0.01, "poll_interval": 0.05, "sweep_interval": 0.1, "queue_refresh": 0.05}
STOP = {"job_id": 812, "kind": "summarize", "worker": "summarize", "queue": "ai", "attempt": 1, "node": "n1"}


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
        == 'belay job=812 kind=summarize queue=ai state=ready attempt=1 duration=0ms error="E: e"'
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
            'belay job=812 kind=summarize queue=ai state=failed attempt=1 duration=6ms node=n1 error="Fail: boom"',
        ),
        (logging.INFO, "belay queue=ai limit=8"),
    ]
    record = mine[0]
    assert record.levelname == "INFO" and record.filename == "logger.py" and record.funcName == "__call__"
    assert record.module == "logger" and record.lineno > 0 and record.exc_info is None
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


# --- the default logger in the background ------------------------------------------------------------------


def _records(on_root: ListHandler, name: str) -> list[logging.LogRecord]:
    return [r for r in on_root.records if r.name == name]


def test_a_background_line_is_handled_later_with_the_time_and_thread_of_its_event(on_root):
    logger = logging.getLogger("belay.test.events.background")
    logger.setLevel(logging.INFO)
    handler = telemetry.DefaultLogger(logging.INFO, logger, background=True, interval=3600)
    times: list[float] = []

    def job_thread() -> None:
        times.append(time.time())
        handler("job.stop", {**STOP, "state": "succeeded", "duration_ms": 5})
        times.append(time.time())

    try:
        thread = threading.Thread(target=job_thread, name="belay-tq_7")
        thread.start()
        thread.join()
        assert not _records(on_root, logger.name), "queued, not handled on the job's thread"
        time.sleep(0.01)  # so that a record stamped when it is built would be visibly later
        handler.flush()
        (record,) = _records(on_root, logger.name)
    finally:
        handler.close()
    assert record.getMessage() == "belay job=812 kind=summarize queue=ai state=succeeded attempt=1 duration=5ms node=n1"
    assert record.threadName == "belay-tq_7" and record.thread == thread.ident
    assert times[0] <= record.created <= times[1]
    assert record.msecs == int((record.created - int(record.created)) * 1000)
    assert abs(record.relativeCreated - (record.created - logging._startTime) * 1000) < 1e-3
    assert record.funcName == "__call__" and record.filename == "logger.py" and record.levelno == logging.INFO


def test_a_background_record_has_the_attributes_make_record_gives_and_honours_a_record_factory(on_root):
    """The background thread copies one makeRecord-made record's attributes per logger and level (issue 33:
    LogRecord.__init__ was most of its time per line): the same attributes as a synchronous line's record,
    bar the event's time and thread; a log record factory, when one is set, still builds every record."""
    logger = logging.getLogger("belay.test.events.bg_record")
    logger.setLevel(logging.INFO)
    event = {**STOP, "state": "succeeded", "duration_ms": 5}
    telemetry.DefaultLogger(logging.INFO, logger)("job.stop", event)
    background = telemetry.DefaultLogger(logging.INFO, logger, background=True, interval=3600)
    default = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = default(*args, **kwargs)
        record.trace_id = "t-2"
        return record

    try:
        background("job.stop", event)
        background("job.stop", {**event, "job_id": 813})
        background.flush()
        logging.setLogRecordFactory(factory)
        background("job.stop", {**event, "job_id": 814})
        background.flush()
    finally:
        logging.setLogRecordFactory(default)
        background.close()
    sync, first, second, made = _records(on_root, logger.name)
    when = {"created", "msecs", "relativeCreated", "thread", "threadName", "args"}
    assert {k: v for k, v in vars(first).items() if k not in when} == {
        k: v for k, v in vars(sync).items() if k not in when
    }
    assert first.getMessage() == sync.getMessage() and "job=813" in second.getMessage()
    assert first is not second and not hasattr(first, "trace_id")
    assert made.trace_id == "t-2" and "job=814" in made.getMessage()


def test_background_lines_go_out_within_the_interval_and_a_warning_at_once_after_them_in_order(on_root):
    logger = logging.getLogger("belay.test.events.order")
    logger.setLevel(logging.INFO)
    handler = telemetry.DefaultLogger(logging.INFO, logger, background=True, interval=3600)
    try:
        for job_id in (1, 2):
            handler("job.stop", {**STOP, "job_id": job_id, "state": "succeeded", "duration_ms": 5})
        assert not _records(on_root, logger.name)
        handler("job.exception", {**STOP, "job_id": 3, "state": "failed", "duration_ms": 6, "error": "Fail: x"})
        assert [(r.levelno, r.getMessage().split()[1]) for r in _records(on_root, logger.name)] == [
            (logging.INFO, "job=1"),
            (logging.INFO, "job=2"),
            (logging.WARNING, "job=3"),
        ]
    finally:
        handler.close()
    quick = telemetry.DefaultLogger(logging.INFO, logger, background=True, interval=0.05)
    try:
        quick("job.stop", {**STOP, "job_id": 4, "state": "succeeded", "duration_ms": 5})
        wait_for(lambda: len(_records(on_root, logger.name)) == 4, 10, "the background thread to handle the line")
    finally:
        quick.close()


class _CountingEvent(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def test_a_full_background_logger_wakes_its_thread_once_not_once_per_line(on_root, monkeypatch):
    """From `capacity` queued lines on, each line used to set the thread's event again (its Condition's lock
    and a notify each time) until the thread had drained, paid by the job's thread while the log thread
    waited for the GIL. Here the thread never runs, so the lines stay queued."""
    logger = logging.getLogger("belay.test.events.wake")
    logger.setLevel(logging.INFO)
    handler = telemetry.DefaultLogger(logging.INFO, logger, background=True, interval=3600, capacity=5)
    monkeypatch.setattr(handler, "_start", lambda: setattr(handler, "_thread", threading.current_thread()))
    handler._wake = wake = _CountingEvent()
    for job_id in range(9):  # below 2 × capacity: the job's thread does not drain them itself
        handler("job.stop", {**STOP, "job_id": job_id, "state": "succeeded", "duration_ms": 5})
    assert wake.sets == 1 and len(handler._pending) == 9
    handler._thread = None
    handler.flush()
    assert len(_records(on_root, logger.name)) == 9


def test_detaching_the_attached_default_logger_handles_its_queued_lines_and_stops_its_thread(on_root):
    logging.getLogger("belay").setLevel(logging.INFO)
    try:
        handler = telemetry.attach_default_logger(handler_id="t-default-bg")
        assert handler.background
        telemetry.dispatch("job.stop", {**STOP, "job_id": 5, "state": "succeeded", "duration_ms": 5})
        thread = handler._thread
        assert thread is not None and thread.is_alive()
        assert telemetry.detach("t-default-bg")
        assert not thread.is_alive()
        assert [r.getMessage().split()[1] for r in _records(on_root, "belay")] == ["job=5"]
    finally:
        logging.getLogger("belay").setLevel(logging.NOTSET)


def test_a_process_that_exits_normally_writes_the_lines_still_queued(tmp_path):
    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, format='%(threadName)s %(message)s', stream=sys.stdout)\n"
        "from impl import telemetry\n"
        "h = telemetry.DefaultLogger(logging.INFO, background=True, interval=3600)\n"
        "h('job.stop', {'job_id': 9, 'kind': 'k', 'queue': 'q', 'state': 'succeeded', 'attempt': 1,"
        " 'duration_ms': 1, 'node': 'n'})\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "MainThread belay job=9 kind=k queue=q state=succeeded attempt=1 duration=1ms node=n\n"


# --- Prometheus: observations folded in at collection ---------------------------------------------------------


def test_prometheus_counts_every_queued_observation_at_a_scrape_and_at_capacity():
    metrics = telemetry.PrometheusMetrics(capacity=100)
    sample = metrics.registry.get_sample_value  # a collection of the registry
    for _ in range(5):
        metrics("claim", {"queue": "ai", "node": "n1", "demand": 2, "claimed": 1, "duration_ms": 3.0})
    for i in range(250):
        metrics("job.stop", {**STOP, "state": "succeeded", "duration_ms": i % 3})
        if i % 50 == 0:
            metrics("job.exception", {**STOP, "state": "failed", "duration_ms": 2000, "error": "E"})
    # at capacity the belay-metrics thread folds them (the reporting thread only past 4 x capacity)
    deadline = time.monotonic() + 10
    while len(metrics._pending) >= 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(metrics._pending) < 100, "folded at capacity"
    assert metrics._folder is not None and metrics._folder.name == "belay-metrics"
    labels = {"queue": "ai", "kind": "summarize"}
    assert sample("belay_jobs_total", {**labels, "outcome": "succeeded"}) == 250
    assert sample("belay_jobs_total", {**labels, "outcome": "failed"}) == 5
    assert sample("belay_job_duration_seconds_count", labels) == 255
    assert sample("belay_job_duration_seconds_bucket", {**labels, "le": "0.005"}) == 250
    assert sample("belay_job_duration_seconds_sum", labels) == pytest.approx(sum(i % 3 for i in range(250)) / 1000 + 10)
    assert sample("belay_claim_latency_seconds_count", {"queue": "ai"}) == 5
    assert sample("belay_claim_latency_seconds_bucket", {"queue": "ai", "le": "0.0025"}) == 0
    assert sample("belay_claim_latency_seconds_bucket", {"queue": "ai", "le": "0.005"}) == 5
    assert not metrics._pending
    assert 'belay_jobs_total{kind="summarize",outcome="failed",queue="ai"} 5.0' in metrics.exposition()


def test_prometheus_buckets_are_cumulative_and_a_value_on_a_bound_counts_in_that_bucket():
    """`le` as prometheus_client's Histogram: an observation equal to a bound is in that bound's bucket,
    every bucket counts the observations at or below its bound, +Inf all of them."""
    metrics = telemetry.PrometheusMetrics()
    sample = metrics.registry.get_sample_value
    for ms in (5, 5, 6, 10, 30, 20000):
        metrics("job.stop", {**STOP, "state": "succeeded", "duration_ms": ms})
    metrics("claim", {"queue": "ai", "node": "n1", "demand": 1, "claimed": 1, "duration_ms": 1.0})
    labels = {"queue": "ai", "kind": "summarize"}
    expected = {"0.005": 2, "0.01": 4, "0.025": 4, "0.05": 5, "10.0": 5, "+Inf": 6}
    assert {le: sample("belay_job_duration_seconds_bucket", {**labels, "le": le}) for le in expected} == expected
    assert sample("belay_job_duration_seconds_count", labels) == 6
    assert sample("belay_job_duration_seconds_sum", labels) == pytest.approx(20.056)
    assert sample("belay_claim_latency_seconds_bucket", {"queue": "ai", "le": "0.001"}) == 1


def test_a_filter_that_raises_on_a_background_line_loses_that_line_only(on_root):
    belay = logging.getLogger("belay")

    def broken(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "job=1 " in message or "could not be handled" in message:  # the line, and the report of it
            raise RuntimeError("filter bug")
        return True

    belay.setLevel(logging.INFO)
    belay.addFilter(broken)
    handler = telemetry.DefaultLogger(logging.INFO, belay, background=True, interval=0.05)
    try:
        handler("job.stop", {**STOP, "job_id": 1, "state": "succeeded", "duration_ms": 5})
        wait_for(lambda: not handler._pending, 10, "the background thread to take the line")
        handler("job.stop", {**STOP, "job_id": 2, "state": "succeeded", "duration_ms": 5})
        wait_for(lambda: _records(on_root, "belay"), 10, "the next line, from the same thread")
    finally:
        handler.close()
        belay.removeFilter(broken)
        belay.setLevel(logging.NOTSET)
    assert [r.getMessage().split()[1] for r in _records(on_root, "belay")] == ["job=2"]


def test_a_forked_child_writes_its_background_lines_from_its_own_thread():
    script = (
        "import logging, os, sys, time\n"
        "logging.basicConfig(level=logging.INFO, format='%(process)d %(message)s', stream=sys.stdout)\n"
        "from impl import telemetry\n"
        "h = telemetry.DefaultLogger(logging.INFO, background=True, interval=0.05)\n"
        "line = {'kind': 'k', 'queue': 'q', 'state': 'succeeded', 'attempt': 1, 'duration_ms': 1}\n"
        "h('job.stop', {**line, 'job_id': 1})\n"
        "h.flush()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    h('job.stop', {**line, 'job_id': 2})\n"
        "    deadline = time.monotonic() + 20\n"
        "    while h._pending and time.monotonic() < deadline:\n"
        "        time.sleep(0.01)\n"
        "    time.sleep(0.1)\n"
        "    sys.stdout.flush()\n"
        "    os._exit(0)\n"  # no atexit: only the child's own background thread can have written it
        "os.waitpid(pid, 0)\n"
        "print('child', pid)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    parent_line, child_line, last = out.stdout.splitlines()
    assert "job=1 " in parent_line and "job=2 " in child_line
    assert child_line.split()[0] == last.split()[1] != parent_line.split()[0], "written by the child"


def test_telemetry_flush_hands_over_every_background_loggers_queued_lines(on_root):
    logger = logging.getLogger("belay.test.events.flush")
    logger.setLevel(logging.INFO)
    handler = telemetry.DefaultLogger(logging.INFO, logger, background=True, interval=3600)
    try:
        handler("job.stop", {**STOP, "state": "succeeded", "duration_ms": 5})
        assert not _records(on_root, logger.name)
        telemetry.flush()  # what `belay worker` calls before leaving with os._exit
        assert len(_records(on_root, logger.name)) == 1
    finally:
        handler.close()


def test_the_second_caching_formatter_formats_as_logging_formatter_does_across_seconds():
    """`belay worker`'s job lines: the date and time rendered once per second, the same text as the stdlib's."""
    import time as _time

    from impl.telemetry import SecondCachingFormatter

    fmt = "%(asctime)s %(levelname)s %(message)s"
    cached, plain = SecondCachingFormatter(fmt), logging.Formatter(fmt)
    base = _time.time()
    for offset in (0.0, 0.001, 0.5, 0.999, 1.0, 1.2, 59.9, 60.0, 3600.5, 0.2, 86400.0, 0.3):
        record = logging.LogRecord("belay", logging.INFO, __file__, 1, "belay job=%s", (offset,), None)
        record.created = base + offset
        record.msecs = int((record.created - int(record.created)) * 1000) + 0.0
        assert cached.format(record) == plain.format(record), offset
    dated = SecondCachingFormatter(fmt, datefmt="%H:%M")
    assert dated.format(record) == logging.Formatter(fmt, datefmt="%H:%M").format(record)


def test_the_background_threads_hand_the_gil_on_after_holding_it_a_while_and_only_then(monkeypatch):
    """A background drain or fold calls time.sleep(0) whenever it has run `_YIELD_AFTER` seconds since it
    last did (here 0: before every item after the first check), and never when not yielding (a flush)."""
    slept: list[float] = []
    monkeypatch.setattr(telemetry_logger.time, "sleep", lambda s: slept.append(s))
    logger = logging.getLogger("belay.test.yield")
    logger.propagate = False
    logger.addHandler(logging.NullHandler())
    line = {**STOP, "state": "succeeded", "duration_ms": 5}
    handler = telemetry.DefaultLogger(logging.INFO, logger, background=True, interval=3600, capacity=10_000)
    metrics = telemetry.PrometheusMetrics(capacity=10_000)
    try:
        for _ in range(5):
            handler._pending.append((logging.INFO, *telemetry.job_line(line), time.time(), 1, "t"))
            metrics("job.stop", line)
        monkeypatch.setattr(telemetry_logger, "_YIELD_AFTER", 3600.0)
        with handler._flushing:
            handler._drain(yielding=True)
        metrics.fold(yielding=True)
        assert slept == [] and not handler._pending and not metrics._pending  # held briefly: no hand-on
        for _ in range(5):
            handler._pending.append((logging.INFO, *telemetry.job_line(line), time.time(), 1, "t"))
            metrics("job.stop", line)
        monkeypatch.setattr(telemetry_logger, "_YIELD_AFTER", 0.0)
        handler.flush()
        metrics.fold()
        assert slept == []  # a flush on the caller's thread never hands on
        for _ in range(5):
            handler._pending.append((logging.INFO, *telemetry.job_line(line), time.time(), 1, "t"))
            metrics("job.stop", line)
        with handler._flushing:
            handler._drain(yielding=True)
        metrics.fold(yielding=True)
        assert slept == [0] * 10
    finally:
        handler.close()


def test_the_log_flusher_hands_the_gil_on_while_it_formats_a_batch(monkeypatch):
    """BatchingStreamHandler's flusher thread formats a batch the way the background threads above drain
    theirs (`flush(yielding=True)`); a flush on a caller's thread (a warning, close) never hands on."""
    slept: list[float] = []
    stream = io.StringIO()
    out = telemetry.BatchingStreamHandler(stream, interval=3600, capacity=10_000)
    out.setFormatter(logging.Formatter("%(message)s"))
    monkeypatch.setattr(telemetry_logger.time, "sleep", lambda s: slept.append(s))
    monkeypatch.setattr(telemetry_logger, "_YIELD_AFTER", 0.0)
    try:
        for i in range(4):
            out.handle(logging.LogRecord("belay", logging.INFO, __file__, 1, "line %d", (i,), None))
        out.flush()
        assert slept == [] and stream.getvalue() == "line 0\nline 1\nline 2\nline 3\n"
        for i in range(4, 8):
            out.handle(logging.LogRecord("belay", logging.INFO, __file__, 1, "line %d", (i,), None))
        out.flush(yielding=True)
        assert slept == [0] * 4, "the flusher held the GIL through its whole batch"
        assert stream.getvalue().splitlines() == [f"line {i}" for i in range(8)]
    finally:
        out.close()
