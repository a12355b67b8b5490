"""The job's Prometheus figures, served on `/metrics` by `dressage run` and trainer rank 0.

Names come from `dressage.metrics`; the batch statistics `staleness/version_span_mean|max|min`
are exported as `dressage_staleness_version_span_mean|max|min`. Each run has its own registry
(no process-wide globals), so tests can run several in one process.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from dressage import metrics as names
from dressage.data.samples import VERSION_SPAN_MAX, VERSION_SPAN_MEAN, VERSION_SPAN_MIN
from dressage.orchestrator.loop import StepRecord
from dressage.trainer import grpo

_GAUGES = {
    VERSION_SPAN_MEAN: (names.STALENESS_VERSION_SPAN_MEAN, "Mean output version span of the batch"),
    VERSION_SPAN_MAX: (names.STALENESS_VERSION_SPAN_MAX, "Largest output version span"),
    VERSION_SPAN_MIN: (names.STALENESS_VERSION_SPAN_MIN, "Smallest output version span"),
    grpo.LOGPROB_ABS_DIFF: (
        names.TRAIN_ROLLOUT_LOGPROB_ABS_DIFF,
        "Mean |train logprob - rollout logprob| over trained tokens",
    ),
    grpo.REWARD: (names.REWARD_MEAN, "Mean reward of the last batch"),
    grpo.ENTROPY: (names.ENTROPY, "Mean policy entropy over trained tokens"),
    grpo.CLIP_FRACTION: (names.CLIP_FRACTION, "Fraction of trained tokens with a clipped ratio"),
    grpo.MISMATCH_KL_K1: (names.MISMATCH_KL_K1, "k1 estimate of KL(rollout || train)"),
    grpo.MISMATCH_KL_K3: (names.MISMATCH_KL_K3, "k3 estimate of KL(rollout || train)"),
    grpo.OFF_POLICY_CLIPPED_FRACTION: (
        names.OFF_POLICY_CLIPPED_FRACTION,
        "Fraction of trained tokens whose importance weight was clipped",
    ),
    grpo.OFF_POLICY_MASKED_FRACTION: (
        names.OFF_POLICY_MASKED_FRACTION,
        "Fraction of trained tokens masked by the off-policy correction",
    ),
    grpo.IS_ESS_FRACTION: (
        names.IS_ESS_FRACTION,
        "Effective sample size of the importance weights, as a fraction of trained tokens",
    ),
}


class RunMetrics:
    """The run's Prometheus registry and its update from each `StepRecord`."""

    def __init__(self, job: str) -> None:
        self.registry = CollectorRegistry()
        self.job = job
        self._gauges = {
            key: Gauge(name, doc, registry=self.registry) for key, (name, doc) in _GAUGES.items()
        }
        self.step = Gauge(names.TRAIN_STEP, "Completed optimizer steps", registry=self.registry)
        self.version = Gauge(
            names.WEIGHT_VERSION,
            "Ordinal of the latest published weight version",
            registry=self.registry,
        )
        self.version_info = Gauge(
            names.WEIGHT_VERSION_INFO,
            "1 for the label of the latest published weight version",
            ["version"],
            registry=self.registry,
        )
        self.dropped = Counter(
            names.DROPPED_GROUPS.removesuffix("_total"),
            "Prompt groups dropped, by reason",
            ["reason"],
            registry=self.registry,
        )
        # Export the drop counter at 0 before the first drop, so dashboards see the series.
        self.dropped.labels(reason="retries_exhausted")
        self.staleness_failures = Counter(
            names.STALENESS_FAILURES.removesuffix("_total"),
            "Rollouts refused by a staleness control",
            registry=self.registry,
        )
        self.retries = Counter(
            names.ROLLOUT_RETRIES.removesuffix("_total"),
            "Prompt-group retries",
            registry=self.registry,
        )
        self.failures = Counter(
            names.ROLLOUT_FAILURES.removesuffix("_total"),
            "Failed prompt-group attempts, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.groups = Counter(
            names.ROLLOUT_GROUPS_COMPLETED.removesuffix("_total"),
            "Prompt groups completed and trained on",
            registry=self.registry,
        )
        self.admissions_held = Counter(
            names.ROLLOUT_ADMISSIONS_HELD.removesuffix("_total"),
            "Prompt groups whose start admission control held back",
            registry=self.registry,
        )
        self.admission_wait = Counter(
            names.ROLLOUT_ADMISSION_WAIT_SECONDS.removesuffix("_total"),
            "Seconds the rollout worker waited for admission",
            registry=self.registry,
        )
        self.samples = Counter(
            names.TRAINED_SAMPLES.removesuffix("_total"),
            "Samples trained on",
            registry=self.registry,
        )
        # The engines' autoscaler reads these two (dressage_operator.fleet_signals).
        self.step_seconds = Counter(
            names.TRAINER_STEP_SECONDS.removesuffix("_total"),
            "Wall seconds of completed steps: waiting for the batch, training, publishing",
            registry=self.registry,
        )
        self.batch_wait = Counter(
            names.TRAINER_BATCH_WAIT_SECONDS.removesuffix("_total"),
            "Seconds the trainer waited for its next batch",
            registry=self.registry,
        )
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def set_version(self, ordinal: int, label: str) -> None:
        self.version.set(ordinal)
        self.version_info.clear()
        self.version_info.labels(version=label).set(1)

    def observe(self, record: StepRecord, version_ordinal: int) -> None:
        for key, gauge in self._gauges.items():
            if key in record.metrics:
                gauge.set(record.metrics[key])
        self.step.set(record.step)
        self.set_version(version_ordinal, record.version)
        for reason, count in record.dropped_groups.items():
            self.dropped.labels(reason=reason).inc(count)
        self.staleness_failures.inc(record.staleness_failures)
        for reason, count in record.failure_reasons.items():
            self.failures.labels(reason=reason).inc(count)
        self.retries.inc(record.retries)
        self.admissions_held.inc(record.admissions_held)
        self.admission_wait.inc(record.admission_wait_seconds)
        self.groups.inc(record.metrics.get("groups", 0.0))
        self.samples.inc(record.metrics.get("samples", 0.0))
        self.batch_wait.inc(record.rollout_seconds)
        self.step_seconds.inc(
            record.rollout_seconds + record.train_seconds + record.publish_seconds
        )

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve `/metrics` on `port` (0 picks a free one); returns the bound port."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self._server, self._thread = server, thread
        return int(server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
