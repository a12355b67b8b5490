"""One GRPO optimizer step on a causal LM, sharded over the trainer gang with FSDP2.

Every rank holds the whole `TrainBatch` (rank 0 collects it and broadcasts it), computes the
same group advantages and trains on its shard of the samples. With more than one rank the
policy is sharded with FSDP2 (`fully_shard` on the input embedding and every decoder layer,
then on the root): each rank keeps 1/world of the float32 master weights, gradients and AdamW
state, and gathers one layer's parameters at a time for compute.

Precision (`TrainerConfig.precision`): `bf16` computes in bfloat16 with float32 gradient
reduction and float32 master weights (FSDP2's `MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)`; autocast for a single process); `fp32` computes in float32; `auto` is
`bf16` on GPUs and `fp32` on CPU, where bfloat16 matmuls are slow and a float32 run keeps the
local tiny-model results exact.

A rank's shard is cut into micro-batches of at most `max_tokens_per_micro_batch` padded
tokens whose gradients accumulate. The loss of every micro-batch is divided by the trained
tokens of the *whole* batch and multiplied by the world size (FSDP averages gradients over
ranks), so the update equals a single worker's update on the whole batch in one pass. Token
logprobs and entropy are computed from the final hidden states a chunk of tokens at a time
(`loss.chunked_token_logprobs_and_entropy`), so the float32 full-vocabulary log-softmax is
never held for a whole micro-batch.

MoE models train like dense ones (FSDP2 shards each decoder layer, experts included, along the
experts' first dimension). With `routing_replay` the rollout's routed experts are replayed in
the forward (`replay`) or only compared with the trainer's own routing (`record`); see
`dressage.trainer.routing_replay`. Published weights use the checkpoint's tensor names: transformers
trains a Qwen3-MoE layer's experts fused (`mlp.experts.gate_up_proj`), and they are published
one expert at a time (`mlp.experts.{e}.gate_proj.weight`, ...), as `save_pretrained` writes
them and as SGLang and the embedded engine load them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from dressage.api.figures import figure
from dressage.data.groups import TrainBatch
from dressage.data.samples import (
    drained_token_stats,
    version_span_histogram,
    version_span_stats,
)
from dressage.trainer.batch import (
    BatchTensors,
    micro_batches,
    muted,
    score_batch,
    shard,
    to_tensors,
    trained_token_count,
)
from dressage.trainer.correction import CorrectionConfig, off_policy_correction
from dressage.trainer.distributed import DistEnv, all_reduce_sum
from dressage.trainer.loss import LossInputs, chunked_token_logprobs_and_entropy, grpo_loss
from dressage.trainer.routing_replay import RoutingReplay

REWARD = figure("reward").key
LOGPROB_ABS_DIFF = figure("train_rollout_logprob_abs_diff").key
ENTROPY = figure("entropy").key
CLIP_FRACTION = figure("clip_fraction").key
MISMATCH_KL_K1 = figure("mismatch_kl_k1").key
MISMATCH_KL_K3 = figure("mismatch_kl_k3").key
OFF_POLICY_CLIPPED_FRACTION = figure("off_policy_clipped_fraction").key
OFF_POLICY_MASKED_FRACTION = figure("off_policy_masked_fraction").key
IS_ESS_FRACTION = figure("is_ess_fraction").key
GROUPS = figure("groups").key
SAMPLES = figure("samples").key
LOSS = "loss"
GRAD_NORM = "grad_norm"
ROUTING_AGREEMENT = figure("routing_agreement").key
ROUTED_TOKEN_FRACTION = figure("routed_token_fraction").key
ROUTING_REPLAY_MODES = ("off", "record", "replay")
_CORRECTION_MEANS = {
    "mismatch_kl_k1": MISMATCH_KL_K1,
    "mismatch_kl_k3": MISMATCH_KL_K3,
    "clipped_fraction": OFF_POLICY_CLIPPED_FRACTION,
    "masked_fraction": OFF_POLICY_MASKED_FRACTION,
}
"""Token-weighted correction figures of a step, by `Correction.metrics` key."""
PRECISIONS = ("auto", "bf16", "fp32")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class TrainerConfig:
    """Optimisation settings (from the job's `spec.training`, `spec.proxy` and `spec.model`)."""

    learning_rate: float = 1e-5
    clip_epsilon: float = 0.2
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    mask_nonlast_version_tokens: bool = False
    precision: str = "auto"
    """`auto`, `bf16` or `fp32` (see the module docstring)."""
    max_tokens_per_micro_batch: int = 8192
    """Padded tokens per forward/backward pass; the gradients of a step's passes accumulate."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer in the backward pass instead of keeping its activations."""
    logprob_chunk_tokens: int = 1024
    """Tokens whose full-vocabulary logits exist at once when computing token logprobs."""
    serving_dtype: str = "float32"
    """Dtype of the published weights (`save_pretrained`, `publishable_state_dict`)."""
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    """Off-policy correction of the loss (`spec.training.offPolicyCorrection`; off: `none`).
    The train/rollout mismatch figures are computed either way."""
    routing_replay: str = "off"
    """MoE routing replay (`spec.rollout.routingReplay`): `replay` routes the rollout's
    tokens to the rollout's experts, `record` only measures agreement, `off` neither."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"training.precision must be one of {PRECISIONS}, got {self.precision!r}"
            )
        if self.serving_dtype not in DTYPES:
            raise ValueError(
                f"model.dtype must be one of {tuple(DTYPES)}, got {self.serving_dtype!r}"
            )
        if self.max_tokens_per_micro_batch < 1:
            raise ValueError("training.maxTokensPerMicroBatch must be >= 1")
        if self.logprob_chunk_tokens < 1:
            raise ValueError("logprob_chunk_tokens must be >= 1")
        if self.routing_replay not in ROUTING_REPLAY_MODES:
            raise ValueError(
                f"rollout.routingReplay must be one of {ROUTING_REPLAY_MODES}, "
                f"got {self.routing_replay!r}"
            )

    def compute_dtype(self, device: torch.device) -> torch.dtype:
        """The dtype of the forward and backward passes on `device`."""
        if self.precision == "bf16" or (self.precision == "auto" and device.type == "cuda"):
            return torch.bfloat16
        return torch.float32


def quiet_transformers() -> None:
    """Turn off transformers' progress bars (one per checkpoint load and save) on stderr."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def load_policy(model_dir: str | Path, device: torch.device) -> torch.nn.Module:
    """A Hugging Face causal LM from a checkpoint directory, float32, in train mode.

    Float32 whatever the checkpoint's dtype: these are the master weights the optimizer
    updates (compute may still run in bfloat16, see `TrainerConfig.precision`).
    """
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    module: torch.nn.Module = model.to(device)
    module.train()
    return module


def pad_token_id(model: torch.nn.Module) -> int:
    """The id used for right padding (never trained, so any valid id works)."""
    config = getattr(model, "config", None)
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(config, name, None)
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, int):
            return value
    return 0


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's transformer blocks (the classes it names in `_no_split_modules`)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} names no decoder layer class in _no_split_modules; "
            "cannot shard it layer by layer"
        )
    return layers


