"""The engines' autoscaler: signals and its record in, the engine count out (pure).

`decide_scale` is the whole decision of one cycle, without I/O: the job's `autoscaling` spec,
the engine count the spec asks for now, the record in `status.autoscaling`
(`dressage.api.scale_status`), the counters of this cycle's scrape (`fleet_signals`), whether
the fleet is at its size, and the time. It returns the new engine count, the new record and,
when the count changes, the Event's message. The handler writes the count through the job's
scale subresource, as `kubectl scale` does.

One decision:
1. A count outside `[minReplicas, maxReplicas]` (a new job, or bounds just moved past it) is
   brought inside at once.
2. The interval's signals (`fleet_signals.interval_signals`) are read only while the fleet is
   at its size (every engine the spec asks for exists and is ready, none going away), so a
   decision always sees what the previous one started; an interval without a completed step
   waits for one.
3. The recommendation: while the trainer waited for batches more than `scaleUpWaitFraction`
   of its step time, `ceil(current / (1 - wait))` engines, at least one more. Reasoning: the
   trainer waits because rollout takes a whole step to produce a batch that the trainer
   trains in `(1 - wait)` of it; engines in proportion would produce it while the trainer
   trains. Else, while admission control held rollout back more than `scaleDownHeldFraction`
   of the time, `ceil(current * (1 - held))` engines, at least one fewer: the engines did the
   rollout the trainer could use in `(1 - held)` of the time. Else the current count.
4. Stabilization and rate limits exactly as a HorizontalPodAutoscaler's `behavior`
   (Kubernetes `pkg/controller/podautoscaler/horizontal.go`:
   `stabilizeRecommendationWithBehaviors`, then `convertDesiredReplicasWithBehaviorRate` with
   `calculateScaleUpLimitWithScalingRules` and `calculateScaleDownLimitWithBehaviors`): a
   scale-up goes to the lowest recommendation of the scale-up window, a scale-down to the
   highest of the scale-down window; the change is then limited by the direction's policies
   over the changes made within each policy's period, and by the bounds.

In `spec.staleness.mode: auto` step 3 is the staleness budget's recommendation instead
(`dressage_operator.budget_scale`: more engines only while the trainer is starved and the
version lag is below the budget, fewer while the budget holds rollout back), steps 1, 2 and 4
are the same, and the Events of its changes say `StalenessBudgetScaleUp` or
`StalenessBudgetScaleDown`.

What this guarantees (the "no oscillation" property, tested with hypothesis on noisy
signals): after a scale-up, no scale-down within the scale-down stabilization window, and
after a scale-down no scale-up within the scale-up window. A scale-up records a
recommendation at least as high as the count it reaches, and the scale-down window keeps it
as a floor; symmetrically for a scale-down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from dressage.api.autoscaling import AutoscalingSpec, ScalingRules
from dressage.api.scale_status import (
    AutoscalingStatus,
    Recommendation,
    ScaleEvent,
    SignalSample,
)
from dressage_operator.budget_scale import (
    EVENT_SCALE_DOWN,
    EVENT_SCALE_UP,
    Advice,
    Budget,
    BudgetFigures,
    budget_status,
    recommend_within_budget,
)
from dressage_operator.fleet_signals import FleetCounters, Signals, interval_signals

MIN_TRAIN_FRACTION = 0.05
"""The scale-up recommendation divides by the part of a step the trainer trains; a trainer
that (nearly) only waits (a synchronous rollout, a stalled fleet) asks for at most 20 times
its engines in one recommendation, and the bounds and policies limit it further."""
REASON_SCALE_UP = "ScaleUp"
REASON_SCALE_DOWN = "ScaleDown"
EVENT_REASON = "EnginesScaled"
"""The reason of the Event every change of the engine count posts."""


@dataclass(frozen=True)
class FleetState:
    """What the decision needs to know of the engines beyond the spec."""

    replicas: int
    """The engine count the spec asks for now (`spec.inference.replicas`)."""
    ready: int
    """Engine pods ready."""
    settled: bool
    """Every engine the spec asks for exists, and none is being created or deleted."""


@dataclass(frozen=True)
class ScaleDecision:
    """One cycle's decision."""

    replicas: int
    """The engine count to write; the current one when nothing changes."""
    status: AutoscalingStatus
    event: str | None = None
    """The Event's message when the count changes."""
    event_reason: str = EVENT_REASON
    """The Event's reason: `EnginesScaled`, or for the staleness budget
    `StalenessBudgetScaleUp` / `StalenessBudgetScaleDown`."""


def stamp(now: datetime) -> str:
    """RFC 3339 in UTC with microseconds (Kubernetes' `MicroTime`)."""
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_stamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _sample(counters: FleetCounters, now: datetime) -> SignalSample:
    return SignalSample(
        time=stamp(now),
        step_seconds=counters.step_seconds,
        batch_wait_seconds=counters.batch_wait_seconds,
        admission_wait_seconds=counters.admission_wait_seconds,
    )


def _counters(sample: SignalSample) -> FleetCounters:
    return FleetCounters(
        step_seconds=sample.step_seconds,
        batch_wait_seconds=sample.batch_wait_seconds,
        admission_wait_seconds=sample.admission_wait_seconds,
    )


