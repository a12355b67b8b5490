"""Where a job runs: the trainer gang, the engines, the proxy, storage, code and restarts.

These specs shape the pods (the operator's builders read them) and the local runner's
processes (`local`); what the job learns and how is in `dressage.api.rl`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from dressage.api.autoscaling import AutoscalingSpec
from dressage.api.base import ApiModel
from dressage.api.bounds import (
    DEFAULT_MAX_SESSIONS,
    MAX_GPUS_PER_NODE,
    MAX_INFERENCE_REPLICAS,
    MAX_ROLLOUT_SIZE,
    MAX_TENSOR_PARALLEL_SIZE,
    MAX_TRAINER_NODES,
)
from dressage.api.k8s import (
    ImageRef,
    Loc,
    PodTemplateOverrides,
    ResourceRequirements,
    SecretKeySelector,
    field_errors,
)
from dressage.api.reserved import OPERATOR_ENGINE_FLAGS
from dressage.api.sglang import SGLANG_PINNED_VERSION, check_release_in_range


def _engine_arg(arg: str) -> str:
    flag = arg.split("=", 1)[0]
    if flag in OPERATOR_ENGINE_FLAGS:
        raise PydanticCustomError(
            "engine_flag_reserved",
            "{flag} is set by the operator on the engine command line ({instead})",
            {"flag": flag, "instead": OPERATOR_ENGINE_FLAGS[flag]},
        )
    return arg


MAX_PROXY_REPLICAS = 16
"""Every replica pauses, continues and drains every engine (the trainer's client and each
engine's drain hook fan out to all of them), so each replica adds a command per engine to
every publish and drain; past a handful of replicas that costs more than another replica's
request rate gains."""


def _proxy_replicas(replicas: int) -> int:
    if replicas > MAX_PROXY_REPLICAS:
        raise PydanticCustomError(
            "proxy_replicas",
            "{replicas} proxy replicas: at most {limit} is supported, because every replica "
            "pauses and drains every engine on each publish and drain; raise "
            "proxy.maxConcurrency instead",
            {"replicas": replicas, "limit": MAX_PROXY_REPLICAS},
        )
    return replicas


ProxyReplicas = Annotated[
    int,
    Field(ge=1),
    AfterValidator(_proxy_replicas),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": MAX_PROXY_REPLICAS}),
]
EngineArg = Annotated[str, AfterValidator(_engine_arg)]


def _sglang_version(version: str) -> str:
    try:
        check_release_in_range(version)
    except ValueError as exc:
        raise PydanticCustomError("sglang_version", "{problem}", {"problem": str(exc)}) from None
    return version


SGLangVersion = Annotated[
    str,
    Field(pattern=r"^v?\d+\.\d+\.\d+"),
    AfterValidator(_sglang_version),
]


class TrainerSpec(ApiModel):
    """The trainer gang: data-parallel torch.distributed workers."""

    nodes: int = Field(default=1, ge=1, le=MAX_TRAINER_NODES)
    """Number of trainer pods (one torchrun node each)."""
    gpus_per_node: int = Field(default=1, ge=0, le=MAX_GPUS_PER_NODE)
    """GPUs per trainer pod; 0 trains on CPU with the gloo backend."""
    image: ImageRef | None = None
    """Trainer image; defaults to the runtime image of the operator's release."""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Container resources; the GPU limit is added from `gpusPerNode`."""
    template: PodTemplateOverrides = Field(default_factory=PodTemplateOverrides)
    """Pod overrides for the trainer pods."""
    distributed_timeout_seconds: float = Field(default=1800.0, gt=0)
    """torch.distributed timeout of the trainer gang's collectives: ranks other than 0 wait
    this long for rank 0's first batch, which includes model staging and engine warm-up."""


GPU_RESOURCE_SUFFIX = "/gpu"
"""How an accelerator resource is named (`nvidia.com/gpu`, `amd.com/gpu`)."""
EngineKind = Literal["sglang", "embedded"]


class InferenceSpec(ApiModel):
    """Inference engines: SGLang servers or Dressage's embedded CPU engine on a cluster, the
    embedded engine locally."""

    engine: EngineKind = "sglang"
    """What the engine pods run. `sglang` (the default): SGLang servers from `image` (the
    operator's SGLang image) on GPUs. `embedded`: Dressage's own engine (`python -m dressage
    engine serve`) from the runtime image, on CPU: the same HTTP API (that of
    `sglangVersion`), the same weight updates, no GPU, for small models on any cluster (kind,
    minikube, a CPU node pool). With `embedded`, `tensorParallelSize` must be 1, `extraArgs`
    empty and `resources` name no GPU, and with `weightSync: distributed` the trainer must be
    on CPU (`trainer.gpusPerNode: 0`: the engine joins its weight-update group over gloo).
    `dressage run` always runs the embedded engine."""
    replicas: int = Field(default=1, ge=1, le=MAX_INFERENCE_REPLICAS)
    """Number of engine servers; what `kubectl scale arj/NAME --replicas=N` sets (the job's
    scale subresource). With `autoscaling` it is the starting point, brought into the
    autoscaler's bounds, and then the autoscaler's: a change outside the bounds is refused."""
    autoscaling: AutoscalingSpec | None = None
    """Let the operator choose `replicas` from what the trainer waits for: more engines while
    the trainer waits for batches, fewer while admission control holds rollout back (see the
    operator's README, Autoscaling). Needs `weightSync: disk`. `dressage run` ignores it and
    runs `replicas` engines."""
    tensor_parallel_size: int = Field(default=1, ge=1, le=MAX_TENSOR_PARALLEL_SIZE)
    """GPUs per engine (SGLang `--tp-size`); 1 with the embedded engine."""
    image: ImageRef | None = None
    """Engine image; defaults to the SGLang image of the operator's release, or with the
    embedded engine to its runtime image."""
    extra_args: list[EngineArg] = Field(default_factory=list)
    """Extra SGLang server arguments, appended verbatim; not the flags the operator sets
    (`--model-path`, `--tp-size`, `--dtype`, `--host`, `--port`, ...)."""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Container resources; the GPU limit is added from `tensorParallelSize`. The embedded
    engine asks for no GPU and, unless set here, requests 1 CPU and 2Gi of memory."""
    template: PodTemplateOverrides = Field(default_factory=PodTemplateOverrides)
    """Pod overrides for the engine pods."""
    sglang_version: SGLangVersion = SGLANG_PINNED_VERSION
    """The SGLang release the engine image runs (default: the newest tested release, the one
    the operator's SGLang image runs). The operator builds the engine command line and probes
    for it and passes only flags that release has; set it when `image` names another SGLang
    release. Tested: 0.5.2 to 0.5.23. An older release is refused; a newer one is accepted
    as untested (condition SGLangReleaseUntested and a Warning Event). The embedded engine
    serves the HTTP API of the tested release that stands in for it."""
    weight_update_timeout_seconds: float = Field(default=900.0, gt=0)
    """How long one engine may take to load a published checkpoint
    (`/update_weights_from_disk`): every tensor-parallel rank reads it from storage while
    generation is paused, minutes for a large model on network storage."""
    weight_sync: Literal["disk", "distributed"] = "disk"
    """How a new weight version reaches the engines. `disk`: the trainer writes a Hugging Face
    checkpoint in the serving dtype to the job's storage every step and each engine re-reads
    it (`/update_weights_from_disk`). `distributed`: trainer rank 0 and every engine rank form
    one `torch.distributed` group (`/init_weights_update_group`, NCCL on GPU, gloo on CPU) and
    each step's weights are broadcast to them in buckets
    (`/update_weights_from_distributed`); the weights are then written to storage only with a
    checkpoint."""
    weight_sync_port: int = Field(default=29600, ge=1, le=65535)
    """TCP port on trainer rank 0 where the weight-update group meets (`distributed` only)."""
    weight_sync_bucket_megabytes: int = Field(default=512, ge=1)
    """Largest bucket of one `/update_weights_from_distributed` request, in MiB (a single
    larger tensor goes alone): bounds the staging memory of the trainer and of each engine."""

    @model_validator(mode="after")
    def _check_embedded(self) -> InferenceSpec:
        if self.engine != "embedded":
            return self
        problems: list[tuple[Loc, str]] = []
        if self.tensor_parallel_size != 1:
            problems.append(
                (
                    ("tensorParallelSize",),
                    f"{self.tensor_parallel_size} with engine 'embedded': the embedded engine is "
                    "one CPU process; set it to 1, or engine to 'sglang' for GPUs",
                )
            )
        if self.extra_args:
            problems.append(
                (
                    ("extraArgs",),
                    "SGLang server arguments with engine 'embedded', which is not SGLang: "
                    "remove them, or set engine to 'sglang'",
                )
            )
        for kind in ("requests", "limits"):
            for name in getattr(self.resources, kind):
                if name.endswith(GPU_RESOURCE_SUFFIX):
                    problems.append(
                        (
                            ("resources", kind, name),
                            "a GPU with engine 'embedded', which computes on CPU: ask for "
                            "cpu and memory, or set engine to 'sglang'",
                        )
                    )
        if problems:
            raise field_errors("InferenceSpec", "embedded_engine", problems)
        return self


class ProxySpec(ApiModel):
    """The rollout proxy between agents and engines."""

    replicas: ProxyReplicas = 1
    """Number of proxy pods (1 to 16). A prompt group's sessions live in one replica's memory:
    the trainer's proxy client sends every request of a group to the replica that rendezvous
    hashing on the group id picks among the ready pods of the `<job>-proxy-replicas` headless
    Service, and fans pause, continue and weight-version changes out to every replica; each
    engine's drain hook drains it on every replica. A replica lost costs only the groups it
    held (retried). Each replica admits `maxConcurrency` generations. Changing it between 1
    and more restarts the trainer gang (its proxy address changes)."""
    image: ImageRef | None = None
    """Proxy image; defaults to the runtime image of the operator's release."""
    partial_rollout: bool = False
    """Resume generations interrupted by a weight update from their partial output
    (`--dressage-partial-rollout`)."""
    record_token_versions: bool = True
    """Record the weight version of every generated token (`--record-token-versions`)."""
    mask_nonlast_version_tokens: bool = False
    """Train only the tokens of a sample's last real output version
    (`--mask-nonlast-version-tokens`). Applied once, where the trainer builds its inputs;
    `dressage train --[no-]mask-nonlast-version-tokens` overrides it either way."""
    max_concurrency: int = Field(default=256, ge=1, le=MAX_ROLLOUT_SIZE)
    """Concurrent generations the proxy admits before answering 429."""
    max_sessions: int = Field(default=DEFAULT_MAX_SESSIONS, ge=1)
    """Live sessions (trajectories) each proxy replica keeps at most; an idle one takes about
    2 KB. A new session at the cap takes the place of the least recently used session idle
    for a minute (an abandoned trajectory, counted in `dressage_proxy_evicted_sessions_total`),
    else it is answered 429 `too_many_sessions` with `Retry-After`."""
    token_secret: SecretKeySelector | None = None
    """Secret key holding the proxy's bearer token. When set, the proxy requires it on every
    request and the trainer pods send it (both read it as `DRESSAGE_PROXY_TOKEN` from the
    Secret when they start; the operator never reads it). Unset: the proxy is open to whoever
    can reach its Service. Immutable while the job exists."""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Container resources of a proxy pod."""
    template: PodTemplateOverrides = Field(default_factory=PodTemplateOverrides)
    """Pod overrides for the proxy pods."""


class StorageSpec(ApiModel):
    """Shared storage for checkpoints and weight sync between trainer and engines."""

    persistent_volume_claim: str | None = None
    """Name of an existing ReadWriteMany PersistentVolumeClaim, mounted in every pod of the job:
    the staged model, the weights the trainer publishes and the checkpoints live there. On a
    cluster it is required with `inference.weightSync: disk` (the engines load every version
    from it) and with a trainer gang of more than one node (the ranks share the model cache and
    the checkpoint directory). A one-node trainer with `weightSync: distributed` may run
    without one: every pod then gets an emptyDir of its own, the model is staged into each, and
    checkpoints last only as long as the trainer pod. `dressage run` ignores it."""
    mount_path: str = "/dressage"
    """Where the storage is mounted in every pod."""
    size: str = "100Gi"
    """Informational size used by the chart when it provisions storage."""


def _package(requirement: str) -> str:
    if not requirement.strip() or requirement.lstrip().startswith("-") or "\n" in requirement:
        raise PydanticCustomError(
            "package_requirement",
            "'{requirement}' is not a requirement specifier (such as 'math-verify==0.8.0' or "
            "'mylib @ https://host/mylib-1.0-py3-none-any.whl'); pip options are not accepted, "
            "set code.indexUrl for another package index",
            {"requirement": requirement},
        )
    return requirement.strip()


PackageRequirement = Annotated[str, AfterValidator(_package)]


class CodeSpec(ApiModel):
    """The job's own code on a cluster: rewards, environments, agent programs and their data.

    They all run in the trainer pods (rank 0 rolls out and scores; every rank builds the task).
    `dressage run` ignores this field: locally, user code is imported from the manifest's
    directory and the working directory, and packages come from the environment it runs in.
    For code that needs system libraries or large dependencies, build an image `FROM` the
    runtime image and set `trainer.image` instead."""

    path: str | None = Field(default=None, min_length=1)
    """A directory on the job's storage, relative to `storage.mountPath` (or absolute under
    it). `dressage train` runs there, so relative paths (`task.dataset.path`, an
    `agentCommand` script) are found in it, and it is on the trainer pods' `PYTHONPATH`, so
    `task.reward: rewards:score` imports its `rewards.py`. It must exist when the trainer
    starts."""
    packages: list[PackageRequirement] = Field(default_factory=list)
    """pip requirement specifiers installed when each trainer pod starts (an
    `install-packages` init container running the trainer image, `pip install --user` into an
    emptyDir on the pods' `PYTHONUSERBASE`); requirements the image already satisfies are kept
    from the image. Needs the pods to reach the package index, and a trainer image whose
    Python allows user installs (the runtime image does; a virtualenv does not)."""
    index_url: Annotated[str, Field(pattern=r"^https?://\S+$")] | None = None
    """Package index for `packages` (`pip --index-url`); unset: the image's pip default."""

    @model_validator(mode="after")
    def _check_path(self) -> CodeSpec:
        if self.path is not None and ".." in self.path.split("/"):
            raise ValueError(f"code.path {self.path!r} must not contain '..'")
        if self.index_url is not None and not self.packages:
            raise ValueError("code.indexUrl is set but code.packages is empty")
        return self

    def directory(self, mount_path: str) -> str | None:
        """The code directory in the trainer pods: `path` under `mount_path` when relative."""
        if self.path is None:
            return None
        if self.path.startswith("/"):
            return self.path.rstrip("/") or "/"
        return f"{mount_path.rstrip('/')}/{self.path.strip('/')}".rstrip("/")


class FailurePolicy(ApiModel):
    """What the operator does when pods fail."""

    max_restarts: int = Field(default=3, ge=0)
    """Trainer gang restarts before the job fails. Engine and proxy failures replace only the
    failed pods and do not count."""


class LocalSpec(ApiModel):
    """Settings used only by `dressage run` on a single machine."""

    workdir: str = "runs"
    """Directory for checkpoints, logs and the run report (a subdirectory per job)."""
    metrics_port: int = Field(default=9400, ge=0, le=65535)
    """Port of the run's Prometheus `/metrics` endpoint; 0 picks a free port."""
    engine_threads: int = Field(default=1, ge=1)
    """torch threads per embedded engine process."""
    engine_max_batch_size: int = Field(default=128, ge=1)
    """Requests an embedded engine decodes together (`--max-batch-size`)."""
    trainer_threads: int = Field(default=1, ge=1)
    """torch threads of the trainer (it runs inside the `dressage run` process)."""
    engine_min_step_interval_ms: float = Field(default=0.0, ge=0.0)
    """Start the embedded engines' decode steps at least this many ms apart
    (`--min-step-interval-ms`): a decode step then costs wall time but little CPU, as on an
    accelerator of its own. 0: no pacing."""
    engine_cpus: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1)
    """CPU cores the engines and the proxy are pinned to (unset: not pinned)."""
    trainer_cpus: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1)
    """CPU cores the `dressage run` process (the trainer) is pinned to (unset: not pinned)."""
    rollout_cpus: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1)
    """CPU cores the rollout process (`spec.rollout.separateProcess`) is pinned to (unset:
    in `sync` mode those of the trainer, idle while it waits for a batch; in the async modes
    those of the engines; not pinned when those are not)."""
    cache_dir: str | None = None
    """Where built models and warm starts are cached; unset uses `$DRESSAGE_CACHE_DIR` or
    `~/.cache/dressage`."""
