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


class AutoscalingStatus(ApiModel):
    """The autoscaler's last decision, its signals and the history its next one needs."""

    desired_replicas: int | None = None
    """The engine count of the last decision."""
    trainer_wait_fraction: float | None = None
    """Of the trainer steps of the last interval, the fraction of wall time trainer rank 0
    waited for batches."""
    admission_held_fraction: float | None = None
    """Over the same steps, the fraction of wall time admission control held rollout back."""
    reason: str = ""
    """Machine-readable reason of the last decision (`ScaleUp`, `ScaleDown`,
    `ScaleUpLimit`, `ScaleDownStabilized`, `WithinThresholds`, `WaitingForEngines`, ...)."""
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
