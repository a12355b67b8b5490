"""The embedded engine answers `return_routed_experts` as SGLang does (`meta_info.routed_experts`,
base64 int32 `[prompt + output - 1 - routed_experts_start_len, layers, top_k]`; SGLang 0.5.23
`managers/scheduler_components/batch_result_processor.py` `_maybe_collect_routed_experts`,
`managers/detokenizer_manager.py` `_b64_encode_per_request`), for batched, aborted and
retracted requests alike.

Reference routes come from the same checkpoint's full forward in the test process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from dressage_testkit.engine import EngineProcess, start_engine

from dressage.data.expert_routing import RoutedExperts
from dressage.engine import EngineClient, GenerateRequest, GenerateResponse, SamplingParams
from dressage.engine.embedded.model import ModelWeights, full_logits, load_weights, new_routes
from dressage.model import BUILTIN_TINY_MOE, resolve_model_source
from tests.integration.engine_support import LONG, PACE_MS, prompt_for

pytestmark = pytest.mark.integration
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def moe_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("moe-cache")
    resolve_model_source(BUILTIN_TINY_MOE, path)
    return path


@pytest.fixture(scope="module")
def moe_weights(moe_cache: Path) -> ModelWeights:
    return load_weights(resolve_model_source(BUILTIN_TINY_MOE, moe_cache))


@pytest.fixture(scope="module")
def engine(moe_cache: Path) -> Iterator[EngineProcess]:
    with start_engine(
        model=BUILTIN_TINY_MOE, cache_dir=moe_cache, min_step_interval_ms=PACE_MS
    ) as process:
        yield process


def _request(prompt: list[int], n: int, **extra: object) -> GenerateRequest:
    params = SamplingParams(max_new_tokens=n, temperature=1.0, ignore_eos=True)
    return GenerateRequest(
        input_ids=prompt,
        sampling_params=params,
        return_logprob=True,
        return_routed_experts=True,
        **extra,  # type: ignore[arg-type]
    )


def _reference(weights: ModelWeights, tokens: list[int]) -> list[int]:
    """The experts of every token of `tokens` in a full forward, flattened row-major."""
    routes = new_routes(weights.shape, len(tokens))
    full_logits(weights, tokens, routes)
    return [int(v) for v in routes.flatten().tolist()]


def _routes(out: GenerateResponse, start_len: int = 0) -> RoutedExperts:
    routes = out.routed_experts(start_len)
    assert routes is not None
    return routes


async def test_routes_cover_every_forwarded_token_of_batched_requests(
    engine: EngineProcess, moe_weights: ModelWeights
) -> None:
    shape = moe_weights.shape
    assert shape.moe is not None
    width = shape.num_layers * shape.moe.top_k
    prompts = [prompt_for(i) for i in range(4)]
    async with EngineClient(engine.base_url) as client:
        outs = await asyncio.gather(
            *(client.generate(_request(p, 6 + i)) for i, p in enumerate(prompts))
        )
    for prompt, out in zip(prompts, outs, strict=True):
        routes = _routes(out)
        assert (routes.rows, routes.width) == (len(prompt) + len(out.output_ids) - 1, width)
        forwarded = prompt + out.output_ids[:-1]
        assert routes.values() == _reference(moe_weights, forwarded)


async def test_start_len_cuts_the_prompts_first_tokens(
    engine: EngineProcess, moe_weights: ModelWeights
) -> None:
    prompt = prompt_for(3)
    async with EngineClient(engine.base_url) as client:
        out = await client.generate(_request(prompt, 5, routed_experts_start_len=4))
    routes = _routes(out, start_len=4)
    assert routes.rows == len(prompt) + 5 - 1 - 4
    width = routes.width
    assert routes.values() == _reference(moe_weights, prompt + out.output_ids[:-1])[4 * width :]


async def test_an_aborted_generation_returns_the_routes_of_its_tokens_so_far(
    engine: EngineProcess, moe_weights: ModelWeights
) -> None:
    prompt = prompt_for(2)
    async with EngineClient(engine.base_url) as client:
        task = asyncio.create_task(client.generate(_request(prompt, LONG, rid="long")))
        while not task.done():
            await asyncio.sleep(0.05)
            await client.abort_request(rid="long")
        out = task.result()
    assert out.aborted
    routes = _routes(out)
    assert routes.rows == len(prompt) + len(out.output_ids) - 1
    assert routes.values() == _reference(moe_weights, prompt + out.output_ids[:-1])


async def test_without_the_flag_no_routes_are_sent(engine: EngineProcess) -> None:
    params = SamplingParams(max_new_tokens=3)
    async with EngineClient(engine.base_url) as client:
        out = await client.generate(
            GenerateRequest(input_ids=prompt_for(0), sampling_params=params)
        )
    assert out.meta_info.routed_experts is None
    assert out.routed_experts() is None


async def test_a_retracted_generation_keeps_one_route_per_token(
    engine: EngineProcess, moe_weights: ModelWeights
) -> None:
    """A retract frees the KV cache; continuing recomputes the prompt and output so far, whose
    routes replace the first ones (SGLang keeps the routing its final KV cache was made with)."""
    prompt = prompt_for(4)
    async with EngineClient(engine.base_url) as client:
        task = asyncio.create_task(client.generate(_request(prompt, LONG, rid="retracted")))
        await client.pause_generation("retract")
        await client.continue_generation()
        await client.pause_generation("retract")
        await client.continue_generation()
        while not task.done():
            await asyncio.sleep(0.05)
            await client.abort_request(rid="retracted")
        out = task.result()
    routes = _routes(out)
    assert routes.rows == len(prompt) + len(out.output_ids) - 1
    assert routes.values() == _reference(moe_weights, prompt + out.output_ids[:-1])
