"""`AsyncRolloutCollector.steer`: the staleness budget's controller changes the groups in
flight and the window between steps; groups above a lower depth finish, none starts until
the count is below it, and a narrower window applies to the next check and to admission."""

from __future__ import annotations

import asyncio

import pytest

from dressage.data.groups import Group
from dressage.rollout.collector import AsyncRolloutCollector
from dressage.rollout.retry import RetryPolicy
from dressage.rollout.staleness import StalenessConfig
from tests.unit.rollout.test_collector import group_for


class GatedEngines:
    """Rollouts that finish only when the test lets them, counting how many run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.gate = asyncio.Event()

    async def rollout(self, index: int, attempt: int) -> Group:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
        finally:
            self.running -= 1
        return group_for(index, "v0")


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_steer_raises_and_lowers_the_groups_in_flight() -> None:
    engines = GatedEngines()
    collector = AsyncRolloutCollector(
        engines.rollout,
        batch_size=2,
        concurrency=2,
        retry=RetryPolicy(max_retries=0, backoff_s=0.0),
        staleness=StalenessConfig(3),
        queue_size=16,
        admission=False,
    )
    async with collector:
        await settle()
        assert engines.running == 2
        collector.steer(5, 3)
        await settle()
        assert engines.running == 5
        collector.steer(1, 3)
        engines.gate.set()  # every running group finishes; from now on one at a time
        engines.gate = asyncio.Event()
        await settle()
        assert engines.running == 1
        assert collector.concurrency == 1


async def test_steer_narrows_the_window_of_the_filter_and_of_admission() -> None:
    engines = GatedEngines()
    collector = AsyncRolloutCollector(
        engines.rollout,
        batch_size=2,
        concurrency=4,
        retry=RetryPolicy(max_retries=0, backoff_s=0.0),
        staleness=StalenessConfig(3),
    )
    collector.steer(4, 1)
    assert collector.filter.config.keep_versions == 1
    assert collector.filter.tracker.keep_versions == 1
    assert collector.admission.keep_versions == 1
    with pytest.raises(ValueError, match=">= 1"):
        collector.steer(0, 1)
    await collector.aclose()
