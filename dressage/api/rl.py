"""What a job learns and how: the model, the task, staleness, rollout and training specs."""

from __future__ import annotations

import difflib
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from dressage.api.base import ApiModel
from dressage.api.bounds import MAX_ROLLOUT_SIZE
from dressage.api.budget import StalenessBudget, StalenessMode
from dressage.api.chat_formats import ReasoningParserName, ToolCallParserName
from dressage.api.k8s import SecretKeySelector
from dressage.api.lora import LoraSpec


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
    lora: LoraSpec | None = None
    """Train a LoRA adapter on the frozen base model instead of the full weights: each version
    after `v0` is an adapter the engines load by name (`dressage.api.lora`); unset: full
    weights."""

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


ARITHMETIC_TASK = "arithmetic"
HOUSEHOLD_TASK = "household"
LONG_TAIL_TASK = "long_tail"
DATASET_TASK = "dataset"
ENVIRONMENT_TASK = "environment"
TASK_NAMES = (ARITHMETIC_TASK, HOUSEHOLD_TASK, LONG_TAIL_TASK, DATASET_TASK, ENVIRONMENT_TASK)
"""Every `task.name` a job may give: the task registry (`dressage.tasks.registry`) holds
exactly these, so a name outside them is refused when the manifest is read (and by the CRD at
`kubectl apply`) instead of by the trainer once its pods run. A task of one's own is the
`dataset` task with a reward function, or the `environment` task with an environment class."""


