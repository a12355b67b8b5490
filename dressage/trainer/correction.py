"""Off-policy correction of the policy loss, as pure tensor functions.

The engines sample tokens under the rollout policy (possibly an older weight version, and
always a different numerical implementation); the trainer optimises its own policy. These
functions measure that mismatch and correct for it, token by token, before the loss is
reduced.

Shapes (B = sequences in the batch, T = padded response length), as in `dressage.trainer.loss`:

- `train_logprobs`    [B, T]  logprob of each sampled token under the trainer's policy at the
                              start of the step (no gradient needed: weights are constants)
- `rollout_logprobs`  [B, T]  logprob the engine reported when it sampled the token
- `loss_mask`         [B, T]  1 (or True) for trained tokens, 0 for padding, prompt, masked
- weights and masks returned are [B, T] in the logprobs' dtype, 0 outside `loss_mask`

Convention: `log_ratio = train_logprobs - rollout_logprobs` and `ratio = exp(log_ratio)`, the
importance ratio pi_train / pi_rollout of a token sampled from pi_rollout. Values at positions
outside `loss_mask` are ignored (they may be anything finite or not).

Modes (`CorrectionConfig.mode`, the job's `spec.training.offPolicyCorrection.mode`):

- `none`: every trained token has weight 1.
- `tis`: truncated importance sampling, `w = clamp(ratio, tis_clip_low, tis_clip)` (slime's
  `--use-tis`, `--tis-clip`, `--tis-clip-low`); the per-token loss is multiplied by `w`.
- `icepop`: a token whose ratio leaves `[low, high]` gets weight 0 (masked), others 1.
- `seq_mask`: a sequence whose geometric-mean ratio `exp(mean of log_ratio over its trained
  tokens)` leaves `[low, high]` is masked whole.

Metrics, over the trained tokens of the batch (before any masking):

- `mismatch_kl_k1 = mean(-log_ratio)` and `mismatch_kl_k3 = mean(ratio - 1 - log_ratio)`:
  Schulman's k1 and k3 estimators of KL(pi_rollout || pi_train), both unbiased for samples
  drawn from pi_rollout; k3 is non-negative per token, k1 can be negative on a batch.
- `clipped_fraction`: tokens whose TIS weight was truncated (0 in other modes);
  `masked_fraction`: tokens given weight 0 by `icepop` or `seq_mask`.
- `ess = (sum w)^2 / sum w^2` over trained tokens (the importance-sampling effective sample
  size; equal to `tokens` when every weight is equal) and `tokens`, the trained token count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import torch

MODES: Final = ("none", "tis", "icepop", "seq_mask")


@dataclass(frozen=True)
class CorrectionConfig:
    """Which correction to apply and its bounds (defaults match the job spec's)."""

    mode: str = "none"
    tis_clip: float = 2.0
    tis_clip_low: float = 0.0
    low: float = 0.5
    high: float = 2.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(
                f"offPolicyCorrection.mode must be one of {', '.join(MODES)}, got {self.mode!r}"
            )
        if not 0.0 <= self.tis_clip_low <= self.tis_clip:
            raise ValueError(
                "offPolicyCorrection: need 0 <= tisClipLow <= tisClip, got "
                f"tisClipLow={self.tis_clip_low}, tisClip={self.tis_clip}"
            )
        if not 0.0 < self.low <= self.high:
            raise ValueError(
                f"offPolicyCorrection: need 0 < low <= high, got low={self.low}, high={self.high}"
            )

    @classmethod
    def from_spec(cls, spec: Any) -> CorrectionConfig:
        """From the job's `spec.training.off_policy_correction` (an `OffPolicyCorrectionSpec`)."""
        return cls(
            mode=str(getattr(spec.mode, "value", spec.mode)),
            tis_clip=spec.tis_clip,
            tis_clip_low=spec.tis_clip_low,
            low=spec.low,
            high=spec.high,
        )


@dataclass(frozen=True)
class Correction:
    """The result of `off_policy_correction`."""

    weights: torch.Tensor
    """[B, T] per-token loss multiplier, detached; 0 outside the loss mask and where masked."""
    loss_mask: torch.Tensor
    """[B, T] the loss mask with masked tokens removed (same dtype as `weights`)."""
    metrics: dict[str, float]
    """`mismatch_kl_k1`, `mismatch_kl_k3`, `clipped_fraction`, `masked_fraction`, `ess`,
    `tokens` (see the module docstring)."""


def _check(
    train_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor
) -> None:
    if train_logprobs.dim() != 2:
        raise ValueError(f"train_logprobs must be [B, T], got shape {tuple(train_logprobs.shape)}")
    for name, tensor in (("rollout_logprobs", rollout_logprobs), ("loss_mask", mask)):
        if tensor.shape != train_logprobs.shape:
            raise ValueError(
                f"{name} shape {tuple(tensor.shape)} != train_logprobs "
                f"{tuple(train_logprobs.shape)}"
            )


def _mask_of(loss_mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return (loss_mask > 0).to(like.dtype)


def masked_log_ratio(
    train_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """[B, T] `train_logprobs - rollout_logprobs` on trained tokens, 0 elsewhere (detached)."""
    _check(train_logprobs, rollout_logprobs, loss_mask)
    diff = train_logprobs.detach() - rollout_logprobs.detach().to(train_logprobs.dtype)
    return torch.where(loss_mask > 0, diff, torch.zeros_like(diff))


def truncated_importance_weights(
    train_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip: float,
    clip_low: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TIS: `(weights, clipped)`, both [B, T].

    `weights = clamp(exp(log_ratio), clip_low, clip)` on trained tokens, 0 elsewhere;
    `clipped` is 1 on trained tokens whose ratio was truncated (above `clip` or below
    `clip_low`), 0 elsewhere.
    """
    mask = _mask_of(loss_mask, train_logprobs)
    ratio = torch.exp(masked_log_ratio(train_logprobs, rollout_logprobs, loss_mask))
    weights = ratio.clamp(min=clip_low, max=clip) * mask
    clipped = ((ratio > clip) | (ratio < clip_low)).to(mask.dtype) * mask
    return weights, clipped


def icepop_mask(
    train_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    low: float,
    high: float,
) -> torch.Tensor:
    """[B, T] 1 on trained tokens whose ratio lies in `[low, high]`, 0 elsewhere."""
    mask = _mask_of(loss_mask, train_logprobs)
    ratio = torch.exp(masked_log_ratio(train_logprobs, rollout_logprobs, loss_mask))
    return ((ratio >= low) & (ratio <= high)).to(mask.dtype) * mask


def sequence_geometric_mask(
    train_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    low: float,
    high: float,
) -> torch.Tensor:
    """[B, T] the loss mask of each sequence whose geometric-mean ratio lies in `[low, high]`
    (the whole row of one that does not is 0).

    The geometric mean is `exp(sum(log_ratio) / trained tokens)` per sequence; a sequence with
    no trained tokens has nothing to mask.
    """
    mask = _mask_of(loss_mask, train_logprobs)
    log_ratio = masked_log_ratio(train_logprobs, rollout_logprobs, loss_mask)
    count = mask.sum(dim=1)
    mean_log = log_ratio.sum(dim=1) / count.clamp(min=1.0)
    keep = (mean_log >= math.log(low)) & (mean_log <= math.log(high))
    return mask * keep.to(mask.dtype).unsqueeze(1)


def mismatch_kl(
    train_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, loss_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(k1, k3)` scalar estimates of KL(pi_rollout || pi_train), means over trained tokens
    (0 when there are none): `k1 = mean(-log_ratio)`, `k3 = mean(exp(log_ratio) - 1 -
    log_ratio)`. Each token's k3 term is `expm1(x) - x` clamped at 0: it is non-negative
    exactly, while `exp(x) - 1 - x` rounds to `-x` for |x| below float epsilon."""
    mask = _mask_of(loss_mask, train_logprobs)
    log_ratio = masked_log_ratio(train_logprobs, rollout_logprobs, loss_mask)
    tokens = mask.sum().clamp(min=1.0)
    k1 = (-log_ratio * mask).sum() / tokens
    k3 = ((torch.expm1(log_ratio) - log_ratio).clamp(min=0.0) * mask).sum() / tokens
    return k1, k3


def effective_sample_size(weights: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Scalar `(sum w)^2 / sum w^2` over the trained tokens of `weights` [B, T]; 0 when every
    weight is 0 or nothing is trained."""
    if weights.shape != loss_mask.shape:
        raise ValueError(
            f"loss_mask shape {tuple(loss_mask.shape)} != weights {tuple(weights.shape)}"
        )
    w = weights.detach() * _mask_of(loss_mask, weights)
    squares = (w * w).sum()
    if squares <= 0:
        return torch.zeros((), dtype=weights.dtype)
    return w.sum() ** 2 / squares


def off_policy_correction(
    config: CorrectionConfig,
    train_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
) -> Correction:
    """The per-token weights of `config.mode` and the mismatch metrics (module docstring).

    The loss applies it as `per_token_loss * correction.weights` (in place of `* loss_mask`),
    keeping its denominator (the trained tokens before correction), so masked tokens lower the
    step's gradient instead of re-weighting the rest and data-parallel normalisation is
    unchanged.
    """
    _check(train_logprobs, rollout_logprobs, loss_mask)
    mask = _mask_of(loss_mask, train_logprobs)
    clipped = torch.zeros_like(mask)
    if config.mode == "tis":
        weights, clipped = truncated_importance_weights(
            train_logprobs,
            rollout_logprobs,
            loss_mask,
            clip=config.tis_clip,
            clip_low=config.tis_clip_low,
        )
        kept = mask
    elif config.mode == "icepop":
        kept = icepop_mask(
            train_logprobs, rollout_logprobs, loss_mask, low=config.low, high=config.high
        )
        weights = kept
    elif config.mode == "seq_mask":
        kept = sequence_geometric_mask(
            train_logprobs, rollout_logprobs, loss_mask, low=config.low, high=config.high
        )
        weights = kept
    else:
        kept = mask
        weights = mask
    k1, k3 = mismatch_kl(train_logprobs, rollout_logprobs, loss_mask)
    tokens = mask.sum()
    denominator = tokens.clamp(min=1.0)
    metrics = {
        "mismatch_kl_k1": float(k1),
        "mismatch_kl_k3": float(k3),
        "clipped_fraction": float(clipped.sum() / denominator),
        "masked_fraction": float((mask - kept).sum() / denominator),
        "ess": float(effective_sample_size(weights, loss_mask)),
        "tokens": float(tokens),
    }
    return Correction(weights=weights.detach(), loss_mask=kept.detach(), metrics=metrics)
