"""The figures of one training step: each declared once, with every name derived from it.

`StepFigures` is the declaration and the record at once: one field per figure, its kind, unit
and description given where it is declared (`counter`, `gauge`, `by_reason`). The collector
fills the rollout figures (`dressage.rollout.stats`), the trainer's step its own (the training
loop, `dressage.orchestrator.loop`); every consumer iterates `figures_of(...)` and never lists
a figure by hand:

- the step record, `history.jsonl` and `report.json` write each figure under `key`;
- the job's `/metrics` (`dressage.orchestrator.metrics`) exports it as `metric`;
- the job's status (`dressage.api.status`) shows the figures declared with `status=True`
  under `status_key`, and the operator, which reads them from the job's `/metrics`, exports
  them per job as `job_metric`;
- the step line of `dressage run` shows the figures declared with a `line` label;
- the Grafana dashboard queries every `metric`.

A new counter is one line here, for example
`widgets_refused: int = counter("attempts", "Attempts a widget refused", status=True)`.

Names, one rule for all (`Figure`): the record key is the field name, or
`<namespace>/<name>` (`staleness/version_span_mean`, the design's name in `docs/staleness.md`); the
Prometheus name is `dressage_` plus the key with `/` as `_` (or the figure's own `metric`
stem), counters ending in `_total`; the operator's per-job name is the same with `dressage_job_`;
the status key is the field name in camelCase, and a by-reason figure adds `<name>ByReason`.

Why here, in the job model's package: `dressage.api` is the lowest layer, and the status keys
are part of the CRD generated from it. Every other consumer sits above it (the record travels
in `dressage.data.groups.TrainBatch`, the names in `dressage.metrics`, the operator reads
`dressage.api`), so each reaches the declaration without importing upward.
"""

from __future__ import annotations

import dataclasses
import typing
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeVar

from pydantic.alias_generators import to_camel


class FigureKind(StrEnum):
    """How a figure adds up over steps, and so how Prometheus exports it."""

    COUNTER = "counter"
    """Counted while the step's batch was collected or trained; summed over steps."""
    GAUGE = "gauge"
    """A value of the step itself (a mean over the batch); the latest one is exported. A
    labelled gauge (`Figure.label`) holds one value per label value, e.g. per reward part."""
    BY_REASON = "by_reason"
    """A counter per reason (Prometheus label `reason`); its total is the sum."""


class FigureSource(StrEnum):
    """Who fills a figure."""

    ROLLOUT = "rollout"
    """The collector, counting while it assembles the batch (`CollectorStats.totals`)."""
    TRAINER = "trainer"
    """The trainer's step: the value of `GRPOTrainer.train_step`'s figure under `key`, or of
    the training loop's measure of the step against the trainer's version (the version lag)."""


@dataclass(frozen=True)
class Figure:
    """One declared figure, and every name it goes by."""

    name: str
    """The field of `StepFigures` (snake_case)."""
    kind: FigureKind
    unit: str
    """What one counts or measures, e.g. `groups`, `seconds`, `versions`, `nats`."""
    description: str
    source: FigureSource
    value_type: type
    """`int` or `float` (the field's type, None aside for gauges)."""
    namespace: str | None = None
    """Prefix of the record key (`staleness` in `staleness/version_span_mean`)."""
    label: str | None = None
    """A labelled gauge: the Prometheus label its values go by (`part` for the reward's named
    parts); its value is a dict from label value to number (None while not measured)."""
    metric_stem: str | None = None
    """The Prometheus name without `dressage_` and `_total` when it is not the key's."""
    status: bool = False
    """Shown in the job's `status.staleness` and exported per job by the operator."""
    line: tuple[str, str] | None = None
    """Label and format spec of the figure in the step line (None: not shown)."""
    reasons: tuple[str, ...] = ()
    """By-reason figures: reasons exported at 0 before they first occur, so dashboards see
    the series from the start."""

    @property
    def key(self) -> str:
        """The figure's key in the step record, `history.jsonl` and `report.json`."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def counted(self) -> bool:
        """Whether the figure adds up over steps (a counter, or a counter per reason)."""
        return self.kind is not FigureKind.GAUGE

    @property
    def _stem(self) -> str:
        return self.metric_stem or self.key.replace("/", "_")

    @property
    def _suffix(self) -> str:
        return "_total" if self.counted else ""

    @property
    def metric(self) -> str:
        """The Prometheus name on the job's `/metrics` (Prometheus names have no `/`)."""
        return f"dressage_{self._stem}{self._suffix}"

    @property
    def job_metric(self) -> str:
        """The operator's per-job Prometheus name (labels `namespace`, `job`)."""
        return f"dressage_job_{self._stem}{self._suffix}"

    @property
    def status_key(self) -> str:
        """The key in `status.staleness` (a by-reason figure: its total)."""
        return to_camel(self.name)

    @property
    def by_reason_name(self) -> str:
        """The status attribute holding a by-reason figure's counts per reason."""
        return f"{self.name}_by_reason"

    @property
    def help(self) -> str:
        """The figure's Prometheus help text: description and unit."""
        per = ", by reason" if self.kind is FigureKind.BY_REASON else ""
        if self.label is not None:
            per = f", by {self.label}"
        return f"{self.description}{per} ({self.unit})"

    def record_value(self, value: Any) -> Any:
        """`value` as written to the step record: a plain dict per reason, seconds to the
        millisecond."""
        if self.kind is FigureKind.BY_REASON or self.label is not None:
            return dict(value)
        if self.unit == "seconds" and isinstance(value, float):
            return round(value, 3)
        return value