class TokenLogprobs(torch.nn.Module):
    """The policy as one module: token ids -> per-token logprobs of the targets and entropy.

    The decoder produces hidden states and the LM head is applied a chunk of tokens at a time
    inside this module's forward, so FSDP2, with this module as its root, gathers the
    embedding and head parameters around it and reduces their gradients.
    """

    def __init__(self, lm: torch.nn.Module, chunk_tokens: int) -> None:
        super().__init__()
        self.lm = lm
        self.chunk_tokens = chunk_tokens

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lm: Any = self.lm
        hidden = lm.get_decoder()(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).last_hidden_state[:, :-1]
        head: Callable[[torch.Tensor], torch.Tensor] = lm.get_output_embeddings()
        logprobs, entropy = chunked_token_logprobs_and_entropy(
            hidden, head, targets, self.chunk_tokens
        )
        # Fresh tensors, not views: FSDP2 hooks the backward pass on this module's outputs.
        return logprobs.clone(), entropy.clone()


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly sharded) DTensor; collective on sharded ones."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


class GRPOTrainer:
    """Owns the policy, its optimizer and the GRPO update (no I/O, no versions)."""

    def __init__(
        self,
        model: torch.nn.Module,
        config: TrainerConfig,
        env: DistEnv | None = None,
        device: torch.device | None = None,
        *,
        shard: bool | None = None,
    ) -> None:
        """`shard`: wrap the policy in FSDP2 (None: when the gang has more than one rank).
        `True` with one rank needs a process group of one (benchmarks and the GPU check
        exercise the sharded path that way on a single device)."""
        self.env = env or DistEnv()
        self.device = device or torch.device("cpu")
        self.config = config
        self.module = model
        """The Hugging Face model (its parameters are DTensor shards when sharded)."""
        self.compute_dtype = config.compute_dtype(self.device)
        if config.activation_checkpointing:
            hf: Any = model
            hf.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False}
            )
        self.routing = (
            None
            if config.routing_replay == "off"
            else RoutingReplay(model, replay=config.routing_replay == "replay")
        )
        """The router hooks of routing replay (None when off)."""
        self.model: torch.nn.Module = TokenLogprobs(model, config.logprob_chunk_tokens)
        self.sharded = self.env.distributed if shard is None else shard
        if self.sharded:
            self._shard()
        # Only what trains: with a LoRA adapter (`dressage.trainer.lora`) the base is frozen.
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=config.learning_rate,
            weight_decay=config.weight_decay,
        )
        self.pad_id = pad_token_id(model)

    def _shard(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(self.device.type, (self.env.world_size,))
        policy = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if self.compute_dtype == torch.bfloat16
            else MixedPrecisionPolicy()
        )
        # The embedding and each decoder layer are gathered only while they compute; the
        # root (LM head and final norm) stays gathered from its forward to its backward.
        hf: Any = self.module
        embedding = hf.get_input_embeddings()
        tied = embedding.weight is getattr(hf.get_output_embeddings(), "weight", None)
        if not tied:
            fully_shard(embedding, mesh=mesh, mp_policy=policy)
        for layer in decoder_layers(self.module):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(self.model, mesh=mesh, mp_policy=policy)

    @contextmanager
    def _autocast(self) -> Iterator[None]:
        # FSDP2 casts the gathered parameters itself; a single process uses autocast.
        if self.sharded or self.compute_dtype == torch.float32:
            with nullcontext():
                yield
        else:
            with torch.autocast(self.device.type, dtype=self.compute_dtype):
                yield

    def _micro_batch_count(self, local: int) -> int:
        if not self.env.distributed:
            return local
        count = torch.tensor([local], dtype=torch.int64, device=self._collective_device())
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        return int(count.item())

    def _collective_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step on `batch`; returns this step's figures (same on every rank)."""
        if not batch.groups:
            raise ValueError("train_step needs a batch with at least one group")
        scored = score_batch(batch, mask_nonlast_version=self.config.mask_nonlast_version_tokens)
        global_tokens = trained_token_count(scored)
        mine = shard(scored, self.env.rank, self.env.world_size)
        parts = micro_batches(mine, self.config.max_tokens_per_micro_batch)
        # Every rank runs as many passes as the busiest one (each pass is a collective).
        parts += [[muted(mine[0])]] * (self._micro_batch_count(len(parts)) - len(parts))

        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = torch.zeros(5 + len(_CORRECTION_MEANS) + 2 + 4, dtype=torch.float64)
        for part in parts:
            sums += self._forward_backward(part, float(global_tokens))
        grad_norm = _full(
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        )
        self.optimizer.step()

        # Token-weighted sums, reduced over ranks, give the whole batch's means.
        reduced = all_reduce_sum(sums.to(self._collective_device()), self.env).tolist()
        loss_sum, diff_sum, clip_sum, entropy_sum, tokens, weight_sum, weight_square_sum = reduced[
            :7
        ]
        correction_sums = reduced[7 : 7 + len(_CORRECTION_MEANS)]
        agree, routed_pairs, routed_tokens, real_tokens = reduced[7 + len(_CORRECTION_MEANS) :]
        denom = max(tokens, 1.0)
        rewards = batch.rewards()
        metrics: dict[str, float] = {
            REWARD: sum(rewards) / len(rewards) if rewards else 0.0,
            LOGPROB_ABS_DIFF: diff_sum / denom,
            ENTROPY: entropy_sum / denom,
            CLIP_FRACTION: clip_sum / denom,
            LOSS: loss_sum,
            GRAD_NORM: float(grad_norm),
            "trained_tokens": tokens,
            SAMPLES: float(len(scored)),
            GROUPS: float(len(batch.groups)),
        }
        for key, total in zip(_CORRECTION_MEANS, correction_sums, strict=True):
            metrics[_CORRECTION_MEANS[key]] = total / denom
        # Effective sample size of the importance weights over trained tokens, as a fraction.
        metrics[IS_ESS_FRACTION] = (
            weight_sum**2 / weight_square_sum / denom if weight_square_sum > 0 else 1.0
        )
        if self.routing is not None:
            metrics[ROUTED_TOKEN_FRACTION] = routed_tokens / max(real_tokens, 1.0)
            if routed_pairs > 0:
                metrics[ROUTING_AGREEMENT] = agree / routed_pairs
        metrics.update(version_span_stats(batch.samples))
        metrics.update(version_span_histogram(batch.samples))
        metrics.update(drained_token_stats(batch.samples))
        return metrics

    def _forward_backward(self, part: list[Any], global_tokens: float) -> torch.Tensor:
        """Accumulate the gradient of one micro-batch; returns its token-weighted sums."""
        routing = self.routing
        tensors = to_tensors(part, self.pad_id, routing.shape if routing is not None else None)
        trains = tensors.loss_mask.sum(dim=-1) > 0
        if tensors.routed_experts is not None:
            # Samples that train nothing (a rank's filler passes) are neither replayed nor
            # counted in the routing figures.
            tensors.routed_experts[~trains] = -1
        with self._routes(tensors):
            sums = self._step(tensors, global_tokens)
        if routing is None or tensors.routed_experts is None:
            return torch.cat([sums, torch.zeros(4, dtype=torch.float64)])
        agree, routed_pairs = routing.agreement()
        real = tensors.attention_mask.bool() & trains.unsqueeze(-1)
        routed = (tensors.routed_experts >= 0).all(dim=-1).any(dim=-1) & real
        counts = [agree, routed_pairs, float(routed.sum()), float(real.sum())]
        return torch.cat([sums, torch.tensor(counts, dtype=torch.float64)])

    @contextmanager
    def _routes(self, tensors: BatchTensors) -> Iterator[None]:
        if self.routing is None or tensors.routed_experts is None:
            yield
            return
        with self.routing.routes(tensors.routed_experts.to(self.device)):
            yield

    def _step(self, tensors: BatchTensors, global_tokens: float) -> torch.Tensor:
        mask = tensors.loss_mask.to(self.device)
        with self._autocast():
            logprobs, entropy = self.model(
                tensors.input_ids.to(self.device),
                tensors.attention_mask.to(self.device),
                tensors.targets.to(self.device),
            )
        rollout = tensors.rollout_logprobs.to(self.device)
        corr = off_policy_correction(
            self.config.correction, logprobs.detach().float(), rollout, mask
        )
        out = grpo_loss(
            LossInputs(
                logprobs=logprobs.float(),
                rollout_logprobs=rollout,
                advantages=tensors.advantages.to(self.device),
                loss_mask=mask,
                clip_epsilon=self.config.clip_epsilon,
                loss_denominator=global_tokens,
                token_weights=None if self.config.correction.mode == "none" else corr.weights,
            )
        )
        (out.loss * self.env.world_size).backward()  # type: ignore[no-untyped-call]
        local_tokens = out.trained_tokens
        sums = torch.stack(
            [
                out.loss.detach(),
                out.logprob_abs_diff * local_tokens,
                out.clip_fraction * local_tokens,
                (entropy.float() * mask).sum(),
                local_tokens,
                corr.weights.double().sum(),
                corr.weights.double().pow(2).sum(),
            ]
        )
        tokens = corr.metrics["tokens"]
        means = [corr.metrics[k] * tokens for k in _CORRECTION_MEANS]
        return torch.cat([sums.to(torch.float64).cpu(), torch.tensor(means, dtype=torch.float64)])

    def iter_publishable(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Each parameter's full tensor in the serving dtype, one at a time, on this rank's
        device, by its Hugging Face name.

        The names are the checkpoint's (`save_pretrained`'s, after transformers reverts its
        load-time conversions): a Qwen3-MoE layer's fused `mlp.experts.gate_up_proj` comes
        out as `mlp.experts.{e}.gate_proj.weight` and `up_proj.weight` per expert.

        Collective and lazy: every rank must consume the whole iterator in step, since each
        item of a sharded model is an all-gather over the gang. Each shard is cast to
        `config.serving_dtype` before it is gathered, so the gather moves serving-dtype bytes
        only, and a rank holds one full parameter at a time (plus whatever its consumer
        keeps): a distributed publish sends from rank 0 while the other ranks just drain it.
        """
        from transformers.core_model_loading import revert_weight_conversion

        dtype = DTYPES[self.config.serving_dtype]
        hf: Any = self.module
        for name, tensor in self.module.state_dict().items():
            local = tensor.detach()
            full = _full(local.to(dtype) if local.is_floating_point() else local)
            # The checkpoint's names: fused MoE experts are split one expert per tensor.
            for saved, part in revert_weight_conversion(hf, {name: full}).items():
                yield saved, part.contiguous()

    def publishable_state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's full weights in the serving dtype, on the CPU of rank 0.

        Collective: every rank must call it. Gathered one parameter at a time
        (`iter_publishable`), so no rank ever holds a full float32 copy of the model; ranks
        other than 0 get an empty dict.
        """
        out: dict[str, torch.Tensor] = {}
        for name, full in self.iter_publishable():
            if self.env.is_main:
                out[name] = full.to("cpu", copy=True)
            del full
        return out

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's full float32 master weights on rank 0's CPU (tests; collective)."""
        out: dict[str, torch.Tensor] = {}
        for name, tensor in self.module.state_dict().items():
            full = _full(tensor.detach())
            if self.env.is_main:
                out[name] = full.to("cpu", copy=True)
        return out

    def save_pretrained(self, out_dir: str | Path) -> None:
        """Write the policy as a Hugging Face checkpoint (config.json + model.safetensors) in
        the serving dtype. Collective: every rank calls it, rank 0 writes."""
        state = self.publishable_state_dict()
        if self.env.is_main:
            write_pretrained(self.module, state, out_dir, self.config.serving_dtype)


def write_pretrained(
    model: torch.nn.Module, state: dict[str, torch.Tensor], out_dir: str | Path, dtype: str
) -> None:
    """Write `state` as `model`'s Hugging Face checkpoint, with `dtype` in its config.json
    (transformers would record the dtype of the float32 master weights instead)."""
    import json

    hf: Any = model
    hf.save_pretrained(str(out_dir), state_dict=state, safe_serialization=True)
    config_file = Path(out_dir) / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["dtype"] = dtype
    if "torch_dtype" in config:
        config["torch_dtype"] = dtype
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
