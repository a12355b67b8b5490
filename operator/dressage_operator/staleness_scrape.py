"""Reading a job's staleness figures from its own Prometheus `/metrics` (trainer rank 0).

Pure: `parse_staleness` turns exposition text into the status's `StalenessStatus`, and
`ScrapeResult` is what one scrape found. The HTTP GET around it is `dressage_operator.scrape`,
at the handlers' level.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from dressage import metrics as names
from dressage.api.figures import FigureKind, StepFigures, status_figures
from dressage.api.status import EvaluationStatus, StalenessStatus, staleness_status_model
from dressage_operator.budget_scale import BudgetFigures
from dressage_operator.fleet_signals import FleetCounters


@dataclass(frozen=True)
class ScrapeResult:
    """One scrape: figures on success, an error message otherwise."""

    url: str
    staleness: StalenessStatus | None = None
    error: str = ""
    counters: FleetCounters | None = None
    """The engines' autoscaling counters (`fleet_signals`), when the job exports them."""
    budget: BudgetFigures | None = None
    """The staleness budget's figures (`budget_scale`), read from every successful scrape."""
    evaluation: EvaluationStatus | None = None
    """The held-out evaluations the job exports (`eval_scrape`), None when it exports none."""


def parse_staleness(
    text: str, scraped_at: str | None = None, declaration: type[StepFigures] = StepFigures
) -> StalenessStatus:
    """Extract the staleness block of the status from Prometheus text exposition: the
    declaration's status figures under their `metric`, the step and the weight version."""
    shown = status_figures(declaration)
    values: dict[str, float] = {}
    by_reason: dict[str, dict[str, int]] = {
        f.metric: {} for f in shown if f.kind is FigureKind.BY_REASON
    }
    version_label: str | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in by_reason:
                counts = by_reason[sample.name]
                reason = sample.labels.get("reason", "unknown")
                counts[reason] = counts.get(reason, 0) + int(sample.value)
            elif sample.name == names.WEIGHT_VERSION_INFO:
                if sample.value and "version" in sample.labels:
                    version_label = sample.labels["version"]
            else:
                values[sample.name] = sample.value

    def opt(name: str) -> float | None:
        value = values.get(name)
        return None if value is None or value != value else value  # NaN: nothing observed yet

    step = opt(names.TRAIN_STEP)
    ordinal = opt(names.WEIGHT_VERSION)
    if version_label is None and ordinal is not None:
        version_label = str(int(ordinal))
    figures: dict[str, object] = {}
    for f in shown:
        if f.kind is FigureKind.GAUGE:
            figures[f.name] = opt(f.metric)
        elif f.kind is FigureKind.COUNTER:
            figures[f.name] = f.value_type(values.get(f.metric, 0))
        else:
            counts = by_reason[f.metric]
            figures[f.name] = sum(counts.values())
            figures[f.by_reason_name] = dict(sorted(counts.items()))
    return staleness_status_model(declaration).model_validate(
        {
            **figures,
            "step": None if step is None else int(step),
            "weight_version": version_label,
            "last_scrape_time": scraped_at,
        }
    )
