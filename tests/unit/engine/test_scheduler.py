"""`StepPacer`: the scheduler's minimum step interval, over a fake clock."""

from __future__ import annotations

import pytest

from dressage.engine.scheduler import StepPacer


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
