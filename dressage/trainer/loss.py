"""GRPO loss: group-normalised advantages and a clipped importance ratio, as pure tensor math.

Shapes (B = sequences in the batch, T = padded response length):

- `logprobs`          [B, T]  log pi_theta(token) under the policy being trained
- `rollout_logprobs`  [B, T]  logprob the engine reported when it sampled the token
- `advantages`        [B]     one advantage per sequence, broadcast over its tokens
- `loss_mask`         [B, T]  1 for trained tokens, 0 for padding, prompt or masked tokens

The objective is PPO's clipped surrogate with the rollout logprobs as the behaviour policy:
`ratio = exp(logprobs - rollout_logprobs)`, per-token loss
`-min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)`, averaged over all trained tokens of the
batch (token-level mean, so long responses weigh by their length). `loss_denominator` lets a
data-parallel worker normalise by the trained tokens of the *global* batch so that summing
gradients over workers gives the same update as one worker on the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint


def group_advantages(rewards: Sequence[Sequence[float]], eps: float = 1e-6) -> list[list[float]]:
    """GRPO advantages: `(r - mean(group)) / (std(group) + eps)` within each prompt group.

    `std` is the population standard deviation. A group whose rewards are all equal (std 0,
    including a group of one) gets advantage 0 for every member: it carries no preference
    between its samples, so it contributes no policy gradient (only its tokens count in the
    token-level mean's denominator).
    """
    out: list[list[float]] = []
    for group in rewards:
        n = len(group)
        if n == 0:
            out.append([])
            continue
        mean = sum(group) / n
        std = (sum((r - mean) ** 2 for r in group) / n) ** 0.5
        if std == 0.0:
            out.append([0.0] * n)
        else:
            out.append([(r - mean) / (std + eps) for r in group])
    return out


@dataclass(frozen=True)
class LossInputs:
    """Inputs of `grpo_loss` (shapes in the module docstring)."""

    logprobs: torch.Tensor
    rollout_logprobs: torch.Tensor
    advantages: torch.Tensor
    loss_mask: torch.Tensor
    clip_epsilon: float = 0.2
    loss_denominator: float | None = None
    """Trained tokens to divide by; None uses this batch's own `loss_mask.sum()`."""
    token_weights: torch.Tensor | None = None
    """[B, T] detached per-token multipliers of the surrogate, 0 wherever `loss_mask` is 0
    (off-policy correction, `dressage.trainer.correction`); None weighs every trained token 1.
    The denominator and the diagnostics stay those of `loss_mask`."""


@dataclass(frozen=True)
class LossOutputs:
    """Outputs of `grpo_loss`. Only `loss` carries gradient; the rest are detached figures."""

    loss: torch.Tensor
    """Scalar: clipped surrogate loss, token-level mean over trained tokens."""
    clip_fraction: torch.Tensor
    """Fraction of trained tokens where the clipped term was the active (smaller) one."""
    logprob_abs_diff: torch.Tensor
    """`train_rollout_logprob_abs_diff`: mean |logprobs - rollout_logprobs| over trained tokens."""
    trained_tokens: torch.Tensor
    """Number of trained tokens (sum of the mask)."""


def _check_shapes(inputs: LossInputs) -> None:
    lp, rlp, adv, mask = (
        inputs.logprobs,
        inputs.rollout_logprobs,
        inputs.advantages,
        inputs.loss_mask,
    )
    if lp.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(lp.shape)}")
    if rlp.shape != lp.shape:
        raise ValueError(f"rollout_logprobs shape {tuple(rlp.shape)} != logprobs {tuple(lp.shape)}")
    if mask.shape != lp.shape:
        raise ValueError(f"loss_mask shape {tuple(mask.shape)} != logprobs {tuple(lp.shape)}")
    if adv.shape != lp.shape[:1]:
        raise ValueError(f"advantages must be [B]={lp.shape[0]}, got shape {tuple(adv.shape)}")


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where `mask` is 1; 0 when the mask is empty."""
    total = mask.sum()
    return (values * mask).sum() / total.clamp(min=1.0)


def grpo_loss(inputs: LossInputs) -> LossOutputs:
    """The clipped GRPO surrogate loss and its diagnostics (see the module docstring)."""
    _check_shapes(inputs)
    mask = inputs.loss_mask.to(inputs.logprobs.dtype)
    rollout = inputs.rollout_logprobs.to(inputs.logprobs.dtype)
    eps = inputs.clip_epsilon
    # Masked positions may hold arbitrary rollout values (padding); zero the log-ratio there
    # so exp() cannot overflow into NaN gradients.
    log_ratio = torch.where(mask > 0, inputs.logprobs - rollout, torch.zeros_like(rollout))
    ratio = torch.exp(log_ratio)
    adv = inputs.advantages.to(inputs.logprobs.dtype).unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - eps, 1.0 + eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    trained = mask.sum()
    denominator = (
        trained.clamp(min=1.0)
        if inputs.loss_denominator is None
        else torch.tensor(max(inputs.loss_denominator, 1.0), dtype=mask.dtype)
    )
    weights = mask if inputs.token_weights is None else inputs.token_weights.to(mask.dtype)
    loss = (per_token * weights).sum() / denominator
    with torch.no_grad():
        clip_active = (clipped < unclipped).to(mask.dtype)
        clip_fraction = masked_mean(clip_active, mask)
        abs_diff = masked_mean((inputs.logprobs - rollout).abs(), mask)
    return LossOutputs(
        loss=loss,
        clip_fraction=clip_fraction,
        logprob_abs_diff=abs_diff,
        trained_tokens=trained.detach(),
    )


def token_logprobs_and_entropy(
    logits: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probability of `targets` and the entropy of the predicted distribution.

    `logits` [B, T, V] predicts `targets` [B, T] position by position (already shifted by the
    caller). Returns `(logprobs [B, T], entropy [B, T])`; entropy is detached (a diagnostic).
    """
    log_softmax = torch.log_softmax(logits.float(), dim=-1)
    logprobs = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    return logprobs, entropy


