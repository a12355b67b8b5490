"""The staleness budget's controller (`dressage.rollout.budget`) against simulated plants: it
settles without oscillating on a noisy trainer, follows a step change in the trainer's speed,
narrows the window when a batch is over budget and widens it again with back-off, and says
when only more (or fewer) engines would help.

The plant is a pipeline in steady state: a group takes `latency` seconds to roll out (longer
once the engines' `slots` are full), so `depth` groups in flight produce `depth / latency`
groups per second, at most what admission lets start (`keepVersions` batches ahead); a step
lasts the longer of training and producing its batch, and the trainer waits the rest. The
wait fraction it reports carries Gaussian noise; the batch's largest lag is what the depth
puts ahead of the trainer, inside the window, with an occasional over-budget step: a sample one
version beyond the window, as a collector whose window moves on observed versions only can
train (in auto mode the window moves on published versions and drops such a sample, so there
an over-budget step comes from the mismatch-KL ceiling, which the controller answers the same
way).
"""

from __future__ import annotations

import itertools
import random
import statistics
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.api.budget import StalenessBudget
from dressage.api.figures import StepFigures
from dressage.rollout.budget import (
    MAX_RECOVERY_STEPS,
    BudgetController,
    BudgetSettings,
    BudgetSteering,
    Observation,
)


@dataclass
class Plant:
    train_s: float
    latency_s: float = 2.0
    slots: int = 64
    batch: int = 8
    noise: float = 0.0
    tail: float = 0.0
    """Probability that a step is over budget (a late sample one version beyond the window)."""

    def step(self, depth: int, keep: int, rng: random.Random) -> tuple[Observation, float]:
        """The step's observation and its trained groups per second."""
        latency = self.latency_s * max(1.0, depth / self.slots)
        ahead = min(depth, keep * self.batch)
        produce = self.batch * latency / ahead
        wall = max(self.train_s, produce)
        wait = 1.0 - self.train_s / wall
        wait = min(1.0, max(0.0, wait + rng.gauss(0.0, self.noise)))
        lag = min(keep - 1, max(0, round(ahead / self.batch) - 1))
        if rng.random() < self.tail:
            lag = keep
        # Over-production ends in admission holding the worker; so does a depth beyond the
        # window's capacity.
        held = max(1.0 - produce / self.train_s, (depth - keep * self.batch) / depth, 0.0)
        held = min(1.0, max(0.0, held + rng.gauss(0.0, self.noise)))
        seen = Observation(wait_fraction=wait, lag_max=float(lag), held_fraction=held)
        return seen, self.batch / wall


def drive(
    controller: BudgetController, plant: Plant, steps: int, rng: random.Random
) -> tuple[list[int], list[float]]:
    depths, rates = [], []
    for _ in range(steps):
        seen, rate = plant.step(controller.concurrency, controller.keep_versions, rng)
        controller.observe(seen)
        depths.append(controller.concurrency)
        rates.append(rate)
    return depths, rates


def direction_changes(values: list[int]) -> int:
    moves = [b - a for a, b in itertools.pairwise(values) if b != a]
    return sum(1 for a, b in itertools.pairwise(moves) if (a > 0) != (b > 0))


def controller(max_lag: int = 2, batch: int = 8, max_depth: int = 64) -> BudgetController:
    return BudgetController(
        BudgetSettings(max_lag=max_lag, batch_size=batch, max_concurrency=max_depth)
    )


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31),
    noise=st.floats(0.0, 0.08),
    train_s=st.floats(0.6, 2.0),
    latency_s=st.floats(1.0, 3.0),
    tail=st.sampled_from([0.0, 0.03]),
)
def test_on_a_noisy_trainer_the_depth_settles_and_does_not_oscillate(
    seed: int, noise: float, train_s: float, latency_s: float, tail: float
) -> None:
    """After 40 steps of settling, 120 more: the depth changes direction at most 6 times
    (a probe down and the step back up, every `starve_memory` steps at most) and its spread is
    within a tenth of its mean (or a one-group dither, at depths of a few groups); it stays in
    its bounds and keeps the trainer fed (the throughput within 15 % of the plant's best).
    With over-budget steps now and then (3 % of steps) too: each narrows the window for a
    while (`test_a_fast_trainer_with_over_budget_steps_now_and_then_is_kept_fed` is the draw
    that once underfed a fast trainer)."""
    rng = random.Random(seed)
    plant = Plant(train_s=train_s, latency_s=latency_s, noise=noise, tail=tail)
    c = controller(max_lag=3)
    depths, rates = drive(c, plant, 160, rng)
    settled = depths[40:]
    assert direction_changes(settled) <= 6, settled
    assert statistics.pstdev(settled) <= max(0.1 * statistics.mean(settled), 0.6), settled
    assert all(c.settings.floor <= d <= c.settings.max_concurrency for d in depths)
    # An over-budget step now and then narrows the window, for a while, to maxLagVersions: the
    # budget's price, so the reference is the best at that window.
    keep = 3 if tail else 4
    best = max(Plant(train_s=train_s, latency_s=latency_s).step(d, keep, rng)[1] for d in (32, 64))
    assert statistics.mean(rates[40:]) >= 0.85 * best


