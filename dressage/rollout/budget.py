"""The staleness budget's controller: the in-flight depth and the window, chosen every step.

In `spec.staleness.mode: auto` the user states a budget (`StalenessBudget`: the largest version
lag a trained sample may have, optionally a mismatch-KL ceiling) and the job chooses, after
every trainer step, the two settings a user otherwise guesses: the prompt groups in flight
(`rollout.concurrency`, the *depth*) and the batch-level window (`keepVersions`). The goal is to
keep the trainer fed without exceeding the budget. Everything here is a pure function of the
step's figures and the controller's own state (no clock, no I/O, deterministic), so the law
is tested against simulated plants (`tests/unit/rollout/test_budget.py`).

The window. Admission control (`dressage.rollout.admission`) starts a group only while its
projected lag is below `keepVersions`, and the batch sink drops what ends outside it; in auto
mode the window also moves on every version the trainer publishes (the collector's
`window_on_published`), so no trained sample lags the trainer by more than `keepVersions - 1`.
The widest window the budget allows, `keepVersions = maxLagVersions + 1`, is where the
controller starts: the widest window drops least. When a trained batch is over budget (the
smoothed mismatch KL above its ceiling; or a sample lagging more than `maxLagVersions`, which
the window's rule keeps out, so the law holds for a collector without it) the window narrows
by one version, down to 1. It widens again by one after
`recovery` steps within budget, and every narrowing doubles that wait (up to
`MAX_RECOVERY_STEPS`): the classic exponential back-off that keeps a probe from turning into
a limit cycle. Only when the window is already 1 does an over-budget step cut the depth too
(multiplicatively, `decrease`).

The depth: a damped proportional law on the trainer's wait fraction `w` (the share of its step
the trainer waited for its batch, `batch_wait_fraction`), smoothed over steps (EWMA,
`smoothing`), with a dead band `[wait_low, wait_high]`, bounded to
`[min_concurrency, max_concurrency]`:

The depth starts at one batch (`batch_size` groups in flight).

- *starved* (`w > wait_high`) while the depth is what limits rollout (admission did not hold
  the worker): groups are produced at a rate proportional to the depth until the engines
  saturate, and a trainer that waits a fraction `w` of its step needs production to grow by
  `(1 - wait_target) / (1 - w)` to wait only `wait_target`. The depth moves `gain` (0.5) of
  the way to that target, at least one group, at most `max_growth` times. The increase is a
  trial: the step after its rest judges it, and if the trainer still waits (more than
  `wait_high`, the mean of the two steps since) and got less than half the fall in wait the
  increase should have brought from the wait at the depth it left (the mean of the last
  `BASELINE_STEPS` waits seen there, or the last one when higher: one noisy step would make a
  good increase look useless, and a trainer that just sped up shows first in the last wait), it
  is undone and the depth it started from becomes a ceiling for `ceiling_memory` steps (30,
  doubled each time a probe past the same depth fails again, up to `MAX_CEILING_STEPS`): the
  engines are saturated, and more in flight only queues behind them (or, with partial
  rollout, has more interrupted by every publish). Increases too small to tell from noise
  (an expected fall below `4 * improvement`) are kept;
- *ahead* (`w < wait_low` while admission held the worker a share `h >= held_small` of the
  step, smoothed) for `fed_patience` steps in a row: rollout produces `1 / (1 - h)` times what
  the trainer takes (with admission on, over-production always ends in admission holding the
  worker), so the depth moves `gain` of the way to `depth * (1 - h)`, at least one group:
  less in flight is less lag and less work a publish interrupts. A trainer that is fed with
  admission idle is exactly balanced and nothing moves. Stale drops above a quarter batch
  while the trainer is fed step the depth down by an eighth the same way. The depth never
  steps down to one at which the trainer starved within the last `starve_memory` steps
  (hysteresis: the same depth is not probed again and again);
- otherwise (inside the dead band): hold.

After any change both are held for `cooldown` steps: the next batch was mostly started
before the change, and reacting to it again would overshoot.

The fleet. When the trainer starves while the depth is at its bound (`max_concurrency` or the
ceiling reached, or admission holds the worker), the depth cannot feed it and
`Decision.engine_ratio` asks for more engines by the same proportional estimate, smoothed; when
the trainer is fed and admission holds the worker most of the step, the ratio falls below 1.
The operator's autoscaler sizes `inference.replicas` from it (`staleness/budget_engine_ratio`),
but adds no engine while the trained data's lag is already at the budget
(`dressage_operator.budget_scale`): there the version window, not the fleet, is taken to be the
limit, and the job pays for freshness with a trainer that waits, which the step line and the
`AtStalenessBudget` reason show.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from dressage.api.budget import StalenessBudget
from dressage.api.figures import StepFigures, figure

MAX_RECOVERY_STEPS = 64
"""The longest wait, in steps within budget, before the window widens again."""
MAX_CEILING_STEPS = 480
"""The longest a depth that did not feed the trainer stays a ceiling."""
BASELINE_STEPS = 4
"""How many of the waits seen at the current depth an increase's trial starts from."""
STALE_REASONS: Final = frozenset({"stale_version", "window_advanced"})
"""The drop reasons of the batch-level control (`DropReason`)."""
LAG_MAX: Final = figure("version_lag_max").key
MISMATCH_KL: Final = figure("mismatch_kl_k3").key


