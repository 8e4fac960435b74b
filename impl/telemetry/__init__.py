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

The modules, bottom to top: `logfmt.py` (quoting, parsing, the job line), `logger.py` (`DefaultLogger`,
the formatters and the batching stream handler), `events.py` (the events, attach/detach, `dispatch`,
`attach_default_logger`), `exporters.py` (OpenTelemetry, Prometheus). Callers import from `impl.telemetry`.
"""

from impl.telemetry.events import (
    EVENTS,
    EVERY_EVENT,
    Handler,
    attach,
    attach_default_logger,
    attached,
    declared_events,
    default_logger,
    detach,
    dispatch,
    silent,
    taken,
    takes,
)
from impl.telemetry.exporters import OpenTelemetrySpans, PrometheusMetrics, attach_opentelemetry, attach_prometheus
from impl.telemetry.logfmt import format_job_line, job_line, logfmt_value, parse_logfmt
from impl.telemetry.logger import (
    BatchingStreamHandler,
    DefaultLogger,
    JsonLinesFormatter,
    SecondCachingFormatter,
    flush,
)

__all__ = [
    "EVENTS",
    "EVERY_EVENT",
    "BatchingStreamHandler",
    "DefaultLogger",
    "Handler",
    "JsonLinesFormatter",
    "OpenTelemetrySpans",
    "PrometheusMetrics",
    "SecondCachingFormatter",
    "attach",
    "attach_default_logger",
    "attach_opentelemetry",
    "attach_prometheus",
    "attached",
    "declared_events",
    "default_logger",
    "detach",
    "dispatch",
    "flush",
    "format_job_line",
    "job_line",
    "logfmt_value",
    "parse_logfmt",
    "silent",
    "taken",
    "takes",
]