def _task_name(name: str) -> str:
    if name not in TASK_NAMES:
        close = difflib.get_close_matches(name, TASK_NAMES, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise PydanticCustomError(
            "task_name",
            "unknown task {name}: {hint}known tasks are {known} (your own code runs as "
            "'dataset' with task.reward, or as 'environment' with task.environment)",
            {"name": repr(name), "hint": hint, "known": ", ".join(TASK_NAMES)},
        )
    return name


TaskName = Annotated[
    str,
    AfterValidator(_task_name),
    WithJsonSchema({"type": "string", "enum": list(TASK_NAMES)}),
]


class TaskSpec(ApiModel):
    """The environment and the verifiable reward."""

    name: TaskName = ARITHMETIC_TASK
    """Task name from the task registry (`arithmetic`, single-turn; `household`, a multi-turn
    environment with tools; `long_tail`, arithmetic with heavy-tailed response lengths;
    `dataset`, prompts from `dataset` scored by `reward`;
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
    on_reward_error: Literal["zero", "stop", "drop"] = "zero"
    """When the reward raises, hangs or returns something that is not a number: `zero` gives
    the sample reward 0 and counts the failure by reason; `stop` stops the run with the error;
    `drop` drops the sample's whole GRPO group, unretried, when the failure is the
    infrastructure's (a reward call past `rewardTimeoutSeconds`; a `TimeoutError`,
    `ConnectionError` or `dressage.tasks.InfrastructureError` raised by the reward or by an
    environment's `episode()` or `step()`), counted in `droppedGroups` as `reward_error` or
    `environment_error`, and gives reward 0 for any other failure, as `zero` does."""
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


class SpanLimitPolicy(StrEnum):
    """What happens to a trajectory that would span more versions than the partial-rollout
    span limit (`maxPartialRolloutPreempts`) allows (`docs/staleness.md`, "Span-limit
    policies")."""

    REFUSE_GROUP = "refuse_group"
    """The proxy refuses the trajectory and the whole prompt group is generated again."""
    RETRY_TRAJECTORY = "retry_trajectory"
    """The proxy refuses it and only that trajectory is generated again, from its prompt; the
    group's finished trajectories are kept (the batch sink still judges the group)."""
    MASK_OLD_TOKENS = "mask_old_tokens"
    """The proxy never refuses; tokens older than the trajectory's newest
    `maxPartialRolloutPreempts + 1` versions stay as context but are left out of the loss."""


class StalenessSpec(ApiModel):
    """The staleness controls (`docs/staleness.md`), chosen by hand (`mode: fixed`) or by the
    job within a budget (`mode: auto`)."""

    mode: StalenessMode = Field(default=StalenessMode.FIXED, strict=False)
    """`fixed`: `keepVersions` and `rollout.concurrency` as given. `auto`: the job chooses the
    window (`keepVersions`) and the groups in flight (at most `rollout.concurrency`) every
    step, to keep the trainer fed within `budget` (`docs/staleness.md`, "The staleness
    budget"); the recommended mode for new jobs."""
    budget: StalenessBudget | None = None
    """What `mode: auto` keeps the trained data within (unset: the defaults, a version lag of
    at most 2); only with `mode: auto`."""

    keep_versions: int = Field(default=0, ge=0)
    """Batch-level control (`dressage_staleness_keep_versions`): at most this many most recent
    observed weight versions may be present in a trainer batch; 0 disables the control."""
    max_partial_rollout_preempts: int | None = Field(default=None, ge=0)
    """Partial-rollout control (`--max-partial-rollout-preempts`): the most version switches
    one trajectory may span; with 2 a trajectory spans at most 3 versions. Unset: unlimited."""
    span_limit_policy: SpanLimitPolicy = Field(default=SpanLimitPolicy.REFUSE_GROUP, strict=False)
    """What a trajectory beyond the span limit costs: `refuse_group` (the whole group is
    generated again), `retry_trajectory` (only that trajectory) or `mask_old_tokens` (kept,
    its oldest versions' tokens out of the loss); needs `maxPartialRolloutPreempts`, which
    `mode: auto` takes from `budget.maxLagVersions` when it is unset."""
    admission: bool = True
    """Admission control for the batch-level control (acts only when `keepVersions > 0`): the
    async worker starts a prompt group only while it can still be trained inside the version
    window, instead of rolling it out to drop it at the batch sink."""

    @model_validator(mode="after")
    def _check_mode(self) -> StalenessSpec:
        if (
            self.span_limit_policy is not SpanLimitPolicy.REFUSE_GROUP
            and self.max_partial_rollout_preempts is None
            and self.mode is StalenessMode.FIXED
        ):
            raise ValueError(
                f"staleness.spanLimitPolicy '{self.span_limit_policy.value}' acts on the span "
                "limit: set staleness.maxPartialRolloutPreempts (or staleness.mode 'auto', "
                "which takes it from the lag budget), or leave spanLimitPolicy out"
            )
        if self.mode is StalenessMode.FIXED:
            if self.budget is not None:
                raise ValueError(
                    "staleness.budget applies to staleness.mode 'auto': set mode to 'auto', "
                    "or leave budget out and set keepVersions by hand"
                )
            return self
        if self.keep_versions:
            raise ValueError(
                f"staleness.keepVersions ({self.keep_versions}) is chosen by the job in "
                "staleness.mode 'auto' (from staleness.budget.maxLagVersions): leave it out, "
                "or set mode to 'fixed'"
            )
        if not self.admission:
            raise ValueError(
                "staleness.admission must stay on in staleness.mode 'auto' (it bounds the lag "
                "of the groups the chosen depth starts): leave it out, or set mode to 'fixed'"
            )
        return self

    @property
    def auto(self) -> bool:
        """Whether the job chooses its depth and window (`mode: auto`)."""
        return self.mode is StalenessMode.AUTO

    @property
    def span_limit(self) -> int | None:
        """The preempt limit in force: `maxPartialRolloutPreempts`; unset, in `mode: auto`
        with a `spanLimitPolicy` chosen, the lag budget's `maxLagVersions` (a trajectory then
        spans at most the window the budget keeps, `maxLagVersions + 1` versions, so the
        window never drops a group for a trajectory the span limit let finish); else None."""
        if self.max_partial_rollout_preempts is not None:
            return self.max_partial_rollout_preempts
        if self.auto and self.span_limit_policy is not SpanLimitPolicy.REFUSE_GROUP:
            return self.effective_budget.max_lag_versions
        return None

    @property
    def effective_budget(self) -> StalenessBudget:
        """The budget `mode: auto` keeps (the defaults when `budget` is unset)."""
        return self.budget if self.budget is not None else StalenessBudget()


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
    reasoning_parser: ReasoningParserName = "auto"
    """How the proxy tells a reply's reasoning from its answer (OpenAI `reasoning_content`):
    SGLang's `--reasoning-parser` name of the model family (`qwen3`, `deepseek-r1`, `glm45`,
    `gpt-oss`, ...), `none`, or `auto` to pick it from the chat template."""
    tool_call_parser: ToolCallParserName = "auto"
    """How the proxy reads a reply's tool calls (OpenAI `tool_calls`): SGLang's
    `--tool-call-parser` name (`qwen`, `qwen3_coder`, `llama3`, `mistral`, `deepseekv3`,
    `glm45`, `kimi_k2`, `gpt-oss`, ...), `none`, or `auto` to pick it from the chat
    template."""
    routing_replay: Literal["off", "record", "replay"] = "off"
    """MoE routing replay (R3). `replay`: the engines return the experts every token was routed
    to (SGLang's `return_routed_experts`, 0.5.7 or later, which the operator starts with
    `--enable-return-routed-experts`), the proxy records them in the segments with the token
    versions, and the trainer's forward sends every token the rollout routed to the same
    experts, so train logprobs use the rollout's routing (tokens it did not route use the
    trainer's router). `record`: recorded the same way, but the trainer routes with its own
    router; `routing_agreement` and `train_rollout_logprob_abs_diff` are reported either way,
    to compare the two. `off`: nothing recorded. `record` and `replay` need an MoE model."""
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
