"""The engines' autoscaler in `spec.staleness.mode: auto`: the fleet sized to the staleness
budget (pure).

In auto mode the job keeps its trained data within a budget (`spec.staleness.budget`:
`maxLagVersions`, optionally `maxMismatchKL`) by choosing its in-flight depth and version
window every step (`dressage.rollout.budget`). The depth is the fast loop; the engine count is
the slow one, and this module decides it: more engines only where the depth cannot feed the
trainer and the budget has room for it, fewer where the budget holds rollout back.

The figures are the job's own, read from trainer rank 0's `/metrics` at each scrape
(`parse_budget_figures`; the declaration is `dressage.api.figures`):

- `staleness/version_lag_max`: the largest version lag of the latest step's trained samples;
- `staleness/budget_engine_ratio`: the engines the job's controller wants over those serving.
  Above 1 the trainer waits for data while the depth is at its bound (more depth would not
  feed it: more engines would); below 1 the trainer is fed and the budget holds rollout back
  most of the time. The controller smooths it over steps;
- `mismatch_kl_k3`, held to `maxMismatchKL` when the budget sets it;
- `staleness/budget_concurrency` and `staleness/budget_keep_versions`, the depth and window
  the job chose, shown beside the decision.

The recommendation (`recommend_within_budget`), before the autoscaler's stabilization and
rate limits (`dressage_operator.autoscale`), which are the same as in fixed mode:

| the trainer (the job's ratio) | the lag | engines |
|---|---|---|
| starved (above 1 + `RATIO_TOLERANCE`) | below the budget | `ceil(current * ratio)`, +1 at least |
| starved | at or above it, or KL above its ceiling | kept (`AtStalenessBudget`) |
| fed, held back (below 1 - `RATIO_TOLERANCE`) | any | `ceil(current * ratio)`, -1 at least |
| fed, held back (`scaleDownHeldFraction`) | any | `ceil(current * (1 - held))`, -1 at least |
| fed (wait under `scaleUpWaitFraction`) | above it | 1 fewer (`OverStalenessBudget`) |
| otherwise | | kept |

The job's ratio decides a scale-up, since only the job knows whether its depth is at its bound
(below it, the job deepens rollout itself, faster than engines start); a surplus is the
ratio's or the interval's own (`scaleDownHeldFraction`, as in fixed mode), whichever shows it,
since the ratio reaches below 1 only on steps without any wait.

Why the lag vetoes a scale-up: at the budget the window is what limits rollout, so more
engines would start groups admission control then holds back (or data the batch sink drops);
the job narrows its depth instead. Without the job's ratio (a runtime that does not export
it), starved and held are the interval's own signals, as in fixed mode
(`autoscale.recommend`). A lag not measured yet counts as no headroom: nothing is added on a
guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from prometheus_client.parser import text_string_to_metric_families

from dressage.api.autoscaling import AutoscalingSpec
from dressage.api.figures import figure
from dressage.api.job import AsyncRLJobSpec
from dressage.api.scale_status import BudgetScaleStatus
from dressage.api.status import Condition, ConditionType
from dressage_operator.fleet_signals import Signals

RATIO_TOLERANCE = 0.1
"""The job's engine ratio moves the fleet only beyond 1 +/- this (an HPA's default
tolerance), so a ratio that hovers around 1 changes nothing."""
EVENT_SCALE_UP = "StalenessBudgetScaleUp"
EVENT_SCALE_DOWN = "StalenessBudgetScaleDown"
"""The reasons of the Events of fleet changes made for the budget."""
HOLD_AT_BUDGET = "AtStalenessBudget"
"""The decision's reason when the trainer is starved but the lag leaves no room."""
SCALE_DOWN_OVER_BUDGET = "OverStalenessBudget"
"""The decision's reason when the fed trainer's data is over the budget: one engine fewer."""

LAG_MAX = figure("version_lag_max").metric
ENGINE_RATIO = figure("budget_engine_ratio").metric
MISMATCH_KL = figure("mismatch_kl_k3").metric
DEPTH = figure("budget_concurrency").metric
KEEP_VERSIONS = figure("budget_keep_versions").metric


class Standing(StrEnum):
    """Where the latest step's data stands against the budget."""

    UNKNOWN = "Unknown"
    """No lag measured yet."""
    WITHIN = "WithinBudget"
    """Lag below `maxLagVersions`, KL (if capped) within its ceiling: room for more rollout."""
    AT = "AtBudget"
    """Lag at `maxLagVersions`: the budget is used up, not exceeded."""
    OVER = "OverBudget"
    """Lag above `maxLagVersions`, or mismatch KL above `maxMismatchKL`."""


@dataclass(frozen=True)
class Budget:
    """The budget the job states (`spec.staleness.budget`, defaults filled in)."""

    max_lag_versions: int
    max_mismatch_kl: float | None = None

    @classmethod
    def of(cls, spec: AsyncRLJobSpec) -> Budget | None:
        """The job's budget; None in `staleness.mode: fixed`."""
        if not spec.staleness.auto:
            return None
        budget = spec.staleness.effective_budget
        return cls(budget.max_lag_versions, budget.max_mismatch_kl)


@dataclass(frozen=True)
class BudgetFigures:
    """The job's budget figures at one scrape (its latest step); None where not exported."""

    lag_max: float | None = None
    engine_ratio: float | None = None
    mismatch_kl: float | None = None
    depth: float | None = None
    keep_versions: float | None = None


