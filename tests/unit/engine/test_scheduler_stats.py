"""`SchedulerStats`: the embedded engine's cumulative step figures, pure bookkeeping."""

from __future__ import annotations

import pytest

from dressage.engine.scheduler import SchedulerStats


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
