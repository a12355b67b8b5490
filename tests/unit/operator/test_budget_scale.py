"""The engines' autoscaler in `spec.staleness.mode: auto` as a pure function: the budget's
figures read from the job's `/metrics`, where the data stands against the budget, the
recommendation (more engines only while the trainer is starved with the lag below the budget),
whole cycles with their Events' reasons and the status's budget block, and, on a simulated
job (engines producing groups, a trainer consuming them, the job's controller smoothing its
engine ratio), that the fleet converges after a step change of the trainer's speed and does
not oscillate on noisy figures."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dressage_operator.autoscale import FleetState, decide_scale
from dressage_operator.budget_scale import (
    DEPTH,
    ENGINE_RATIO,
    EVENT_SCALE_DOWN,
    EVENT_SCALE_UP,
    HOLD_AT_BUDGET,
    KEEP_VERSIONS,
    LAG_MAX,
    MISMATCH_KL,
    Budget,
    BudgetFigures,
    Standing,
    condition,
    parse_budget_figures,
    recommend_within_budget,
    standing,
)
from dressage_operator.fleet_signals import FleetCounters, Signals
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.api.autoscaling import AutoscalingSpec
from dressage.api.job import AsyncRLJobSpec
from dressage.api.scale_status import AutoscalingStatus
from dressage.api.status import ConditionType

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
BUDGET = Budget(max_lag_versions=2)


def _spec(**kw: Any) -> AutoscalingSpec:
    return AutoscalingSpec.model_validate({"minReplicas": 1, "maxReplicas": 16, **kw})


def _signals(wait: float = 0.0, held: float = 0.0) -> Signals:
    return Signals(trainer_wait_fraction=wait, admission_held_fraction=held, step_seconds=10.0)


def _settled(n: int) -> FleetState:
    return FleetState(replicas=n, ready=n, settled=True)


# --- the figures and the budget --------------------------------------------------------------
def test_the_budget_figures_are_read_from_the_jobs_metrics() -> None:
    text = "\n".join(
        [
            f"# TYPE {LAG_MAX} gauge",
            f"{LAG_MAX} 1.0",
            f"# TYPE {ENGINE_RATIO} gauge",
            f"{ENGINE_RATIO} 1.4",
            f"# TYPE {MISMATCH_KL} gauge",
            f"{MISMATCH_KL} NaN",
            f"# TYPE {DEPTH} gauge",
            f"{DEPTH} 24.0",
            f"# TYPE {KEEP_VERSIONS} gauge",
            f"{KEEP_VERSIONS} 3.0",
            "",
        ]
    )
    assert parse_budget_figures(text) == BudgetFigures(
        lag_max=1.0, engine_ratio=1.4, mismatch_kl=None, depth=24.0, keep_versions=3.0
    )
    assert parse_budget_figures("") == BudgetFigures()


def test_the_budget_of_a_job_is_its_auto_modes() -> None:
    base = {
        "model": {"source": "builtin:tiny"},
        "trainer": {"nodes": 1},
        "inference": {"replicas": 1},
        "storage": {"persistentVolumeClaim": "shared"},
    }
    fixed = AsyncRLJobSpec.model_validate(base)
    assert Budget.of(fixed) is None
    auto = AsyncRLJobSpec.model_validate({**base, "staleness": {"mode": "auto"}})
    assert Budget.of(auto) == Budget(max_lag_versions=2)
    capped = AsyncRLJobSpec.model_validate(
        {
            **base,
            "staleness": {"mode": "auto", "budget": {"maxLagVersions": 4, "maxMismatchKL": 0.01}},
        }
    )
    assert Budget.of(capped) == Budget(max_lag_versions=4, max_mismatch_kl=0.01)


@pytest.mark.parametrize(
    ("lag", "kl", "expected"),
    [
        (None, None, Standing.UNKNOWN),
        (0.0, None, Standing.WITHIN),
        (1.0, 0.005, Standing.WITHIN),
        (2.0, None, Standing.AT),
        (3.0, None, Standing.OVER),
        (1.0, 0.02, Standing.OVER),  # the KL ceiling (0.01) is part of the budget
    ],
)
def test_where_the_data_stands_against_the_budget(
    lag: float | None, kl: float | None, expected: Standing
) -> None:
    budget = Budget(max_lag_versions=2, max_mismatch_kl=0.01)
    assert standing(budget, BudgetFigures(lag_max=lag, mismatch_kl=kl))[0] is expected


def test_the_condition_says_whether_the_budget_is_met() -> None:
    assert condition(BUDGET, BudgetFigures(lag_max=2.0)) == (
        ConditionType.STALENESS_BUDGET_MET,
        True,
        "AtBudget",
        "version lag 2 of at most 2",
    )
    over = condition(BUDGET, BudgetFigures(lag_max=3.0))
    assert over is not None
    assert (over[1], over[2]) == (False, "OverBudget")
    assert condition(BUDGET, BudgetFigures()) is None


# --- the recommendation ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ratio", "lag", "wait", "held", "current", "expected", "reason"),
    [
        (1.5, 1.0, 0.4, 0.0, 4, 6, ""),  # starved, room under the budget: ceil(4 * 1.5)
        (1.05, 1.0, 0.1, 0.0, 4, 4, ""),  # within the ratio's tolerance
        (1.2, 0.0, 0.2, 0.0, 2, 3, ""),  # at least one more
        (1.5, 2.0, 0.4, 0.0, 4, 4, HOLD_AT_BUDGET),  # at the budget: no engine added
        (1.5, None, 0.4, 0.0, 4, 4, HOLD_AT_BUDGET),  # lag not measured: nothing on a guess
        (0.6, 2.0, 0.0, 0.3, 5, 3, ""),  # the budget holds rollout back: ceil(5 * 0.6)
        (0.85, 2.0, 0.0, 0.3, 4, 3, ""),  # at least one fewer
        (1.0, 2.0, 0.0, 0.6, 4, 2, ""),  # the interval held rollout back: ceil(4 * 0.4)
        (1.0, 3.0, 0.0, 0.0, 4, 3, "OverStalenessBudget"),  # over it, the trainer fed
        (1.0, 3.0, 0.3, 0.0, 4, 4, ""),  # over it, the trainer starved: fewer would not help
        (None, 1.0, 0.5, 0.0, 4, 8, ""),  # no ratio exported: the interval's own signals
        (None, 2.0, 0.5, 0.0, 4, 4, HOLD_AT_BUDGET),
        (None, 2.0, 0.0, 0.75, 4, 1, ""),
    ],
)
def test_the_recommendation_follows_the_budget(
    ratio: float | None,
    lag: float | None,
    wait: float,
    held: float,
    current: int,
    expected: int,
    reason: str,
) -> None:
    figures = BudgetFigures(lag_max=lag, engine_ratio=ratio)
    advice = recommend_within_budget(_signals(wait, held), figures, BUDGET, current, _spec())
    assert (advice.replicas, advice.hold_reason) == (expected, reason)


def test_a_kl_above_its_ceiling_holds_a_scale_up_back() -> None:
    budget = Budget(max_lag_versions=2, max_mismatch_kl=0.01)
    figures = BudgetFigures(lag_max=1.0, engine_ratio=1.5, mismatch_kl=0.03)
    advice = recommend_within_budget(_signals(0.4), figures, budget, 4, _spec())
    assert (advice.replicas, advice.hold_reason) == (4, HOLD_AT_BUDGET)
    assert "mismatch KL 0.03 of at most 0.01" in advice.said


# --- whole cycles ----------------------------------------------------------------------------
def test_a_starved_trainer_under_the_budget_gets_an_engine_with_an_event_naming_the_figures() -> (
    None
):
    spec = _spec(
        behavior={"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}
    )
    figures = BudgetFigures(lag_max=1.0, engine_ratio=1.6, depth=32.0, keep_versions=3.0)
    first = decide_scale(spec, _settled(2), None, FleetCounters(100, 0, 0), T0, BUDGET, figures)
    now = T0 + timedelta(seconds=15)
    decision = decide_scale(
        spec, _settled(2), first.status, FleetCounters(140, 20, 0), now, BUDGET, figures
    )
    assert (decision.replicas, decision.event_reason) == (3, EVENT_SCALE_UP)
    assert decision.event == (
        "engines 2 -> 3 (ScaleUpLimit): the trainer waited for batches 50% of its step time, "
        "admission control held rollout back 0% of it, the job asks for 1.60x the engines "
        "(depth 32, window 3); version lag 1 of at most 2; recommended 4, limited by "
        "behavior.scaleUp.policies"
    )
    budget = decision.status.budget
    assert budget is not None
    assert budget.to_wire() == {
        "maxLagVersions": 2,
        "lagVersions": 1.0,
        "engineRatio": 1.6,
        "standing": "WithinBudget",
    }


def test_a_starved_trainer_at_the_budget_gets_no_engine() -> None:
    spec = _spec()
    figures = BudgetFigures(lag_max=2.0, engine_ratio=1.6)
    first = decide_scale(spec, _settled(2), None, FleetCounters(100, 0, 0), T0, BUDGET, figures)
    now = T0 + timedelta(seconds=15)
    decision = decide_scale(
        spec, _settled(2), first.status, FleetCounters(140, 20, 0), now, BUDGET, figures
    )
    assert (decision.replicas, decision.event) == (2, None)
    assert decision.status.reason == HOLD_AT_BUDGET
    assert "version lag 2 of at most 2" in decision.status.message
    assert decision.status.budget is not None
    assert decision.status.budget.standing == "AtBudget"


def test_a_scale_down_for_the_budget_says_so() -> None:
    spec = _spec(behavior={"scaleDown": {"stabilizationWindowSeconds": 0}})
    figures = BudgetFigures(lag_max=2.0, engine_ratio=0.5)
    first = decide_scale(spec, _settled(4), None, FleetCounters(100, 0, 0), T0, BUDGET, figures)
    now = T0 + timedelta(seconds=15)
    decision = decide_scale(
        spec, _settled(4), first.status, FleetCounters(140, 0, 10), now, BUDGET, figures
    )
    assert (decision.replicas, decision.event_reason) == (2, EVENT_SCALE_DOWN)


def test_without_a_budget_the_block_is_gone_and_the_event_is_the_fixed_modes() -> None:
    spec = _spec()
    status = decide_scale(spec, _settled(2), None, FleetCounters(0, 0, 0), T0, BUDGET).status
    assert status.budget is not None
    assert status.budget.standing == "Unknown"
    decision = decide_scale(
        spec, _settled(2), status, FleetCounters(10, 5, 0), T0 + timedelta(seconds=15)
    )
    assert decision.status.budget is None
    assert (decision.replicas, decision.event_reason) == (4, "EnginesScaled")


# --- a simulated job -------------------------------------------------------------------------
INTERVAL = 15.0
"""Seconds between two scrapes."""
ENGINE_START = 45.0
"""Seconds an added engine takes to be ready (the fleet is unsettled meanwhile)."""
GROUPS_PER_ENGINE = 1.0
"""Prompt groups one engine completes per second at the depth's bound."""


