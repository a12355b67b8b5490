"""The engines' autoscaler as a pure function: its signals, its recommendation, an HPA's
stabilization and rate limits (the tables use the examples of the Kubernetes documentation's
HorizontalPodAutoscaler walkthrough), the decisions of whole cycles, and the property that it
does not oscillate on a noisy signal: after a scale-up, no scale-down within the scale-down
stabilization window; after a scale-down, no scale-up within the scale-up window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dressage_operator.autoscale import (
    FleetState,
    decide_scale,
    recommend,
    scale_down_limit,
    scale_up_limit,
    stabilize,
    stamp,
)
from dressage_operator.fleet_signals import FleetCounters, Signals
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.api.autoscaling import AutoscalingSpec, ScalingRules
from dressage.api.scale_status import AutoscalingStatus, Recommendation, ScaleEvent

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _spec(**kw: Any) -> AutoscalingSpec:
    return AutoscalingSpec.model_validate({"minReplicas": 1, "maxReplicas": 16, **kw})


def _signals(wait: float = 0.0, held: float = 0.0) -> Signals:
    return Signals(trainer_wait_fraction=wait, admission_held_fraction=held, step_seconds=10.0)


# --- recommendation -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("wait", "held", "current", "expected"),
    [
        (0.0, 0.0, 4, 4),  # neither signal: keep
        (0.05, 0.3, 4, 4),  # both under their thresholds
        (0.5, 0.0, 4, 8),  # trains half the step: twice the engines
        (0.2, 0.0, 4, 5),  # ceil(4 / 0.8)
        (0.11, 0.0, 4, 5),  # just above: at least one more
        (1.0, 0.0, 2, 40),  # only waits (sync rollout): at most 20x
        (0.0, 0.75, 4, 1),  # rollout needed a quarter of the time
        (0.0, 0.6, 4, 2),  # ceil(4 * 0.4)
        (0.0, 0.51, 10, 5),
        (0.0, 0.55, 1, 0),  # the bounds keep at least minReplicas
        (0.5, 0.9, 4, 8),  # waiting wins over holding
    ],
)
def test_the_recommendation_follows_the_signals(
    wait: float, held: float, current: int, expected: int
) -> None:
    assert recommend(_signals(wait, held), current, _spec())[0] == expected


# --- an HPA's stabilization and rate limits -------------------------------------------------
def _recs(*pairs: tuple[float, int]) -> list[Recommendation]:
    return [Recommendation(time=stamp(T0 + timedelta(seconds=s)), replicas=r) for s, r in pairs]


def test_a_scale_down_takes_the_highest_recommendation_of_its_window() -> None:
    up = ScalingRules(stabilization_window_seconds=0)
    down = ScalingRules(stabilization_window_seconds=300)
    now = T0 + timedelta(seconds=400)
    history = _recs((50, 9), (150, 6), (350, 5))
    # 50 s is out of the window (before now - 300 s): 6 is the highest within it.
    value, kept = stabilize(history, now, 2, 8, up, down)
    assert value == 6
    assert [r.replicas for r in kept] == [6, 5, 2]
    # A scale-up is not held back by a zero scale-up window.
    assert stabilize(history, now, 12, 8, up, down)[0] == 12


def test_a_scale_up_takes_the_lowest_recommendation_of_its_window() -> None:
    up = ScalingRules(stabilization_window_seconds=60)
    down = ScalingRules(stabilization_window_seconds=0)
    now = T0 + timedelta(seconds=100)
    assert stabilize(_recs((50, 5), (80, 9)), now, 12, 4, up, down)[0] == 5
    assert stabilize(_recs((30, 2)), now, 12, 4, up, down)[0] == 12


def _events(*pairs: tuple[float, int]) -> list[ScaleEvent]:
    return [ScaleEvent(time=stamp(T0 + timedelta(seconds=s)), change=c) for s, c in pairs]


def test_scale_down_policies_as_in_the_kubernetes_walkthrough() -> None:
    """`Pods 4 / 60 s` and `Percent 10 / 60 s`, the larger change: 80 replicas lose 8 at the
    first step, 72 lose 8 again (7.2 rounded up) a period later, and nothing within one."""
    rules = ScalingRules.model_validate(
        {
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 60},
                {"type": "Percent", "value": 10, "periodSeconds": 60},
            ]
        }
    )
    assert scale_down_limit(80, [], [], rules, T0) == 72
    later = T0 + timedelta(seconds=61)
    assert scale_down_limit(72, [], _events((0, 8)), rules, later) == 64
    soon = T0 + timedelta(seconds=15)
    assert scale_down_limit(72, [], _events((0, 8)), rules, soon) == 72
    # `Min` picks the policy with the smaller change: 4 pods.
    minimal = rules.model_copy(update={"select_policy": "Min"})
    assert scale_down_limit(80, [], [], minimal, T0) == 76
    disabled = rules.model_copy(update={"select_policy": "Disabled"})
    assert scale_down_limit(80, [], [], disabled, T0) == 80


def test_scale_up_defaults_add_four_pods_or_double_whichever_is_more() -> None:
    rules = _spec().behavior.up()
    assert scale_up_limit(2, [], [], rules, T0) == 6
    assert scale_up_limit(10, [], [], rules, T0) == 20
    # A change within the period counts from the period's start.
    soon = T0 + timedelta(seconds=5)
    assert scale_up_limit(6, _events((0, 4)), [], rules, soon) == 6


# --- whole cycles ---------------------------------------------------------------------------
def _counters(steps: float, wait: float = 0.0, held: float = 0.0) -> FleetCounters:
    return FleetCounters(steps, wait, held)


def _settled(n: int) -> FleetState:
    return FleetState(replicas=n, ready=n, settled=True)


def test_a_cycle_scales_up_while_the_trainer_waits_and_says_why() -> None:
    spec = _spec(maxReplicas=8)
    first = decide_scale(spec, _settled(2), None, _counters(100), T0)
    assert (first.replicas, first.status.reason, first.event) == (2, "Started", None)
    now = T0 + timedelta(seconds=15)
    decision = decide_scale(spec, _settled(2), first.status, _counters(140, wait=20), now)
    assert decision.replicas == 4
    status = decision.status
    assert (status.reason, status.scale_up_count, status.desired_replicas) == ("ScaleUp", 1, 4)
    assert (status.trainer_wait_fraction, status.admission_held_fraction) == (0.5, 0.0)
    assert decision.event == (
        "engines 2 -> 4 (ScaleUp): the trainer waited for batches 50% of its step time "
        "(scale-up above 10%), admission control held rollout back 0% of it (scale-down above "
        "50%)"
    )
    assert status.last_scale_time == stamp(now)
    assert [e.change for e in status.scale_ups] == [2]


def test_a_cycle_scales_down_once_the_window_no_longer_holds_a_higher_recommendation() -> None:
    """Within the thresholds for 45 s, then admission holds rollout back 80 % of the time:
    the recommendation drops to 1 at once, but the 60 s window keeps the earlier
    recommendations of 4 as a floor until they are older than it."""
    spec = _spec(behavior={"scaleDown": {"stabilizationWindowSeconds": 60}})
    status = decide_scale(spec, _settled(4), None, _counters(0), T0).status
    steps = held = 0.0
    replicas, reasons = [], []
    for i in range(1, 8):
        steps += 15
        held += 12 if i >= 4 else 0
        now = T0 + timedelta(seconds=15 * i)
        decision = decide_scale(spec, _settled(4), status, _counters(steps, held=held), now)
        status = decision.status
        replicas.append(decision.replicas)
        reasons.append(status.reason)
    assert replicas == [4, 4, 4, 4, 4, 4, 1]
    assert reasons[:3] == ["WithinThresholds"] * 3
    assert reasons[3:6] == ["ScaleDownStabilized"] * 3
    assert (reasons[6], status.scale_down_count) == ("ScaleDown", 1)


def test_a_recent_higher_recommendation_holds_a_scale_down_back() -> None:
    spec = _spec(behavior={"scaleDown": {"stabilizationWindowSeconds": 300}})
    status = decide_scale(spec, _settled(2), None, _counters(0), T0).status
    up = decide_scale(spec, _settled(2), status, _counters(10, wait=5), T0 + timedelta(seconds=15))
    assert up.replicas == 4
    down = decide_scale(
        spec, _settled(4), up.status, _counters(20, wait=5, held=9), T0 + timedelta(seconds=30)
    )
    assert (down.replicas, down.status.reason) == (4, "ScaleDownStabilized")
    assert down.event is None


def test_no_decision_while_engines_start_or_no_step_completed() -> None:
    spec = _spec()
    status = decide_scale(spec, _settled(2), None, _counters(10), T0).status
    starting = FleetState(replicas=3, ready=2, settled=False)
    waiting = decide_scale(spec, starting, status, _counters(20, wait=9), T0 + timedelta(seconds=5))
    assert (waiting.replicas, waiting.status.reason) == (3, "WaitingForEngines")
    assert waiting.status.message == "waiting for the engines: 2/3 ready"
    # The interval starts again from the counters seen while the engines started.
    assert waiting.status.sample is not None
    assert waiting.status.sample.step_seconds == 20
    idle = decide_scale(spec, _settled(3), waiting.status, _counters(20, wait=9), T0)
    assert (idle.replicas, idle.status.reason) == (3, "NoStepCompleted")
    # No scrape this cycle: nothing is decided and nothing recorded.
    quiet = decide_scale(spec, _settled(3), idle.status, None, T0)
    assert quiet.status == idle.status


def test_a_count_outside_the_bounds_is_brought_in_at_once() -> None:
    spec = _spec(minReplicas=2, maxReplicas=4)
    low = decide_scale(spec, _settled(1), None, None, T0)
    assert (low.replicas, low.status.reason) == (2, "OutOfBounds")
    assert low.event == (
        "engines 1 -> 2 (OutOfBounds): spec.inference.replicas 1 is below autoscaling.minReplicas 2"
    )
    high = decide_scale(spec, _settled(9), None, None, T0)
    assert high.replicas == 4


def test_a_restarted_trainer_starts_a_new_interval() -> None:
    spec = _spec()
    status = decide_scale(spec, _settled(2), None, _counters(500, wait=100), T0).status
    again = decide_scale(
        spec, _settled(2), status, _counters(5, wait=5), T0 + timedelta(seconds=15)
    )
    assert (again.replicas, again.status.reason) == (2, "Started")


# --- the property ---------------------------------------------------------------------------
@st.composite
def _behaviors(draw: st.DrawFn) -> dict[str, Any]:
    def rules(max_window: int) -> dict[str, Any]:
        policies = draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "type": st.sampled_from(["Pods", "Percent"]),
                        "value": st.integers(1, 200),
                        "periodSeconds": st.integers(1, 300),
                    }
                ),
                min_size=1,
                max_size=3,
            )
        )
        return {
            "stabilizationWindowSeconds": draw(st.integers(0, max_window)),
            "selectPolicy": draw(st.sampled_from(["Max", "Min"])),
            "policies": policies,
        }

    return {"scaleUp": rules(120), "scaleDown": rules(600)}


@settings(max_examples=150, deadline=None)
@given(
    behavior=_behaviors(),
    bounds=st.tuples(st.integers(1, 4), st.integers(4, 24)),
    start=st.integers(1, 24),
    intervals=st.lists(
        st.tuples(
            st.floats(1.0, 90.0),  # seconds to the next scrape
            st.floats(0.0, 1.0),  # the trainer's wait fraction
            st.floats(0.0, 1.0),  # admission's held fraction
            st.booleans(),  # a step completed in the interval
        ),
        min_size=1,
        max_size=80,
    ),
)
def test_the_autoscaler_does_not_oscillate_on_a_noisy_signal(
    behavior: dict[str, Any],
    bounds: tuple[int, int],
    start: int,
    intervals: list[tuple[float, float, float, bool]],
) -> None:
    """Oscillation: a change of direction within the stabilization window that guards it, a
    scale-down less than `scaleDown.stabilizationWindowSeconds` after a scale-up, or a
    scale-up less than `scaleUp.stabilizationWindowSeconds` after a scale-down. Signals are
    random in each interval; the fleet follows every decision at once (the worst case: no
    engine start time damps it). The count stays within the bounds."""
    spec = _spec(minReplicas=bounds[0], maxReplicas=bounds[1], behavior=behavior)
    up_window = spec.behavior.up().stabilization_window_seconds or 0
    down_window = spec.behavior.down().stabilization_window_seconds or 0
    now = T0
    current = spec.clamp(start)
    counters = FleetCounters(0.0, 0.0, 0.0)
    status: AutoscalingStatus | None = None
    changes: list[tuple[datetime, int]] = []  # (time, +1 up / -1 down)
    for seconds, wait, held, stepped in intervals:
        now += timedelta(seconds=seconds)
        if stepped:
            counters = FleetCounters(
                counters.step_seconds + seconds,
                counters.batch_wait_seconds + wait * seconds,
                counters.admission_wait_seconds + held * seconds,
            )
        decision = decide_scale(spec, _settled(current), status, counters, now)
        assert spec.min_replicas <= decision.replicas <= spec.max_replicas
        if decision.replicas != current:
            assert decision.event is not None
            changes.append((now, 1 if decision.replicas > current else -1))
        current, status = decision.replicas, decision.status
    for i, (first, direction) in enumerate(changes):
        for later, other in changes[i + 1 :]:
            if other == direction:
                continue
            gap = (later - first).total_seconds()
            window = down_window if direction > 0 else up_window
            assert gap >= window, (changes, direction, gap, window)