_FIGURE: Final = "dressage.figure"
"""The field-metadata key holding a figure's declaration."""


def _declare(kind: FigureKind, unit: str, description: str, **options: Any) -> dict[str, Any]:
    return {_FIGURE: {"kind": kind, "unit": unit, "description": description, **options}}


def counter(
    unit: str,
    description: str,
    *,
    source: FigureSource = FigureSource.ROLLOUT,
    status: bool = False,
    metric: str | None = None,
    line: tuple[str, str] | None = None,
    float_valued: bool = False,
) -> Any:
    """Declare a counter field (`int`, or `float` with `float_valued`), 0 by default."""
    options = {"source": source, "status": status, "metric_stem": metric, "line": line}
    default: int | float = 0.0 if float_valued else 0
    return field(
        default=default, metadata=_declare(FigureKind.COUNTER, unit, description, **options)
    )


def gauge(
    unit: str,
    description: str,
    *,
    source: FigureSource = FigureSource.TRAINER,
    status: bool = False,
    namespace: str | None = None,
    metric: str | None = None,
    line: tuple[str, str] | None = None,
    label: str | None = None,
) -> Any:
    """Declare a gauge field (`float | None`, None while not measured); with `label`, a
    labelled gauge (`dict[str, float] | None`, one value per label value)."""
    options = {
        "source": source,
        "status": status,
        "namespace": namespace,
        "metric_stem": metric,
        "line": line,
        "label": label,
    }
    return field(default=None, metadata=_declare(FigureKind.GAUGE, unit, description, **options))


def by_reason(
    unit: str,
    description: str,
    *,
    status: bool = False,
    metric: str | None = None,
    line: tuple[str, str] | None = None,
    reasons: tuple[str, ...] = (),
) -> Any:
    """Declare a counter per reason (`Counter[str]`, filled by the collector)."""
    options = {
        "source": FigureSource.ROLLOUT,
        "status": status,
        "metric_stem": metric,
        "line": line,
        "reasons": reasons,
    }
    return field(
        default_factory=Counter,
        metadata=_declare(FigureKind.BY_REASON, unit, description, **options),
    )


F = TypeVar("F", bound="StepFigures")