def test_a_fast_trainer_with_over_budget_steps_now_and_then_is_kept_fed() -> None:
    """The case the property above once found on a random draw (seed 172812, noise 0.064,
    steps of 0.61 s, groups of 2 s, 3 % of steps over budget): an increase from 12 to 17 was
    judged against the one noisy wait of the step it started at (0.44, where the plant's wait
    at 12 is 0.54), so the fall it brought (to 0.33) looked too small, the increase was undone
    and 12 became a ceiling: half the plant's best. Judged against the waits seen at the depth
    it left, it is kept."""
    rng = random.Random(172812)
    plant = Plant(train_s=0.609375, latency_s=2.0, noise=0.064453125, tail=0.03)
    c = controller(max_lag=3)
    depths, rates = drive(c, plant, 160, rng)
    settled = depths[40:]
    assert statistics.pstdev(settled) <= max(0.1 * statistics.mean(settled), 0.6), settled
    best = max(Plant(train_s=0.609375, latency_s=2.0).step(d, 3, rng)[1] for d in (32, 64))
    assert statistics.mean(rates[40:]) >= 0.85 * best


@pytest.mark.parametrize(("before_s", "after_s"), [(1.0, 0.4), (0.4, 1.0)])
def test_a_step_change_in_trainer_speed_is_followed_within_twenty_steps(
    before_s: float, after_s: float
) -> None:
    """A trainer 2.5x faster needs 2.5x the depth to stay fed (the plant's groups take 2 s: 16
    groups feed a 1 s step of 8, 40 a 0.4 s one); 2.5x slower needs less, which the controller
    finds by probing down. Either way it settles within 20 steps (the probe down waits out the
    hysteresis of the depth that starved) and then holds within an eighth of the need."""
    rng = random.Random(7)
    c = controller(max_lag=4, max_depth=64)
    plant = Plant(train_s=before_s, noise=0.03)
    drive(c, plant, 60, rng)
    plant.train_s = after_s
    depths, rates = drive(c, plant, 60, rng)
    need = round(8 * 2.0 / after_s)
    tail = depths[25:]
    assert all(need * 0.875 <= d <= need * 1.25 for d in tail), depths
    assert direction_changes(tail) <= 2, depths
    assert statistics.mean(rates[25:]) >= 0.9 * 8 / after_s


def test_starting_depth_is_what_the_widest_window_admits() -> None:
    s = BudgetSettings(max_lag=2, batch_size=8, max_concurrency=32)
    assert (s.start, s.max_keep, s.floor) == (8, 3, 4)
    assert BudgetSettings(max_lag=5, batch_size=64, max_concurrency=32).start == 32
    assert BudgetSettings.of(
        StalenessBudget(max_lag_versions=1, max_mismatch_kl=0.01), batch_size=4, max_concurrency=8
    ) == BudgetSettings(max_lag=1, max_kl=0.01, batch_size=4, max_concurrency=8)


def test_an_over_budget_batch_narrows_the_window_and_recovery_backs_off() -> None:
    """A lag above the budget narrows the window by one (the step after a change is not acted
    on); within budget it widens again after `recovery` steps, and each narrowing doubles
    that wait, so a recurring tail is probed ever more rarely."""
    c = controller(max_lag=2)
    c.observe(Observation(wait_fraction=0.5))  # warm-up
    over = Observation(wait_fraction=0.08, lag_max=3.0)
    ok = Observation(wait_fraction=0.08, lag_max=2.0)
    first = c.observe(over)
    assert (first.keep_versions, first.reason, first.exceeded) == (2, "over_lag", True)
    assert c.observe(over).keep_versions == 2  # resting after the change
    widened_after = []
    for _ in range(3):
        steps = 0
        while c.keep_versions < 3:
            steps += 1
            c.observe(ok)
        widened_after.append(steps)
        c.observe(over)
        c.observe(ok)
    assert widened_after[0] < widened_after[1] < widened_after[2]
    assert c.state.recovery <= MAX_RECOVERY_STEPS


