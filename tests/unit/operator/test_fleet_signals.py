"""The autoscaler's signals from trainer rank 0's counters: read from Prometheus text, and an
interval's trainer wait and admission held fractions as ratios of the counters' increases,
each within [0, 1], none for an interval without a completed step or across a trainer
restart."""

from __future__ import annotations

from dressage_operator.fleet_signals import (
    FleetCounters,
    Signals,
    interval_signals,
    parse_fleet_counters,
)
from hypothesis import given
from hypothesis import strategies as st

from dressage import metrics as names


def test_the_counters_are_read_from_the_jobs_metrics() -> None:
    text = "\n".join(
        [
            "# TYPE dressage_trainer_step_seconds counter",
            f"{names.TRAINER_STEP_SECONDS} 120.5",
            "# TYPE dressage_trainer_batch_wait_seconds counter",
            f"{names.TRAINER_BATCH_WAIT_SECONDS} 30.25",
            "# TYPE dressage_rollout_admission_wait_seconds counter",
            f"{names.ROLLOUT_ADMISSION_WAIT_SECONDS} 4",
            "",
        ]
    )
    assert parse_fleet_counters(text) == FleetCounters(120.5, 30.25, 4.0)
    # A runtime without the step seconds gives the autoscaler no signal.
    assert parse_fleet_counters(f"{names.TRAIN_STEP} 3\n") is None


def test_an_intervals_signals_are_ratios_of_the_increases() -> None:
    start = FleetCounters(step_seconds=100, batch_wait_seconds=10, admission_wait_seconds=50)
    end = FleetCounters(step_seconds=140, batch_wait_seconds=20, admission_wait_seconds=52)
    assert interval_signals(start, end) == Signals(0.25, 0.05, 40.0)
    # The admission wait counted into a batch may overlap the previous step: clamped.
    overlap = FleetCounters(step_seconds=110, batch_wait_seconds=10, admission_wait_seconds=70)
    signals = interval_signals(start, overlap)
    assert signals is not None
    assert signals.admission_held_fraction == 1.0
    assert interval_signals(start, start) is None  # no step completed
    assert interval_signals(end, start) is None  # the trainer restarted


_SECONDS = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(start=st.tuples(_SECONDS, _SECONDS, _SECONDS), grown=st.tuples(_SECONDS, _SECONDS, _SECONDS))
def test_an_intervals_fractions_are_within_0_and_1_of_its_step_seconds(
    start: tuple[float, float, float], grown: tuple[float, float, float]
) -> None:
    before = FleetCounters(*start)
    after = FleetCounters(*(a + b for a, b in zip(start, grown, strict=True)))
    signals = interval_signals(before, after)
    if after.step_seconds <= before.step_seconds:
        assert signals is None
        return
    assert signals is not None
    assert 0.0 <= signals.trainer_wait_fraction <= 1.0
    assert 0.0 <= signals.admission_held_fraction <= 1.0
    assert signals.step_seconds == after.step_seconds - before.step_seconds
