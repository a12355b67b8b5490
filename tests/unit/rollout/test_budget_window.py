"""The staleness budget's window (`AsyncRolloutCollector(window_on_published=True)`): the
window also moves on every version the trainer publishes, so a handed-out batch never holds a
sample lagging the trainer's version by `keep_versions` or more, whatever order groups
complete in. Without it the window moves on versions seen in completed groups only (the
design's batch-level rule), and a group that completes after versions nobody completed a
group at passes it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.data.groups import Group
from dressage.data.samples import Sample
from dressage.data.versions import issued_index, version_label
from dressage.rollout.collector import AsyncRolloutCollector
from dressage.rollout.lag import sample_trajectory_versions
from dressage.rollout.retry import RetryPolicy
from dressage.rollout.staleness import StalenessConfig
from tests.unit.rollout.test_collector import group_for


class Fleet:
    """Rollouts that run on the version live when they started and finish when the test says."""

    def __init__(self) -> None:
        self.live = 0
        self.waiting: dict[int, asyncio.Future[None]] = {}

    async def rollout(self, index: int, attempt: int) -> Group:
        version = version_label(self.live)
        done = asyncio.get_running_loop().create_future()
        self.waiting[index] = done
        await done
        return group_for(index, version)

    def finish(self, index: int) -> None:
        self.waiting.pop(index).set_result(None)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def collector_for(fleet: Fleet, keep: int, on_published: bool) -> AsyncRolloutCollector:
    return AsyncRolloutCollector(
        fleet.rollout,
        batch_size=2,
        concurrency=6,
        retry=RetryPolicy(max_retries=0, backoff_s=0.0),
        staleness=StalenessConfig(keep),
        queue_size=16,
        admission=False,  # old groups keep starting: the window alone must hold the budget
        window_on_published=on_published,
    )


def lags(fleet: Fleet, samples: Sequence[Sample]) -> list[int]:
    """Each sample's lag behind the trainer's version (the one the batch is trained on)."""
    indices = [issued_index(v) if v else None for v in sample_trajectory_versions(samples)]
    assert None not in indices, indices
    return [fleet.live - i for i in indices if i is not None]


@pytest.mark.parametrize(("on_published", "lag"), [(True, None), (False, 2)])
async def test_a_group_finishing_two_publishes_late_is_dropped_only_on_published_versions(
    on_published: bool, lag: int | None
) -> None:
    """keepVersions 2 (budget: lag at most 1). Groups start at v0; the trainer publishes v1
    and v2 while no group finishes; then v0 groups finish. Observed versions alone still hold
    v0 in the window (lag 2 trained); with the published versions v0 is out."""
    fleet = Fleet()
    collector = collector_for(fleet, keep=2, on_published=on_published)
    async with collector:
        await settle()
        assert len(fleet.waiting) == 6
        for live in (1, 2):
            fleet.live = live
            collector.on_weights_published(version_label(live))
        batch_task = asyncio.create_task(collector.next_batch())
        for index in sorted(fleet.waiting)[:4]:  # the six v0 groups start to finish
            fleet.finish(index)
            await settle()
        if lag is None:
            assert not batch_task.done()
            assert collector.stats.totals.dropped_groups["stale_version"] == 4
            for index in sorted(i for i in fleet.waiting if i >= 6)[:2]:  # started at v2
                fleet.finish(index)
                await settle()
        batch = await batch_task
        assert max(lags(fleet, batch.samples)) == (lag if lag is not None else 0)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31), keep=st.integers(1, 3))
def test_no_handed_out_sample_lags_the_trainer_by_the_window_or_more(seed: int, keep: int) -> None:
    """Groups finish in a random order, the trainer publishes after every batch: every
    sample of every batch lags the trainer's version by at most `keep - 1`, and groups that
    would lag more are counted as drops, never trained."""

    async def run() -> None:
        rng = random.Random(seed)
        fleet = Fleet()
        collector = collector_for(fleet, keep=keep, on_published=True)
        async with collector:
            for _ in range(10):
                batch_task = asyncio.create_task(collector.next_batch())
                await settle()
                while not batch_task.done():
                    assert fleet.waiting, "no group in flight while the trainer waits"
                    fleet.finish(rng.choice(sorted(fleet.waiting)))
                    await settle()
                batch = batch_task.result()
                assert all(0 <= lag <= keep - 1 for lag in lags(fleet, batch.samples))
                fleet.live += 1
                collector.on_weights_published(version_label(fleet.live))
            assert collector.stats.groups_trained == 20

    asyncio.run(run())