def chunked_token_logprobs_and_entropy(
    hidden: torch.Tensor,
    output_layer: Callable[[torch.Tensor], torch.Tensor],
    targets: torch.Tensor,
    chunk_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs_and_entropy(output_layer(hidden), targets)`, a chunk of tokens at a time.

    `hidden` [B, T, H] are the final hidden states, `output_layer` maps `[N, H]` to vocabulary
    logits `[N, V]` (the LM head), `targets` [B, T]. The B*T positions are flattened and
    processed `chunk_tokens` at a time, so at most `chunk_tokens x V` float32 logits exist at
    once. When gradients are needed each chunk is recomputed in the backward pass
    (activation checkpointing), so the saved activations are the hidden states, not the
    `B x T x V` log-softmax. Same results as the unchunked function up to float rounding.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if hidden.dim() != 3 or targets.shape != hidden.shape[:2]:
        raise ValueError(
            f"hidden must be [B, T, H] and targets [B, T], got {tuple(hidden.shape)} and "
            f"{tuple(targets.shape)}"
        )
    b, t, h = hidden.shape
    flat = hidden.reshape(b * t, h)
    flat_targets = targets.reshape(b * t)

    def one_chunk(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_softmax = torch.log_softmax(output_layer(x).float(), dim=-1)
        logprobs = log_softmax.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            entropy = -(log_softmax.exp() * log_softmax).sum(-1)
        return logprobs, entropy

    recompute = torch.is_grad_enabled()
    logprobs: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    for start in range(0, b * t, chunk_tokens):
        x = flat[start : start + chunk_tokens]
        y = flat_targets[start : start + chunk_tokens]
        if recompute:
            lp, ent = checkpoint(one_chunk, x, y, use_reentrant=False)
        else:
            lp, ent = one_chunk(x, y)
        logprobs.append(lp)
        entropies.append(ent.detach())
    if not logprobs:
        empty = hidden.new_zeros((b, t), dtype=torch.float32)
        return empty, empty
    return torch.cat(logprobs).reshape(b, t), torch.cat(entropies).reshape(b, t)