def recommend(signals: Signals, current: int, spec: AutoscalingSpec) -> tuple[int, str]:
    """The interval's engine count before stabilization, and why (module docstring, 3)."""
    wait, held = signals.trainer_wait_fraction, signals.admission_held_fraction
    said = (
        f"the trainer waited for batches {wait:.0%} of its step time (scale-up above "
        f"{spec.scale_up_wait_fraction:.0%}), admission control held rollout back "
        f"{held:.0%} of it (scale-down above {spec.scale_down_held_fraction:.0%})"
    )
    if wait > spec.scale_up_wait_fraction:
        wanted = math.ceil(current / max(1.0 - wait, MIN_TRAIN_FRACTION) - 1e-9)
        return max(current + 1, wanted), said
    if held > spec.scale_down_held_fraction:
        wanted = math.ceil(current * (1.0 - held) - 1e-9)
        return max(0, min(current - 1, wanted)), said
    return current, said


def stabilize(
    history: list[Recommendation],
    now: datetime,
    recommended: int,
    current: int,
    up: ScalingRules,
    down: ScalingRules,
) -> tuple[int, list[Recommendation]]:
    """HPA's `stabilizeRecommendationWithBehaviors`: the count within the lowest
    recommendation of the scale-up window and the highest of the scale-down window (this one
    included), and the history with this recommendation recorded and those older than both
    windows dropped."""
    up_cutoff = now - timedelta(seconds=up.stabilization_window_seconds or 0)
    down_cutoff = now - timedelta(seconds=down.stabilization_window_seconds or 0)
    up_value = down_value = recommended
    kept = []
    for rec in history:
        when = parse_stamp(rec.time)
        if when > up_cutoff:
            up_value = min(up_value, rec.replicas)
        if when > down_cutoff:
            down_value = max(down_value, rec.replicas)
        if when > up_cutoff or when > down_cutoff:
            kept.append(rec)
    stabilized = min(max(current, up_value), down_value)
    return stabilized, [*kept, Recommendation(time=stamp(now), replicas=recommended)]


def _changed_within(events: list[ScaleEvent], now: datetime, period_seconds: int) -> int:
    """HPA's `getReplicasChangePerPeriod`: engines changed by the events of the period."""
    cutoff = now - timedelta(seconds=period_seconds)
    return sum(e.change for e in events if parse_stamp(e.time) > cutoff)


def scale_up_limit(
    current: int,
    ups: list[ScaleEvent],
    downs: list[ScaleEvent],
    rules: ScalingRules,
    now: datetime,
) -> int:
    """HPA's `calculateScaleUpLimitWithScalingRules`: the most engines the scale-up policies
    allow now, counted from the engines at each policy period's start."""
    if rules.select_policy == "Disabled":
        return current
    proposals = []
    for policy in rules.policies or []:
        added = _changed_within(ups, now, policy.period_seconds)
        removed = _changed_within(downs, now, policy.period_seconds)
        start = current - added + removed
        if policy.type == "Pods":
            proposals.append(start + policy.value)
        else:
            proposals.append(math.ceil(start * (1 + policy.value / 100)))
    return min(proposals) if rules.select_policy == "Min" else max(proposals)


def scale_down_limit(
    current: int,
    ups: list[ScaleEvent],
    downs: list[ScaleEvent],
    rules: ScalingRules,
    now: datetime,
) -> int:
    """HPA's `calculateScaleDownLimitWithBehaviors`: the fewest engines the scale-down
    policies allow now."""
    if rules.select_policy == "Disabled":
        return current
    proposals = []
    for policy in rules.policies or []:
        added = _changed_within(ups, now, policy.period_seconds)
        removed = _changed_within(downs, now, policy.period_seconds)
        start = current - added + removed
        if policy.type == "Pods":
            proposals.append(start - policy.value)
        else:
            proposals.append(int(start * (1 - policy.value / 100)))
    return max(proposals) if rules.select_policy == "Min" else min(proposals)


def limit_rate(
    desired: int,
    current: int,
    spec: AutoscalingSpec,
    status: AutoscalingStatus,
    now: datetime,
) -> tuple[int, str]:
    """HPA's `convertDesiredReplicasWithBehaviorRate`: the count the policies and the bounds
    allow, and a reason when they limited it ("" otherwise)."""
    up, down = spec.behavior.up(), spec.behavior.down()
    if desired > current:
        limit = max(current, scale_up_limit(current, status.scale_ups, status.scale_downs, up, now))
        if spec.max_replicas > limit:
            allowed, reason = limit, "ScaleUpLimit"
        else:
            allowed, reason = spec.max_replicas, "TooManyReplicas"
        return (allowed, reason) if desired > allowed else (desired, "")
    if desired < current:
        limit = min(
            current, scale_down_limit(current, status.scale_ups, status.scale_downs, down, now)
        )
        if spec.min_replicas < limit:
            allowed, reason = limit, "ScaleDownLimit"
        else:
            allowed, reason = spec.min_replicas, "TooFewReplicas"
        return (allowed, reason) if desired < allowed else (desired, "")
    return desired, ""


