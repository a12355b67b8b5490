"""The proxy's Prometheus metrics, in a registry of its own (one per app, no globals).

Names come from `dressage.metrics`, the project's single list of metric names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dressage import metrics as names
from dressage.proxy import errors
from dressage.proxy.drain import LOST_REASONS

_LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
)  # fmt: skip
_OVERHEAD_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip
_SPAN_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 16)


DEFAULT_PER_ENGINE_MAX = 64
"""Engines up to which the proxy exports series labelled by `engine` by default."""
ALL_ENGINES = "all"
"""The `engine` label of the busy refusals of a pool too large for per-engine series."""

EngineStates = Callable[[], tuple[int, int]]
"""The pool's engines: `(healthy, unhealthy)`."""


class _EngineCounts(Collector):
    """`dressage_proxy_engines{state}`, read from the pool when scraped."""

    def __init__(self, states: EngineStates) -> None:
        self._states = states

    def collect(self) -> Iterator[Metric]:
        healthy, unhealthy = self._states()
        family = GaugeMetricFamily(
            names.PROXY_ENGINES, "Engines of the proxy's pool, by health.", labels=["state"]
        )
        family.add_metric(["healthy"], float(healthy))
        family.add_metric(["unhealthy"], float(unhealthy))
        yield family


class ProxyMetrics:
    """Requests and latency, preempts, refusals by reason, sessions, version spans, engines.

    Series labelled by `engine` multiply by the fleet: they are exported while the pool holds
    at most `per_engine_max` engines (`--per-engine-metrics-max-engines`, 64 by default; raise
    it to opt in on a larger fleet). Beyond it the pool is counted by health
    (`dressage_proxy_engines{state}`, always exported) and busy refusals are counted for all
    engines together (`engine="all"`)."""

    def __init__(
        self,
        active_sessions: Callable[[], float],
        engine_states: EngineStates = lambda: (0, 0),
        pool_size: Callable[[], int] = lambda: 0,
        per_engine_max: int = DEFAULT_PER_ENGINE_MAX,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._pool_size = pool_size
        self.per_engine_max = per_engine_max
        r.register(_EngineCounts(engine_states))
        self.requests = Counter(
            names.PROXY_REQUESTS.removesuffix("_total"),
            "Requests answered, by endpoint and HTTP status code.",
            ["endpoint", "code"],
            registry=r,
        )
        self.duration = Histogram(
            names.PROXY_REQUEST_DURATION,
            "Request latency in seconds, by endpoint.",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.generation_overhead = Histogram(
            names.PROXY_GENERATION_OVERHEAD,
            "Seconds a model turn spent in the proxy beyond the engines' reported time "
            "(meta_info.e2e_latency): proxy work and queueing, network, engine HTTP intake.",
            buckets=_OVERHEAD_BUCKETS,
            registry=r,
        )
        self.preempts = Counter(
            names.PROXY_PREEMPTS.removesuffix("_total"),
            "Generations interrupted by a weight-update pause.",
            registry=r,
        )
        self.refusals = Counter(
            names.PROXY_REFUSALS.removesuffix("_total"),
            "Trajectories refused, by reason (partial_rollout_staleness_exceeded, "
            "version_changed_without_partial_rollout).",
            ["reason"],
            registry=r,
        )
        # Exported at 0 before the first refusal, so dashboards and alerts see the series.
        for reason in (
            errors.PARTIAL_ROLLOUT_STALENESS_EXCEEDED,
            errors.VERSION_CHANGED_WITHOUT_PARTIAL_ROLLOUT,
        ):
            self.refusals.labels(reason)
        self.active_sessions = Gauge(
            names.PROXY_ACTIVE_SESSIONS, "Sessions currently open.", registry=r
        )
        self.active_sessions.set_function(active_sessions)
        self.version_span = Histogram(
            names.PROXY_VERSION_SPAN,
            "Version span of finished segments (distinct real versions of their responses).",
            buckets=_SPAN_BUCKETS,
            registry=r,
        )
        self.engine_healthy = Gauge(
            names.PROXY_ENGINE_HEALTHY,
            "1 when the engine answers its health check.",
            ["engine"],
            registry=r,
        )
        self.engine_retries = Counter(
            names.PROXY_ENGINE_RETRIES.removesuffix("_total"),
            "Generations sent to another engine because theirs failed before answering.",
            registry=r,
        )
        self.engine_busy = Counter(
            names.PROXY_ENGINE_BUSY.removesuffix("_total"),
            "Generations an engine turned away with HTTP 503 (its request queue is full); the "
            "proxy tried another engine or backed off, without marking the engine down.",
            ["engine"],
            registry=r,
        )
        self.drained_turns = Counter(
            names.PROXY_DRAINED_TURNS.removesuffix("_total"),
            "Pieces of turns a draining engine aborted; each turn continued on another engine "
            "with its tokens (partial rollout) or from its prompt.",
            registry=r,
        )
        self.drained_tokens = Counter(
            names.PROXY_DRAINED_TOKENS.removesuffix("_total"),
            "Tokens a draining engine had generated for the pieces it aborted, kept as their "
            "turns continued on another engine (partial rollout); each turn's record counts "
            "its own in drained_tokens.",
            registry=r,
        )
        self.drained_tokens_lost = Counter(
            names.PROXY_DRAINED_TOKENS_LOST.removesuffix("_total"),
            "Of the drained tokens kept, those whose turn then failed, by the failure's name "
            "(engine_failed, partial_rollout_staleness_exceeded, cancelled, ...): the rollout "
            "retries the group and they are generated again.",
            ["reason"],
            registry=r,
        )
        self.lost_tokens = Counter(
            names.PROXY_LOST_TOKENS.removesuffix("_total"),
            "Tokens the engines returned that no sample will hold, by reason (the failure's "
            "name, or restarted: a preempted turn generated again) and evaluation session.",
            ["reason", "evaluation"],
            registry=r,
        )
        self.engine_failed_turns = Counter(
            names.PROXY_ENGINE_FAILED_TURNS.removesuffix("_total"),
            "Turns an engine failure hit, by reason: connect_failed and connection_lost were "
            "sent to another engine, connection_lost_mid_turn (502 engine_failed) and "
            "reply_timeout (504) are retried by the rollout.",
            ["reason"],
            registry=r,
        )
        for reason in LOST_REASONS:
            self.engine_failed_turns.labels(reason)
        self.expired_sessions = Counter(
            names.PROXY_EXPIRED_SESSIONS.removesuffix("_total"),
            "Sessions dropped after being idle longer than the session TTL.",
            registry=r,
        )
        self.evicted_sessions = Counter(
            names.PROXY_EVICTED_SESSIONS.removesuffix("_total"),
            "Idle sessions dropped to make room for a new one at max_sessions.",
            registry=r,
        )
        self.inflight = Gauge(
            names.PROXY_INFLIGHT, "Generations in flight through the proxy.", registry=r
        )

    def per_engine(self) -> bool:
        """Whether series labelled by `engine` are exported for the pool as it is now; when
        the pool has grown past the limit, the ones exported so far are dropped."""
        on = self._pool_size() <= self.per_engine_max
        if not on:
            self.engine_healthy.clear()
        return on

    def engine_health(self, url: str, healthy: bool) -> None:
        """Engine `url` passed (or failed) its health check."""
        if self.per_engine():
            self.engine_healthy.labels(url).set(1 if healthy else 0)

    def engine_left(self, url: str) -> None:
        """Engine `url` left the pool: its series goes."""
        with contextlib.suppress(KeyError):  # no sample for it
            self.engine_healthy.remove(url)

    def engine_refused_busy(self, url: str) -> None:
        """Engine `url` answered 503 (its queue full)."""
        self.engine_busy.labels(url if self.per_engine() else ALL_ENGINES).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
