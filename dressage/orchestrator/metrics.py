"""The job's Prometheus figures, served on `/metrics` by `dressage run` and trainer rank 0.

One series per declared step figure (`dressage.api.figures.StepFigures`), under its derived
name (`staleness/version_span_mean` as `dressage_staleness_version_span_mean`, a counter with
`_total`, a by-reason counter labelled `reason`, a labelled gauge by its label, such as
`dressage_reward_part{part="correct"}`), the step's seconds among them (the engines'
autoscaler reads the steps' wall and batch-wait seconds, `dressage_trainer_step_seconds_total`
and `dressage_trainer_batch_wait_seconds_total`), plus the training step, the weight version
and the dataset's skipped rows by reason (`dressage_dataset_bad_rows`, set once when the task
is built), and the held-out evaluations by version (`dressage_eval_pass_at_k{version,k}`,
`dressage_eval_reward_mean`, `dressage_eval_step`, `dressage_eval_prompts`, each for the latest
4 evaluated versions and the best one; `dressage_eval_runs_total`). Each run has its own
registry (no process-wide globals), so tests can run several in one process.

A gauge figure's family is always served, its sample only from its first value: one a step
never has is never exported, such as the MoE routing figures (`routing_agreement`,
`routed_token_fraction`) of a dense model, instead of a `0.0` that reads as measured.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dressage import metrics as names
from dressage.api.figures import Figure, FigureKind, StepFigures, figures_of
from dressage.evaluation.figures import Evaluation, exported
from dressage.orchestrator.loop import StepRecord


class _EvaluationSeries(Collector):
    """The held-out evaluations' gauges, labelled by version: only those `exported` keeps, so
    an older version's label sets disappear once it falls out (`names.EVAL_*`)."""

    def __init__(self) -> None:
        self.evaluations: list[Evaluation] = []
        self._lock = threading.Lock()

    def add(self, evaluation: Evaluation) -> None:
        with self._lock:
            self.evaluations.append(evaluation)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            shown = exported(self.evaluations, names.EVAL_EXPORTED_VERSIONS)
        pass_at = GaugeMetricFamily(
            names.EVAL_PASS_AT_K,
            "pass@k of a weight version on the held-out evaluation prompts",
            labels=["version", "k"],
        )
        reward = GaugeMetricFamily(
            names.EVAL_REWARD_MEAN,
            "Mean reward of a weight version on the held-out evaluation prompts",
            labels=["version"],
        )
        step = GaugeMetricFamily(
            names.EVAL_STEP,
            "Training step whose publish made the evaluated version (0: the starting weights)",
            labels=["version"],
        )
        prompts = GaugeMetricFamily(
            names.EVAL_PROMPTS, "Prompts of the version's evaluation", labels=["version"]
        )
        for e in shown:
            for k, value in sorted(e.pass_at.items()):
                pass_at.add_metric([e.version, str(k)], value)
            reward.add_metric([e.version], e.reward_mean)
            step.add_metric([e.version], e.step)
            prompts.add_metric([e.version], e.prompts)
        yield from (pass_at, reward, step, prompts)


class _FigureGauges(Collector):
    """The gauge figures' latest values; a family without a value yet has no sample."""

    def __init__(self, figures: tuple[Figure, ...]) -> None:
        self._figures = [f for f in figures if f.kind is FigureKind.GAUGE]
        self._values: dict[str, dict[tuple[str, ...], float]] = {}
        self._lock = threading.Lock()

    def set(self, figure: Figure, value: float, label: str | None = None) -> None:
        key = () if label is None else (label,)
        with self._lock:
            self._values.setdefault(figure.name, {})[key] = float(value)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            values = {name: dict(samples) for name, samples in self._values.items()}
        for f in self._figures:
            family = GaugeMetricFamily(f.metric, f.help, labels=[f.label] if f.label else None)
            for key, value in values.get(f.name, {}).items():
                family.add_metric(list(key), value)
            yield family


class RunMetrics:
    """The run's Prometheus registry and its update from each `StepRecord`."""

    def __init__(self, job: str, declaration: type[StepFigures] = StepFigures) -> None:
        self.registry = CollectorRegistry()
        self.job = job
        self.figures = figures_of(declaration)
        self._gauges = _FigureGauges(tuple(self.figures))
        self.registry.register(self._gauges)
        self._counters = {f.name: self._counter(f) for f in self.figures if f.counted}
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
        self.dataset_bad_rows = Gauge(
            names.DATASET_BAD_ROWS,
            "Rows of the job's dataset skipped as unusable, by reason (rows)",
            ["reason"],
            registry=self.registry,
        )
        self._evaluations = _EvaluationSeries()
        self.registry.register(self._evaluations)
        self.eval_runs = Counter(
            names.EVAL_RUNS.removesuffix("_total"),
            "Held-out evaluations completed",
            registry=self.registry,
        )
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def _counter(self, figure: Figure) -> Counter:
        labels = ["reason"] if figure.kind is FigureKind.BY_REASON else []
        stem = figure.metric.removesuffix("_total")  # prometheus_client adds it
        counter = Counter(stem, figure.help, labels, registry=self.registry)
        for reason in figure.reasons:  # exported at 0 before the first one, for dashboards
            counter.labels(reason=reason)
        return counter

    def set_version(self, ordinal: int, label: str) -> None:
        self.version.set(ordinal)
        self.version_info.clear()
        self.version_info.labels(version=label).set(1)

    def set_dataset_bad_rows(self, counts: Mapping[str, int]) -> None:
        """The dataset's skipped rows by reason (the task is built once per run)."""
        self.dataset_bad_rows.clear()
        for reason, count in counts.items():
            self.dataset_bad_rows.labels(reason=reason).set(count)

    def observe(self, record: StepRecord, version_ordinal: int) -> None:
        for figure in self.figures:
            value = getattr(record.figures, figure.name)
            if figure.kind is FigureKind.GAUGE and figure.label is not None:
                for label, number in (value or {}).items():
                    self._gauges.set(figure, number, label)
            elif figure.kind is FigureKind.GAUGE:
                if value is not None:
                    self._gauges.set(figure, value)
            elif figure.kind is FigureKind.COUNTER:
                self._counters[figure.name].inc(value)
            else:
                for reason, count in value.items():
                    self._counters[figure.name].labels(reason=reason).inc(count)
        self.step.set(record.step)
        self.set_version(version_ordinal, record.version)

    def observe_evaluation(self, evaluation: Evaluation) -> None:
        """A completed evaluation's figures (`dressage_eval_*`, by version)."""
        self._evaluations.add(evaluation)
        self.eval_runs.inc()

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
