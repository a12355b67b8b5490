"""How a step figure is declared: its kind, its source, and every name it goes by.

`dressage.api.figures` declares the figures (`StepFigures`) with the field helpers here
(`counter`, `gauge`, `by_reason`) and is what every consumer imports; this module holds the
model of one declared figure (`Figure`) and reads a declaration's fields into it
(`read_declaration`), so the declaration itself stays a list of figures.
"""

from __future__ import annotations

import dataclasses
import typing
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

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
    """The trainer's step: the value of `GRPOTrainer.train_step`'s figure under `key`."""
    LOOP = "loop"
    """The training loop's own measure of the step: its seconds, the version lag against the
    trainer's version, and the ratio figures it computes from the step's counters."""


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
    ratio: tuple[str, str] | None = None
    """A ratio gauge: the counters (field names) it divides, numerator by denominator. A
    step's value is the quotient of the step's own counts, a run's the quotient of their sums
    (`ratio_of`); None while the denominator is 0."""

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
        """The operator's per-job Prometheus name (labels `namespace`, `dressage_job`)."""
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

    def ratio_of(self, counts: Mapping[str, Any]) -> float | None:
        """A ratio gauge's value from its counters' values, keyed by name (a counter has no
        namespace, so its name is its record key too): None when one is missing or the
        denominator is not above 0."""
        if self.ratio is None:
            raise ValueError(f"{self.name} is not a ratio")
        numerator, denominator = (counts.get(name) for name in self.ratio)
        if numerator is None or denominator is None or float(denominator) <= 0:
            return None
        return float(numerator) / float(denominator)

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
    ratio: tuple[str, str] | None = None,
) -> Any:
    """Declare a gauge field (`float | None`, None while not measured); with `label`, a
    labelled gauge (`dict[str, float] | None`, one value per label value); with `ratio`, the
    quotient of two counters (`Figure.ratio`), which the record computes, never a source."""
    options = {
        "source": source,
        "status": status,
        "namespace": namespace,
        "metric_stem": metric,
        "line": line,
        "label": label,
        "ratio": ratio,
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


def read_declaration(declaration: type) -> tuple[Figure, ...]:
    """The figures a dataclass of figure fields declares, in declaration order; a field not
    declared with `counter`, `gauge` or `by_reason`, or a ratio of figures that are not
    counters declared before it, is an error."""
    hints = typing.get_type_hints(declaration)
    out: list[Figure] = []
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
        declared = Figure(name=f.name, value_type=value_type, **spec)
        counters = {d.name for d in out if d.kind is FigureKind.COUNTER}
        if declared.ratio is not None and not set(declared.ratio) <= counters:
            raise TypeError(
                f"{declaration.__name__}.{f.name} divides {declared.ratio}: "
                "counters declared before it"
            )
        out.append(declared)
    return tuple(out)
