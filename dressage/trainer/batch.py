"""From `TrainBatch` to padded tensors: token alignment, loss masks, advantages, sharding.

A causal LM's logits at position t predict token t+1, so every per-token tensor here is on the
*shifted* axis of length `L - 1` (L = longest sample): entry t describes token `tokens[t + 1]`.
A sample's response is its last `response_length` tokens; only response tokens with loss mask 1
are trained. Padding is on the right and never trained.

A worker's shard is cut into micro-batches bounded by a token budget (`micro_batches`); the
gradients of its micro-batches accumulate into one optimizer step.

Routed experts (MoE routing replay) are on the *unshifted* axis: entry `[b, t]` holds the
experts the rollout routed token `t` of sample `b` to, in each layer (-1 where it did not).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from dressage.data.groups import TrainBatch
from dressage.data.samples import Sample, mask_nonlast_version_tokens
from dressage.trainer.loss import group_advantages
from dressage.trainer.routing_replay import RouteShape


@dataclass(frozen=True)
class ScoredSample:
    """A sample with its GRPO advantage."""

    sample: Sample
    advantage: float


@dataclass(frozen=True)
class BatchTensors:
    """Padded model inputs and per-token training tensors (shifted axis, see module doc)."""

    input_ids: torch.Tensor
    """[B, L] token ids, right-padded with `pad_id`."""
    attention_mask: torch.Tensor
    """[B, L] 1 for real tokens."""
    targets: torch.Tensor
    """[B, L-1] the token each position predicts (`input_ids[:, 1:]`)."""
    loss_mask: torch.Tensor
    """[B, L-1] float, 1 where the predicted token is a trained response token."""
    rollout_logprobs: torch.Tensor
    """[B, L-1] rollout logprob of the predicted token (0 where not trained)."""
    advantages: torch.Tensor
    """[B] advantage of each sequence."""
    routed_experts: torch.Tensor | None = None
    """[B, L, num_layers, top_k] the rollout's experts of each token (-1: not routed); None
    when no route shape was given."""


def score_batch(batch: TrainBatch, *, mask_nonlast_version: bool = False) -> list[ScoredSample]:
    """Group-normalised advantages for every sample, optionally masking non-last versions.

    Advantages are computed per group over the whole group before any sharding, so every
    data-parallel worker sees the same statistics.
    """
    advantages = group_advantages([g.rewards() for g in batch.groups])
    scored: list[ScoredSample] = []
    for group, group_adv in zip(batch.groups, advantages, strict=True):
        for sample, adv in zip(group.samples, group_adv, strict=True):
            s = mask_nonlast_version_tokens(sample) if mask_nonlast_version else sample
            scored.append(ScoredSample(s, adv))
    return scored


def shard(scored: Sequence[ScoredSample], rank: int, world_size: int) -> list[ScoredSample]:
    """This worker's share of the batch: every `world_size`-th sample starting at `rank`.

    A worker left without samples gets a copy of the first one with an all-zero loss mask, so
    it still joins the gradient all-reduce but contributes nothing.
    """
    if not scored:
        raise ValueError("cannot shard an empty batch")
    mine = list(scored[rank::world_size])
    return mine or [muted(scored[0])]


def muted(item: ScoredSample) -> ScoredSample:
    """A copy of `item` that trains nothing (all-zero loss mask, advantage 0).

    A data-parallel worker runs it when it has less work than the others, so that every rank
    takes part in the same number of forward and backward passes (each is a collective).
    """
    sample = replace(item.sample, loss_mask=(0,) * item.sample.response_length)
    return ScoredSample(sample, 0.0)


def micro_batches(scored: Sequence[ScoredSample], max_tokens: int) -> list[list[ScoredSample]]:
    """Split `scored` into micro-batches of at most `max_tokens` padded tokens each.

    Samples are taken longest first, so each micro-batch holds samples of similar length and
    little padding. A sample longer than the budget gets a micro-batch of its own (a sample
    is never split). Every sample lands in exactly one micro-batch; because the loss of each
    is normalised by the whole batch's trained tokens, their summed gradients equal the
    gradient of the whole batch.
    """
    if max_tokens < 1:
        raise ValueError(f"maxTokensPerMicroBatch must be >= 1, got {max_tokens}")
    ordered = sorted(scored, key=lambda s: len(s.sample.tokens), reverse=True)
    out: list[list[ScoredSample]] = []
    current: list[ScoredSample] = []
    for item in ordered:
        if current and (len(current) + 1) * len(current[0].sample.tokens) > max_tokens:
            out.append(current)
            current = []
        current.append(item)
    if current:
        out.append(current)
    return out


def trained_token_count(scored: Sequence[ScoredSample]) -> int:
    """Trained tokens over `scored` (the token-level mean's denominator)."""
    return sum(sum(s.sample.loss_mask) for s in scored)


def rollout_routes(scored: Sequence[ScoredSample], length: int, shape: RouteShape) -> torch.Tensor:
    """The rollout's routed experts of `scored` padded to `length` tokens (-1 where a sample
    has none); ValueError naming the sample whose rows do not split into `shape`."""
    routes = torch.full((len(scored), length, shape.num_layers, shape.top_k), -1, dtype=torch.long)
    for i, item in enumerate(scored):
        recorded = item.sample.routed_experts
        if recorded is None or recorded.rows == 0:
            continue
        if recorded.width != shape.width:
            raise ValueError(
                f"sample {item.sample.parent_traj_id!r} (segment {item.sample.segment_index}): "
                f"routed_experts rows hold {recorded.width} experts, the model routes "
                f"{shape.num_layers} layers x top-{shape.top_k} = {shape.width}"
            )
        rows = torch.frombuffer(bytearray(recorded.data), dtype=torch.int32)
        routes[i, : recorded.rows] = rows.view(recorded.rows, shape.num_layers, shape.top_k)
    return routes


def to_tensors(
    scored: Sequence[ScoredSample], pad_id: int, route_shape: RouteShape | None = None
) -> BatchTensors:
    """Pad and align `scored` into `BatchTensors` (with the rollout's routed experts when
    `route_shape` is given)."""
    if not scored:
        raise ValueError("cannot build tensors from an empty batch")
    length = max(len(s.sample.tokens) for s in scored)
    if length < 2:
        raise ValueError("every batch needs a sample of at least two tokens")
    b = len(scored)
    input_ids = torch.full((b, length), pad_id, dtype=torch.long)
    attention = torch.zeros((b, length), dtype=torch.long)
    loss_mask = torch.zeros((b, length - 1), dtype=torch.float32)
    rollout = torch.zeros((b, length - 1), dtype=torch.float32)
    for i, item in enumerate(scored):
        s = item.sample
        n = len(s.tokens)
        input_ids[i, :n] = torch.tensor(s.tokens, dtype=torch.long)
        attention[i, :n] = 1
        # Response token j sits at position prompt_length + j and is predicted at that - 1.
        start = s.prompt_length - 1
        if s.response_length and start < 0:
            raise ValueError("a sample needs at least one prompt token before its response")
        for j in range(s.response_length):
            loss_mask[i, start + j] = float(s.loss_mask[j])
            rollout[i, start + j] = s.rollout_log_probs[j] if s.loss_mask[j] else 0.0
    return BatchTensors(
        input_ids=input_ids,
        attention_mask=attention,
        targets=input_ids[:, 1:],
        loss_mask=loss_mask,
        rollout_logprobs=rollout,
        advantages=torch.tensor([s.advantage for s in scored], dtype=torch.float32),
        routed_experts=None if route_shape is None else rollout_routes(scored, length, route_shape),
    )