def test_a_mismatch_kl_over_its_ceiling_narrows_down_to_one_then_cuts_the_depth() -> None:
    c = BudgetController(BudgetSettings(max_lag=2, max_kl=0.01, batch_size=8, max_concurrency=32))
    c.observe(Observation(wait_fraction=0.5))
    reasons = Counter()
    for _ in range(8):
        d = c.observe(Observation(wait_fraction=0.08, lag_max=1.0, kl=0.05))
        reasons[d.reason] += 1
    assert c.keep_versions == 1
    assert c.concurrency < 24
    assert reasons["over_kl"] == 8


def test_a_starved_trainer_at_the_depths_bound_asks_for_engines() -> None:
    """Each increase feeds the trainer a little more until the depth's bound; there it still
    waits, and only more engines would feed it."""
    c = controller(max_lag=2, max_depth=16)
    c.observe(Observation(wait_fraction=0.6))
    wait = 0.6
    for _ in range(12):
        d = c.observe(Observation(wait_fraction=wait))
        wait = max(0.25, 1.0 - 0.4 * c.concurrency / 8)
    assert c.concurrency == 16
    assert d.reason == "bound"
    assert d.engine_ratio == pytest.approx(0.95 / 0.75, abs=0.02)  # to wait 0.05, not 0.25


def test_an_increase_that_does_not_feed_the_trainer_is_undone_and_becomes_a_ceiling() -> None:
    """Engines saturated: the wait does not fall with more depth (more in flight only queues),
    so the trial increase is undone, the depth stays at its start and the fleet is asked to
    grow; a probe again only after `ceiling_memory` steps."""
    c = controller(max_lag=2, max_depth=64)
    reasons = Counter()
    for _ in range(25):
        d = c.observe(Observation(wait_fraction=0.5))
        reasons[d.reason] += 1
    assert (c.concurrency, reasons["starved"], reasons["no_gain"]) == (8, 1, 1)
    assert reasons["bound"] >= 20
    assert d.engine_ratio > 1.5


def test_a_fed_trainer_with_rollout_held_back_has_engines_to_spare() -> None:
    c = controller(max_lag=2, max_depth=16)
    c.observe(Observation(wait_fraction=0.6))
    for _ in range(6):
        d = c.observe(Observation(wait_fraction=0.0, held_fraction=0.8))
    assert 0.5 <= d.engine_ratio < 0.8


def test_inside_the_dead_band_nothing_moves() -> None:
    c = controller()
    for wait in [0.5] + [0.05, 0.1, 0.04, 0.11, 0.06] * 5:
        d = c.observe(Observation(wait_fraction=wait, lag_max=1.0))
    assert (d.concurrency, d.keep_versions, d.engine_ratio) == (8, 3, 1.0)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def steer(self, concurrency: int, keep_versions: int) -> None:
        self.calls.append((concurrency, keep_versions))


def test_steering_steers_the_collector_on_a_change_and_records_every_decision() -> None:
    """The step's figures carry the decision (the step line's `depth` and `keep`), a change
    reaches the collector and is said in one log line."""
    lines: list[str] = []
    recorder = Recorder()
    steering = BudgetSteering(controller(max_depth=32), recorder, lines.append)
    starved = StepFigures(version_lag_max=1.0).timed(3.0, 1.0, 0.0)
    first = steering.after_step(starved)
    assert (first.budget_concurrency, first.budget_keep_versions) == (8.0, 3.0)
    assert (first.budget_max_lag, first.budget_changes) == (2.0, 0)
    assert recorder.calls == []
    second = steering.after_step(starved)
    assert second.budget_concurrency == 12.0
    assert second.budget_changes == 1
    assert recorder.calls == [(12, 3)]
    assert lines == [
        "staleness budget: depth 8 -> 12, keepVersions 3 -> 3 (starved: trainer waited 0.75 "
        "of the step, lag max 1.00 of 2, admission held 0.00)"
    ]
    over = steering.after_step(StepFigures(version_lag_max=3.0).timed(0.1, 1.0, 0.0))
    assert over.budget_exceeded_steps == 1  # counted, though not acted on while resting
    assert over.budget_keep_versions == 3
