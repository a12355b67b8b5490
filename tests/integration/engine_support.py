"""Helpers shared by the engine integration tests (reference decoding, request builders)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from dressage.engine import EngineClient, GenerateRequest, GenerateResponse, SamplingParams
from dressage.engine.embedded.model import Decoder, KVCache, ModelWeights
from dressage.model import BUILTIN_TINY, resolve_model_source

LONG = 1500
"""Output tokens of a generation that is still running when a test acts on it."""
PACE_MS = 2.0
"""`min_step_interval_ms` of an engine whose tests act on a running generation: each token
takes at least this long, so a LONG generation lasts at least 3 s however fast or loaded the
machine is, far longer than the few loopback HTTP calls a test makes before it acts."""


def make_uniform_checkpoint(cache_dir: Path) -> Path:
    """The tiny model with its final norm zeroed: every logit is 0, so greedy decoding emits
    token 0 with logprob -log(vocab). Tokens from these weights are recognisable."""
    source = resolve_model_source(BUILTIN_TINY, cache_dir)
    target = cache_dir / "uniform"
    target.mkdir(exist_ok=True)
    for item in source.iterdir():
        if item.name != "model.safetensors":
            (target / item.name).write_bytes(item.read_bytes())
    tensors = load_file(str(source / "model.safetensors"))
    tensors["model.norm.weight"] = torch.zeros_like(tensors["model.norm.weight"])
    save_file(tensors, str(target / "model.safetensors"))
    return target


def greedy_reference(weights: ModelWeights, prompt: list[int], n: int) -> list[int]:
    """The first `n` greedy tokens after `prompt`, decoded alone in this process."""
    decoder = Decoder(weights.shape, len(prompt) + n)
    cache = KVCache(weights.shape, 1, len(prompt) + n)
    logits = decoder.prefill(weights, cache, 0, prompt)[-1]
    out: list[int] = []
    for _ in range(n):
        out.append(int(torch.argmax(logits)))
        logits = decoder.decode(weights, cache, [0], [out[-1]], [len(prompt) + len(out) - 1])[0]
    return out


def greedy(prompt: list[int], n: int, **extra: object) -> GenerateRequest:
    params = SamplingParams(max_new_tokens=n, temperature=0.0, ignore_eos=True)
    return GenerateRequest(input_ids=prompt, sampling_params=params, **extra)  # type: ignore[arg-type]


def prompt_for(i: int) -> list[int]:
    """A distinct chat-like prompt per `i` (lengths 7 to 11)."""
    return [5, *(10 + (i * 7 + j) % 90 for j in range(3 + i % 5)), 2, 6]


async def stream_until(
    client: EngineClient, req: GenerateRequest, tokens: int
) -> tuple[asyncio.Task[GenerateResponse], asyncio.Event]:
    """Run a streaming generation in a task; the event is set once `tokens` tokens arrived."""
    reached = asyncio.Event()

    async def run() -> GenerateResponse:
        last = None
        async for snapshot in client.generate_stream(req):
            last = snapshot
            if len(snapshot.output_ids) >= tokens:
                reached.set()
        assert last is not None
        reached.set()
        return last

    return asyncio.create_task(run()), reached
