"""The operator's own Prometheus metrics: per-job staleness, evaluation and health, reconcile
counters.

Per-job series are labelled `namespace` and `dressage_job` (`dressage.metrics.JOB_LABEL`, which
leaves Prometheus' own `job` label alone) and are produced by a collector from the
latest status of each job, so a deleted job's series disappear with it and counters mirror the
job's own cumulative counters exactly (no double counting across operator restarts). The
status figures of the step declaration (`dressage.api.figures`) are exported under their
`job_metric` names.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dressage import metrics as names
from dressage.api.figures import Figure, FigureKind, StepFigures, status_figures
from dressage.api.job import AsyncRLJobSpec
from dressage.api.status import AsyncRLJobStatus, JobPhase
from dressage_operator.fleet_metrics import fleet_families

JOB_LABELS = ["namespace", names.JOB_LABEL]


def version_span_limit(spec: AsyncRLJobSpec) -> int | None:
    """The most weight versions one trajectory may span: `maxPartialRolloutPreempts + 1`
    (each preempt adds one version), or the one `mode: auto` chose (`span_limit`); None
    when the job sets no limit."""
    preempts = spec.staleness.span_limit
    return None if preempts is None else preempts + 1


class JobMetricsCollector(Collector):
    """Exports the last known status of every job."""

    def __init__(self, declaration: type[StepFigures] = StepFigures) -> None:
        self.figures = status_figures(declaration)
        """The status figures exported per job, under their `job_metric`."""
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], tuple[AsyncRLJobStatus, int | None]] = {}
        self._modes: dict[tuple[str, str], str] = {}

    def update(
        self,
        namespace: str,
        job: str,
        status: AsyncRLJobStatus,
        max_version_span: int | None = None,
        rollout_mode: str | None = None,
    ) -> None:
        """Record a job's latest status, its version span limit (`version_span_limit`) and
        its `spec.rollout.mode` (None: unknown, no series)."""
        with self._lock:
            self._jobs[(namespace, job)] = (status.model_copy(deep=True), max_version_span)
            if rollout_mode is None:
                self._modes.pop((namespace, job), None)
            else:
                self._modes[(namespace, job)] = rollout_mode

    def remove(self, namespace: str, job: str) -> None:
        with self._lock:
            self._jobs.pop((namespace, job), None)
            self._modes.pop((namespace, job), None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            jobs = dict(self._jobs)
            modes = dict(self._modes)

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=JOB_LABELS)

        figures: list[tuple[Figure, GaugeMetricFamily | CounterMetricFamily]] = []
        for f in self.figures:
            if f.kind is FigureKind.GAUGE:
                figures.append((f, gauge(f.job_metric, f"{f.help}.")))
            else:
                labels = [*JOB_LABELS, "reason"] if f.kind is FigureKind.BY_REASON else JOB_LABELS
                figures.append((f, CounterMetricFamily(f.job_metric, f"{f.help}.", labels=labels)))
        step = gauge(names.JOB_TRAIN_STEP, "Current trainer step.")
        version = gauge(names.JOB_WEIGHT_VERSION, "Latest published weight version (ordinal).")
        phase = GaugeMetricFamily(
            names.JOB_PHASE, "1 for the job's current phase.", labels=[*JOB_LABELS, "phase"]
        )
        restarts = CounterMetricFamily(
            names.JOB_RESTARTS, "Trainer gang restarts.", labels=JOB_LABELS
        )
        mode = GaugeMetricFamily(
            names.JOB_ROLLOUT_MODE,
            "1 for the job's rollout mode (spec.rollout.mode).",
            labels=[*JOB_LABELS, "mode"],
        )
        limit = gauge(
            names.JOB_MAX_VERSION_SPAN_LIMIT,
            "Version span limit of the job (maxPartialRolloutPreempts + 1); absent when unset.",
        )
        evaluation = {
            "latest": (
                gauge(names.JOB_EVAL_LATEST_PASS_AT_1, "Held-out pass@1 of the latest version."),
                gauge(names.JOB_EVAL_LATEST_STEP, "Training step of the latest evaluated version."),
            ),
            "best": (
                gauge(names.JOB_EVAL_BEST_PASS_AT_1, "Best held-out pass@1 so far."),
                gauge(names.JOB_EVAL_BEST_STEP, "Training step of the best evaluated version."),
            ),
        }
        for (ns, job), (st, max_span) in sorted(jobs.items()):
            labels = [ns, job]
            if max_span is not None:
                limit.add_metric(labels, float(max_span))
            if (ns, job) in modes:
                mode.add_metric([*labels, modes[(ns, job)]], 1.0)
            s = st.staleness
            for f, family in figures:
                if f.kind is FigureKind.BY_REASON:
                    for reason, count in getattr(s, f.by_reason_name).items():
                        family.add_metric([*labels, reason], float(count))
                elif (value := getattr(s, f.name)) is not None:
                    family.add_metric(labels, float(value))
            if s.step is not None:
                step.add_metric(labels, float(s.step))
            if s.weight_version is not None:
                # A non-numeric label has no ordinal here.
                with contextlib.suppress(ValueError):
                    version.add_metric(labels, float(s.weight_version))
            for p in JobPhase:
                phase.add_metric([*labels, p.value], 1.0 if st.phase is p else 0.0)
            restarts.add_metric(labels, float(st.restarts))
            for which, (pass_at_1, step_of) in evaluation.items():
                seen = getattr(st.evaluation, which, None)
                if seen is not None and seen.pass_at_1 is not None:
                    pass_at_1.add_metric(labels, seen.pass_at_1)
                if seen is not None and seen.step is not None:
                    step_of.add_metric(labels, float(seen.step))
        yield from (family for _, family in figures)
        yield from (limit, mode, step, version, phase, restarts)
        yield from (family for pair in evaluation.values() for family in pair)
        yield from fleet_families({key: st for key, (st, _) in jobs.items()})


class OperatorMetrics:
    """The registry served on the operator's `/metrics`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.jobs = JobMetricsCollector()
        self.registry.register(self.jobs)
        self.reconciles = Counter(
            names.OPERATOR_RECONCILE,
            "Reconcile cycles, by result.",
            ["result"],
            registry=self.registry,
        )
        self.errors = Counter(
            names.OPERATOR_RECONCILE_ERRORS, "Reconcile cycles that raised.", registry=self.registry
        )
        self.duration = Histogram(
            names.OPERATOR_RECONCILE_DURATION,
            "Duration of one reconcile cycle.",
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