@dataclass
class StepFigures:
    """The figures of one step, as the collector and the trainer filled them.

    Subclass it to add figures (tests do); every consumer takes the declaration it iterates.

    Not declared here: the batch's samples by output version span,
    `staleness/version_span_samples/N` (`dressage.data.samples.version_span_histogram`). It
    has one key per span the batch holds, which `benchmarks/long_tail.py` reads from the
    history key by key, while a figure has one key: one value, or a labelled gauge's values
    per label under that key, and those the latest batch's only, where this distribution is a
    count to add up over steps. So it stays in the step record's extras: in the history, not
    on `/metrics`, the status or the dashboard.
    """

    # --- counted by the collector while it assembled the batch ---------------------------
    dropped_groups: Counter[str] = by_reason(
        "groups",
        "Prompt groups dropped (a staleness verdict such as `stale_version` or "
        "`window_advanced`, `retries_exhausted`, `shutdown`)",
        status=True,
        line=("drops", "d"),
        reasons=("retries_exhausted",),
    )
    failed_attempts: Counter[str] = by_reason(
        "attempts",
        "Prompt-group attempts that failed, each retry counting one (a group tried 4 times "
        "counts 4); the reason is the proxy's error name, the user code's failure reason "
        "(`reward_raised` under `onRewardError: stop`, `environment_raised`, `agent_failed`) "
        "or `rollout_error`",
        metric="rollout_failed_attempts",
    )
    failed_groups: Counter[str] = by_reason(
        "groups",
        "Prompt groups with at least one failed attempt, each group counted once per reason "
        "whether a retry then completed it or it was dropped (`dropped_groups` says which)",
        metric="rollout_failed_groups",
    )
    reward_failed_samples: Counter[str] = by_reason(
        "samples",
        "Samples of the batch whose reward call failed, so they were trained with reward 0 "
        "(`onRewardError: zero`), at most the batch's samples; the reason is "
        "`reward_raised`, `reward_timeout` or `reward_invalid`",
    )
    retries: int = counter("retries", "Prompt-group retries", metric="rollout_retries")
    staleness_failures: int = counter(
        "attempts",
        "Prompt-group attempts a staleness control refused: the proxy's partial-rollout span "
        "limit (502 `partial_rollout_staleness_exceeded`) or, without partial rollout, a "
        "trajectory whose version changed (409 `version_changed_without_partial_rollout`); "
        "one per failed attempt, however many of its trajectories were refused",
        status=True,
    )
    admissions_held: int = counter(
        "groups",
        "Prompt groups whose start admission control held back (each counted once)",
        metric="rollout_admissions_held",
    )
    admission_wait_seconds: float = counter(
        "seconds",
        "Seconds the rollout worker waited for admission control before starting a group",
        metric="rollout_admission_wait_seconds",
        float_valued=True,
    )
    # --- the trainer's step ----------------------------------------------------------------
    reward: float | None = gauge(
        "reward", "Mean reward of the batch's samples", metric="reward_mean"
    )
    reward_parts: dict[str, float] | None = gauge(
        "reward",
        "Mean of each named part of a reward returning a dict, over the batch's samples whose "
        "reward call succeeded (without failures, `reward` is the parts' weighted sum)",
        source=FigureSource.ROLLOUT,
        metric="reward_part",
        label="part",
    )
    train_rollout_logprob_abs_diff: float | None = gauge(
        "nats",
        "Mean |train logprob - rollout logprob| over trained tokens",
        line=("logprob_diff", ".1e"),
    )
    version_span_mean: float | None = gauge(
        "versions",
        "Mean number of weight versions a trajectory of the batch spans (its output tokens)",
        namespace="staleness",
        status=True,
        line=("span", ".2f"),
    )
    version_span_max: float | None = gauge(
        "versions",
        "Largest number of weight versions a trajectory of the batch spans",
        namespace="staleness",
        status=True,
        line=("span_max", "d"),
    )
    version_span_min: float | None = gauge(
        "versions",
        "Smallest number of weight versions a trajectory of the batch spans",
        namespace="staleness",
        status=True,
    )
    version_lag_mean: float | None = gauge(
        "versions",
        "Mean version lag of the batch's samples: the trainer's version at the step minus the "
        "sample's trajectory version, in observed-version order (`dressage.rollout.lag`); "
        "samples of unknown version left out",
        namespace="staleness",
        status=True,
        line=("lag", ".2f"),
    )
    version_lag_max: float | None = gauge(
        "versions",
        "Largest version lag of a sample of the batch",
        namespace="staleness",
        status=True,
        line=("lag_max", "d"),
    )
    version_lag_token_mean: float | None = gauge(
        "versions",
        "Mean version lag of the batch's trainable tokens (each sample's lag weighted by them)",
        namespace="staleness",
        status=True,
    )
    version_lag_unknown_samples: int = counter(
        "samples",
        "Trained samples without a version lag: no real trajectory version, or one the "
        "trainer's version order does not hold",
        source=FigureSource.TRAINER,
        metric="staleness_version_lag_unknown_samples",
    )
    admission_lag_mean: float | None = gauge(
        "versions",
        "Mean version lag the groups started since the previous batch will have when trained, "
        "as admission control projects it at their start (`AdmissionPolicy.projected_lag`)",
        source=FigureSource.ROLLOUT,
        namespace="staleness",
    )
    admission_lag_max: float | None = gauge(
        "versions",
        "Largest projected version lag of a group started since the previous batch; with "
        "admission control on it stays below `keepVersions`",
        source=FigureSource.ROLLOUT,
        namespace="staleness",
    )
    entropy: float | None = gauge(
        "nats", "Mean policy entropy over trained tokens", line=("entropy", ".3f")
    )
    clip_fraction: float | None = gauge(
        "fraction", "Fraction of trained tokens with a clipped ratio", line=("clip", ".3f")
    )
    mismatch_kl_k1: float | None = gauge(
        "nats", "k1 estimate of KL(rollout || train) over the step's trained tokens"
    )
    mismatch_kl_k3: float | None = gauge(
        "nats",
        "k3 estimate (`exp(d) - 1 - d`, d = train - rollout logprob) of KL(rollout || train)",
    )
    off_policy_clipped_fraction: float | None = gauge(
        "fraction", "Fraction of trained tokens whose importance weight the correction clipped"
    )
    off_policy_masked_fraction: float | None = gauge(
        "fraction", "Fraction of trained tokens the off-policy correction masked out of the loss"
    )
    is_ess_fraction: float | None = gauge(
        "fraction",
        "Effective sample size of the importance weights, as a fraction of trained tokens",
    )
    routing_agreement: float | None = gauge(
        "fraction",
        "Share of the (token, MoE layer) pairs the rollout routed whose top-k expert set the "
        "trainer's own router picks too (MoE, `spec.rollout.routingReplay` record or replay)",
    )
    routed_token_fraction: float | None = gauge(
        "fraction",
        "Share of the trained samples' tokens that carried the rollout's routed experts (MoE, "
        "routing replay on)",
    )
    groups: int = counter(
        "groups",
        "Prompt groups completed and trained on",
        source=FigureSource.TRAINER,
        metric="rollout_groups_completed",
    )
    samples: int = counter(
        "samples", "Samples trained on", source=FigureSource.TRAINER, metric="trained_samples"
    )
    drained_tokens: int = counter(
        "tokens",
        "Trained response tokens generated on an engine that a drain then took their turn from "
        "(partial rollout continued the turn on another engine); over a run they add up to the "
        "proxy's `dressage_proxy_drained_tokens_total` unless a group holding them was dropped "
        "or is not trained yet",
        source=FigureSource.TRAINER,
        metric="trained_drained_tokens",
        status=True,
        line=("drained_tokens", "d"),
    )
    drained_samples: int = counter(
        "samples",
        "Trained samples holding drained tokens (`drained_tokens`)",
        source=FigureSource.TRAINER,
        metric="trained_drained_samples",
    )

    def since(self: F, before: StepFigures) -> F:
        """What was counted since `before` (an earlier copy of the same running totals);
        gauges are this record's own."""
        values: dict[str, Any] = {}
        for f in figures_of(type(self)):
            now, then = getattr(self, f.name), getattr(before, f.name)
            if f.kind is FigureKind.BY_REASON:
                values[f.name] = Counter(now) - Counter(then)
            elif f.kind is FigureKind.COUNTER:
                values[f.name] = now - then
        return dataclasses.replace(self, **values)

    def plus(self: F, other: StepFigures) -> F:
        """This record with `other`'s counted figures added (per reason for a by-reason
        one); gauges are this record's own."""
        values: dict[str, Any] = {}
        for f in figures_of(type(self)):
            now, more = getattr(self, f.name), getattr(other, f.name)
            if f.kind is FigureKind.BY_REASON:
                values[f.name] = Counter(now) + Counter(more)
            elif f.kind is FigureKind.COUNTER:
                values[f.name] = now + more
        return dataclasses.replace(self, **values)

    def copy(self: F) -> F:
        """An independent copy (the counts per reason are copied too)."""
        counts: dict[str, Any] = {
            f.name: Counter(getattr(self, f.name))
            for f in figures_of(type(self))
            if f.kind is FigureKind.BY_REASON
        }
        counts.update(
            {
                f.name: dict(value)
                for f in figures_of(type(self))
                if f.label is not None and (value := getattr(self, f.name)) is not None
            }
        )
        return dataclasses.replace(self, **counts)

    def with_trainer_figures(self: F, values: Mapping[str, float]) -> F:
        """This record with the trainer's figures taken from `values` (keyed by `key`; a
        figure the step did not report keeps its value)."""
        taken = {
            f.name: f.value_type(values[f.key])
            for f in figures_of(type(self))
            if f.source is FigureSource.TRAINER and f.key in values
        }
        return dataclasses.replace(self, **taken)

    def record(self) -> dict[str, Any]:
        """Every figure under its `key`, as the step record writes it (unmeasured gauges
        left out)."""
        return {
            f.key: f.record_value(value)
            for f in figures_of(type(self))
            if (value := getattr(self, f.name)) is not None
        }

    def total(self, name: str) -> float:
        """A counted figure's value, summed over its reasons for a by-reason one."""
        value = getattr(self, name)
        return float(sum(value.values()) if isinstance(value, Mapping) else value)


