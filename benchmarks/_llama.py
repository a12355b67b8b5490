"""Random-initialised Llama-shaped models and synthetic batches for the trainer benchmarks.

`gpu_check.py` and `trainer_memory.py` measure the trainer on models far larger than the tiny
one, so they build them from a `transformers.LlamaConfig` with random weights (no download),
and train them on random token sequences. Imports of torch and transformers happen on use, so a
benchmark's `--help` stays fast.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Mapping
from typing import Any


def random_llama(shape: Mapping[str, Any], *, seed: int = 0, device: Any = None) -> Any:
    """A `LlamaForCausalLM` of `shape` (`LlamaConfig` fields), seeded, built on `device`
    (default: torch's current default device) and in training mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    with torch.device(device) if device is not None else contextlib.nullcontext():
        model = LlamaForCausalLM(LlamaConfig(**shape))
    model.train()
    return model


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def synthetic_batch(groups: int, group_size: int, length: int, vocab: int, seed: int = 0) -> Any:
    """A `TrainBatch` of `groups` groups of `group_size` random sequences of `length` tokens
    (a quarter prompt), with alternating rewards (so every group has non-zero advantages) and
    the rollout logprobs of a uniform policy."""
    from dressage.data.groups import Group, TrainBatch
    from dressage.data.samples import Sample

    rng = random.Random(seed)
    uniform = -math.log(vocab)
    out = []
    for g in range(groups):
        prompt = [rng.randrange(8, vocab) for _ in range(max(1, length // 4))]
        members = []
        for i in range(group_size):
            response = [rng.randrange(8, vocab) for _ in range(length - len(prompt))]
            members.append(
                Sample.build(
                    prompt_tokens=prompt,
                    response_tokens=response,
                    response_versions=["v0"] * len(response),
                    rollout_log_probs=[uniform] * len(response),
                    reward=float(i % 2),
                    group_id=f"g{g}",
                    parent_traj_id=f"g{g}-{i}",
                )
            )
        out.append(Group(f"g{g}", tuple(members)))
    return TrainBatch(groups=tuple(out))