@dataclass(frozen=True)
class BudgetSettings:
    """The budget and the control law's constants (the defaults are the documented ones)."""

    max_lag: int
    """`maxLagVersions`."""
    batch_size: int
    """Prompt groups per trainer step."""
    max_concurrency: int
    """The depth's upper bound (`rollout.concurrency`)."""
    max_kl: float | None = None
    """`maxMismatchKL` (None: none)."""
    min_concurrency: int | None = None
    """The depth's lower bound; None: half a batch (at least 1, at most `max_concurrency`)."""
    initial_concurrency: int | None = None
    """The depth of the first steps; None: one batch (`batch_size`), within the bounds."""
    wait_low: float = 0.03
    wait_high: float = 0.12
    wait_target: float = 0.05
    smoothing: float = 0.5
    """Weight of the newest step in the smoothed wait fraction, held fraction and KL."""
    gain: float = 0.5
    max_growth: float = 2.0
    decrease: float = 0.75
    fed_patience: int = 2
    cooldown: int = 1
    recovery: int = 4
    starve_memory: int = 20
    ceiling_memory: int = 30
    improvement: float = 0.03
    """The noise an increase is judged against: one expected to lower the wait by four times
    this or more must deliver half of it (or bring the wait into the band) to stay."""
    held_small: float = 0.1
    """Admission held the worker less than this share of the step: the depth is the limit."""
    held_high: float = 0.5
    """Admission held the worker more than this share of a fed step: engines to spare."""
    held_target: float = 0.25
    warmup_steps: int = 1
    """Steps whose wait (the pipeline filling) is not acted on."""

    def __post_init__(self) -> None:
        if self.max_lag < 1 or self.batch_size < 1 or self.max_concurrency < 1:
            raise ValueError("max_lag, batch_size and max_concurrency must be >= 1")
        if not 0.0 <= self.wait_low <= self.wait_target <= self.wait_high < 1.0:
            raise ValueError("need 0 <= wait_low <= wait_target <= wait_high < 1")

    @classmethod
    def of(
        cls, budget: StalenessBudget, *, batch_size: int, max_concurrency: int
    ) -> BudgetSettings:
        return cls(
            max_lag=budget.max_lag_versions,
            max_kl=budget.max_mismatch_kl,
            batch_size=batch_size,
            max_concurrency=max_concurrency,
        )

    @property
    def max_keep(self) -> int:
        """The widest window the budget allows."""
        return self.max_lag + 1

    @property
    def floor(self) -> int:
        low = self.min_concurrency
        if low is None:
            low = max(1, self.batch_size // 2)
        return max(1, min(low, self.max_concurrency))

    @property
    def start(self) -> int:
        depth = self.initial_concurrency
        if depth is None:
            depth = self.batch_size
        return self.clamp(depth)

    def clamp(self, depth: int) -> int:
        return max(self.floor, min(self.max_concurrency, depth))


@dataclass(frozen=True)
class Observation:
    """What one trainer step showed the controller."""

    wait_fraction: float | None
    """The share of the step the trainer waited for its batch (None: not measured)."""
    lag_max: float | None = None
    """The batch's largest version lag (None: unknown)."""
    kl: float | None = None
    """The step's mismatch KL, k3 (None: not measured)."""
    held_fraction: float = 0.0
    """The share of the step admission control held the rollout worker."""
    stale_drops: int = 0
    """Groups the batch-level control dropped since the previous batch."""

    @classmethod
    def of(cls, figures: StepFigures) -> Observation:
        """The observation in a step's figures (as the training loop recorded them)."""
        step = figures.step_seconds
        held = figures.admission_wait_seconds / step if step > 0 else 0.0
        drops = sum(n for r, n in figures.dropped_groups.items() if r in STALE_REASONS)
        return cls(
            wait_fraction=figures.batch_wait_fraction,
            lag_max=figures.version_lag_max,
            kl=figures.mismatch_kl_k3,
            held_fraction=min(1.0, max(0.0, held)),
            stale_drops=drops,
        )


@dataclass(frozen=True)
class BudgetState:
    """The controller's memory between steps."""

    concurrency: int
    keep_versions: int
    steps: int = 0
    wait: float | None = None
    held: float = 0.0
    kl: float | None = None
    engine_ratio: float = 1.0
    cooldown: int = 0
    fed_streak: int = 0
    within: int = 0
    recovery: int = 0
    starved_at: tuple[tuple[int, int], ...] = ()
    """(step, depth) of the recent starved steps: depths not to step down to again."""
    at_depth: tuple[float, ...] = ()
    """The waits seen at the current depth since it last changed (the last
    `BASELINE_STEPS`): the baseline an increase is judged against."""
    trial: tuple[int, float, tuple[float, ...]] | None = None
    """After an increase: the depth before it, the wait at that depth (the mean of
    `at_depth` with the step's own wait, or that wait when higher), and the waits seen
    since."""
    ceiling: tuple[int, int] | None = None
    """(step, depth): an increase from this depth did not feed the trainer; not tried again
    for `ceiling_for` steps."""
    ceiling_for: int = 0
    """How long the ceiling holds: `ceiling_memory`, doubled each time a probe past the same
    depth fails again (at most `MAX_CEILING_STEPS`)."""

    @classmethod
    def initial(cls, settings: BudgetSettings) -> BudgetState:
        return cls(
            concurrency=settings.start, keep_versions=settings.max_keep, recovery=settings.recovery
        )


@dataclass(frozen=True)
class Decision:
    """The settings from the next group on, and why."""

    concurrency: int
    keep_versions: int
    reason: str
    """`hold`, `warmup`, `starved`, `no_gain`, `fed`, `over_lag`, `over_kl`, `widen`, `bound`."""
    exceeded: bool
    """The observed batch was over budget."""
    engine_ratio: float
    changed: bool
    state: BudgetState = field(repr=False)

    def figures(self, settings: BudgetSettings) -> dict[str, float]:
        """The decision's figures under their `StepFigures` field names."""
        values: dict[str, float] = {
            "budget_concurrency": float(self.concurrency),
            "budget_keep_versions": float(self.keep_versions),
            "budget_max_lag": float(settings.max_lag),
            "budget_engine_ratio": round(self.engine_ratio, 4),
            "budget_exceeded_steps": int(self.exceeded),
            "budget_changes": int(self.changed),
        }
        if settings.max_kl is not None:
            values["budget_max_mismatch_kl"] = settings.max_kl
        return values


def _smooth(previous: float | None, value: float | None, weight: float) -> float | None:
    if value is None or math.isnan(value):
        return previous
    return value if previous is None else weight * value + (1.0 - weight) * previous


def decide(settings: BudgetSettings, state: BudgetState, seen: Observation) -> Decision:
    """The control law of the module docstring, applied to one step's observation."""
    s = settings
    steps = state.steps + 1
    wait = _smooth(state.wait, seen.wait_fraction, s.smoothing)
    held = _smooth(state.held, seen.held_fraction, s.smoothing) or 0.0
    kl = _smooth(state.kl, seen.kl, s.smoothing)
    over_lag = seen.lag_max is not None and seen.lag_max > s.max_lag
    over_kl = s.max_kl is not None and kl is not None and kl > s.max_kl
    exceeded = over_lag or (s.max_kl is not None and seen.kl is not None and seen.kl > s.max_kl)
    depth, keep = state.concurrency, state.keep_versions
    resting = state.cooldown > 0  # the step after a change
    cooldown = max(0, state.cooldown - 1)
    fed_streak, within, recovery = state.fed_streak, state.within, state.recovery
    starved_at = tuple((t, d) for t, d in state.starved_at if steps - t <= s.starve_memory)
    trial = state.trial
    ceiling, ceiling_for = state.ceiling, state.ceiling_for
    reason = "hold"
    if steps <= s.warmup_steps:
        reason = "warmup"
        wait = None  # the pipeline filling says nothing about the depth
    elif over_lag or over_kl:
        reason = "over_lag" if over_lag else "over_kl"
        within, fed_streak = 0, 0
        if not resting:  # a batch collected before the last change says nothing of it
            recovery = min(MAX_RECOVERY_STEPS, 2 * recovery)
            if keep > 1:
                keep -= 1
            else:
                depth = s.clamp(math.floor(depth * s.decrease))
            cooldown = s.cooldown
    else:
        within += 1
        if keep < s.max_keep and within >= recovery:
            keep, within, reason = keep + 1, 0, "widen"
        elif resting and trial is not None and seen.wait_fraction is not None:
            trial = (trial[0], trial[1], (*trial[2], seen.wait_fraction))
        elif not resting and trial is not None and seen.wait_fraction is not None:
            # The step after the rest judges the last increase: kept if the trainer waits
            # less, else undone, and the depth it started from becomes a ceiling for a while
            # (the engines are saturated: more in flight only queues, or interrupts more).
            before, wanted, since = trial
            trial = None
            waits = (*since, seen.wait_fraction)
            now = sum(waits) / len(waits)
            # Production grows with the depth until the engines saturate: the wait it should
            # fall to, and whether the fall is large enough to tell from noise.
            expected = max(0.0, 1.0 - (1.0 - wanted) * depth / before)
            fall = wanted - expected
            judged = fall >= 4 * s.improvement
            if judged and now > s.wait_high and now > wanted - fall / 2:
                again = state.ceiling is not None and state.ceiling[1] == before
                ceiling_for = min(MAX_CEILING_STEPS, 2 * ceiling_for) if again else s.ceiling_memory
                depth, reason, ceiling = before, "no_gain", (steps, before)
                cooldown = s.cooldown
        elif not resting and wait is not None:
            top = _top(s, ceiling, ceiling_for, steps)
            depth, reason, fed_streak, starved_at = _depth_step(
                s, depth, top, wait, held, seen, fed_streak, starved_at, steps
            )
            if depth != state.concurrency:
                cooldown = s.cooldown
            if depth > state.concurrency and seen.wait_fraction is not None:
                here = (*state.at_depth, seen.wait_fraction)
                baseline = max(seen.wait_fraction, sum(here) / len(here))
                trial = (state.concurrency, baseline, ())
    at_bound = depth >= _top(s, ceiling, ceiling_for, steps)
    at_depth: tuple[float, ...] = ()
    if depth == state.concurrency and seen.wait_fraction is not None and reason != "warmup":
        at_depth = (*state.at_depth, seen.wait_fraction)[-BASELINE_STEPS:]
    ratio = _engine_ratio(s, at_bound, wait, held)
    engine_ratio = _smooth(state.engine_ratio, ratio, s.smoothing) or 1.0
    new = BudgetState(
        concurrency=depth,
        keep_versions=keep,
        steps=steps,
        wait=wait,
        held=held,
        kl=kl,
        engine_ratio=engine_ratio,
        cooldown=cooldown,
        fed_streak=fed_streak,
        within=within,
        recovery=recovery,
        starved_at=starved_at,
        at_depth=at_depth,
        trial=trial,
        ceiling=ceiling,
        ceiling_for=ceiling_for,
    )
    changed = (depth, keep) != (state.concurrency, state.keep_versions)
    return Decision(depth, keep, reason, exceeded, engine_ratio, changed, new)


def _depth_step(
    s: BudgetSettings,
    depth: int,
    top: int,
    wait: float,
    held: float,
    seen: Observation,
    fed_streak: int,
    starved_at: tuple[tuple[int, int], ...],
    steps: int,
) -> tuple[int, str, int, tuple[tuple[int, int], ...]]:
    """The depth's move inside the budget: (depth, reason, fed streak, starved depths)."""
    if wait > s.wait_high:
        starved_at = (*starved_at, (steps, depth))
        if depth >= top or held >= s.held_small:
            return depth, "bound", 0, starved_at
        target = depth * min(s.max_growth, (1.0 - s.wait_target) / (1.0 - wait))
        step = max(1, round(s.gain * (target - depth)))
        return min(top, s.clamp(depth + step)), "starved", 0, starved_at
    ahead = wait < s.wait_low and held >= s.held_small
    dropping = seen.stale_drops > s.batch_size // 4
    if not (ahead or dropping):
        return depth, "hold", 0, starved_at
    fed_streak += 1
    if fed_streak < s.fed_patience:
        return depth, "hold", fed_streak, starved_at
    # Held a share `held` of the step, rollout produces 1 / (1 - held) times what the trainer
    # takes: the depth moves `gain` of the way to `depth * (1 - held)`.
    lower = s.clamp(depth - max(1, round(s.gain * depth * held), depth // 8 if dropping else 1))
    starved_depths = [d for _, d in starved_at]
    if starved_depths and lower <= max(starved_depths):
        lower = max(depth, min(s.max_concurrency, max(starved_depths) + 1))
    if lower >= depth:
        return depth, "hold", 0, starved_at
    return lower, "fed", 0, starved_at


def _top(s: BudgetSettings, ceiling: tuple[int, int] | None, hold: int, steps: int) -> int:
    """The depth's upper bound now: `max_concurrency`, or a ceiling still in force."""
    if ceiling is None or steps - ceiling[0] > hold:
        return s.max_concurrency
    return min(s.max_concurrency, ceiling[1])


def _engine_ratio(
    s: BudgetSettings, at_bound: bool, wait: float | None, held: float
) -> float | None:
    """Engines wanted over engines serving, from this step (None: no evidence)."""
    if wait is None:
        return None
    if wait > s.wait_high and (at_bound or held >= s.held_small):
        return min(2.0, max(1.0, (1.0 - s.wait_target) / (1.0 - wait)))
    if wait < s.wait_low and held > s.held_high:
        return max(0.5, (1.0 - held) / (1.0 - s.held_target))
    return 1.0


class BudgetController:
    """`decide` with its state kept: one `observe` per trainer step."""

    def __init__(self, settings: BudgetSettings) -> None:
        self.settings = settings
        self.state = BudgetState.initial(settings)

    @property
    def concurrency(self) -> int:
        return self.state.concurrency

    @property
    def keep_versions(self) -> int:
        return self.state.keep_versions

    def observe(self, seen: Observation) -> Decision:
        decision = decide(self.settings, self.state, seen)
        self.state = decision.state
        return decision

    def record(self, figures: StepFigures, decision: Decision) -> StepFigures:
        """`figures` with the decision's figures filled in."""
        values: Mapping[str, float] = decision.figures(self.settings)
        return dataclasses.replace(figures, **values)  # type: ignore[arg-type]


class Steerable(Protocol):
    """A collector whose depth and window can change between steps
    (`AsyncRolloutCollector.steer`, `RolloutProcessCollector.steer`)."""

    def steer(self, concurrency: int, keep_versions: int) -> None: ...


class BudgetSteering:
    """The controller wired to a running job: after every trainer step (rank 0), observe the
    step's figures, steer the collector when the decision changed, say so in one log line, and
    give the step's figures back with the decision's filled in (the step line's `depth` and
    `keep`, `/metrics`, the status)."""

    def __init__(
        self,
        controller: BudgetController,
        collector: Steerable,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.controller = controller
        self.collector = collector
        self.log = log

    def after_step(self, figures: StepFigures) -> StepFigures:
        before = self.controller.state
        seen = Observation.of(figures)
        decision = self.controller.observe(seen)
        if decision.changed:
            self.collector.steer(decision.concurrency, decision.keep_versions)
            self.log(
                f"staleness budget: depth {before.concurrency} -> {decision.concurrency}, "
                f"keepVersions {before.keep_versions} -> {decision.keep_versions} "
                f"({decision.reason}: trainer waited {_fmt(seen.wait_fraction)} of the step, "
                f"lag max {_fmt(seen.lag_max)} of {self.controller.settings.max_lag}, "
                f"admission held {seen.held_fraction:.2f})"
            )
        return self.controller.record(figures, decision)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
