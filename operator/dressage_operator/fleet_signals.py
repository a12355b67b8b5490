"""The engines' autoscaling signals, read from the job's own `/metrics` (pure).

Trainer rank 0 exports three counters, each summed over the trainer's completed steps
(`dressage.orchestrator.metrics`, from each step's record):

- `dressage_trainer_step_seconds_total`: the steps' wall seconds (waiting for the batch,
  training, publishing the weights);
- `dressage_trainer_batch_wait_seconds_total`: of those, the seconds rank 0 waited for its next
  batch (from asking the collector to holding the batch);
- `dressage_rollout_admission_wait_seconds_total`: the seconds admission control held the
  rollout worker back (rollout ran ahead of the staleness window), counted into the batch being
  collected meanwhile.

The operator reads them at every scrape. Between two scrapes at which the step seconds grew
(at least one step completed), the interval's signals are the ratios of the increases:

    trainer wait fraction   = increase(batch wait seconds) / increase(step seconds)
    admission held fraction = increase(admission wait seconds) / increase(step seconds)

each within [0, 1] (the admission wait of a batch's collection is counted in the step that
takes it, which overlaps the previous step's training, so the ratio is clamped). In PromQL, for
an HPA or KEDA on the same figures: `rate(dressage_trainer_batch_wait_seconds_total[5m]) /
rate(dressage_trainer_step_seconds_total[5m])`. Counters that went down belong to a restarted
trainer: the interval starts again from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from dressage import metrics as names


@dataclass(frozen=True)
class FleetCounters:
    """The three counters at one scrape."""

    step_seconds: float
    batch_wait_seconds: float
    admission_wait_seconds: float

    def restarted_since(self, earlier: FleetCounters) -> bool:
        """Whether a counter went down: the trainer restarted and counts from 0 again."""
        return (
            self.step_seconds < earlier.step_seconds
            or self.batch_wait_seconds < earlier.batch_wait_seconds
            or self.admission_wait_seconds < earlier.admission_wait_seconds
        )


@dataclass(frozen=True)
class Signals:
    """One interval's signals."""

    trainer_wait_fraction: float
    admission_held_fraction: float
    step_seconds: float
    """The wall seconds of the steps the interval covers."""


def parse_fleet_counters(text: str) -> FleetCounters | None:
    """The counters in Prometheus text exposition; None when the trainer exports no step
    seconds (a runtime without them: the autoscaler then has no signal)."""
    found: dict[str, float] = {}
    wanted = {
        names.TRAINER_STEP_SECONDS,
        names.TRAINER_BATCH_WAIT_SECONDS,
        names.ROLLOUT_ADMISSION_WAIT_SECONDS,
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                found[sample.name] = found.get(sample.name, 0.0) + float(sample.value)
    if names.TRAINER_STEP_SECONDS not in found:
        return None
    return FleetCounters(
        step_seconds=found[names.TRAINER_STEP_SECONDS],
        batch_wait_seconds=found.get(names.TRAINER_BATCH_WAIT_SECONDS, 0.0),
        admission_wait_seconds=found.get(names.ROLLOUT_ADMISSION_WAIT_SECONDS, 0.0),
    )


def _fraction(part: float, whole: float) -> float:
    return min(1.0, max(0.0, part / whole))


def interval_signals(start: FleetCounters, end: FleetCounters) -> Signals | None:
    """The signals of the interval from `start` to `end`; None when no step completed in it
    (or the trainer restarted: the caller starts a new interval)."""
    steps = end.step_seconds - start.step_seconds
    if steps <= 0 or end.restarted_since(start):
        return None
    return Signals(
        trainer_wait_fraction=_fraction(end.batch_wait_seconds - start.batch_wait_seconds, steps),
        admission_held_fraction=_fraction(
            end.admission_wait_seconds - start.admission_wait_seconds, steps
        ),
        step_seconds=steps,
    )
