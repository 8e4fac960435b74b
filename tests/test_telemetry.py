"""Telemetry (impl/telemetry/; spec/belay-operations.txt "Telemetry") and the queue pause
extension, on real PostgreSQL with in-process Workers: the default logger's one line per job
attempt, Prometheus metrics served over HTTP (and by `belay worker --metrics-port`), OpenTelemetry
spans, and a paused belay_queues row stopping a node's claims without resetting its limits.
"""

from __future__ import annotations

import io
import logging
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from impl import telemetry
from impl.client import Client
from impl.ops.operator import Operator, stats_reader
from impl.runtime import QueueConfig, Worker, WorkerConfig
from impl.testing import wait_for
from model.queues import QueueOpts, merge_opts
from tests.apps import telemetry_app as app

ROOT = Path(__file__).resolve().parents[1]
FAST = {"busy_poll": 0.01, "poll_interval": 0.05, "sweep_interval": 0.1, "queue_refresh": 0.05}


@pytest.fixture
def worker(db_url):
    started: list[Worker] = []

    def start(telemetry_sinks: tuple | None = None, limit: int = 3) -> Worker:
        config = WorkerConfig(node="tnode", queues=(QueueConfig(app.QUEUE, QueueOpts(limit, limit)),), **FAST)
        kwargs = {} if telemetry_sinks is None else {"telemetry": telemetry_sinks}
        w = Worker(db_url, app.registry, config, **kwargs)
        started.append(w)
        return w.start()

    yield start
    for w in started:
        if not w.stopped.is_set():
            w.stop(grace=5)


def _when(needle: str, text: str) -> str | None:
    return text if needle in text else None


def finished(client: Client, *ids: int) -> bool:
    return all(client.job(i).terminal for i in ids)


def test_the_default_logger_writes_one_line_per_job_attempt(db_url, worker, caplog):
    caplog.set_level(logging.INFO, logger="belay")
    telemetry.attach_default_logger()
    try:
        worker()  # the default telemetry: the attached handlers
        with Client(db_url) as client:
            ok, boom = client.enqueue(app.QUEUE, "ok").id, client.enqueue(app.QUEUE, "boom").id
            wait_for(lambda: finished(client, ok, boom), 30, "both jobs to finish")
            wait_for(lambda: f"belay job={boom} " in caplog.text, 10, "the exception line")
            wait_for(lambda: f"belay job={ok} " in caplog.text, 10, "the success line (built in the background)")
    finally:
        assert telemetry.detach("belay-default-logger")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"belay job={ok} ")]
    assert len(lines) == 1, caplog.text
    assert re.fullmatch(
        rf"belay job={ok} kind=ok queue=tq state=succeeded attempt=1 duration=\d+ms node=tnode", lines[0]
    )
    line = next(r for r in caplog.records if r.getMessage().startswith(f"belay job={boom} "))
    assert line.levelno == logging.WARNING
    assert re.match(
        rf"belay job={boom} kind=boom queue=tq state=failed attempt=1 duration=\d+ms node=tnode "
        r'error="Fail: boom"$',
        line.getMessage(),
    )


def test_job_events_carry_duration_queue_kind_id_attempt_node_and_outcome(db_url, worker):
    events: list[tuple[str, dict]] = []
    worker((lambda e, m: events.append((e, m)),))
    with Client(db_url) as client:
        job_id = client.enqueue(app.QUEUE, "ok").id
        wait_for(lambda: any(e == "job.stop" for e, _ in events), 30, "job.stop")
    start = next(m for e, m in events if e == "job.start")
    stop = next(m for e, m in events if e == "job.stop")
    assert start == {"job_id": job_id, "kind": "ok", "worker": "ok", "queue": "tq", "attempt": 1, "node": "tnode"}
    assert stop["state"] == "succeeded" and isinstance(stop["duration_ms"], int)
    claim = next(m for e, m in events if e == "claim" and m["claimed"])
    assert claim["queue"] == "tq" and claim["duration_ms"] >= 0


def test_prometheus_metrics_count_outcomes_claims_and_read_queue_depth(db_url, worker):
    from impl.store import PgStore

    with PgStore(db_url) as store:
        metrics = telemetry.PrometheusMetrics(depth=stats_reader(store))
        server = metrics.serve(0)
        try:
            worker((metrics,))
            with Client(db_url) as client:
                ids = [
                    client.enqueue(app.QUEUE, "ok").id,
                    client.enqueue(app.QUEUE, "ok").id,
                    client.enqueue(app.QUEUE, "boom").id,
                ]
                client.enqueue("elsewhere", "ok")
                wait_for(lambda: finished(client, *ids), 30, "the jobs to finish")
            # job.stop is emitted after the ack commits; wait for the third outcome to be counted
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            text = wait_for(lambda: _when('outcome="failed"', httpx.get(url).text), 10, "the failed outcome counted")
        finally:
            server.shutdown()
    assert 'belay_jobs_total{kind="ok",outcome="succeeded",queue="tq"} 2.0' in text
    assert 'belay_jobs_total{kind="boom",outcome="failed",queue="tq"} 1.0' in text
    assert re.search(r'belay_claim_latency_seconds_count\{queue="tq"\} [1-9]', text)
    assert 'belay_queue_depth{queue="tq",state="succeeded"} 2.0' in text
    assert 'belay_queue_depth{queue="elsewhere",state="ready"} 1.0' in text
    metrics("ack.stale", {"job_id": 1, "attempt": 1})
    metrics("lease.lost", {"job_id": 1, "attempt": 1, "node": "n"})
    metrics("reclaim", {"node": "n", "retried": 2, "failed": 1})
    text = metrics.exposition()
    for line in (
        "belay_stale_acks_total 1.0",
        "belay_lease_losses_total 1.0",
        'belay_reclaims_total{outcome="retried"} 2.0',
        'belay_reclaims_total{outcome="failed"} 1.0',
    ):
        assert line in text