@dataclass
class Job:
    """A job in auto mode, a scrape interval at a time. Engines produce `GROUPS_PER_ENGINE`
    groups a second each; the trainer consumes `demand` a second. Short of it the trainer
    waits the missing part and the data is fresh (lag 1, now and then 0 or 2); beyond it
    admission holds rollout back the surplus part and rollout runs ahead to the budget (lag 2,
    now and then 1). The job's controller computes its engine ratio from the step's
    fractions (the rule `dressage.rollout.budget` documents: above 1 while the trainer waits
    with the depth at its bound, below 1 while it is fed and held more than half the time)
    and smooths it over steps; every fraction carries noise."""

    rng: random.Random
    demand: float
    noise: float = 0.05
    ratio: float = 1.0

    def interval(self, engines: int) -> tuple[float, float, BudgetFigures]:
        produced = engines * GROUPS_PER_ENGINE
        jitter = self.rng.gauss
        if produced < self.demand:
            wait, held = 1.0 - produced / self.demand, 0.0
            lag = 1.0 + self.rng.choice((-1.0, 0.0, 0.0, 1.0))
        else:
            wait, held = 0.0, 1.0 - self.demand / produced
            lag = 2.0 - self.rng.choice((0.0, 0.0, 1.0))
        wait = min(1.0, max(0.0, wait + jitter(0, self.noise)))
        held = min(1.0, max(0.0, held + jitter(0, self.noise)))
        if wait > 0.05:
            step_ratio = min(2.0, max(1.0, 0.95 / (1.0 - wait)))
        elif wait < 0.03 and held > 0.5:
            step_ratio = max(0.5, (1.0 - held) / 0.75)
        else:
            step_ratio = 1.0
        self.ratio = 0.5 * self.ratio + 0.5 * step_ratio
        return wait, held, BudgetFigures(lag_max=lag, engine_ratio=self.ratio)


