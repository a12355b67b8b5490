"""The proxy records routed experts with the token versions (`--record-routed-experts`): a real
embedded engine serving the tiny MoE, a real proxy, multi-turn `/generate` sessions and weight
updates in the middle of a partial-rollout generation.

Each segment record's `routed_experts` must be the routing of its tokens as the engine
computed it when it produced the token after each one: for a single-version trajectory that
is the full forward of the segment in the test process; across a weight update, the tokens
forwarded before the update keep the old weights' routing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import ProxyProcess, start_proxy

from dressage.data.samples import Sample
from dressage.engine.embedded.model import ModelWeights, full_logits, load_weights, new_routes
from dressage.model import BUILTIN_TINY_MOE, build_tiny_moe_model, resolve_model_source
from dressage.proxy.records import record_to_sample
from tests.integration.proxy_support import new_label, session_busy, update_weights, wait_for

pytestmark = pytest.mark.integration
torch.set_num_threads(1)

PROMPT = [1, 5, 12, 23, 40, 41, 42]
PACE_MS = 4.0


@pytest.fixture(scope="module")
def moe_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("moe-cache")
    resolve_model_source(BUILTIN_TINY_MOE, path)
    build_tiny_moe_model(path / "other", seed=7)
    return path


@pytest.fixture(scope="module")
def weights(moe_cache: Path) -> ModelWeights:
    return load_weights(resolve_model_source(BUILTIN_TINY_MOE, moe_cache))


@pytest.fixture(scope="module")
def engine(moe_cache: Path) -> Iterator[EngineProcess]:
    with start_engine(
        model=BUILTIN_TINY_MOE, cache_dir=moe_cache, min_step_interval_ms=PACE_MS
    ) as process:
        yield process


@pytest.fixture(scope="module")
def proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    args = ["--record-token-versions", "--record-routed-experts", "--dressage-partial-rollout"]
    with start_proxy([engine.base_url], *args) as process:
        yield process


def _routes_of(weights: ModelWeights, tokens: list[int]) -> list[int]:
    routes = new_routes(weights.shape, len(tokens))
    full_logits(weights, tokens, routes)
    return [int(v) for v in routes.flatten().tolist()]


async def _turn(
    client: httpx.AsyncClient, session: str, input_ids: list[int], n: int, **extra: Any
) -> Any:
    answer = await client.post(
        "/generate",
        headers={"X-Session-Id": session, "X-Instance-Id": "moe"},
        json={
            "input_ids": input_ids,
            "sampling_params": {"max_new_tokens": n, "ignore_eos": True},
            "return_logprob": True,
            **extra,
        },
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


async def _finalize(client: httpx.AsyncClient, session: str) -> Sample:
    assert (
        await client.post(f"/sessions/{session}/finalize", json={"reward": 1.0})
    ).status_code == 200
    records = (await client.get("/segments", params={"instance_id": "moe"})).json()["segments"]
    (record,) = [r for r in records if r["session_id"] == session]
    return record_to_sample(record)


async def test_a_multi_turn_segment_carries_the_routing_of_its_tokens(
    proxy: ProxyProcess, weights: ModelWeights
) -> None:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
        first = await _turn(client, "multi", PROMPT, 6)
        observation = [30, 31, 32]
        context = PROMPT + first["output_ids"] + observation
        second = await _turn(client, "multi", context, 5)
        sample = await _finalize(client, "multi")
    tokens = list(sample.tokens)
    assert tokens == context + second["output_ids"]
    routes = sample.routed_experts
    assert routes is not None
    assert routes.rows == len(tokens) - 1  # the last token was never forwarded
    assert routes.values() == _routes_of(weights, tokens[:-1])


async def test_tokens_forwarded_before_a_weight_update_keep_the_old_routing(
    proxy: ProxyProcess, engine: EngineProcess, weights: ModelWeights, moe_cache: Path
) -> None:
    other = load_weights(moe_cache / "other")
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
        task = asyncio.create_task(
            _turn(client, "resumed", PROMPT, 400, return_routed_experts=True)
        )
        await wait_for(lambda: session_busy(client, "resumed"), what="generation in flight")
        await asyncio.wait({task}, timeout=0.3)
        assert not task.done()
        assert (await client.post("/pause_generation")).status_code == 200
        await update_weights(engine.base_url, moe_cache / "other", new_label())
        assert (await client.post("/continue_generation")).status_code == 200
        answer = await task
        sample = await _finalize(client, "resumed")
        # The engine serves its first weights again for the other tests.
        assert (await client.post("/pause_generation")).status_code == 200
        base = resolve_model_source(BUILTIN_TINY_MOE, moe_cache)
        await update_weights(engine.base_url, base, new_label())
        assert (await client.post("/continue_generation")).status_code == 200
    assert answer["dressage"]["preempts"] == 1
    versions = sample.response_versions
    switch = next(i for i, v in enumerate(versions) if v != versions[0])
    tokens = list(sample.tokens)
    routes = sample.routed_experts
    assert routes is not None
    assert routes.rows == len(tokens) - 1
    width = routes.width
    # Tokens up to the last one of the first version were forwarded under the first weights;
    # the resumed piece forwarded the rest (its prefill recomputed the earlier ones, which
    # keep their first report).
    cut = len(PROMPT) + switch - 1
    old = _routes_of(weights, tokens[:cut])
    new = _routes_of(other, tokens[:-1])
    assert routes.values()[: cut * width] == old
    assert routes.values()[cut * width :] == new[cut * width :]
    assert old != new[: cut * width]
    # A client that asked for the routes (slime's routing replay) gets the session's: each
    # position's first report, not the last piece's recomputed prefill.
    assert answer["meta_info"]["routed_experts"] == routes.to_base64()
