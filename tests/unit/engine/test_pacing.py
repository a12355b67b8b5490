"""The embedded engine's step bookkeeping: `StepPacer`, the minimum step interval over a fake
clock, and `SchedulerStats`, the cumulative step figures."""

from __future__ import annotations

import pytest

from dressage.engine.embedded.pacing import SchedulerStats, StepPacer


def test_a_step_adds_its_occupancy_once_and_per_token_slot() -> None:
    stats = SchedulerStats()
    stats.record_step(seconds=0.02, tokens=3)
    stats.record_step(seconds=0.05, tokens=1)  # a step slower than the pacing interval
    assert stats.steps == 2
    assert stats.tokens == 4
    assert stats.active_seconds == pytest.approx(0.07)
    assert stats.slot_seconds == pytest.approx(0.02 * 3 + 0.05 * 1)


def test_a_step_that_produced_nothing_is_not_counted() -> None:
    stats = SchedulerStats()
    stats.record_step(seconds=0.02, tokens=0)
    assert stats.snapshot() == {
        "steps": 0,
        "tokens": 0,
        "prefill_tokens": 0,
        "active_seconds": 0.0,
        "slot_seconds": 0.0,
    }


def test_steps_are_spaced_by_the_interval_from_the_previous_start() -> None:
    pacer = StepPacer(0.005)
    assert pacer.wait_s(100.0) == 0.0  # the first step never waits
    pacer.started(100.0)
    assert pacer.wait_s(100.0) == pytest.approx(0.005)
    assert pacer.wait_s(100.002) == pytest.approx(0.003)
    assert pacer.wait_s(100.005) == 0.0
    assert pacer.wait_s(107.0) == 0.0  # an idle engine owes nothing
    pacer.started(107.0)
    assert pacer.wait_s(107.001) == pytest.approx(0.004)


def test_zero_interval_never_waits() -> None:
    pacer = StepPacer(0.0)
    pacer.started(1.0)
    assert pacer.wait_s(1.0) == 0.0


def test_negative_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="interval"):
        StepPacer(-1.0)
