"""The span-limit policies (`staleness.spanLimitPolicy`) on a real engine and a real proxy, with
a publish landing mid-generation.

A group of two trajectories: a short one that finishes under v0, and a long one (paced engine)
that a publish interrupts. With `maxPartialRolloutPreempts: 0` a trajectory may not span two
versions, so the resumed long one is refused (502 `partial_rollout_staleness_exceeded`):

- `refuse_group`: the group fails, carrying the finished sibling's tokens for the token ledger
  (`refused`), and the proxy counts the refused turn's own (`dressage_proxy_lost_tokens_total`);
- `retry_trajectory`: only the long trajectory runs again, in a new session, wholly under the
  new version; the short one is kept;
- `mask_old_tokens`: the proxy runs without a span limit (as `proxy_settings` configures it), the
  long trajectory spans both versions, and at the batch sink its v0 tokens leave the loss while
  staying in the sample as context.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import ProxyProcess, start_proxy

from dressage import metrics as names
from dressage.agents.single_turn import SingleTurnRollout
from dressage.data.groups import Group, GroupFailed
from dressage.proxy.client import ProxyRolloutClient, SamplingSettings
from dressage.proxy.errors import PARTIAL_ROLLOUT_STALENESS_EXCEEDED
from dressage.rollout.span_policy import mask_old_tokens
from dressage.tasks.base import Scored
from tests.integration.proxy_support import (
    metric_value,
    new_label,
    session_busy,
    tiny_checkpoint,
    update_weights,
    wait_for,
)

pytestmark = pytest.mark.integration

PACE_MS = 4.0
LONG = 300
"""Tokens of the long trajectory: over a second on the paced engine, so the publish lands
while it generates."""
SHORT = 4


@pytest.fixture(scope="module")
def engine(cache_dir: Path) -> Iterator[EngineProcess]:
    with start_engine(
        cache_dir=cache_dir, weight_version="v0", min_step_interval_ms=PACE_MS
    ) as engine:
        yield engine


PARTIAL = ("--dressage-partial-rollout", "--record-token-versions")


@pytest.fixture(scope="module")
def limited_proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    with start_proxy([engine.base_url], *PARTIAL, "--max-partial-rollout-preempts", "0") as p:
        yield p


@pytest.fixture(scope="module")
def unlimited_proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    with start_proxy([engine.base_url], *PARTIAL) as proxy:
        yield proxy


class Prompts:
    def prompt_ids(self, index: int) -> list[int]:
        return [1, 5, 12, 23, 40]

    async def ascored(self, index: int, output_ids: Sequence[int]) -> Scored:
        return Scored(1.0)


def agent(proxy: ProxyProcess, tag: str, retry_refused: int) -> SingleTurnRollout:
    return SingleTurnRollout(
        source=Prompts(),
        client=ProxyRolloutClient(proxy.base_url),
        group_size=2,
        sampling=SamplingSettings(max_new_tokens=LONG),
        run_tag=tag,
        lengths=lambda index, member: SHORT if member == 0 else LONG,
        retry_refused=retry_refused,
        refresh_share=0.0,  # the short one is kept as it ended, not refreshed after
    )


async def group_with_publishes(
    proxy: ProxyProcess, engine: EngineProcess, cache_dir: Path, rollout: SingleTurnRollout
) -> tuple[asyncio.Task[Group], list[str]]:
    """Start prompt 0's group; once the short trajectory finished and the long one generates,
    publish a new version (pause, update, continue with its label); the group's task and the
    version published."""
    task = asyncio.create_task(rollout(0, 0))
    group = f"{rollout.run_tag}-p0-a0"
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:

        async def short_done_long_busy() -> bool:
            finished = await client.get(
                "/segments", params={"instance_id": group, "drain": "false"}
            )
            done = finished.status_code == 200 and len(finished.json()["segments"]) == 1
            return done and await session_busy(client, f"{group}-t1")

        await wait_for(short_done_long_busy, what="the short trajectory done, the long one busy")
        assert (await client.post("/pause_generation")).status_code == 200
        label = new_label()
        await update_weights(engine.base_url, tiny_checkpoint(cache_dir), label)
        resumed = await client.post("/continue_generation", json={"weight_version": label})
        assert resumed.status_code == 200
    return task, [label]


def _versions(group: Group) -> dict[str, set[str | None]]:
    return {str(s.parent_traj_id): set(s.response_versions) for s in group.samples}


async def _lost_refused(proxy: ProxyProcess) -> float:
    async with httpx.AsyncClient(base_url=proxy.base_url) as client:
        text = (await client.get("/metrics")).text
    lines = [
        line
        for line in text.splitlines()
        if line.startswith(names.PROXY_LOST_TOKENS) and PARTIAL_ROLLOUT_STALENESS_EXCEEDED in line
    ]
    return metric_value("\n".join(lines), names.PROXY_LOST_TOKENS)


async def test_refuse_group_fails_the_group_and_the_ledger_keeps_both_sides(
    engine: EngineProcess, limited_proxy: ProxyProcess, cache_dir: Path
) -> None:
    before = await _lost_refused(limited_proxy)
    rollout = agent(limited_proxy, "refuse", retry_refused=0)
    task, _ = await group_with_publishes(limited_proxy, engine, cache_dir, rollout)
    with pytest.raises(GroupFailed) as failed:
        await asyncio.wait_for(task, timeout=60)
    assert failed.value.reason == PARTIAL_ROLLOUT_STALENESS_EXCEEDED
    assert failed.value.staleness
    assert failed.value.tokens == SHORT  # the finished sibling, generated for nothing
    assert await _lost_refused(limited_proxy) > before  # the refused turn's own tokens
    await rollout.client.aclose()


async def test_retry_trajectory_runs_only_the_refused_trajectory_again(
    engine: EngineProcess, limited_proxy: ProxyProcess, cache_dir: Path
) -> None:
    rollout = agent(limited_proxy, "retry", retry_refused=2)
    task, (label,) = await group_with_publishes(limited_proxy, engine, cache_dir, rollout)
    group = await asyncio.wait_for(task, timeout=60)
    versions = _versions(group)
    assert len(versions) == 2, versions
    short = next(v for traj, v in versions.items() if traj.endswith("-t0"))
    retried = versions[f"{rollout.run_tag}-p0-a0-t1-s1"]
    assert len(short) == 1  # kept as it finished, under the version before the publish
    assert label not in short
    assert retried == {label}  # generated again, wholly under the new version
    assert sum(sum(s.loss_mask) for s in group.samples) == SHORT + LONG
    await rollout.client.aclose()


async def test_mask_old_tokens_keeps_the_trajectory_and_trains_its_newest_version(
    engine: EngineProcess, unlimited_proxy: ProxyProcess, cache_dir: Path
) -> None:
    rollout = agent(unlimited_proxy, "mask", retry_refused=0)
    task, (label,) = await group_with_publishes(unlimited_proxy, engine, cache_dir, rollout)
    group = await asyncio.wait_for(task, timeout=60)
    long = next(s for s in group.samples if str(s.parent_traj_id).endswith("-t1"))
    old = sum(1 for v in long.response_versions if v != label)
    assert 0 < old < LONG  # the publish landed mid-generation: two versions in one response
    masked, tokens = mask_old_tokens(group, keep=1)  # maxPartialRolloutPreempts 0 + 1
    assert tokens == old
    kept = next(s for s in masked.samples if str(s.parent_traj_id).endswith("-t1"))
    assert kept.response_length == LONG  # the old tokens stay as context
    assert [v for v, m in zip(kept.response_versions, kept.loss_mask, strict=True) if m] == (
        [label] * (LONG - old)
    )
    await rollout.client.aclose()
