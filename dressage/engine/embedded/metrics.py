"""The embedded engine's `/metrics`: SGLang's own metric names, as the release it plays exports
them (`dressage.metrics.sglang`), so the dashboard's SGLang engine row and the tests read an
embedded engine as they read SGLang.

The scheduler's gauges are read when scraped: the requests running and waiting, the KV-cache
tokens in use (`num_used_tokens`; `token_usage` is their share of the cache, `max_batch_size x
context_length` tokens here) and the generation throughput, the tokens produced per second since
the previous reading at least a second before (SGLang measures it over its decode log interval).
The per-request series are observed when a request finishes, from the scheduler thread:
prompt and generated tokens, requests, the time to first token and the end-to-end latency,
counted from the request's arrival as SGLang's tokenizer manager counts them. Each engine has a
registry of its own, so engines sharing a process (tests) do not mix their series.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dressage.engine.embedded.scheduler import Request, Scheduler
from dressage.metrics import sglang

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
THROUGHPUT_WINDOW_S = 1.0
"""The shortest time over which the generation throughput is measured."""

Clock = Callable[[], float]


class _SchedulerGauges(Collector):
    """The scheduler's gauges, read from the scheduler when scraped."""

    def __init__(
        self, scheduler: Scheduler, labels: tuple[str, ...], values: list[str], clock: Clock
    ) -> None:
        self._scheduler = scheduler
        self._labels = labels
        self._values = values
        self._clock = clock
        self._lock = threading.Lock()
        self._last = (clock(), scheduler.stats.tokens)
        self._throughput = 0.0

    def _gen_throughput(self) -> float:
        with self._lock:
            now, tokens = self._clock(), self._scheduler.stats.tokens
            then, before = self._last
            if now - then >= THROUGHPUT_WINDOW_S:
                self._throughput = (tokens - before) / (now - then)
                self._last = (now, tokens)
            return self._throughput

    def collect(self) -> Iterator[Metric]:
        s = self._scheduler
        running = list(s.running_requests())
        used = sum(r.length for r in running)
        capacity = s.max_batch_size * s.context_length
        values = {
            sglang.NUM_RUNNING_REQS: float(len(running)),
            sglang.NUM_QUEUE_REQS: float(s.waiting_count()),
            sglang.NUM_USED_TOKENS: float(used),
            sglang.TOKEN_USAGE: used / capacity if capacity else 0.0,
            sglang.GEN_THROUGHPUT: self._gen_throughput(),
        }
        for metric in sglang.METRICS:
            if metric.role == "scheduler":
                family = GaugeMetricFamily(metric.name, metric.help, labels=self._labels)
                family.add_metric(self._values, values[metric.name])
                yield family


class EngineMetrics:
    """One engine's registry: SGLang's declared metrics with `release`'s labels."""

    def __init__(
        self,
        scheduler: Scheduler,
        model_name: str,
        release: str,
        clock: Clock = time.monotonic,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.release = release
        labels = sglang.release_labels(release)
        known = {
            "model_name": model_name,
            "engine_type": labels.engine_type,
            "tp_rank": "0",
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }
        self._tokenizer_values = [known[name] for name in labels.tokenizer]
        self._streaming = bool(labels.per_request)
        self.registry.register(
            _SchedulerGauges(
                scheduler, labels.scheduler, [known[n] for n in labels.scheduler], clock
            )
        )
        self._per_request: dict[str, Counter | Histogram] = {}
        for metric in sglang.METRICS:
            if metric.role != "tokenizer":
                continue
            names = sglang.labels_of(metric, release)
            if metric.kind == "counter":
                self._per_request[metric.name] = Counter(
                    metric.name, metric.help, names, registry=self.registry
                )
            else:
                self._per_request[metric.name] = Histogram(
                    metric.name,
                    metric.help,
                    names,
                    registry=self.registry,
                    buckets=sglang.LATENCY_BUCKETS,
                )
        self._clock = clock

    def finished(self, request: Request) -> None:
        """Count a finished request (any thread; the scheduler calls it as it finishes one)."""
        values = list(self._tokenizer_values)
        if self._streaming:
            values.append("true" if request.stream else "false")
        m = self._per_request
        now = self._clock()
        counter(m[sglang.PROMPT_TOKENS]).labels(*values).inc(len(request.prompt_ids))
        counter(m[sglang.GENERATION_TOKENS]).labels(*values).inc(len(request.output_ids))
        counter(m[sglang.NUM_REQUESTS]).labels(*values).inc()
        if request.first_token_at is not None:
            ttft = max(0.0, request.first_token_at - request.created)
            histogram(m[sglang.TIME_TO_FIRST_TOKEN]).labels(*values).observe(ttft)
        latency = max(0.0, now - request.created)
        histogram(m[sglang.E2E_REQUEST_LATENCY]).labels(*values).observe(latency)

    def exposition(self) -> bytes:
        """The text `/metrics` answers."""
        return generate_latest(self.registry)


def counter(metric: Counter | Histogram) -> Counter:
    assert isinstance(metric, Counter)
    return metric


def histogram(metric: Counter | Histogram) -> Histogram:
    assert isinstance(metric, Histogram)
    return metric
