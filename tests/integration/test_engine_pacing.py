"""`dressage engine serve --min-step-interval-ms`: decode pacing bounds the token rate from
above without changing the tokens, and commands never wait out the interval."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import torch
from dressage_testkit.engine import start_engine

from dressage.engine import EngineClient
from dressage.engine.embedded.model import load_weights
from dressage.engine.embedded.release_profiles import ReleaseProfile
from dressage.model import BUILTIN_TINY, resolve_model_source
from tests.integration.engine_support import greedy, greedy_reference, prompt_for, stream_until

pytestmark = pytest.mark.integration
torch.set_num_threads(1)


async def test_pacing_bounds_the_token_rate_and_keeps_the_tokens(cache_dir: Path) -> None:
    interval_ms, n = 25.0, 16
    weights = load_weights(resolve_model_source(BUILTIN_TINY, cache_dir))
    prompts = [prompt_for(i) for i in range(3)]
    with start_engine(cache_dir=cache_dir, min_step_interval_ms=interval_ms) as engine:
        async with EngineClient(engine.base_url) as client:
            started = time.monotonic()
            outs = await asyncio.gather(*(client.generate(greedy(p, n)) for p in prompts))
            elapsed = time.monotonic() - started
    # The first token comes with the prefill step; each later one needs a step of its own.
    floor_s = (n - 1) * interval_ms / 1000
    assert elapsed >= floor_s
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.meta_info.e2e_latency is not None
        assert out.meta_info.e2e_latency >= floor_s
        assert out.output_ids == greedy_reference(weights, prompt, n)


async def test_commands_do_not_wait_for_the_next_paced_step(
    cache_dir: Path, engine_profile: ReleaseProfile
) -> None:
    # One step a minute: the first token comes at once (prefill), the next not for 60 s. A
    # pause, a weight update (paused: it need not wait for the running generation) and an
    # abort must land meanwhile, well within the 20 s allowed each.
    with start_engine(
        cache_dir=cache_dir, min_step_interval_ms=60_000, sglang_release=engine_profile.release
    ) as engine:
        async with EngineClient(engine.base_url) as client:
            task, reached = await stream_until(client, greedy(prompt_for(1), 50, rid="slow"), 1)
            await asyncio.wait_for(reached.wait(), 20)
            mode = "in_place" if engine_profile.pause_modes else "abort"
            await asyncio.wait_for(client.pause_generation(mode), 20)
            checkpoint = str(resolve_model_source(BUILTIN_TINY, cache_dir))
            await asyncio.wait_for(client.update_weights_from_disk(checkpoint, "v1"), 20)
            assert await client.get_weight_version() == "v1"
            await asyncio.wait_for(client.abort_request(rid="slow"), 20)
            out = await asyncio.wait_for(task, 20)
            await client.continue_generation()
    assert out.aborted
    assert out.token_versions() == ["v0"]
