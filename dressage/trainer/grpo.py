"""One GRPO optimizer step on a causal LM, data-parallel over the trainer gang.

Every rank holds the whole `TrainBatch` (rank 0 collects it and broadcasts it), computes the
same group advantages, trains on its shard, and DDP all-reduces the gradients. The loss of each
shard is divided by the trained tokens of the *whole* batch and multiplied by the world size
(DDP averages gradients), so the update equals a single worker's update on the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from dressage.data.groups import TrainBatch
from dressage.data.samples import version_span_stats
from dressage.trainer.batch import score_batch, shard, to_tensors, trained_token_count
from dressage.trainer.distributed import DistEnv, all_reduce_sum
from dressage.trainer.loss import LossInputs, grpo_loss, token_logprobs_and_entropy

REWARD = "reward"
LOGPROB_ABS_DIFF = "train_rollout_logprob_abs_diff"
ENTROPY = "entropy"
CLIP_FRACTION = "clip_fraction"
LOSS = "loss"
GRAD_NORM = "grad_norm"


@dataclass(frozen=True)
class TrainerConfig:
    """Optimisation settings (from the job's `spec.training` and `spec.proxy`)."""

    learning_rate: float = 1e-5
    clip_epsilon: float = 0.2
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    mask_nonlast_version_tokens: bool = False


def quiet_transformers() -> None:
    """Turn off transformers' progress bars (one per checkpoint load and save) on stderr."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def load_policy(model_dir: str | Path, device: torch.device) -> torch.nn.Module:
    """A Hugging Face causal LM from a checkpoint directory, float32, in train mode."""
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


class GRPOTrainer:
    """Owns the policy, its optimizer and the GRPO update (no I/O, no versions)."""

    def __init__(
        self,
        model: torch.nn.Module,
        config: TrainerConfig,
        env: DistEnv | None = None,
        device: torch.device | None = None,
    ) -> None:
        self.env = env or DistEnv()
        self.device = device or torch.device("cpu")
        self.config = config
        self.module = model
        self.model: torch.nn.Module = (
            DistributedDataParallel(
                model, device_ids=[self.device] if self.device.type == "cuda" else None
            )
            if self.env.distributed
            else model
        )
        self.optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=config.learning_rate,
            weight_decay=config.weight_decay,
        )
        self.pad_id = pad_token_id(model)

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step on `batch`; returns this step's figures (same on every rank)."""
        if not batch.groups:
            raise ValueError("train_step needs a batch with at least one group")
        scored = score_batch(batch, mask_nonlast_version=self.config.mask_nonlast_version_tokens)
        global_tokens = trained_token_count(scored)
        mine = shard(scored, self.env.rank, self.env.world_size)
        tensors = to_tensors(mine, self.pad_id)

        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        input_ids = tensors.input_ids.to(self.device)
        logits = self.model(
            input_ids=input_ids, attention_mask=tensors.attention_mask.to(self.device)
        ).logits[:, :-1]
        logprobs, entropy = token_logprobs_and_entropy(logits, tensors.targets.to(self.device))
        mask = tensors.loss_mask.to(self.device)
        out = grpo_loss(
            LossInputs(
                logprobs=logprobs,
                rollout_logprobs=tensors.rollout_logprobs.to(self.device),
                advantages=tensors.advantages.to(self.device),
                loss_mask=mask,
                clip_epsilon=self.config.clip_epsilon,
                loss_denominator=float(global_tokens),
            )
        )
        (out.loss * self.env.world_size).backward()  # type: ignore[no-untyped-call]
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.module.parameters(), self.config.max_grad_norm
        )
        self.optimizer.step()

        # Token-weighted sums, reduced over ranks, give the whole batch's means.
        local_tokens = out.trained_tokens
        sums = torch.stack(
            [
                out.loss.detach(),
                out.logprob_abs_diff * local_tokens,
                out.clip_fraction * local_tokens,
                (entropy * mask).sum(),
                local_tokens,
            ]
        ).to(torch.float64)
        loss_sum, diff_sum, clip_sum, entropy_sum, tokens = all_reduce_sum(sums, self.env).tolist()
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
            "samples": float(len(scored)),
            "groups": float(len(batch.groups)),
        }
        metrics.update(version_span_stats(batch.samples))
        return metrics

    def save_pretrained(self, out_dir: str | Path) -> None:
        """Write the policy as a Hugging Face checkpoint (config.json + model.safetensors)."""
        save: Any = self.module
        save.save_pretrained(str(out_dir), safe_serialization=True)
