"""The engines' built-in autoscaler: bounds, signal thresholds and an HPA-like `behavior`.

`spec.inference.autoscaling` lets the operator choose `spec.inference.replicas` itself from
the job's own figures, for clusters without a metrics adapter for a HorizontalPodAutoscaler.
The operator's decision (`dressage_operator.autoscale`) follows the HorizontalPodAutoscaler's
algorithm (Kubernetes `pkg/controller/podautoscaler/horizontal.go`: stabilization windows over
past recommendations, then per-period limits on the change), and these types mirror
`autoscaling/v2`'s `HorizontalPodAutoscalerBehavior`, with the same bounds and defaults, so a
user who knows an HPA's `behavior` knows this one.

Signals (the definitions the operator's README documents):
- the trainer's wait fraction: of the wall time of the trainer steps completed between two
  scrapes, the part trainer rank 0 spent waiting for its next batch
  (`dressage_trainer_batch_wait_seconds_total` over `dressage_trainer_step_seconds_total`);
  above `scaleUpWaitFraction`, rollout is too slow for the trainer: more engines;
- admission's held fraction: over the same steps, the part the rollout worker spent held by
  admission control because rollout ran ahead of the staleness window
  (`dressage_rollout_admission_wait_seconds_total` over the step seconds); above
  `scaleDownHeldFraction`, engines generate faster than the trainer can use: fewer engines.

In `spec.staleness.mode: auto` the job's own figures decide instead
(`dressage_operator.budget_scale`): its engine ratio (engines wanted over engines serving,
`staleness/budget_engine_ratio`) above 1 adds engines only while the version lag of the
latest step (`staleness/version_lag_max`) is below the budget's `maxLagVersions`, and a ratio
below 1 (or the held fraction above `scaleDownHeldFraction`) removes them. The bounds,
thresholds and `behavior` apply the same way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dressage.api.base import ApiModel
from dressage.api.bounds import MAX_INFERENCE_REPLICAS

MAX_STABILIZATION_WINDOW_SECONDS = 3600
"""`autoscaling/v2` HPAScalingRules: `stabilizationWindowSeconds` is at most one hour."""
MAX_POLICY_PERIOD_SECONDS = 1800
"""`autoscaling/v2` HPAScalingPolicy: `periodSeconds` is at most 30 minutes."""


class ScalingPolicy(ApiModel):
    """One limit on the change of the engine count within a period (an HPA's
    `HPAScalingPolicy`)."""

    type: Literal["Pods", "Percent"]
    """`Pods`: at most `value` engines added (or removed) within the period; `Percent`: at
    most `value` percent of the engines at the period's start."""
    value: int = Field(ge=1)
    """The amount of change the policy allows (engines, or percent)."""
    period_seconds: int = Field(ge=1, le=MAX_POLICY_PERIOD_SECONDS)
    """The window the change is counted over."""


class ScalingRules(ApiModel):
    """How fast the engine count may move in one direction (an HPA's `HPAScalingRules`); a
    field left out takes the direction's default (`ScalingBehavior`)."""

    stabilization_window_seconds: int | None = Field(
        default=None, ge=0, le=MAX_STABILIZATION_WINDOW_SECONDS
    )
    """Recommendations of this many past seconds are considered: a scale-up takes the lowest
    of them, a scale-down the highest, so one noisy interval moves nothing."""
    select_policy: Literal["Max", "Min", "Disabled"] = "Max"
    """Which policy applies when several do: `Max` the one allowing the largest change,
    `Min` the smallest, `Disabled` no change in this direction at all."""
    policies: list[ScalingPolicy] | None = Field(default=None, min_length=1)
    """The limits on the change; at least one when given."""


DEFAULT_SCALE_UP_WINDOW_SECONDS = 0
DEFAULT_SCALE_DOWN_WINDOW_SECONDS = 300
DEFAULT_SCALE_UP_POLICIES = (
    ScalingPolicy(type="Pods", value=4, period_seconds=15),
    ScalingPolicy(type="Percent", value=100, period_seconds=15),
)
DEFAULT_SCALE_DOWN_POLICIES = (ScalingPolicy(type="Percent", value=100, period_seconds=15),)
"""An HPA's defaults (`autoscaling/v2`, `SetDefaults_HorizontalPodAutoscalerBehavior`)."""


class ScalingBehavior(ApiModel):
    """Stabilization and rate limits for each direction. The defaults are an HPA's: scale up
    at once, by up to 4 engines or 100 % every 15 s (whichever is more); scale down only after
    300 s without a higher recommendation, by up to 100 % every 15 s."""

    scale_up: ScalingRules = Field(default_factory=ScalingRules)
    """Rules for adding engines."""
    scale_down: ScalingRules = Field(default_factory=ScalingRules)
    """Rules for removing engines."""

    def up(self) -> ScalingRules:
        """The scale-up rules with the defaults filled in."""
        return _complete(self.scale_up, DEFAULT_SCALE_UP_WINDOW_SECONDS, DEFAULT_SCALE_UP_POLICIES)

    def down(self) -> ScalingRules:
        """The scale-down rules with the defaults filled in."""
        return _complete(
            self.scale_down, DEFAULT_SCALE_DOWN_WINDOW_SECONDS, DEFAULT_SCALE_DOWN_POLICIES
        )


def _complete(
    rules: ScalingRules, window: int, policies: tuple[ScalingPolicy, ...]
) -> ScalingRules:
    return rules.model_copy(
        update={
            "stabilization_window_seconds": (
                window
                if rules.stabilization_window_seconds is None
                else rules.stabilization_window_seconds
            ),
            "policies": list(policies) if rules.policies is None else rules.policies,
        }
    )


class AutoscalingSpec(ApiModel):
    """The operator sets `inference.replicas` between `minReplicas` and `maxReplicas` from
    what the trainer waits for (see the operator's README, Autoscaling); in
    `staleness.mode: auto`, from the staleness budget's figures: more engines only while the
    trainer is starved and the version lag is under `maxLagVersions` (the operator's README,
    Autoscaling to a staleness budget)."""

    min_replicas: int = Field(ge=1, le=MAX_INFERENCE_REPLICAS)
    """The fewest engines the autoscaler leaves running."""
    max_replicas: int = Field(ge=1, le=MAX_INFERENCE_REPLICAS)
    """The most engines the autoscaler starts."""
    scale_up_wait_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)
    """Scale up when, over the trainer steps of a scrape interval, trainer rank 0 waited for
    its batches more than this fraction of the steps' wall time."""
    scale_down_held_fraction: float = Field(default=0.5, gt=0.0, lt=1.0)
    """Scale down when, over the same steps, admission control held the rollout worker back
    (rollout ahead of the staleness window) more than this fraction of their wall time, and
    the trainer did not wait."""
    behavior: ScalingBehavior = Field(default_factory=ScalingBehavior)
    """Stabilization windows and rate limits, as an HPA's `behavior`."""

    @model_validator(mode="after")
    def _check_bounds(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"inference.autoscaling.minReplicas ({self.min_replicas}) is above "
                f"maxReplicas ({self.max_replicas})"
            )
        return self

    def clamp(self, replicas: int) -> int:
        """`replicas` brought into `[minReplicas, maxReplicas]`."""
        return max(self.min_replicas, min(self.max_replicas, replicas))
