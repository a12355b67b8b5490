"""The embedded engine's weight updates, version spans, pause/continue, readiness and seeding,
each against an engine process of its own, for every SGLang release it plays where the
behaviour is one both releases have (`in_place` and `retract` pauses only where the release
has pause modes)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from dressage_testkit.engine import EngineProcess, start_engine

from dressage.engine import (
    EngineClient,
    EngineUnavailable,
    GenerateRequest,
    GenerateResponse,
    SamplingParams,
)
from dressage.engine.embedded.model import ModelWeights
from dressage.engine.embedded.release_profiles import ReleaseProfile
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
def fresh_engine(cache_dir: Path, engine_release: str) -> Iterator[EngineProcess]:
    with start_engine(
        cache_dir=cache_dir,
        weight_version="v0",
        min_step_interval_ms=PACE_MS,
        sglang_release=engine_release,
    ) as process:
        yield process


def needs_pause_modes(profile: ReleaseProfile) -> None:
    if not profile.pause_modes:
        pytest.skip(f"SGLang {profile.release} has no pause modes: every pause aborts")


async def test_an_unpaused_update_waits_for_the_generations_in_flight(
    fresh_engine: EngineProcess, weights: ModelWeights, uniform_checkpoint: Path
) -> None:
    """As SGLang's model-update lock makes it: an update while generation runs unpaused waits
    until the running generation has finished, so that one is all old weights, and the next
    one all new."""
    prompt = prompt_for(5)
    n = 200  # >= 1 s of tokens (PACE_MS): the update is sent while it runs
    async with EngineClient(fresh_engine.base_url) as client:
        task, reached = await stream_until(client, greedy(prompt, n), 5)
        await asyncio.wait_for(reached.wait(), 60)
        result = await client.update_weights_from_disk(str(uniform_checkpoint), "v1")
        assert result.success
        # The engine answered the update after it sent the generation's last token; this side
        # may read the two connections in either order, so the stream is awaited, not polled.
        # That the update waited shows in the versions: every token of it is v0.
        out = await asyncio.wait_for(task, 60)
        after = await client.generate(greedy(prompt, 3))
        assert await client.get_weight_version() == "v1"
    assert out.output_ids == greedy_reference(weights, prompt, n)
    assert out.token_versions() == ["v0"] * n
    assert after.token_versions() == ["v1"] * 3
    assert after.output_ids == [0, 0, 0]  # the uniform weights' greedy token


async def test_pause_in_place_holds_tokens_until_continue(
    fresh_engine: EngineProcess,
    engine_profile: ReleaseProfile,
    weights: ModelWeights,
    uniform_checkpoint: Path,
) -> None:
    """An update while requests are held in place lands mid-generation: the held request's
    tokens split at the swap, reported per token (`weight_versions`). The update is loaded
    without its own cache flush, which the release would refuse with requests held."""
    needs_pause_modes(engine_profile)
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
    fresh_engine: EngineProcess, engine_profile: ReleaseProfile
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
        # The version route answers while paused (no scheduler round trip); a release whose
        # /health does not generate answers it too.
        assert await client.get_weight_version() == "v0"
        if not engine_profile.health_generates:
            assert await client.health()
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
        # The announcement is printed beside the answers; its line is read by another thread.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not any(line.startswith("engine ready on ") for line in list(process.output)):
            assert loop.time() < deadline, process.output[-10:]
            await asyncio.sleep(0.05)


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
    fresh_engine: EngineProcess, engine_profile: ReleaseProfile, weights: ModelWeights
) -> None:
    needs_pause_modes(engine_profile)
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
