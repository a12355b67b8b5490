"""What the engines' autoscaler keeps and shows in `status.autoscaling`.

The autoscaler's decision is a pure function of this record, the job's figures and the time
(`dressage_operator.autoscale`); the record lives in the job's status, not in the operator's
memory, so an operator restart neither forgets a stabilization window nor the changes that
count against a rate limit, and `kubectl get arj NAME -o yaml` shows why the engines are as
many as they are. Times are RFC 3339 with microseconds (Kubernetes' `MicroTime`).
"""

from __future__ import annotations

from pydantic import Field

from dressage.api.base import ApiModel


class SignalSample(ApiModel):
    """The job's counters at the start of the current interval (one scrape of trainer rank
    0's `/metrics`)."""

    time: str
    """When they were read."""
    step_seconds: float = Field(ge=0)
    """`dressage_trainer_step_seconds_total`: wall seconds of the trainer's completed steps."""
    batch_wait_seconds: float = Field(ge=0)
    """`dressage_trainer_batch_wait_seconds_total`: of those, seconds trainer rank 0 waited
    for its next batch."""
    admission_wait_seconds: float = Field(ge=0)
    """`dressage_rollout_admission_wait_seconds_total`: seconds admission control held the
    rollout worker back."""


class Recommendation(ApiModel):
    """One interval's engine count, before stabilization (an HPA's recommendation)."""

    time: str
    replicas: int = Field(ge=0)


class ScaleEvent(ApiModel):
    """One change of the engine count the autoscaler made (counted against its policies)."""

    time: str
    change: int = Field(ge=1)
    """Engines added (in `scaleUps`) or removed (in `scaleDowns`)."""


class BudgetScaleStatus(ApiModel):
    """The staleness budget as the autoscaler reads it (`spec.staleness.mode: auto`): the
    budget, and the latest step's figures against it."""

    max_lag_versions: int
    """The budget's `maxLagVersions`."""
    max_mismatch_kl: float | None = Field(default=None, alias="maxMismatchKL")
    """The budget's `maxMismatchKL`, when it sets one."""
    lag_versions: float | None = None
    """The largest version lag of the latest step's trained samples
    (`staleness/version_lag_max`)."""
    mismatch_kl: float | None = Field(default=None, alias="mismatchKL")
    """The latest step's mismatch KL (`mismatch_kl_k3`)."""
    engine_ratio: float | None = None
    """The engines the job's controller wants over those serving
    (`staleness/budget_engine_ratio`): above 1 the trainer waits with the depth at its bound,
    below 1 the budget holds rollout back."""
    standing: str = "Unknown"
    """`WithinBudget` (room for more rollout), `AtBudget` (lag at `maxLagVersions`),
    `OverBudget` (lag or mismatch KL above the budget) or `Unknown` (nothing measured yet)."""


class AutoscalingStatus(ApiModel):
    """The autoscaler's last decision, its signals and the history its next one needs."""

    desired_replicas: int | None = None
    """The engine count of the last decision."""
    trainer_wait_fraction: float | None = None
    """Of the trainer steps of the last interval, the fraction of wall time trainer rank 0
    waited for batches."""
    admission_held_fraction: float | None = None
    """Over the same steps, the fraction of wall time admission control held rollout back."""
    budget: BudgetScaleStatus | None = None
    """In `spec.staleness.mode: auto`, the budget the engine count is sized to and the
    figures against it (`dressage_operator.budget_scale`)."""
    reason: str = ""
    """Machine-readable reason of the last decision (`ScaleUp`, `ScaleDown`,
    `ScaleUpLimit`, `ScaleDownStabilized`, `WithinThresholds`, `WaitingForEngines`, and in
    `spec.staleness.mode: auto` `AtStalenessBudget`, `OverStalenessBudget`, ...)."""
    message: str = ""
    """The last decision in words, with the signal values."""
    last_scale_time: str | None = None
    """When the autoscaler last changed the engine count."""
    scale_up_count: int = 0
    """Scale-ups so far (exported per job on the operator's `/metrics`)."""
    scale_down_count: int = 0
    """Scale-downs so far."""
    sample: SignalSample | None = None
    """The counters the current interval started from."""
    recommendations: list[Recommendation] = Field(default_factory=list)
    """Recent recommendations, as long as a stabilization window can look back."""
    scale_ups: list[ScaleEvent] = Field(default_factory=list)
    """Recent scale-ups, as long as the longest scale-up policy period."""
    scale_downs: list[ScaleEvent] = Field(default_factory=list)
    """Recent scale-downs, as long as the longest scale-down policy period."""