def test_opentelemetry_spans_cover_each_job_attempt(db_url, worker):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    worker((telemetry.OpenTelemetrySpans(provider),))
    with Client(db_url) as client:
        ok, boom = client.enqueue(app.QUEUE, "ok").id, client.enqueue(app.QUEUE, "boom").id
        spans = wait_for(
            lambda: len(exporter.get_finished_spans()) == 2 and exporter.get_finished_spans(), 30, "two spans"
        )
    by_job = {s.attributes["belay.job_id"]: s for s in spans}
    assert by_job[ok].name == "belay.job ok" and by_job[ok].attributes["belay.state"] == "succeeded"
    assert by_job[ok].attributes["belay.node"] == "tnode" and by_job[ok].attributes["belay.queue"] == "tq"
    assert by_job[boom].status.status_code == StatusCode.ERROR


def test_a_handler_that_raises_never_breaks_the_worker(db_url, worker):
    def broken(event, meta):
        raise RuntimeError("telemetry bug")

    telemetry.attach("broken", broken)
    try:
        worker()
        with Client(db_url) as client:
            job_id = client.enqueue(app.QUEUE, "ok").id
            wait_for(lambda: finished(client, job_id), 30, "the job")
            assert client.job(job_id).state == "succeeded"
    finally:
        telemetry.detach("broken")


def test_a_queue_row_merges_over_static_options_key_by_key():
    static = QueueOpts(2, 20, global_limit=5)
    assert merge_opts(static, {"paused": True}) == QueueOpts(2, 20, global_limit=5, paused=True)
    assert merge_opts(static, {"limit": 4, "global_limit": None}) == QueueOpts(4, 4)


def test_pausing_a_queue_stops_a_nodes_claims_without_resetting_its_limits_and_resume_restarts_them(db_url, worker):
    node = worker(limit=7)
    producer = node.producers[app.QUEUE]
    with Operator(db_url) as op, Client(db_url) as client:
        op.pause(app.QUEUE, create=True)  # no jobs yet
        wait_for(lambda: producer.opts.paused, 10, "the node to see the pause")
        assert (producer.opts.limit_min, producer.opts.limit_max) == (7, 7)
        job_id = client.enqueue(app.QUEUE, "ok").id
        for _ in range(3):  # several whole claim rounds pass without a claim
            producer.poke()
            wait_for(lambda: not producer.poked.is_set(), 10, "a producer round")
        assert client.job(job_id).state == "ready"
        op.resume(app.QUEUE)
        wait_for(lambda: finished(client, job_id), 30, "the job to run after resume")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_belay_worker_serves_metrics_and_logs_a_line_per_job(db_url, tmp_path):
    port = _free_port()
    log = tmp_path / "worker.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "impl.ops.cli",
                "worker",
                "--app",
                "tests.apps.telemetry_app",
                "--database-url",
                db_url,
                "--metrics-port",
                str(port),
                "--node",
                "cli-node",
                "--no-notify",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
        )
    try:
        with Client(db_url) as client:
            job_id = client.enqueue(app.QUEUE, "ok").id

            def scraped() -> str | None:
                try:
                    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
                except httpx.HTTPError:
                    return None
                return text if 'outcome="succeeded"' in text else None

            text = wait_for(scraped, 60, "the metrics endpoint to count the job")
        assert 'belay_jobs_total{kind="ok",outcome="succeeded",queue="tq"} 1.0' in text
        assert 'belay_queue_depth{queue="tq",state="succeeded"} 1.0' in text
        wait_for(lambda: f"belay job={job_id} kind=ok" in log.read_text(), 10, "the log line")
        assert re.search(
            rf"belay job={job_id} kind=ok queue=tq state=succeeded attempt=1 duration=\d+ms "
            "node=cli-node",
            log.read_text(),
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --- the batching log handler `belay worker` logs through ---------------------------------------------------


def _batching_logger(stream: io.StringIO, **kw: Any) -> tuple[logging.Logger, telemetry.BatchingStreamHandler]:
    logger = logging.getLogger(f"belay.test.batching.{id(stream)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = telemetry.BatchingStreamHandler(stream, **kw)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    return logger, handler


def test_batched_info_lines_wait_for_the_interval_and_a_warning_writes_them_at_once_in_order():
    stream = io.StringIO()
    logger, handler = _batching_logger(stream, interval=3600)
    try:
        logger.info("job 1 done")
        logger.info("job 2 done")
        assert stream.getvalue() == "", "INFO lines wait for the batch"
        logger.warning("lease lost")
        assert stream.getvalue() == "INFO job 1 done\nINFO job 2 done\nWARNING lease lost\n"
    finally:
        handler.close()


def test_batched_lines_are_written_when_the_interval_passes_when_capacity_is_reached_and_on_close():
    stream = io.StringIO()
    logger, handler = _batching_logger(stream, interval=0.05)
    logger.info("one")
    wait_for(lambda: stream.getvalue() == "INFO one\n", 10, "the flusher to write the pending line")
    handler.close()

    stream = io.StringIO()
    logger, handler = _batching_logger(stream, interval=3600, capacity=3)
    logger.info("a")
    logger.info("b")
    assert stream.getvalue() == ""
    logger.info("c")
    wait_for(lambda: stream.getvalue() == "INFO a\nINFO b\nINFO c\n", 10, "a full batch to be written")
    logger.info("d")
    handler.close()
    assert stream.getvalue().endswith("INFO d\n"), "close() writes what is waiting"