def _simulate(
    job: Job, phases: list[tuple[float, int]], spec: AutoscalingSpec, start: int
) -> list[list[tuple[float, int]]]:
    """Run `job` through phases of (demand, intervals); each phase's (seconds, engines)
    after every interval."""
    counters = FleetCounters(0.0, 0.0, 0.0)
    status: AutoscalingStatus | None = None
    engines, ready_at = start, 0.0
    clock = 0.0
    runs: list[list[tuple[float, int]]] = []
    for demand, intervals in phases:
        job.demand = demand
        run = []
        for _ in range(intervals):
            clock += INTERVAL
            wait, held, figures = job.interval(engines)
            counters = FleetCounters(
                counters.step_seconds + INTERVAL,
                counters.batch_wait_seconds + wait * INTERVAL,
                counters.admission_wait_seconds + held * INTERVAL,
            )
            fleet = FleetState(engines, engines, settled=clock >= ready_at)
            now = T0 + timedelta(seconds=clock)
            decision = decide_scale(spec, fleet, status, counters, now, BUDGET, figures)
            if decision.replicas > engines:
                ready_at = clock + ENGINE_START
            engines, status = decision.replicas, decision.status
            run.append((clock, engines))
        runs.append(run)
    return runs


def _fed_band(demand: float) -> range:
    """The engine counts a converged fleet may have: enough to feed the trainer within the
    scale-up threshold, not so many that the budget holds them back more than half the time."""
    low = math.ceil(demand * 0.9 / GROUPS_PER_ENGINE)
    high = math.floor(2 * demand / GROUPS_PER_ENGINE)
    return range(low, high + 1)