_DECLARED: dict[type[StepFigures], tuple[Figure, ...]] = {}
"""`figures_of`'s answers: a declaration is read once."""


def figures_of(declaration: type[StepFigures] = StepFigures) -> tuple[Figure, ...]:
    """The figures `declaration` declares, in declaration order."""
    known = _DECLARED.get(declaration)
    if known is None:
        known = _DECLARED[declaration] = _read(declaration)
    return known


def _read(declaration: type[StepFigures]) -> tuple[Figure, ...]:
    hints = typing.get_type_hints(declaration)
    out = []
    for f in dataclasses.fields(declaration):
        spec = f.metadata.get(_FIGURE)
        if spec is None:
            raise TypeError(f"{declaration.__name__}.{f.name} is not declared as a figure")
        value_type = (
            float
            if spec.get("label")
            else next(
                (t for t in (int, float) if t in (hints[f.name], *typing.get_args(hints[f.name]))),
                int,
            )
        )
        out.append(Figure(name=f.name, value_type=value_type, **spec))
    return tuple(out)


def figure(name: str, declaration: type[StepFigures] = StepFigures) -> Figure:
    """The declared figure called `name`."""
    for f in figures_of(declaration):
        if f.name == name:
            return f
    raise KeyError(f"no figure {name!r} in {declaration.__name__}")


