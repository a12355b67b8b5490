"""The long-tail task's lengths through a real proxy and engine: every trajectory of a group
generates exactly the length the task drew for it, past end-of-sequence, and the engine's step
counters (the server info's `scheduler_stats`) account for every token it generated."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from dressage_testkit.engine import start_engine
from dressage_testkit.proxy import start_proxy

from dressage.agents.single_turn import SingleTurnRollout
from dressage.proxy.client import ProxyRolloutClient, SamplingSettings
from dressage.tasks.codec import PromptCodec, TaskPrompts
from dressage.tasks.long_tail import LengthDistribution, LongTailTask
from tests.integration.proxy_support import tiny_checkpoint

pytestmark = pytest.mark.integration
GROUP = 8
PROMPTS = 12


async def test_each_trajectory_generates_exactly_the_length_the_task_drew(
    tmp_path: Path,
) -> None:
    lengths = LengthDistribution(median_tokens=6, tail_factor=8, max_tokens=96)
    task = LongTailTask(seed=3, max_operand=9, lengths=lengths)
    with (
        start_engine(cache_dir=tmp_path) as engine,
        start_proxy([engine.base_url], "--record-token-versions") as proxy,
    ):
        codec = PromptCodec.from_pretrained(tiny_checkpoint(tmp_path))
        client = ProxyRolloutClient(proxy.base_url)
        rollout = SingleTurnRollout(
            source=TaskPrompts(task, codec),
            client=client,
            group_size=GROUP,
            sampling=SamplingSettings(max_new_tokens=96),
            lengths=task.response_tokens,
        )
        try:
            groups = [await rollout(index, 0) for index in range(PROMPTS)]
        finally:
            await client.aclose()
        async with httpx.AsyncClient(base_url=engine.base_url) as probe:
            info = (await probe.get("/server_info")).json()  # 0.5.23, the default release
    got: dict[tuple[int, int], int] = {}
    early_eos = 0
    for index, group in enumerate(groups):
        for sample in group.samples:
            member = int(str(sample.parent_traj_id).rsplit("-t", 1)[1])
            got[(index, member)] = sample.response_length
            response = sample.tokens[-sample.response_length :]
            early_eos += codec.eos_id in response[:-1]
    expected = {(i, m): task.response_tokens(i, m) for i in range(PROMPTS) for m in range(GROUP)}
    assert got == expected
    stats = info["scheduler_stats"]
    assert stats["tokens"] == sum(expected.values())
    prompts = sum(len(g.samples[0].tokens) - g.samples[0].response_length for g in groups)
    assert stats["prefill_tokens"] == GROUP * prompts
    # The longest response took one step per token; every counted step gave a token to at
    # least one request, so the slot-seconds are at least the active seconds.
    assert stats["steps"] >= max(expected.values())
    assert stats["active_seconds"] > 0.0
    assert stats["slot_seconds"] >= stats["active_seconds"]
    # The untrained tiny model samples end-of-sequence now and then; those responses went on.
    assert early_eos > 0