def parse_budget_figures(text: str) -> BudgetFigures:
    """The budget figures in Prometheus text exposition (a NaN gauge is not measured yet)."""
    wanted = {LAG_MAX, ENGINE_RATIO, MISMATCH_KL, DEPTH, KEEP_VERSIONS}
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted and sample.value == sample.value:
                found[sample.name] = float(sample.value)
    return BudgetFigures(
        lag_max=found.get(LAG_MAX),
        engine_ratio=found.get(ENGINE_RATIO),
        mismatch_kl=found.get(MISMATCH_KL),
        depth=found.get(DEPTH),
        keep_versions=found.get(KEEP_VERSIONS),
    )


def standing(budget: Budget, figures: BudgetFigures) -> tuple[Standing, str]:
    """Where the data stands against the budget, and the figures in words."""
    if figures.lag_max is None:
        return Standing.UNKNOWN, f"version lag not measured yet (budget {budget.max_lag_versions})"
    said = f"version lag {figures.lag_max:g} of at most {budget.max_lag_versions}"
    kl_over = False
    if budget.max_mismatch_kl is not None and figures.mismatch_kl is not None:
        kl_over = figures.mismatch_kl > budget.max_mismatch_kl
        said += f", mismatch KL {figures.mismatch_kl:.4g} of at most {budget.max_mismatch_kl:g}"
    if kl_over or figures.lag_max > budget.max_lag_versions:
        return Standing.OVER, said
    if figures.lag_max >= budget.max_lag_versions:
        return Standing.AT, said
    return Standing.WITHIN, said


@dataclass(frozen=True)
class Advice:
    """The budget's recommendation for one interval."""

    replicas: int
    said: str
    """The figures that decided it, in words (the Event's and the status's message)."""
    hold_reason: str = ""
    """Why a starved trainer gets no engine (`AtStalenessBudget`), or why one goes
    (`OverStalenessBudget`); "" otherwise."""


def recommend_within_budget(
    signals: Signals,
    figures: BudgetFigures,
    budget: Budget,
    current: int,
    spec: AutoscalingSpec,
) -> Advice:
    """The interval's engine count in auto mode, before stabilization (module docstring)."""
    where, said_lag = standing(budget, figures)
    wait, held = signals.trainer_wait_fraction, signals.admission_held_fraction
    said = (
        f"the trainer waited for batches {wait:.0%} of its step time, admission control held "
        f"rollout back {held:.0%} of it"
    )
    fed = wait <= spec.scale_up_wait_fraction
    # The interval's own evidence of a surplus, as in fixed mode: the trainer fed and the
    # budget's admission control holding rollout back most of the time.
    held_back = fed and held > spec.scale_down_held_fraction
    ratio = figures.engine_ratio
    if ratio is not None:
        said += f", the job asks for {ratio:.2f}x the engines"
        starved = ratio > 1 + RATIO_TOLERANCE
        surplus = not starved and (ratio < 1 - RATIO_TOLERANCE or held_back)
        if held_back:
            ratio = min(ratio, 1.0 - held)
    else:
        starved, surplus = not fed, held_back
        ratio = 1.0 / max(1.0 - wait, 0.05) if starved else 1.0 - held
    if figures.depth is not None:
        said += f" (depth {figures.depth:g}"
        if figures.keep_versions is not None:
            said += f", window {figures.keep_versions:g}"
        said += ")"
    said += f"; {said_lag}"
    if starved:
        if where is not Standing.WITHIN:
            return Advice(current, said, HOLD_AT_BUDGET)
        return Advice(max(current + 1, math.ceil(current * ratio - 1e-9)), said)
    if surplus:
        return Advice(max(0, min(current - 1, math.ceil(current * ratio - 1e-9))), said)
    if where is Standing.OVER and fed:
        return Advice(current - 1, said, SCALE_DOWN_OVER_BUDGET)
    return Advice(current, said)


def budget_status(
    budget: Budget, figures: BudgetFigures | None, previous: BudgetScaleStatus | None
) -> BudgetScaleStatus:
    """The status's view of the budget: its limits and, once scraped, the figures against
    them (kept from `previous` in cycles without a scrape)."""
    lag, kl = budget.max_lag_versions, budget.max_mismatch_kl
    if figures is None:
        if previous is not None:
            return previous.model_copy(update={"max_lag_versions": lag, "max_mismatch_kl": kl})
        return BudgetScaleStatus(max_lag_versions=lag, max_mismatch_kl=kl)
    where, _ = standing(budget, figures)
    return BudgetScaleStatus(
        max_lag_versions=lag,
        max_mismatch_kl=kl,
        lag_versions=figures.lag_max,
        mismatch_kl=figures.mismatch_kl,
        engine_ratio=None if figures.engine_ratio is None else round(figures.engine_ratio, 4),
        standing=where.value,
    )


def condition(
    budget: Budget, figures: BudgetFigures
) -> tuple[ConditionType, bool, str, str] | None:
    """Condition `StalenessBudgetMet` from a scrape's figures: True within or at the budget,
    False over it; None while no lag is measured (the condition keeps its last value)."""
    where, said = standing(budget, figures)
    if where is Standing.UNKNOWN:
        return None
    return ConditionType.STALENESS_BUDGET_MET, where is not Standing.OVER, where.value, said


def without_budget_condition(conditions: list[Condition]) -> list[Condition]:
    """The conditions without `StalenessBudgetMet` (a job back in `staleness.mode: fixed`)."""
    return [c for c in conditions if c.type != ConditionType.STALENESS_BUDGET_MET.value]