def status_figures(declaration: type[StepFigures] = StepFigures) -> tuple[Figure, ...]:
    """The figures shown in the job's status and exported per job by the operator."""
    return tuple(f for f in figures_of(declaration) if f.status)


def trainer_keys(declaration: type[StepFigures] = StepFigures) -> frozenset[str]:
    """The keys of the figures the trainer's step fills."""
    return frozenset(f.key for f in figures_of(declaration) if f.source is FigureSource.TRAINER)


def totals(
    records: Iterable[Mapping[str, Any]], declaration: type[StepFigures] = StepFigures
) -> dict[str, Any]:
    """Every counted figure summed over step records (as `StepFigures.record` wrote them),
    by reason for a by-reason figure; a figure no record has counts 0."""
    sums: dict[str, Any] = {}
    counted = [f for f in figures_of(declaration) if f.counted]
    for f in counted:
        sums[f.key] = Counter() if f.kind is FigureKind.BY_REASON else f.value_type(0)
    for record in records:
        for f in counted:
            if f.key not in record:
                continue
            if f.kind is FigureKind.BY_REASON:
                sums[f.key].update({k: int(v) for k, v in dict(record[f.key]).items()})
            else:
                sums[f.key] += f.value_type(record[f.key])
    return {f.key: f.record_value(sums[f.key]) for f in counted}


def line_parts(figures: StepFigures) -> list[str]:
    """`label value` for every figure the declaration gives a step-line label (`line`), in
    declaration order, `-` for a figure the step did not measure: what both `dressage run`'s
    and `dressage train`'s step lines show after the step, its reward and version."""
    parts = []
    for f in figures_of(type(figures)):
        if f.line is None:
            continue
        label, spec = f.line
        value: float | None = figures.total(f.name) if f.counted else getattr(figures, f.name)
        if value is not None and spec.endswith("d"):
            value = int(value)
        parts.append(f"{label} {'-' if value is None else format(value, spec)}")
    return parts
