"""The `AsyncRLJob` model: the single source of truth for a Dressage job.

The CRD schema in `crds/` is generated from these classes, the operator validates custom
resources with them, and `dressage run` executes them locally. Field docstrings become the CRD's
field descriptions, so they are written for the user of a manifest.

The model is split by concern: `dressage.api.k8s` (Kubernetes primitives: quantities, env vars,
volumes, pod overrides), `dressage.api.reserved` (the env vars, engine flags and directories
the operator owns in a job's pods), `dressage.api.rl` (model, task, staleness, rollout,
training), `dressage.api.roles` (trainer, engines, proxy, storage, code, restarts),
`dressage.api.autoscaling` (the engines' autoscaler), `dressage.api.scheduling` (queue and
priority on a shared cluster), `dressage.api.tracking` (experiment trackers) and
`dressage.api.bounds` (static maxima). This module holds the job itself and re-exports every
name of those modules, so `from dressage.api.job import ...` keeps working.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from dressage.api.autoscaling import (
    AutoscalingSpec,
    ScalingBehavior,
    ScalingPolicy,
    ScalingRules,
)
from dressage.api.base import ApiModel
from dressage.api.bounds import (
    MAX_GPUS_PER_NODE,
    MAX_INFERENCE_REPLICAS,
    MAX_ROLLOUT_SIZE,
    MAX_TENSOR_PARALLEL_SIZE,
    MAX_TRAINER_NODES,
)
from dressage.api.budget import StalenessBudget, StalenessMode
from dressage.api.evaluation import EvaluationSpec
from dressage.api.k8s import (
    ENV_VAR_NAME_PATTERN,
    QUANTITY_PATTERN,
    RESTRICTED_CAPABILITIES,
    EnvVar,
    EnvVarName,
    ImageRef,
    ObjectMeta,
    PodSecurityContext,
    PodSecuritySpec,
    PodTemplateOverrides,
    Quantity,
    ResourceRequirements,
    SeccompProfile,
    SecretKeySelector,
    Volume,
)
from dressage.api.reserved import CODE_ENV, OPERATOR_ENGINE_FLAGS, OPERATOR_ENV, PACKAGES_DIR
from dressage.api.rl import (
    ARITHMETIC_TASK,
    BUILTIN_SOURCE_PREFIX,
    DATASET_TASK,
    ENVIRONMENT_TASK,
    HOUSEHOLD_TASK,
    LONG_TAIL_TASK,
    STAGED_MODELS_DIR,
    TASK_NAMES,
    DatasetSpec,
    ModelSpec,
    OffPolicyCorrectionMode,
    OffPolicyCorrectionSpec,
    RolloutMode,
    RolloutSpec,
    StalenessSpec,
    TaskName,
    TaskSpec,
    TrainingSpec,
    WarmStartSpec,
)
from dressage.api.roles import (
    MAX_PROXY_REPLICAS,
    CodeSpec,
    EngineArg,
    EngineKind,
    FailurePolicy,
    InferenceSpec,
    LocalSpec,
    PackageRequirement,
    ProxyReplicas,
    ProxySpec,
    SGLangVersion,
    StorageSpec,
    TrainerSpec,
)
from dressage.api.scheduling import SchedulingSpec
from dressage.api.sglang import (
    DETERMINISTIC_INFERENCE_SINCE,
    ROUTED_EXPERTS_SINCE,
    has_deterministic_inference,
    has_routed_experts,
)
from dressage.api.tracking import MlflowSpec, TensorBoardSpec, TrackingSpec, WandbSpec

API_GROUP = "dressage.io"
API_VERSION = "v1alpha1"
KIND = "AsyncRLJob"
PLURAL = "asyncrljobs"


class AsyncRLJobSpec(ApiModel):
    """Desired state of an asynchronous RL job."""

    model: ModelSpec
    """The policy model."""
    task: TaskSpec = Field(default_factory=TaskSpec)
    """Environment, agent and reward."""
    trainer: TrainerSpec = Field(default_factory=TrainerSpec)
    """The trainer gang."""
    inference: InferenceSpec = Field(default_factory=InferenceSpec)
    """The inference engines."""
    proxy: ProxySpec = Field(default_factory=ProxySpec)
    """The rollout proxy."""
    staleness: StalenessSpec = Field(default_factory=StalenessSpec)
    """Staleness controls."""
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    """Rollout collection."""
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    """Optimisation."""
    storage: StorageSpec = Field(default_factory=StorageSpec)
    """Checkpoint and weight-sync storage."""
    code: CodeSpec = Field(default_factory=CodeSpec)
    """The job's own code and packages on a cluster (ignored by `dressage run`)."""
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    """Queue (Kueue) and priority of the job's pods on a shared cluster (ignored by
    `dressage run`)."""
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    """Restart policy."""
    local: LocalSpec = Field(default_factory=LocalSpec)
    """Local-run settings (ignored by the operator)."""
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    """Experiment trackers (TensorBoard, Weights & Biases, MLflow) the trainer logs the run
    to: every step's figures, the manifest, the report's plots."""
    evaluation: EvaluationSpec | None = None
    """Held-out evaluation of the weight versions during training (`docs/evaluation.md`):
    unset, none."""
    suspend: bool = False
    """Suspend the job: its pods are deleted, the job and its progress are kept."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    """Delete the job this many seconds after it succeeded or failed."""
    active_deadline_seconds: int | None = Field(default=None, ge=1)
    """Fail the job when it has been running longer than this."""

    @model_validator(mode="after")
    def _check_cross_fields(self) -> AsyncRLJobSpec:
        if self.task.agent == "blackbox" and not self.task.agent_command:
            raise ValueError("task.agentCommand is required when task.agent is 'blackbox'")
        self._check_code()
        if (
            self.staleness.span_limit is not None
            and self.rollout.mode is not RolloutMode.PARTIAL_ASYNC
            and not self.proxy.partial_rollout
        ):
            field = (
                "maxPartialRolloutPreempts"
                if self.staleness.max_partial_rollout_preempts is not None
                else "spanLimitPolicy"
            )
            raise ValueError(
                f"staleness.{field} needs partial rollout: set "
                "rollout.mode to 'partial_async' or proxy.partialRollout to true"
            )
        if self.staleness.auto and self.rollout.mode is RolloutMode.SYNC:
            raise ValueError(
                "staleness.mode 'auto' steers asynchronous rollout, but rollout.mode 'sync' "
                "trains only on-policy data (lag 0): set rollout.mode to 'fully_async' or "
                "'partial_async', or staleness.mode to 'fixed'"
            )
        if self.rollout.seeded_sampling and not has_deterministic_inference(
            self.inference.sglang_version
        ):
            raise ValueError(
                f"rollout.seededSampling needs SGLang {DETERMINISTIC_INFERENCE_SINCE} or later "
                "(--enable-deterministic-inference), but inference.sglangVersion is "
                f"{self.inference.sglang_version}: set inference.image and "
                "inference.sglangVersion to a newer release, or turn seededSampling off"
            )
        if self.rollout.routing_replay != "off" and not has_routed_experts(
            self.inference.sglang_version
        ):
            raise ValueError(
                f"rollout.routingReplay: {self.rollout.routing_replay} needs SGLang "
                f"{ROUTED_EXPERTS_SINCE} or later (return_routed_experts), but "
                f"inference.sglangVersion is {self.inference.sglang_version}: set "
                "inference.image and inference.sglangVersion to a newer release, or set "
                "routingReplay to off"
            )
        in_flight = self.rollout.concurrency * self.rollout.group_size
        admitted = self.proxy.max_concurrency * self.proxy.replicas
        if in_flight > admitted:
            raise ValueError(
                f"rollout.concurrency x rollout.groupSize ({in_flight} generations in flight) "
                f"exceeds what the proxies admit (proxy.maxConcurrency x proxy.replicas = "
                f"{admitted}); the excess would be refused with HTTP 429"
            )
        self._check_evaluation(admitted)
        return self

    def _check_evaluation(self, admitted: int) -> None:
        evaluation = self.evaluation
        if evaluation is None:
            return
        if self.task.name == ENVIRONMENT_TASK:
            raise ValueError(
                "evaluation: the 'environment' task has no held-out split (the environment "
                "class draws its own instances); evaluate a built-in task or the 'dataset' task"
            )
        if evaluation.dataset is None and self.task.name == DATASET_TASK:
            raise ValueError(
                "evaluation.dataset: the 'dataset' task has no held-out split of its own: give "
                "the prompts to evaluate on in evaluation.dataset (e.g. its test split)"
            )
        if evaluation.dataset is not None and self.task.name != DATASET_TASK:
            raise ValueError(
                "evaluation.dataset: only the 'dataset' task reads prompts from a dataset; "
                f"the built-in {self.task.name!r} task evaluates on its own held-out split "
                "(leave evaluation.dataset out)"
            )
        if evaluation.in_flight > admitted:
            raise ValueError(
                f"evaluation.maxConcurrency x evaluation.samplesPerPrompt "
                f"({evaluation.in_flight} generations in flight) exceeds what the proxies "
                f"admit (proxy.maxConcurrency x proxy.replicas = {admitted}); lower "
                "evaluation.maxConcurrency or raise proxy.maxConcurrency"
            )

    def _check_code(self) -> None:
        code = self.code
        mount = self.storage.mount_path.rstrip("/")
        outside = not (f"{code.path}/").startswith(f"{mount}/")
        if code.path is not None and code.path.startswith("/") and outside:
            raise ValueError(
                f"code.path {code.path!r} is not on the job's storage: give it relative "
                f"to storage.mountPath ({self.storage.mount_path}) or absolute under it"
            )
        if code.path is not None or code.packages:
            clash = sorted({e.name for e in self.trainer.template.env} & set(CODE_ENV))
            if clash:
                raise ValueError(
                    f"trainer.template.env sets {', '.join(clash)}, which the operator sets "
                    "on the trainer pods when code is set: put the code in code.path and "
                    "the packages in code.packages"
                )

    @property
    def partial_rollout(self) -> bool:
        """Whether generations resume across weight updates (mode or explicit proxy flag)."""
        return self.rollout.mode is RolloutMode.PARTIAL_ASYNC or self.proxy.partial_rollout


class AsyncRLJob(ApiModel):
    """An `AsyncRLJob` custom resource (apiVersion, kind, metadata, spec)."""

    api_version: Literal["dressage.io/v1alpha1"] = Field(
        default="dressage.io/v1alpha1", alias="apiVersion"
    )
    """Always `dressage.io/v1alpha1`."""
    kind: Literal["AsyncRLJob"] = "AsyncRLJob"
    """Always `AsyncRLJob`."""
    metadata: ObjectMeta
    """Object metadata."""
    spec: AsyncRLJobSpec
    """Desired state."""
    status: dict[str, Any] | None = Field(default=None, exclude=True)
    """The observed state the operator writes (`AsyncRLJobStatus`); not part of the job's
    definition, so it is never dumped."""


__all__ = [
    "API_GROUP",
    "API_VERSION",
    "ARITHMETIC_TASK",
    "BUILTIN_SOURCE_PREFIX",
    "CODE_ENV",
    "DATASET_TASK",
    "ENVIRONMENT_TASK",
    "ENV_VAR_NAME_PATTERN",
    "HOUSEHOLD_TASK",
    "KIND",
    "LONG_TAIL_TASK",
    "MAX_GPUS_PER_NODE",
    "MAX_INFERENCE_REPLICAS",
    "MAX_PROXY_REPLICAS",
    "MAX_ROLLOUT_SIZE",
    "MAX_TENSOR_PARALLEL_SIZE",
    "MAX_TRAINER_NODES",
    "OPERATOR_ENGINE_FLAGS",
    "OPERATOR_ENV",
    "PACKAGES_DIR",
    "PLURAL",
    "QUANTITY_PATTERN",
    "RESTRICTED_CAPABILITIES",
    "STAGED_MODELS_DIR",
    "TASK_NAMES",
    "AsyncRLJob",
    "AsyncRLJobSpec",
    "AutoscalingSpec",
    "CodeSpec",
    "DatasetSpec",
    "EngineArg",
    "EngineKind",
    "EnvVar",
    "EnvVarName",
    "FailurePolicy",
    "ImageRef",
    "InferenceSpec",
    "LocalSpec",
    "MlflowSpec",
    "ModelSpec",
    "ObjectMeta",
    "OffPolicyCorrectionMode",
    "OffPolicyCorrectionSpec",
    "PackageRequirement",
    "PodSecurityContext",
    "PodSecuritySpec",
    "PodTemplateOverrides",
    "ProxyReplicas",
    "ProxySpec",
    "Quantity",
    "ResourceRequirements",
    "RolloutMode",
    "RolloutSpec",
    "SGLangVersion",
    "ScalingBehavior",
    "ScalingPolicy",
    "ScalingRules",
    "SchedulingSpec",
    "SeccompProfile",
    "SecretKeySelector",
    "StalenessBudget",
    "StalenessMode",
    "StalenessSpec",
    "StorageSpec",
    "TaskName",
    "TaskSpec",
    "TensorBoardSpec",
    "TrackingSpec",
    "TrainerSpec",
    "TrainingSpec",
    "Volume",
    "WandbSpec",
    "WarmStartSpec",
]
