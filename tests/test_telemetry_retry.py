"""Telemetry of a job whose code raised and was scheduled for a retry (issue 32).

impl/telemetry/: `job.exception` is "the job code raised; state says what the ack made of it" — also
when the ack made it `ready` again (a retry). tests/test_telemetry.py looks at final failures only (a
`Fail` is never retried), so a runtime that reported a retried attempt as a plain `job.stop` went
unnoticed. Both execution paths: one job per invocation (`Worker.execute`) and a chunk kind
(`Worker.execute_chunk`, whose per-job results may be exceptions).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from impl import telemetry
from impl.client import Client
from impl.runtime import QueueConfig, Worker, WorkerConfig
from impl.testing import wait_for
from impl.worker import Registry
from model import worker_ops as w
from model.queues import QueueOpts

QUEUE = "tr"
FAST: dict[str, Any] = {"busy_poll": 0.01, "poll_interval": 0.05, "sweep_interval": 0.1, "queue_refresh": 0.05}
NO_WAIT = w.Backoff(base_s=0, factor=1, max_s=0)  # the retry is due at once

registry = Registry()


@registry.kind("flaky", queue=QUEUE, backoff=NO_WAIT)
def flaky(ctx, input):
    if ctx.attempt == 1:
        raise RuntimeError("transient")
    return {"attempt": ctx.attempt}


@registry.kind("flaky_chunk", queue=QUEUE, chunk={"size": 4, "gather_ms": 50}, backoff=NO_WAIT)
def flaky_chunk(contexts):
    return {c.id: RuntimeError("transient") if c.attempt == 1 else {"attempt": c.attempt} for c in contexts}


@pytest.fixture
def run_jobs(db_url):
    """Enqueue `n` jobs of `kind` with max_attempts 3, run a node until all succeed; the events seen."""
    workers: list[Worker] = []

    def run(kind: str, n: int = 1, *, attached: bool = False) -> tuple[list[int], list[tuple[str, dict]]]:
        events: list[tuple[str, dict]] = []
        lock = threading.Lock()

        def sink(event: str, meta: dict) -> None:
            with lock:
                events.append((event, dict(meta)))

        config = WorkerConfig(node="rnode", queues=(QueueConfig(QUEUE, QueueOpts(4, 4)),), **FAST)
        sinks = (telemetry.dispatch, sink) if attached else (sink,)  # dispatch: the attached handlers
        worker = Worker(db_url, registry, config, telemetry=sinks)
        workers.append(worker)
        worker.start()
        with Client(db_url) as client:
            ids = [_id(client.enqueue(QUEUE, kind, max_attempts=3)) for _ in range(n)]
            wait_for(lambda: all(_job(client, i).state == "succeeded" for i in ids), 30, f"{kind} jobs to succeed")
            assert all(_job(client, i).attempt == 2 for i in ids)
        wait_for(lambda: sum(e == "job.stop" for e, _ in list(events)) >= n, 10, "the successes' job.stop")
        with lock:
            return ids, list(events)

    yield run
    for worker in workers:
        if not worker.stopped.is_set():
            worker.stop(grace=5)


def _id(outcome: Any) -> int:
    assert isinstance(outcome.id, int)
    return outcome.id


def _job(client: Client, job_id: int) -> Any:
    job = client.job(job_id)
    assert job is not None
    return job


def _endings(events: list[tuple[str, dict]], job_id: int, attempt: int) -> list[tuple[str, dict]]:
    return [
        (e, m)
        for e, m in events
        if e in ("job.stop", "job.exception") and m.get("job_id") == job_id and m.get("attempt") == attempt
    ]


@pytest.mark.parametrize("kind,n", [("flaky", 1), ("flaky_chunk", 3)])
def test_an_attempt_that_raised_and_is_retried_ends_in_job_exception_with_state_ready(run_jobs, kind, n):
    ids, events = run_jobs(kind, n)
    for job_id in ids:
        first = _endings(events, job_id, 1)
        assert [e for e, _ in first] == ["job.exception"], f"job {job_id} attempt 1 (raised, retried): {first}"
        meta = first[0][1]
        assert meta["state"] == "ready", meta
        assert meta["error"] == "RuntimeError: transient", meta
        assert meta["kind"] == kind and meta["queue"] == QUEUE and isinstance(meta["duration_ms"], int)
        second = _endings(events, job_id, 2)
        assert [(e, m["state"]) for e, m in second] == [("job.stop", "succeeded")], second


def test_the_default_logger_writes_a_retried_attempt_at_warning_with_its_error(run_jobs, caplog):
    caplog.set_level(logging.INFO, logger="belay")
    telemetry.attach_default_logger()
    try:
        [job_id], _ = run_jobs("flaky", attached=True)
        wait_for(lambda: f"belay job={job_id} " in caplog.text and "attempt=2" in caplog.text, 10, "both lines")
    finally:
        assert telemetry.detach("belay-default-logger")
    lines = [r for r in caplog.records if r.getMessage().startswith(f"belay job={job_id} ")]
    first = [r for r in lines if " attempt=1 " in r.getMessage()]
    assert len(first) == 1, caplog.text
    assert first[0].levelno == logging.WARNING
    assert " state=ready " in first[0].getMessage() and 'error="RuntimeError: transient"' in first[0].getMessage()
