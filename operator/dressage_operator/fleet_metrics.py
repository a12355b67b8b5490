"""The engine fleet's per-job series on the operator's `/metrics` (pure).

From each job's latest status, like the other per-job series (`dressage_operator.metrics`
collects them): the engines asked for and ready, and, for a job with
`spec.inference.autoscaling`, the autoscaler's changes by direction (a counter mirroring the
status's cumulative counts, so an operator restart neither loses nor doubles one), its last
decision's engine count and its two signals.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dressage import metrics as names
from dressage.api.status import AsyncRLJobStatus

JOB_LABELS = ["namespace", names.JOB_LABEL]


def fleet_families(jobs: Mapping[tuple[str, str], AsyncRLJobStatus]) -> Iterator[Metric]:
    """The fleet's metric families for every job of `jobs` (keyed by namespace and name)."""
    engines = GaugeMetricFamily(
        names.JOB_ENGINES,
        "Engines the job asks for (desired) and engines ready.",
        labels=[*JOB_LABELS, "state"],
    )
    scaled = CounterMetricFamily(
        names.JOB_ENGINE_SCALE_EVENTS,
        "Changes of the engine count by the job's autoscaler, by direction.",
        labels=[*JOB_LABELS, "direction"],
    )
    desired = GaugeMetricFamily(
        names.JOB_AUTOSCALER_DESIRED_ENGINES,
        "Engine count of the autoscaler's last decision.",
        labels=JOB_LABELS,
    )
    wait = GaugeMetricFamily(
        names.JOB_TRAINER_WAIT_FRACTION,
        "Fraction of the trainer's step time spent waiting for batches (last interval).",
        labels=JOB_LABELS,
    )
    held = GaugeMetricFamily(
        names.JOB_ADMISSION_HELD_FRACTION,
        "Fraction of the trainer's step time admission control held rollout back.",
        labels=JOB_LABELS,
    )
    for (namespace, job), status in sorted(jobs.items()):
        labels = [namespace, job]
        engines.add_metric([*labels, "desired"], float(status.inference.desired))
        engines.add_metric([*labels, "ready"], float(status.inference.ready))
        auto = status.autoscaling
        if auto is None:
            continue
        scaled.add_metric([*labels, "up"], float(auto.scale_up_count))
        scaled.add_metric([*labels, "down"], float(auto.scale_down_count))
        if auto.desired_replicas is not None:
            desired.add_metric(labels, float(auto.desired_replicas))
        if auto.trainer_wait_fraction is not None:
            wait.add_metric(labels, auto.trainer_wait_fraction)
        if auto.admission_held_fraction is not None:
            held.add_metric(labels, auto.admission_held_fraction)
    yield from (engines, scaled, desired, wait, held)