def _record_change(
    status: AutoscalingStatus, spec: AutoscalingSpec, before: int, after: int, now: datetime
) -> None:
    """A scale event, kept as long as the direction's longest policy period (HPA's
    `storeScaleEvent`), and the counts and time of the last change."""
    up, down = spec.behavior.up(), spec.behavior.down()
    for events, rules in ((status.scale_ups, up), (status.scale_downs, down)):
        longest = max((p.period_seconds for p in rules.policies or []), default=0)
        cutoff = now - timedelta(seconds=longest)
        events[:] = [e for e in events if parse_stamp(e.time) > cutoff]
    event = ScaleEvent(time=stamp(now), change=abs(after - before))
    if after > before:
        status.scale_ups.append(event)
        status.scale_up_count += 1
    else:
        status.scale_downs.append(event)
        status.scale_down_count += 1
    status.last_scale_time = stamp(now)


def _changed(
    status: AutoscalingStatus,
    spec: AutoscalingSpec,
    before: int,
    after: int,
    now: datetime,
    reason: str,
    why: str,
    event_reason: str = EVENT_REASON,
) -> ScaleDecision:
    _record_change(status, spec, before, after, now)
    status.desired_replicas = after
    status.reason = reason
    status.message = f"engines {before} -> {after} ({reason}): {why}"
    return ScaleDecision(
        replicas=after, status=status, event=status.message, event_reason=event_reason
    )


def _held(status: AutoscalingStatus, current: int, reason: str, message: str) -> ScaleDecision:
    status.desired_replicas = current
    status.reason = reason
    status.message = message
    return ScaleDecision(replicas=current, status=status)


def decide_scale(
    spec: AutoscalingSpec,
    fleet: FleetState,
    previous: AutoscalingStatus | None,
    counters: FleetCounters | None,
    now: datetime,
    budget: Budget | None = None,
    figures: BudgetFigures | None = None,
) -> ScaleDecision:
    """This cycle's engine count and the autoscaler's new record (module docstring); with a
    `budget` (`spec.staleness.mode: auto`), sized to it from the scrape's `figures`."""
    status = (previous or AutoscalingStatus()).model_copy(deep=True)
    status.budget = None if budget is None else budget_status(budget, figures, status.budget)
    current = fleet.replicas
    bounded = spec.clamp(current)
    if bounded != current:
        side = "below autoscaling.minReplicas" if current < bounded else "above maxReplicas"
        limit = spec.min_replicas if current < bounded else spec.max_replicas
        why = f"spec.inference.replicas {current} is {side} {limit}"
        return _changed(status, spec, current, bounded, now, "OutOfBounds", why)
    if counters is None:
        return ScaleDecision(replicas=current, status=status)
    start = status.sample
    if start is None or counters.restarted_since(_counters(start)):
        status.sample = _sample(counters, now)
        return _held(status, current, "Started", "the first interval starts")
    if not fleet.settled:
        # The interval starts again once the fleet is at its size.
        status.sample = _sample(counters, now)
        message = f"waiting for the engines: {fleet.ready}/{current} ready"
        return _held(status, current, "WaitingForEngines", message)
    signals = interval_signals(_counters(start), counters)
    if signals is None:
        return _held(status, current, "NoStepCompleted", "no trainer step completed yet")
    status.sample = _sample(counters, now)
    status.trainer_wait_fraction = round(signals.trainer_wait_fraction, 4)
    status.admission_held_fraction = round(signals.admission_held_fraction, 4)
    if budget is not None and figures is not None:
        advice = recommend_within_budget(signals, figures, budget, current, spec)
    else:
        advice = Advice(*recommend(signals, current, spec))
    recommended, said = advice.replicas, advice.said
    up, down = spec.behavior.up(), spec.behavior.down()
    stabilized, status.recommendations = stabilize(
        status.recommendations, now, recommended, current, up, down
    )
    allowed, limited = limit_rate(stabilized, current, spec, status, now)
    if allowed == current:
        if recommended > current:
            reason = limited or "ScaleUpStabilized"
        elif recommended < current:
            reason = limited or "ScaleDownStabilized"
        else:
            reason = advice.hold_reason or "WithinThresholds"
        message = f"{current} engines (recommended {recommended}): {said}"
        return _held(status, current, reason, message)
    why = said
    if allowed != recommended:
        why += f"; recommended {recommended}, {LIMITED_BY.get(limited, 'stabilized')}"
    up_or_down = REASON_SCALE_UP if allowed > current else REASON_SCALE_DOWN
    reason = limited or advice.hold_reason or up_or_down
    if budget is None:
        return _changed(status, spec, current, allowed, now, reason, why)
    event = EVENT_SCALE_UP if allowed > current else EVENT_SCALE_DOWN
    return _changed(status, spec, current, allowed, now, reason, why, event)


LIMITED_BY = {
    "ScaleUpLimit": "limited by behavior.scaleUp.policies",
    "TooManyReplicas": "limited by maxReplicas",
    "ScaleDownLimit": "limited by behavior.scaleDown.policies",
    "TooFewReplicas": "limited by minReplicas",
}
