"""Prometheus metrics of the API.

Service-wide figures (queue depth; jobs, documents and job durations of the jobs created in the last
`metrics_window_s`) are read from Redis when scraped, so every API replica reports the same values; HTTP
request figures are per replica, as usual.
"""
import bisect
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter as PromCounter, Histogram
from prometheus_client import generate_latest
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.jobs import Job, JobStatus
from core.queues import queue_depth
from core.state import JobState

JOB_DURATION_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0)
DOCUMENT_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
_JOBS_PER_ROUND_TRIP = 500

router = APIRouter(tags=["metrics"])


class ServiceCollector(Collector):
    """Queue depth, and the statuses, document counts and durations of the jobs created in the last `window_s`
    seconds, read from Redis.

    Reading the window's jobs costs one pipelined round trip per 500 jobs, so results are kept for `cache_s`
    seconds: several scrapers in that time share one read.
    """

    def __init__(self, state: JobState, queue: str, window_s: int, cache_s: float = 10.0):
        self.state = state
        self.queue = queue
        self.window_s = window_s
        self.cache_s = cache_s
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] > self.cache_s:
                self._cached = (now, self._read())
            return iter(self._cached[1])

    def _jobs(self) -> Iterator[Job]:
        """The jobs created within the window (the tenants' job indexes are scored by creation time in ms)."""
        since_ms = int((time.time() - self.window_s) * 1000)
        ids: list[str] = []
        for index in self.state.redis.scan_iter(match=f"{self.state.prefix}tenant:*:jobs", count=1000):
            ids.extend(member.decode() for member in self.state.redis.zrangebyscore(index, since_ms, "+inf"))
        for start in range(0, len(ids), _JOBS_PER_ROUND_TRIP):
            yield from (job for job in self.state.get_many(ids[start:start + _JOBS_PER_ROUND_TRIP]) if job)

    def _read(self) -> list[Metric]:
        depth = GaugeMetricFamily("docflash_queue_depth", "Tasks waiting in the GPU queue", labels=["queue"])
        depth.add_metric([self.queue], queue_depth(self.state.redis, self.queue))
        jobs_by_status: Counter[str] = Counter({status.value: 0 for status in JobStatus})
        documents: Counter[str] = Counter({name: 0 for name in DOCUMENT_STATES})
        durations: dict[str, list[float]] = defaultdict(list)
        for job in self._jobs():
            jobs_by_status[job.status.value] += 1
            for name in DOCUMENT_STATES:
                documents[name] += getattr(job.counts, name)
            if job.finished_at is not None:
                durations[job.task].append((job.finished_at - (job.started_at or job.created_at)).total_seconds())
        jobs = GaugeMetricFamily("docflash_jobs", "Jobs created in the metrics window, by status", labels=["status"])
        for status, count in sorted(jobs_by_status.items()):
            jobs.add_metric([status], count)
        docs = GaugeMetricFamily(
            "docflash_documents", "Documents of the jobs created in the metrics window, by state", labels=["state"]
        )
        for name, count in documents.items():
            docs.add_metric([name], count)
        return [depth, jobs, docs, _duration_histogram(durations)]


def _duration_histogram(durations: dict[str, list[float]]) -> GaugeHistogramMetricFamily:
    family = GaugeHistogramMetricFamily(
        "docflash_job_duration_seconds",
        "Run time (start to end) of the finished jobs created in the metrics window, by task",
        labels=["task"],
    )
    for task, values in sorted(durations.items()):
        values.sort()
        buckets = [(f"{bound:g}", float(bisect.bisect_right(values, bound))) for bound in JOB_DURATION_BUCKETS]
        buckets.append(("+Inf", float(len(values))))
        family.add_metric([task], buckets, sum(values))
    return family


class RequestMetrics:
    """HTTP requests answered and their durations, by method, route template and status code."""

    def __init__(self, registry: CollectorRegistry):
        self.requests = PromCounter(
            "docflash_api_requests", "HTTP requests answered", ["method", "route", "status"], registry=registry
        )
        self.seconds = Histogram(
            "docflash_api_request_duration_seconds", "Time to answer HTTP requests", ["method", "route"],
            registry=registry,
        )


class RequestMetricsMiddleware:
    """Records every HTTP request in a RequestMetrics."""

    def __init__(self, app: ASGIApp, metrics: RequestMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(scope["method"], route, str(status)).inc()
            self.metrics.seconds.labels(scope["method"], route).observe(time.perf_counter() - start)


@router.get("/metrics", response_class=Response, summary="Prometheus metrics")
def metrics(request: Request) -> Response:
    """Metrics in the Prometheus text format."""
    return Response(generate_latest(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST)
