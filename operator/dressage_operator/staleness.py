"""Reading a job's staleness figures from its own Prometheus `/metrics` (trainer rank 0).

Pure: `parse_staleness` turns exposition text into the status's `StalenessStatus`, and
`ScrapeResult` is what one scrape found. The HTTP GET around it is `dressage_operator.scrape`,
at the handlers' level.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from dressage import metrics as names
from dressage.api.status import StalenessStatus
from dressage_operator.fleet_signals import FleetCounters


@dataclass(frozen=True)
class ScrapeResult:
    """One scrape: figures on success, an error message otherwise."""

    url: str
    staleness: StalenessStatus | None = None
    error: str = ""
    counters: FleetCounters | None = None
    """The engines' autoscaling counters (`fleet_signals`), when the job exports them."""


def parse_staleness(text: str, scraped_at: str | None = None) -> StalenessStatus:
    """Extract the staleness block of the status from Prometheus text exposition."""
    values: dict[str, float] = {}
    dropped: dict[str, int] = {}
    version_label: str | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == names.DROPPED_GROUPS:
                reason = sample.labels.get("reason", "unknown")
                dropped[reason] = dropped.get(reason, 0) + int(sample.value)
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
    return StalenessStatus(
        version_span_mean=opt(names.STALENESS_VERSION_SPAN_MEAN),
        version_span_max=opt(names.STALENESS_VERSION_SPAN_MAX),
        version_span_min=opt(names.STALENESS_VERSION_SPAN_MIN),
        dropped_groups=sum(dropped.values()),
        dropped_groups_by_reason=dict(sorted(dropped.items())),
        staleness_failures=int(values.get(names.STALENESS_FAILURES, 0)),
        step=None if step is None else int(step),
        weight_version=version_label,
        last_scrape_time=scraped_at,
    )