@pytest.mark.parametrize("seed", range(5))
def test_the_fleet_converges_after_a_step_change_of_the_trainers_speed(seed: int) -> None:
    """The trainer doubles its speed (6 -> 12 groups a second), then slows to a quarter of
    it (3): each time the fleet moves one way only, reaches the band where the trainer is fed
    within the budget, and stays there for the rest of the phase (30 minutes each)."""
    spec = _spec(maxReplicas=32)
    phases = [(6.0, 120), (12.0, 120), (3.0, 120)]
    runs = _simulate(Job(random.Random(seed), demand=6.0), phases, spec, start=2)
    previous = 2
    for (demand, _), run in zip(phases, runs, strict=True):
        counts = [previous] + [n for _, n in run]
        steps = [b - a for a, b in itertools.pairwise(counts) if b != a]
        assert all(s > 0 for s in steps) or all(s < 0 for s in steps), (demand, steps)
        settled_from = next(i for i in range(len(run)) if all(n == run[i][1] for _, n in run[i:]))
        assert run[-1][1] in _fed_band(demand), (demand, run[-1][1])
        # Converged within the first third of the phase (a scale-down waits out its 300 s
        # window first), then steady.
        assert settled_from < len(run) // 3, (demand, settled_from)
        previous = run[-1][1]


@pytest.mark.parametrize("seed", range(5))
def test_a_trainer_starved_at_the_budget_never_gets_an_engine(seed: int) -> None:
    """The long-tail case: the trainer waits while the lag sits at the budget (the window,
    not the engines, limits rollout); its engine ratio says "more", the lag says no room: not
    one engine is added in an hour of noisy figures."""
    rng = random.Random(seed)
    spec = _spec()
    counters = FleetCounters(0.0, 0.0, 0.0)
    status = None
    for i in range(1, 241):
        wait = min(1.0, max(0.0, 0.4 + rng.gauss(0, 0.1)))
        counters = FleetCounters(i * INTERVAL, counters.batch_wait_seconds + wait * INTERVAL, 0.0)
        figures = BudgetFigures(lag_max=2.0, engine_ratio=1.0 + rng.uniform(0.2, 1.0))
        now = T0 + timedelta(seconds=i * INTERVAL)
        decision = decide_scale(spec, _settled(4), status, counters, now, BUDGET, figures)
        assert decision.replicas == 4
        status = decision.status
    assert status is not None
    assert status.reason == HOLD_AT_BUDGET


@settings(max_examples=100, deadline=None)
@given(
    start=st.integers(1, 16),
    intervals=st.lists(
        st.tuples(
            st.floats(1.0, 90.0),  # seconds to the next scrape
            st.floats(0.0, 1.0),  # the trainer's wait fraction
            st.floats(0.0, 1.0),  # admission's held fraction
            st.floats(0.4, 2.2),  # the job's engine ratio
            st.sampled_from([0.0, 1.0, 2.0, 3.0]),  # the lag (budget 2)
        ),
        min_size=1,
        max_size=80,
    ),
)
def test_the_budget_mode_does_not_oscillate_on_noisy_figures(
    start: int, intervals: list[tuple[float, float, float, float, float]]
) -> None:
    """As in fixed mode (`test_autoscale`): with the default behavior, no scale-down less
    than 300 s after a scale-up, whatever the figures do; and never a scale-up while the lag
    is at or above the budget."""
    spec = _spec()
    down_window = spec.behavior.down().stabilization_window_seconds or 0
    now, current = T0, start
    counters = FleetCounters(0.0, 0.0, 0.0)
    status: AutoscalingStatus | None = None
    last_up: datetime | None = None
    for seconds, wait, held, ratio, lag in intervals:
        now += timedelta(seconds=seconds)
        counters = FleetCounters(
            counters.step_seconds + seconds,
            counters.batch_wait_seconds + wait * seconds,
            counters.admission_wait_seconds + held * seconds,
        )
        figures = BudgetFigures(lag_max=lag, engine_ratio=ratio)
        decision = decide_scale(spec, _settled(current), status, counters, now, BUDGET, figures)
        if decision.replicas > current:
            assert lag < BUDGET.max_lag_versions
            last_up = now
        elif decision.replicas < current and last_up is not None:
            assert (now - last_up).total_seconds() >= down_window
        current, status = decision.replicas, decision.status
