"""Optional integrations (extras `otel` and `prometheus`): `OpenTelemetrySpans` (one span per job attempt)
and `PrometheusMetrics` (claim latency, jobs by outcome, stale acks, lease losses, reclaims, queue depth).
"""

from __future__ import annotations

import bisect
import collections
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

from impl.telemetry.events import attach, detach
from impl.telemetry.logger import _taken

log = logging.getLogger("belay")


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
