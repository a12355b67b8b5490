"""The observed state of an `AsyncRLJob`: what the operator writes into `.status`.

The CRD's status schema is generated from these classes, and the operator builds its status
patches with them, so `kubectl get arj -o yaml` and the Python side agree on every name. The
staleness block's figures are not listed here: they are the `status=True` figures of the step
declaration (`dressage.api.figures`), under the keys derived there.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import Field, create_model

from dressage.api.base import ApiModel
from dressage.api.figures import FigureKind, StepFigures, status_figures
from dressage.api.scale_status import AutoscalingStatus


class JobPhase(StrEnum):
    """Lifecycle phase of a job, shown in `kubectl get arj`."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def finished(self) -> bool:
        """Whether the phase is terminal: nothing is reconciled any more but TTL."""
        return self in (JobPhase.SUCCEEDED, JobPhase.FAILED)


class ConditionType(StrEnum):
    """Condition types the operator maintains; each is present once with True/False."""

    SPEC_VALID = "SpecValid"
    """False when the spec fails validation; the message names the field."""
    TRAINER_READY = "TrainerReady"
    INFERENCE_READY = "InferenceReady"
    PROXY_READY = "ProxyReady"
    METRICS_AVAILABLE = "MetricsAvailable"
    """Whether the last scrape of the trainer's /metrics succeeded."""
    CHILDREN_APPLIED = "ChildrenApplied"
    """False while the API server refuses a child (pod, Service, ...); the message says which
    and quotes the server."""
    PODS_HEALTHY = "PodsHealthy"
    """False while a pod of the job does not start or keeps failing, as the scheduler or the
    kubelet says it (Unschedulable, ImagePullBackOff, CreateContainerConfigError,
    CrashLoopBackOff, OOMKilled, ...); the reason is the first pod's, the message names each
    pod. True again once they recover."""
    STALENESS_BUDGET_MET = "StalenessBudgetMet"
    """In `spec.staleness.mode: auto`: True while the latest step's trained data is within
    the budget (reason `WithinBudget` or `AtBudget`), False while its version lag or
    mismatch KL is above it (`OverBudget`); the message gives the figures and the budget."""
    SUSPENDED = "Suspended"
    SGLANG_RELEASE_UNTESTED = "SGLangReleaseUntested"
    """True when `spec.inference.sglangVersion` is newer than the newest tested SGLang release;
    the message names the tested range."""
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Condition(ApiModel):
    """A Kubernetes-style condition."""

    type: str
    """Condition type (see `ConditionType`)."""
    status: str = Field(pattern=r"^(True|False|Unknown)$")
    """`True`, `False` or `Unknown`."""
    reason: str = ""
    """Machine-readable CamelCase reason of the last transition."""
    message: str = ""
    """Human-readable detail; for an invalid spec it names the field at fault."""
    last_transition_time: str | None = None
    """When `status` last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The `.metadata.generation` this condition was computed for."""


class RoleStatus(ApiModel):
    """Pod counts of one role (trainer, inference or proxy)."""

    desired: int = 0
    """Pods the spec asks for."""
    ready: int = 0
    """Pods that are ready."""
    failed: int = 0
    """Pods seen failed since the job started (replaced or restarted)."""
    restarts: int = 0
    """Trainer: gang restarts. Inference and proxy: pods replaced after a failure."""


class InferenceStatus(RoleStatus):
    """Engine pods: the counts of every role, and what the job's scale subresource reads."""

    replicas: int = 0
    """Engine pods that exist and are not being deleted (the scale subresource's
    `status.replicas`)."""
    selector: str = ""
    """The engine pods' label selector, serialized (the scale subresource's
    `status.selector`, which a HorizontalPodAutoscaler reads)."""


class StalenessStatusBase(ApiModel):
    """What the staleness block holds besides the step's figures: where the trainer is."""

    step: int | None = None
    """The trainer's current optimizer step."""
    weight_version: str | None = None
    """Label of the latest published weight version."""
    last_scrape_time: str | None = None
    """When these figures were read (RFC 3339); kept while they do not change, so the status
    of an idle job is not rewritten at every scrape."""


def _figure_fields(declaration: type[StepFigures]) -> dict[str, Any]:
    """The status fields of the declaration's `status=True` figures, in declaration order: a
    gauge is None until measured, a counter starts at 0, a by-reason figure has its total and
    its counts per reason."""
    fields: dict[str, Any] = {}
    for f in status_figures(declaration):
        of = f"({f.unit}; `{f.key}`)"
        if f.kind is FigureKind.GAUGE:
            text = f"{f.description}, at the latest step {of}."
            fields[f.name] = (float | None, Field(default=None, description=text))
        elif f.kind is FigureKind.COUNTER:
            text = f"{f.description}, so far {of}."
            fields[f.name] = (f.value_type, Field(default=0, description=text))
        else:
            text = f"{f.description}, so far, all reasons together {of}."
            fields[f.name] = (int, Field(default=0, description=text))
            text = f"{f.description}, so far, by reason {of}."
            fields[f.by_reason_name] = (
                dict[str, int],
                Field(default_factory=dict, description=text),
            )
    return fields


