"""A resumed piece the span limit would refuse is refused before the engine generates it.

With partial rollout and `--max-partial-rollout-preempts 2`, a trajectory interrupted by a
third weight update would span a fourth version. When the publisher tells the proxy the new
version at continue (`{"weight_version": V}`, as `dressage.weights` does), the proxy knows the
version the resumed piece would be generated under, so it refuses the trajectory then, before
spending engine tokens the refusal would throw away. A real embedded engine and a real proxy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import ProxyProcess, start_proxy

from tests.integration.proxy_support import (
    new_label,
    session_busy,
    tiny_checkpoint,
    update_weights,
    wait_for,
)

pytestmark = pytest.mark.integration

PROMPT = [1, 5, 12, 23, 40, 41, 42]
PACE_MS = 4.0
"""Every token takes at least 4 ms: 2000 tokens outlast the three updates by seconds."""


@pytest.fixture(scope="module")
def engine(cache_dir: Path) -> Iterator[EngineProcess]:
    with start_engine(
        cache_dir=cache_dir, weight_version="v0", min_step_interval_ms=PACE_MS
    ) as engine:
        yield engine


@pytest.fixture(scope="module")
def limited_proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    args = ["--dressage-partial-rollout", "--record-token-versions"]
    with start_proxy([engine.base_url], *args, "--max-partial-rollout-preempts", "2") as proxy:
        yield proxy


async def _engine_tokens(engine: EngineProcess) -> int:
    async with httpx.AsyncClient(base_url=engine.base_url) as probe:
        info = (await probe.get("/server_info")).json()
    return int(info["scheduler_stats"]["tokens"])


async def test_the_fourth_version_is_refused_before_its_piece_is_generated(
    engine: EngineProcess, limited_proxy: ProxyProcess, cache_dir: Path
) -> None:
    async with httpx.AsyncClient(base_url=limited_proxy.base_url, timeout=120) as client:
        task = asyncio.create_task(
            client.post(
                "/generate",
                headers={"X-Session-Id": "early-1", "X-Instance-Id": "prompt-1"},
                json={
                    "input_ids": PROMPT,
                    "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True},
                    "return_logprob": True,
                },
            )
        )
        await wait_for(lambda: session_busy(client, "early-1"), what="generation in flight")
        labels = []
        for _ in range(3):
            await asyncio.wait({task}, timeout=0.3)  # a few tokens under each version
            assert not task.done()
            assert (await client.post("/pause_generation")).status_code == 200
            label = new_label()
            await update_weights(engine.base_url, tiny_checkpoint(cache_dir), label)
            paused_tokens = await _engine_tokens(engine)
            resumed = await client.post("/continue_generation", json={"weight_version": label})
            assert resumed.status_code == 200
            labels.append(label)
        response = await asyncio.wait_for(task, timeout=30)
        assert response.status_code == 502, response.text
        error = response.json()["error"]
        assert error["type"] == "partial_rollout_staleness_exceeded"
        assert error["detail"]["version_span"] == 4
        assert error["detail"]["versions"][-1] == labels[-1]
        # Nothing was generated under the fourth version: the engine's token count is the
        # one it had while paused for the third update.
        assert await _engine_tokens(engine) == paused_tokens
