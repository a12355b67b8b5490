"""The embedded engine's weight updates, version spans, pause/continue, readiness and seeding,
each against an engine process of its own."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from dressage.engine import (
    EngineClient,
    EngineUnavailable,
    GenerateRequest,
    GenerateResponse,
    SamplingParams,
)
from dressage.engine.model import ModelWeights
from dressage.engine.testing import EngineProcess, start_engine
from dressage.model import BUILTIN_TINY
from tests.integration.engine_support import (
    LONG,
    greedy,
    greedy_reference,
    make_uniform_checkpoint,
    prompt_for,
    stream_until,
)

pytestmark = pytest.mark.integration
torch.set_num_threads(1)

PACE_MS = 5.0
"""Decode pacing of `fresh_engine`: every test here acts on a generation while it runs (weight
update, pause), so each token takes at least 5 ms; a test's generation of N tokens therefore
lasts at least N * 5 ms however loaded the machine is, which the token counts below rely on."""


@pytest.fixture(scope="module")
def uniform_checkpoint(cache_dir: Path) -> Path:
    return make_uniform_checkpoint(cache_dir)


@pytest.fixture
def fresh_engine(cache_dir: Path) -> Iterator[EngineProcess]:
    with start_engine(
        cache_dir=cache_dir, weight_version="v0", min_step_interval_ms=PACE_MS
    ) as process:
        yield process


async def test_weight_update_mid_generation_splits_versions_at_the_swap(
    fresh_engine: EngineProcess, weights: ModelWeights, uniform_checkpoint: Path
) -> None:
    prompt = prompt_for(5)
    vocab = weights.shape.vocab_size
    # LONG tokens take >= 7.5 s: the update and 20 more tokens land well before the end.
    async with EngineClient(fresh_engine.base_url) as client:
        updated = asyncio.Event()
        after_update: list[GenerateResponse] = []

        async def watch() -> GenerateResponse:
            last = None
            async for snapshot in client.generate_stream(
                greedy(prompt, LONG, rid="long", return_logprob=True)
            ):
                last = snapshot
                if len(snapshot.output_ids) >= 10:
                    updated.set()
                if snapshot.token_versions()[-1] == "v1":
                    after_update.append(snapshot)
                    if len(after_update) == 20:
                        await client.abort_request(rid="long")
            assert last is not None
            return last

        task = asyncio.create_task(watch())
        await asyncio.wait_for(updated.wait(), 60)
        result = await client.update_weights_from_disk(str(uniform_checkpoint), "v1")
        assert result.success
        out = await asyncio.wait_for(task, 60)
        assert await client.get_weight_version() == "v1"
        after = await client.generate(greedy(prompt, 3))
    assert after.token_versions() == ["v1"] * 3
    assert out.aborted
    n = len(out.output_ids)
    spans = out.meta_info.weight_versions or []
    assert [s.version for s in spans] == ["v0", "v1"]
    boundary = spans[0].end
    assert spans[1].start == boundary
    assert spans[1].end == n
    assert 10 <= boundary < n < LONG
    assert out.meta_info.weight_version == "v1"
    # Tokens before the boundary are the old model's, every token from it on the new one's.
    assert out.output_ids[:boundary] == greedy_reference(weights, prompt, boundary)
    uniform = -math.log(vocab)
    logprobs = out.output_logprobs()
    assert all(not math.isclose(lp, uniform, abs_tol=1e-5) for lp in logprobs[:boundary])
    assert all(math.isclose(lp, uniform, abs_tol=1e-5) for lp in logprobs[boundary:])
    assert set(out.output_ids[boundary:]) == {0}


async def test_pause_in_place_holds_tokens_until_continue(
    fresh_engine: EngineProcess, weights: ModelWeights, uniform_checkpoint: Path
) -> None:
    prompt = prompt_for(6)
    # The tokens after the 5th take >= 2 s (PACE_MS), so the pause lands mid-generation; the
    # test pays that time once, when the generation finishes after continue.
    total = 400
    async with EngineClient(fresh_engine.base_url) as client:
        counts: list[int] = []
        reached = asyncio.Event()

        async def run() -> GenerateResponse:
            last = None
            async for snapshot in client.generate_stream(greedy(prompt, total)):
                counts.append(len(snapshot.output_ids))
                if len(snapshot.output_ids) >= 5:
                    reached.set()
                last = snapshot
            assert last is not None
            return last

        task = asyncio.create_task(run())
        await asyncio.wait_for(reached.wait(), 60)
        await client.pause_generation("in_place")
        # Snapshots already sent may still arrive; then nothing, however long we wait.
        settled = -1
        while settled != len(counts):
            settled = len(counts)
            await asyncio.sleep(0.3)
        held = counts[-1]
        assert held < total
        assert not task.done()
        # New requests wait too, and a weight update lands while paused.
        queued = asyncio.create_task(client.generate(greedy(prompt, 2)))
        await client.update_weights_from_disk(str(uniform_checkpoint), "v1")
        assert not queued.done()
        assert len(counts) == settled
        await client.continue_generation()
        out = await asyncio.wait_for(task, 60)
        newcomer = await asyncio.wait_for(queued, 60)
    assert out.meta_info.finish_reason is not None
    assert out.meta_info.finish_reason.type == "length"
    assert [(s.version, s.start, s.end) for s in out.meta_info.weight_versions or []] == [
        ("v0", 0, held),
        ("v1", held, total),
    ]
    assert out.output_ids[:held] == greedy_reference(weights, prompt, held)
    assert newcomer.token_versions() == ["v1", "v1"]


async def test_pause_abort_aborts_in_flight_and_holds_new_requests(
    fresh_engine: EngineProcess,
) -> None:
    async with EngineClient(fresh_engine.base_url) as client:
        # LONG tokens take >= 7.5 s (PACE_MS): the pause aborts the generation mid-way.
        task, reached = await stream_until(client, greedy(prompt_for(7), LONG), 3)
        await asyncio.wait_for(reached.wait(), 60)
        await client.pause_generation("abort")
        aborted = await asyncio.wait_for(task, 60)
        assert aborted.aborted
        assert 3 <= len(aborted.output_ids) < LONG
        held = asyncio.create_task(client.generate(greedy(prompt_for(7), 2)))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(held), 0.5)
        assert await client.health_generate()  # a paused engine is healthy
        await client.continue_generation()
        resumed = await asyncio.wait_for(held, 60)
    assert resumed.meta_info.finish_reason is not None
    assert resumed.meta_info.finish_reason.type == "length"


async def test_health_is_not_ready_until_weights_load(cache_dir: Path) -> None:
    with start_engine(cache_dir=cache_dir, start_unloaded=True) as process:
        async with EngineClient(process.base_url) as client:
            assert not await client.health()
            assert not await client.health_generate()
            with pytest.raises(EngineUnavailable) as caught:
                await client.generate(greedy([5, 10], 2))
            assert caught.value.status_code == 503
            info = await client.get_model_info()
            assert info.model_path == BUILTIN_TINY
            assert info.architectures == ["LlamaForCausalLM"]
            await client.update_weights_from_disk(BUILTIN_TINY, "v1")
            await client.wait_until_ready(10)
            assert await client.health()
            assert await client.health_generate()
            out = await client.generate(greedy([5, 10], 2))
        assert out.token_versions() == ["v1", "v1"]
        assert any(line.startswith("engine ready on ") for line in process.output)


async def test_same_engine_seed_and_request_order_reproduce(cache_dir: Path) -> None:
    params = SamplingParams(max_new_tokens=16, temperature=1.0)
    reqs = [GenerateRequest(input_ids=prompt_for(i), sampling_params=params) for i in range(3)]
    runs = []
    for seed in (11, 11):
        with start_engine(cache_dir=cache_dir, seed=seed) as process:
            async with EngineClient(process.base_url) as client:
                runs.append([(await client.generate(r)).output_ids for r in reqs])
    assert runs[0] == runs[1]
    assert len({tuple(ids) for ids in runs[0]}) == 3  # unseeded requests differ


async def test_pause_retract_recomputes_the_cache_and_continues_exactly(
    fresh_engine: EngineProcess, weights: ModelWeights
) -> None:
    prompt = prompt_for(9)
    # >= 2 s after the 5th token (PACE_MS): the retract lands mid-generation.
    total = 400
    async with EngineClient(fresh_engine.base_url) as client:
        task, reached = await stream_until(client, greedy(prompt, total), 5)
        await asyncio.wait_for(reached.wait(), 60)
        await client.pause_generation("retract")
        with pytest.raises(TimeoutError):  # held mid-generation, without its KV cache
            await asyncio.wait_for(asyncio.shield(task), 0.3)
        await client.continue_generation()
        out = await asyncio.wait_for(task, 60)
    # Same weights before and after: recomputing the KV cache must not change the tokens.
    assert out.output_ids == greedy_reference(weights, prompt, total)
    assert out.token_versions() == ["v0"] * total
