"""Token sampling with the logprob of the distribution actually sampled from.

RL needs the behaviour policy's probability of each generated token. So the returned logprob is
taken after temperature, top-k, top-p and min-p (renormalised over the kept tokens), exactly the
distribution `torch.multinomial` drew from. Greedy decoding (temperature 0) returns the
log-softmax of the raw logits. Each request draws from its own seeded `torch.Generator`, so its
tokens do not depend on which other requests share the batch.
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch

GREEDY_EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class SamplingSpec:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_EPS


def request_seed(engine_seed: int, sampling_seed: int | None, counter: int) -> int:
    """Seed of one request's generator: from the request's `sampling_seed` when given (so the
    same request reproduces regardless of arrival order), else from its arrival counter."""
    key = f"{engine_seed}:seed:{sampling_seed}" if sampling_seed is not None else None
    key = key or f"{engine_seed}:arrival:{counter}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & (2**63 - 1)


def filtered_logprobs(logits: torch.Tensor, spec: SamplingSpec) -> torch.Tensor:
    """Log-probabilities `[vocab]` of the sampling distribution (-inf for removed tokens)."""
    if spec.greedy:
        return torch.log_softmax(logits.float(), dim=-1)
    scaled = logits.float() / spec.temperature
    if 0 < spec.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, spec.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if spec.top_p < 1.0:
        probs = torch.softmax(scaled, dim=-1)
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop_sorted = before >= spec.top_p  # keep the smallest prefix reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    if spec.min_p > 0.0:
        probs = torch.softmax(scaled, dim=-1)
        scaled = scaled.masked_fill(probs < spec.min_p * probs.max(), float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def sample(
    logits: torch.Tensor, spec: SamplingSpec, generator: torch.Generator
) -> tuple[int, float]:
    """Draw one token from `logits` `[vocab]`; return it and its logprob under the distribution
    it was drawn from."""
    logprobs = filtered_logprobs(logits, spec)
    if spec.greedy:
        token = int(torch.argmax(logprobs))
    else:
        token = int(torch.multinomial(logprobs.exp(), 1, generator=generator))
    return token, float(logprobs[token])
