"""The proxy's Prometheus metrics, in a registry of its own (one per app, no globals).

Names come from `dressage.metrics`, the project's single list of metric names.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

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


class ProxyMetrics:
    """Requests and latency, preempts, refusals by reason, sessions, version spans, engines."""

    def __init__(self, active_sessions: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
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
        self.inflight = Gauge(
            names.PROXY_INFLIGHT, "Generations in flight through the proxy.", registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
