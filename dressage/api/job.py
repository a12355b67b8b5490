"""The `AsyncRLJob` model: the single source of truth for a Dressage job.

The CRD schema in `crds/` is generated from these classes, the operator validates custom
resources with them, and `dressage run` executes them locally. Field docstrings become the CRD's
field descriptions, so they are written for the user of a manifest.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from dressage.api.base import ApiModel
from dressage.api.sglang import (
    DETERMINISTIC_INFERENCE_SINCE,
    SGLANG_PINNED_VERSION,
    check_release_in_range,
    has_deterministic_inference,
)

API_GROUP = "dressage.io"
API_VERSION = "v1alpha1"
KIND = "AsyncRLJob"
PLURAL = "asyncrljobs"


ENV_VAR_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
"""What Kubernetes accepts as an environment variable name (`IsEnvVarName`)."""
QUANTITY_PATTERN = r"^\+?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?$"
"""A non-negative Kubernetes resource quantity: `8`, `1.5`, `500m`, `64Gi`, `1e3`."""
OPERATOR_ENV = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "NNODES",
        "NPROC_PER_NODE",
        "WORLD_SIZE",
        "NODE_RANK",
        "RANK",
        "LOCAL_RANK",
        "DRESSAGE_JOB_CONFIG",
        "DRESSAGE_ENGINE_URLS",
        "DRESSAGE_PROXY_URL",
        "DRESSAGE_METRICS_PORT",
        "DRESSAGE_WORKDIR",
        "DRESSAGE_ROLLOUT_MAX_RETRIES",
        "HOME",
        "DRESSAGE_PROXY_TOKEN",
    }
)
"""Environment variables the operator (or torchrun) sets in a job's pods: the rendezvous, the
wiring between trainer, engines and proxy, the engines' writable home and the proxy token
(from `proxy.tokenSecret`, never a plain value that would land in the job's ConfigMap). A job's
`template.env` cannot override them."""
OPERATOR_ENGINE_FLAGS = {
    "--model-path": "set spec.model.source",
    "--model": "set spec.model.source",
    "--tokenizer-path": "set spec.model.tokenizer",
    "--tp-size": "set spec.inference.tensorParallelSize",
    "--tp": "set spec.inference.tensorParallelSize",
    "--tensor-parallel-size": "set spec.inference.tensorParallelSize",
    "--dtype": "set spec.model.dtype",
    "--host": "the engine listens on 0.0.0.0",
    "--port": "the engine Service's port is fixed",
    "--weight-version": "the trainer stamps weight versions",
    "--enable-metrics": "metrics are always on",
    "--enable-deterministic-inference": "set spec.rollout.seededSampling",
}
"""SGLang flags the operator puts on the engine command line, with what to do instead."""

_QUANTITY = re.compile(QUANTITY_PATTERN)
_ENV_VAR_NAME = re.compile(ENV_VAR_NAME_PATTERN)


def _quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise PydanticCustomError(
            "quantity",
            "{value!r} is not a Kubernetes quantity (a non-negative number with an optional "
            "suffix: 8, 1.5, 500m, 64Gi, 1e3)",
            {"value": value},
        )
    return value


def _env_var_name(name: str) -> str:
    if not _ENV_VAR_NAME.match(name):
        raise PydanticCustomError(
            "env_var_name",
            "{name!r} is not a valid environment variable name: letters, digits, '_', '-' or "
            "'.', not starting with a digit",
            {"name": name},
        )
    if name in OPERATOR_ENV:
        raise PydanticCustomError(
            "env_var_reserved",
            "{name} is set by the operator (rendezvous and wiring of the job's pods) and "
            "cannot be overridden",
            {"name": name},
        )
    return name


def _engine_arg(arg: str) -> str:
    flag = arg.split("=", 1)[0]
    if flag in OPERATOR_ENGINE_FLAGS:
        raise PydanticCustomError(
            "engine_flag_reserved",
            "{flag} is set by the operator on the engine command line ({instead})",
            {"flag": flag, "instead": OPERATOR_ENGINE_FLAGS[flag]},
        )
    return arg


MAX_INFERENCE_REPLICAS = 4096
MAX_TENSOR_PARALLEL_SIZE = 64
MAX_TRAINER_NODES = 1024
MAX_GPUS_PER_NODE = 64
MAX_ROLLOUT_SIZE = 65536
"""Static maxima of what a manifest may ask, in the model and the CRD alike. They only bound
the absurd; each cluster's own, lower limits are the operator's (`dressage_operator.limits`,
raised in the operator chart's `limits:`)."""


MAX_PROXY_REPLICAS = 1
"""A session (its turns, its finalize and its segment reads) lives in one proxy's memory and the
proxy Service does not route a session's requests to one replica, so a job runs one proxy."""


def _proxy_replicas(replicas: int) -> int:
    if replicas > MAX_PROXY_REPLICAS:
        raise PydanticCustomError(
            "proxy_replicas",
            "{replicas} proxy replicas: at most {limit} is supported, because a session lives "
            "in one proxy's memory and the proxy Service would send its turns, finalize and "
            "segment reads to different replicas; raise proxy.maxConcurrency instead",
            {"replicas": replicas, "limit": MAX_PROXY_REPLICAS},
        )
    return replicas


ProxyReplicas = Annotated[
    int,
    Field(ge=1),
    AfterValidator(_proxy_replicas),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": MAX_PROXY_REPLICAS}),
]
Quantity = Annotated[
    str,
    AfterValidator(_quantity),
    WithJsonSchema({"type": "string", "pattern": QUANTITY_PATTERN}),
]
EnvVarName = Annotated[
    str,
    AfterValidator(_env_var_name),
    WithJsonSchema({"type": "string", "minLength": 1, "pattern": ENV_VAR_NAME_PATTERN}),
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

RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
"""The only capability the Restricted Pod Security Standard lets a container add."""


def _volume(volume: dict[str, Any]) -> dict[str, Any]:
    if "hostPath" in volume:
        raise PydanticCustomError(
            "host_path_volume",
            "volume '{name}' is a hostPath volume: a job's pods do not mount node directories "
            "(the Baseline and Restricted Pod Security Standards forbid it); use the job's "
            "storage, a persistentVolumeClaim or an emptyDir",
            {"name": volume.get("name", "")},
        )
    return volume


Volume = Annotated[dict[str, Any], AfterValidator(_volume)]
ImageRef = Annotated[str, Field(pattern=r"^\S+$")]
"""A container image reference: no whitespace anywhere."""


class RolloutMode(StrEnum):
    """How rollout and training are scheduled against each other."""

    SYNC = "sync"
    FULLY_ASYNC = "fully_async"
    PARTIAL_ASYNC = "partial_async"


class OffPolicyCorrectionMode(StrEnum):
    """How the trainer corrects for the gap between rollout and training logprobs."""

    NONE = "none"
    TIS = "tis"
    """Token-level truncated importance sampling: each token's loss is weighted by
    `min(exp(train_logprob - rollout_logprob), tisClip)`."""
    ICEPOP = "icepop"
    """Tokens whose ratio `exp(train_logprob - rollout_logprob)` leaves `[low, high]` are
    masked out of the loss."""
    SEQ_MASK = "seq_mask"
    """Sequences whose geometric-mean ratio over their trained tokens leaves `[low, high]`
    are masked out of the loss."""


class ObjectMeta(ApiModel):
    """The subset of Kubernetes object metadata a job manifest carries."""

    model_config = ApiModel.model_config | {"extra": "allow"}

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """Job name; a DNS-1123 label because child objects are named after it."""
    namespace: str | None = None
    """Namespace of the job (cluster only)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Labels copied onto every child object."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Annotations of the job object."""


class WarmStartSpec(ApiModel):
    """A short supervised warm start on the task before RL (for models that cannot do the
    task at all, such as `builtin:tiny`). The result is cached by a hash of its settings."""

    target_reward: float = Field(default=0.2, gt=0.0, le=1.0)
    """Stop once the expected reward of sampling at temperature 1 (the probability of the
    exact answer, averaged over the task's first prompts) reaches this."""
    max_steps: int = Field(default=400, ge=1)
    """Upper bound on supervised steps."""
    batch_size: int = Field(default=64, ge=1)
    """Prompts per supervised step."""
    learning_rate: float = Field(default=3e-3, gt=0.0)
    """AdamW learning rate of the warm start."""
    eval_prompts: int = Field(default=256, ge=1)
    """Prompts the expected reward is measured on."""
    seed: int = 0
    """Seed of the warm start's prompt stream (drawn apart from the RL prompts)."""


class SecretKeySelector(ApiModel):
    """A key of a Secret in the job's namespace (Kubernetes' `secretKeyRef`)."""

    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """The Secret's name."""
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    """The key within the Secret."""


BUILTIN_SOURCE_PREFIX = "builtin:"
STAGED_MODELS_DIR = "models"
"""Where staged models live on the job's storage: `<storage.mountPath>/models/<source>`."""


class ModelSpec(ApiModel):
    """The policy model to train and serve."""

    source: str = Field(min_length=1)
    """Where the initial weights come from: a Hugging Face model id (staged once onto the job's
    storage before anything starts), a path readable by the trainer, the engines and the proxy,
    or `builtin:tiny` for the small model the project builds offline."""
    revision: str | None = Field(default=None, min_length=1)
    """Hub revision (branch, tag or commit) of a Hugging Face `source`; unset: the default
    branch. Immutable while the job exists."""
    token_secret: SecretKeySelector | None = None
    """Secret key holding a Hugging Face token (`HF_TOKEN`) for gated or private models; only
    the model-staging step receives it."""
    hub_offline: bool = False
    """Stage a Hugging Face `source` from the Hugging Face cache on the job's storage
    (`<storage.mountPath>/models/.hf-home`, laid out as the hub writes it) and never from the
    network (`HF_HUB_OFFLINE=1` on the staging step): for clusters without internet access."""
    tokenizer: str | None = None
    """Tokenizer source when it differs from `source`."""
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    """Parameter dtype on the engines and for training (CPU runs always use float32)."""
    warm_start: WarmStartSpec | None = None
    """Supervised warm start on the task before RL; unset starts RL from `source` as is."""

    @property
    def is_hub_id(self) -> bool:
        """Whether `source` names a Hugging Face repository (`org/name` or `name`) to be
        staged, rather than a path (absolute, or starting with `.` or `~`) or a built-in."""
        source = self.source
        return not (
            source.startswith((BUILTIN_SOURCE_PREFIX, "/", ".", "~")) or source.count("/") > 1
        )

    def staged_path(self, mount_path: str) -> str:
        """Where the trainer, the engines and the proxy read the model on the job's storage:
        a hub id's staging directory (`<mount>/models/<org>--<name>[@<revision>]`), else
        `source` itself."""
        if not self.is_hub_id:
            return self.source
        name = self.source.replace("/", "--")
        if self.revision:
            name += "@" + self.revision.replace("/", "--")
        return f"{mount_path.rstrip('/')}/{STAGED_MODELS_DIR}/{name}"


class DatasetSpec(ApiModel):
    """Prompts read from a dataset: a JSONL or Parquet file, a dataset directory saved by the
    `datasets` library, or a Hugging Face Hub dataset. Prompt `i` is valid row `i` modulo the
    number of valid rows, in the dataset's own order; rows that cannot be used (unparsable JSON,
    a missing or non-text prompt) are skipped, reported with file, row and column, and counted."""

    path: str | None = Field(default=None, min_length=1)
    """A `.jsonl` or `.parquet` file, or a directory written by `datasets`' `save_to_disk`.
    Relative paths are looked up next to the job manifest, then in the working directory; on a
    cluster use a path on the job's storage (under `spec.storage.mountPath`)."""
    hub: str | None = Field(default=None, min_length=1)
    """Hugging Face Hub dataset id loaded with `datasets.load_dataset` (or a `datasets` builder
    such as `json` or `parquet` together with `dataFiles`). Exactly one of `path` and `hub`."""
    subset: str | None = Field(default=None, min_length=1)
    """Configuration (subset) name of a `hub` dataset."""
    data_files: list[str] | None = None
    """Data files handed to `datasets.load_dataset` with a `hub` builder."""
    revision: str | None = Field(default=None, min_length=1)
    """Hub revision (branch, tag or commit) of a `hub` dataset; unset: the default branch."""
    split: str = Field(default="train", min_length=1)
    """Split of a `hub` dataset or of a `save_to_disk` directory holding several splits."""
    cache_dir: str | None = Field(default=None, min_length=1)
    """Where `datasets` caches hub downloads; unset uses its default (`HF_HOME`)."""
    shuffle: bool = False
    """Visit the rows in one fixed order shuffled with `spec.task.seed` instead of the
    dataset's own (the same order every epoch and on resume)."""
    format: Literal["auto", "jsonl", "parquet"] = "auto"
    """File format of `path`; `auto` goes by the extension (`.parquet`, else JSON lines)."""
    prompt_column: str | None = Field(default=None, min_length=1)
    """Column holding the prompt text (one user message). Exactly one of `promptColumn` and
    `messagesColumn`."""
    messages_column: str | None = Field(default=None, min_length=1)
    """Column holding the chat messages (`[{role, content}, ...]`) that open the conversation."""
    answer_column: str | None = Field(default=None, min_length=1)
    """Column holding the reference answer (the built-in rewards and the warm start use it)."""
    reward_columns: list[str] | None = None
    """Columns of the row passed to the reward (the answer column is always passed); unset
    passes every column."""
    system_prompt: str | None = None
    """System message put before the prompt, unless the row's messages start with their own."""
    prompt_format: Literal["chat", "raw"] = "chat"
    """`chat` renders the prompt with the model's chat template (generation prompt appended);
    `raw` feeds the prompt column's text to the model as is."""

    @model_validator(mode="after")
    def _check_choices(self) -> DatasetSpec:
        if (self.path is None) == (self.hub is None):
            raise ValueError("task.dataset: set exactly one of path and hub")
        if (self.prompt_column is None) == (self.messages_column is None):
            raise ValueError("task.dataset: set exactly one of promptColumn and messagesColumn")
        if self.path is not None and (self.subset or self.data_files or self.revision):
            raise ValueError("task.dataset: subset, dataFiles and revision apply to hub only")
        if self.prompt_format == "raw" and (self.messages_column or self.system_prompt):
            raise ValueError(
                "task.dataset.promptFormat: raw takes a promptColumn and no systemPrompt"
            )
        return self


DATASET_TASK = "dataset"
ENVIRONMENT_TASK = "environment"


class TaskSpec(ApiModel):
    """The environment and the verifiable reward."""

    name: str = Field(default="arithmetic", min_length=1)
    """Task name from the task registry (`arithmetic`, single-turn; `household`, a multi-turn
    environment with tools; `dataset`, prompts from `dataset` scored by `reward`;
    `environment`, the user environment class named by `environment`)."""
    agent: Literal["whitebox", "blackbox"] = "whitebox"
    """Whitebox agents run our environment loop; blackbox agents are external programs that
    only speak the OpenAI chat API to the proxy."""
    agent_command: list[str] | None = None
    """Command line of a blackbox agent program (required when `agent` is `blackbox`)."""
    max_turns: int | None = Field(default=None, ge=1)
    """Maximum turns per trajectory for multi-turn tasks; unset uses the task's own limit."""
    dataset_size: int = Field(default=4096, ge=1)
    """Number of prompts the task generator yields per epoch (generated tasks; the `dataset`
    task's epoch is its usable rows)."""
    seed: int = 0
    """Seed of the task generator."""
    params: dict[str, int | float | str] = Field(default_factory=dict)
    """Task-specific settings (`arithmetic`: `maxOperand`, the largest operand; `household`:
    `boxes`, the number of boxes to search; a user environment reads its own)."""
    dataset: DatasetSpec | None = None
    """Where the `dataset` task reads its prompts."""
    reward: str | None = Field(default=None, min_length=1)
    """Reward of the `dataset` task: `exact_match`, `math` (answer checking with
    `math-verify`), or a function `package.module:function` called as
    `f(completion, row) -> float | dict[str, float]` (or awaited when async), where `row` holds
    the reward columns. Unset: `exact_match`."""
    reward_batched: bool = False
    """The reward function takes lists, `f(completions, rows) -> list`, one result per sample."""
    reward_weights: dict[str, float] = Field(default_factory=dict)
    """Weights that turn a reward returning named parts into the trained scalar (the weighted
    sum); unset weighs every part 1. A weighted part missing from the result is an error."""
    reward_timeout_seconds: float = Field(default=30.0, gt=0)
    """Time one reward call may take before it counts as failed (`reward_timeout`)."""
    on_reward_error: Literal["zero", "stop"] = "zero"
    """When the reward raises, hangs or returns something that is not a number: `zero` gives
    the sample reward 0 and counts the failure by reason; `stop` stops the run with the error."""
    environment: str | None = Field(default=None, min_length=1)
    """The `environment` task's class, `package.module:Class`, constructed as `Class(spec)` with
    this task spec and implementing `dressage.tasks.base.Environment`."""

    @model_validator(mode="after")
    def _check_task_kind(self) -> TaskSpec:
        if (self.name == DATASET_TASK) != (self.dataset is not None):
            raise ValueError("task.dataset is set exactly when task.name is 'dataset'")
        if (self.name == ENVIRONMENT_TASK) != (self.environment is not None):
            raise ValueError("task.environment is set exactly when task.name is 'environment'")
        if self.name != DATASET_TASK and (
            self.reward is not None or self.reward_batched or self.reward_weights
        ):
            raise ValueError("task.reward settings apply to the 'dataset' task only")
        return self


class ResourceRequirements(ApiModel):
    """Kubernetes container resources (requests and limits)."""

    requests: dict[str, Quantity] = Field(default_factory=dict)
    """Resource requests, e.g. `{"cpu": "8", "memory": "64Gi"}`."""
    limits: dict[str, Quantity] = Field(default_factory=dict)
    """Resource limits, e.g. `{"nvidia.com/gpu": "8"}`."""


class EnvVar(ApiModel):
    """A plain environment variable."""

    name: EnvVarName
    """Variable name (letters, digits, `_`, `-`, `.`; not one the operator sets)."""
    value: str = ""
    """Variable value."""


class PodSecuritySpec(ApiModel):
    """How strictly one role's pods are locked down."""

    profile: Literal["restricted", "baseline"] = "restricted"
    """`restricted` (the default) meets the Restricted Pod Security Standard: the pods run as
    `runAsUser` (never root), with no privilege escalation, every capability dropped, the
    RuntimeDefault seccomp profile and no service-account token. `baseline` is the explicit
    relaxation for GPU images that must run as their own user (often root, e.g. SGLang's
    upstream images) or need capabilities: the image's user, the runtime's default
    capabilities plus `addCapabilities`, privilege escalation allowed; seccomp RuntimeDefault
    and no service-account token stay. Its pods need a namespace whose
    `pod-security.kubernetes.io/enforce` level is `baseline` (`privileged` for a capability
    outside Baseline's list, such as `IPC_LOCK` for RDMA)."""
    run_as_user: int = Field(default=1000, ge=1)
    """UID of the containers under `restricted` (the runtime images' user)."""
    fs_group: int = Field(default=1000, ge=0)
    """Group that the kubelet gives the job's storage to, so `runAsUser` can write it."""
    add_capabilities: list[Annotated[str, Field(pattern=r"^[A-Z_]+$")]] = Field(
        default_factory=list
    )
    """Linux capabilities added to the main container (`IPC_LOCK`, ...); under `restricted`
    only `NET_BIND_SERVICE`."""

    @model_validator(mode="after")
    def _check_capabilities(self) -> PodSecuritySpec:
        extra = sorted(set(self.add_capabilities) - RESTRICTED_CAPABILITIES)
        if self.profile == "restricted" and extra:
            raise ValueError(
                f"addCapabilities {extra} are not allowed under the restricted profile "
                "(only NET_BIND_SERVICE): set profile to 'baseline'"
            )
        return self


class PodTemplateOverrides(ApiModel):
    """Pod-level settings merged into the pods the operator creates for one role."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels the pods must match."""
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    """Kubernetes tolerations, passed through unchanged."""
    affinity: dict[str, Any] | None = None
    """Kubernetes affinity, passed through unchanged."""
    priority_class_name: str | None = None
    """Priority class of the pods."""
    image_pull_secrets: list[str] = Field(default_factory=list)
    """Names of image pull secrets."""
    env: list[EnvVar] = Field(default_factory=list)
    """Extra environment variables for the main container."""
    volumes: list[Volume] = Field(default_factory=list)
    """Extra volumes, passed through unchanged; `hostPath` volumes are refused."""
    volume_mounts: list[dict[str, Any]] = Field(default_factory=list)
    """Extra volume mounts of the main container."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra pod labels."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Extra pod annotations."""
    security: PodSecuritySpec = Field(default_factory=PodSecuritySpec)
    """Pod security: the Restricted Pod Security Standard unless relaxed explicitly."""


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


class InferenceSpec(ApiModel):
    """Inference engines: SGLang servers on a cluster, the embedded engine locally."""

    replicas: int = Field(default=1, ge=1, le=MAX_INFERENCE_REPLICAS)
    """Number of engine servers."""
    tensor_parallel_size: int = Field(default=1, ge=1, le=MAX_TENSOR_PARALLEL_SIZE)
    """GPUs per engine (SGLang `--tp-size`)."""
    image: ImageRef | None = None
    """SGLang image; defaults to the SGLang image of the operator's release."""
    extra_args: list[EngineArg] = Field(default_factory=list)
    """Extra SGLang server arguments, appended verbatim; not the flags the operator sets
    (`--model-path`, `--tp-size`, `--dtype`, `--host`, `--port`, ...)."""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Container resources; the GPU limit is added from `tensorParallelSize`."""
    template: PodTemplateOverrides = Field(default_factory=PodTemplateOverrides)
    """Pod overrides for the engine pods."""
    sglang_version: SGLangVersion = SGLANG_PINNED_VERSION
    """The SGLang release the engine image runs (default: the newest tested release, the one
    the operator's SGLang image runs). The operator builds the engine command line and probes
    for it and passes only flags that release has; set it when `image` names another SGLang
    release. Tested: 0.5.2 to 0.5.23. An older release is refused; a newer one is accepted
    as untested (condition SGLangReleaseUntested and a Warning Event)."""
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


class ProxySpec(ApiModel):
    """The rollout proxy between agents and engines."""

    replicas: ProxyReplicas = 1
    """Number of proxy pods behind the proxy Service: 1. A session's turns, finalize and
    segment reads must reach the proxy that holds it in memory, and the ClusterIP Service does
    not route them to one replica, so more than one is refused until the proxy has sticky
    routing; one proxy serves `maxConcurrency` generations."""
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
    token_secret: SecretKeySelector | None = None
    """Secret key holding the proxy's bearer token. When set, the proxy requires it on every
    request and the trainer pods send it (both read it as `DRESSAGE_PROXY_TOKEN` from the
    Secret when they start; the operator never reads it). Unset: the proxy is open to whoever
    can reach its Service. Immutable while the job exists."""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Container resources of a proxy pod."""
    template: PodTemplateOverrides = Field(default_factory=PodTemplateOverrides)
    """Pod overrides for the proxy pods."""


class StalenessSpec(ApiModel):
    """The two staleness controls of the reference design."""

    keep_versions: int = Field(default=0, ge=0)
    """Batch-level control (`dressage_staleness_keep_versions`): at most this many most recent
    observed weight versions may be present in a trainer batch; 0 disables the control."""
    max_partial_rollout_preempts: int | None = Field(default=None, ge=0)
    """Partial-rollout control (`--max-partial-rollout-preempts`): the most version switches
    one trajectory may span; with 2 a trajectory spans at most 3 versions. Unset: unlimited."""
    admission: bool = True
    """Admission control for the batch-level control (acts only when `keepVersions > 0`): the
    async worker starts a prompt group only while it can still be trained inside the version
    window, instead of rolling it out to drop it at the batch sink."""


class RolloutSpec(ApiModel):
    """How trajectories are collected."""

    mode: RolloutMode = Field(default=RolloutMode.FULLY_ASYNC, strict=False)
    """`sync` alternates rollout and training; `fully_async` overlaps them;
    `partial_async` also resumes generations interrupted by weight updates."""
    max_retries: int = Field(default=3, ge=0)
    """Prompt-group retries after a failed group (`DRESSAGE_ROLLOUT_MAX_RETRIES`); the group
    is dropped once they are exhausted."""
    group_size: int = Field(default=8, ge=1, le=MAX_ROLLOUT_SIZE)
    """Trajectories per prompt (the GRPO group)."""
    batch_size: int = Field(default=8, ge=1, le=MAX_ROLLOUT_SIZE)
    """Prompt groups per trainer step."""
    concurrency: int = Field(default=32, ge=1, le=MAX_ROLLOUT_SIZE)
    """Prompt groups in flight at once in the background worker."""
    max_new_tokens: int = Field(default=32, ge=1)
    """Generation budget per turn."""
    temperature: float = Field(default=1.0, ge=0.0)
    """Sampling temperature."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus sampling threshold."""
    seeded_sampling: bool = False
    """Make every sample's tokens a function of its sampling seed (reproducible rollouts).
    Each sample always carries its own seed; the embedded engine always draws from it, while
    SGLang does only in deterministic-inference mode, which the operator then turns on
    (`--enable-deterministic-inference`: batch-invariant kernels, slower; SGLang 0.5.3 or
    later, see `inference.sglangVersion`)."""
    separate_process: bool = False
    """Run rollout orchestration (the collector, the agents, the proxy client, the reward) in
    a process of its own next to trainer rank 0, instead of on the trainer's interpreter: the
    two then never wait for each other's interpreter lock, which is what async rollout needs
    to overlap generation with training."""


class OffPolicyCorrectionSpec(ApiModel):
    """Off-policy correction of the policy loss (`dressage.trainer.correction`)."""

    mode: OffPolicyCorrectionMode = Field(default=OffPolicyCorrectionMode.NONE, strict=False)
    """`none`, `tis`, `icepop` or `seq_mask`."""
    tis_clip: float = Field(default=2.0, gt=0.0)
    """`tis`: upper truncation of the importance weight (`--tis-clip`)."""
    tis_clip_low: float = Field(default=0.0, ge=0.0)
    """`tis`: lower truncation of the importance weight (`--tis-clip-low`)."""
    low: float = Field(default=0.5, gt=0.0)
    """`icepop`, `seq_mask`: smallest ratio kept."""
    high: float = Field(default=2.0, gt=0.0)
    """`icepop`, `seq_mask`: largest ratio kept."""

    @model_validator(mode="after")
    def _check_bounds(self) -> OffPolicyCorrectionSpec:
        if self.low > self.high:
            raise ValueError(
                f"spec.training.offPolicyCorrection: low ({self.low}) must be <= high ({self.high})"
            )
        if self.tis_clip_low > self.tis_clip:
            raise ValueError(
                f"spec.training.offPolicyCorrection: tisClipLow ({self.tis_clip_low}) must be "
                f"<= tisClip ({self.tis_clip})"
            )
        return self


class TrainingSpec(ApiModel):
    """Optimisation settings of the GRPO trainer."""

    steps: int = Field(default=100, ge=1)
    """Optimizer steps of the run; each publishes a new weight version."""
    learning_rate: float = Field(default=1e-5, gt=0.0)
    """AdamW learning rate."""
    clip_epsilon: float = Field(default=0.2, gt=0.0)
    """PPO-style clipping of the importance ratio against the rollout logprobs."""
    weight_decay: float = Field(default=0.0, ge=0.0)
    """AdamW weight decay."""
    max_grad_norm: float = Field(default=1.0, gt=0.0)
    """Gradient clipping norm."""
    checkpoint_every: int = Field(default=1, ge=1)
    """Write a resumable checkpoint (every rank's shards of the float32 weights, and of the
    optimizer state when `optimizerCheckpointEvery` is due) every this many steps. Weights
    are published every step regardless."""
    optimizer_checkpoint_every: int | None = Field(default=None, ge=1)
    """Also write the optimizer state (AdamW moments, twice the size of the weights) every
    this many steps, a multiple of `checkpointEvery`; unset: with every checkpoint. A run
    resumed from a checkpoint without optimizer state takes the weights and counters of that
    checkpoint and the optimizer state of the newest checkpoint before it that has one
    (moments a few steps old, with a warning), or fresh moments when there is none."""
    checkpoint_in_background: bool | None = None
    """Write checkpoints in the background, so that the next step trains while the weights and
    optimizer state are written; a run killed meanwhile resumes from the checkpoint before.
    In line, the step's version is still published before its checkpoint is waited for, and
    the step's record follows the complete checkpoint. Unset: in the background on GPU
    trainers, in line on CPU ones (small checkpoints)."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """Trainer compute precision: `bf16` computes in bfloat16 with float32 gradient reduction
    and float32 master weights; `fp32` computes in float32; `auto` is `bf16` on GPUs and
    `fp32` on CPU."""
    max_tokens_per_micro_batch: int = Field(default=8192, ge=1)
    """Padded tokens per forward/backward pass on one trainer rank; a step's micro-batches
    accumulate their gradients into one update, equal to one pass over the whole batch."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass (less memory, about a
    third more compute)."""
    seed: int = 0
    """Seed of the trainer and samplers."""
    off_policy_correction: OffPolicyCorrectionSpec = Field(default_factory=OffPolicyCorrectionSpec)
    """Correction for the rollout/training logprob mismatch; off (`mode: none`) by default."""

    @model_validator(mode="after")
    def _check_optimizer_cadence(self) -> TrainingSpec:
        every = self.optimizer_checkpoint_every
        if every is not None and every % self.checkpoint_every:
            raise ValueError(
                f"training.optimizerCheckpointEvery ({every}) must be a multiple of "
                f"training.checkpointEvery ({self.checkpoint_every})"
            )
        return self

    @property
    def optimizer_every(self) -> int:
        """Steps between checkpoints that carry the optimizer state."""
        return self.optimizer_checkpoint_every or self.checkpoint_every


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


PACKAGES_DIR = "/opt/dressage/packages"
"""Where the trainer pods' `install-packages` init container installs `spec.code.packages`
(`pip install --user` with this as `PYTHONUSERBASE`, an emptyDir shared with the trainer)."""
CODE_ENV = ("PYTHONPATH", "PYTHONUSERBASE")
"""Variables the operator sets on the trainer pods when `spec.code` is set."""


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
    those of the engines when `engineCpus` is set, else not pinned)."""
    cache_dir: str | None = None
    """Where built models and warm starts are cached; unset uses `$DRESSAGE_CACHE_DIR` or
    `~/.cache/dressage`."""


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
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    """Restart policy."""
    local: LocalSpec = Field(default_factory=LocalSpec)
    """Local-run settings (ignored by the operator)."""
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
            self.staleness.max_partial_rollout_preempts is not None
            and self.rollout.mode is not RolloutMode.PARTIAL_ASYNC
            and not self.proxy.partial_rollout
        ):
            raise ValueError(
                "staleness.maxPartialRolloutPreempts needs partial rollout: set "
                "rollout.mode to 'partial_async' or proxy.partialRollout to true"
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
        in_flight = self.rollout.concurrency * self.rollout.group_size
        admitted = self.proxy.max_concurrency * self.proxy.replicas
        if in_flight > admitted:
            raise ValueError(
                f"rollout.concurrency x rollout.groupSize ({in_flight} generations in flight) "
                f"exceeds what the proxies admit (proxy.maxConcurrency x proxy.replicas = "
                f"{admitted}); the excess would be refused with HTTP 429"
            )
        return self

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