_MODELS: dict[type[StepFigures], type[StalenessStatusBase]] = {}
"""`staleness_status_model`'s answers: one model class per declaration."""


def staleness_status_model(
    declaration: type[StepFigures] = StepFigures,
) -> type[StalenessStatusBase]:
    """The model of `status.staleness` for a figure declaration: `StalenessStatusBase` and
    the declaration's `status=True` figures, read from the job's own metrics (trainer rank 0)."""
    model = _MODELS.get(declaration)
    if model is None:
        model = _MODELS[declaration] = create_model(
            "StalenessStatus",
            __base__=StalenessStatusBase,
            __doc__="Staleness figures from the job's metrics.",
            __module__=__name__,
            **_figure_fields(declaration),
        )
    return model


if TYPE_CHECKING:
    StalenessStatus = StalenessStatusBase
else:
    StalenessStatus = staleness_status_model()
    """The model of `status.staleness`; its figure fields come from `StepFigures`."""


class EvaluatedVersion(ApiModel):
    """One weight version's held-out evaluation, as the job's trainer rank 0 exports it."""

    version: str
    """The weight version's label (`v0` for the starting weights)."""
    step: int | None = None
    """The training step whose publish made the version (0 for `v0`); None when the job did
    not export it."""
    pass_at_1: float | None = None
    """Held-out pass@1 of the version, in [0, 1]: the headline figure."""
    reward: float | None = None
    """Mean held-out reward of the version."""


class EvaluationStatus(ApiModel):
    """Held-out evaluation (`spec.evaluation`), read from the job's metrics (trainer rank 0):
    the latest evaluated version and the best one so far."""

    latest: EvaluatedVersion | None = None
    """The evaluated version with the highest step among those the job exports now."""
    best: EvaluatedVersion | None = None
    """The version with the highest held-out pass@1 seen so far (ties go to the later step).
    Kept when the job stops exporting it; replaced only by a higher figure."""
    runs: int = 0
    """Evaluations the job has run (its `dressage_eval_runs_total`)."""


class AdapterStatus(ApiModel):
    """The adapter a job trains instead of its full weights (`spec.model.lora`): each weight
    version after `v0` is this adapter, published alone and loaded by name on the engines."""

    type: str = "lora"
    """The kind of adapter (only `lora`)."""
    rank: int
    """The adapter's rank `r`."""
    alpha: float
    """`lora_alpha`: the adapter's update is scaled by `alpha / rank`."""
    target_modules: list[str] = Field(default_factory=list)
    """The linear layers that carry the adapter."""


class AsyncRLJobStatus(ApiModel):
    """Observed state of an asynchronous RL job."""

    phase: JobPhase = Field(default=JobPhase.PENDING, strict=False)
    """Lifecycle phase."""
    conditions: list[Condition] = Field(default_factory=list)
    """Conditions with reasons and messages."""
    observed_generation: int | None = None
    """The `.metadata.generation` the status reflects."""
    trainer: RoleStatus = Field(default_factory=RoleStatus)
    """Trainer gang pods."""
    inference: InferenceStatus = Field(default_factory=InferenceStatus)
    """Inference engine pods."""
    autoscaling: AutoscalingStatus | None = None
    """The engines' autoscaler (`spec.inference.autoscaling`): its last decision and why."""
    proxy: RoleStatus = Field(default_factory=RoleStatus)
    """Proxy pods."""
    restarts: int = 0
    """Trainer gang restarts so far, the current gang's number: after a failed or lost pod
    (limited by `spec.failurePolicy.maxRestarts`) or to roll out a `spec.trainer` change."""
    spec_restarts: int = 0
    """Those of `restarts` that rolled out a change of `spec.trainer` (not counted against
    `spec.failurePolicy.maxRestarts`)."""
    gang_pods: list[str] = Field(default_factory=list)
    """Trainer pods of the current gang seen created: one of them gone without having failed
    (force-deleted, its node lost) restarts the gang like a failed one."""
    staleness: StalenessStatus = Field(default_factory=StalenessStatus)
    """Staleness figures from the job's metrics."""
    evaluation: EvaluationStatus | None = None
    """Held-out evaluation figures from the job's metrics (latest and best version); absent
    until the job exports an evaluation."""
    adapter: AdapterStatus | None = None
    """The LoRA adapter the job trains (from `spec.model.lora`); absent when it trains the
    full weights."""
    start_time: str | None = None
    """When the job's pods were first created (or the job was last resumed)."""
    completion_time: str | None = None
    """When the job succeeded or failed."""
    message: str = ""
    """One-line summary of the current phase."""
