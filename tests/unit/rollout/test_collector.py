"""The async collector's worker and batch sink, driven by an in-process rollout function.

The rollout function stands in for the agent layer (proxy + engines); integration tests run the
collectors against real processes. Here it hands out samples stamped with whatever version the
test has "published", so staleness behaviour can be pinned exactly.
"""

from __future__ import annotations

import asyncio

import pytest

from dressage.data.groups import Group, GroupFailed
from dressage.data.samples import Sample
from dressage.proxy.errors import PARTIAL_ROLLOUT_STALENESS_EXCEEDED
from dressage.rollout.collector import SHUTDOWN, AsyncRolloutCollector, CollectorClosed
from dressage.rollout.retry import RETRIES_EXHAUSTED, ROLLOUT_BROKEN, RetryPolicy, RolloutBroken
from dressage.rollout.staleness import StalenessConfig

GROUP_SIZE = 3


def group_for(index: int, version: str) -> Group:
    samples = [
        Sample.build(
            prompt_tokens=[1, 2],
            response_tokens=[3],
            response_versions=[version],
            rollout_log_probs=[-0.1],
            reward=float(j),
            group_id=f"p{index}",
            parent_traj_id=f"p{index}-{j}",
        )
        for j in range(GROUP_SIZE)
    ]
    return Group(group_id=f"p{index}", samples=tuple(samples))


def index_of(group: Group) -> int:
    return int(group.group_id[1:])


class Engines:
    """The published version, and a gate the test opens to let rollouts finish."""

    def __init__(self) -> None:
        self.version = "v0"
        self.started: list[int] = []

    async def rollout(self, index: int, attempt: int) -> Group:
        self.started.append(index)
        await asyncio.sleep(0)
        return group_for(index, self.version)


def collector(
    engines: Engines,
    *,
    keep: int = 0,
    n: int | None = None,
    batch: int = 2,
    concurrency: int = 2,
    retries: int = 2,
) -> AsyncRolloutCollector:
    return AsyncRolloutCollector(
        engines.rollout,
        num_prompts=n,
        batch_size=batch,
        concurrency=concurrency,
        retry=no_backoff(retries),
        staleness=StalenessConfig(keep),
    )


def no_backoff(retries: int, breaker_after: int = 64) -> RetryPolicy:
    return RetryPolicy(max_retries=retries, backoff_s=0.0, breaker_after=breaker_after)


async def test_batches_hold_whole_groups() -> None:
    engines = Engines()
    async with collector(engines, batch=3) as c:
        batch = await c.next_batch()
    assert len(batch.groups) == 3
    assert all(len(g.samples) == GROUP_SIZE for g in batch.groups)
    assert all({s.group_id for s in g.samples} == {g.group_id} for g in batch.groups)


class Script:
    """A rollout whose groups finish only when the test releases them, with a given version."""

    def __init__(self) -> None:
        self._release: dict[int, asyncio.Future[str]] = {}
        self.started = asyncio.Condition()

    def _future(self, index: int) -> asyncio.Future[str]:
        if index not in self._release:
            self._release[index] = asyncio.get_running_loop().create_future()
        return self._release[index]

    async def rollout(self, index: int, attempt: int) -> Group:
        async with self.started:
            self._future(index)
            self.started.notify_all()
        version = await self._future(index)
        return group_for(index, version)

    async def wait_started(self, count: int) -> None:
        async with self.started:
            await self.started.wait_for(lambda: len(self._release) >= count)

    def release(self, version: str, *indices: int) -> None:
        for index in indices:
            self._future(index).set_result(version)


async def test_stale_groups_are_dropped_whole_and_counted() -> None:
    """Groups finishing under a version outside the window never reach the trainer."""
    script = Script()
    c = AsyncRolloutCollector(
        script.rollout,
        batch_size=2,
        concurrency=6,
        retry=no_backoff(0),
        staleness=StalenessConfig(keep_versions=1),
        admission=False,  # the sink filter alone
    )
    async with c:
        await script.wait_started(6)
        script.release("v0", 2, 3)
        first = await c.next_batch()
        script.release("v1", 4, 5)  # the trainer published v1
        second = await c.next_batch()
        script.release("v0", 0, 1)  # long v0 rollouts finish late: stale
        await script.wait_started(8)
        script.release("v1", 6, 7)
        third = await c.next_batch()
    assert [index_of(g) for g in first.groups] == [2, 3]
    assert [index_of(g) for g in second.groups] == [4, 5]
    assert [index_of(g) for g in third.groups] == [6, 7]
    assert c.stats.totals.dropped_groups["stale_version"] == 2
    assert c.stats.groups_trained == 6


async def test_window_advance_removes_pending_groups() -> None:
    script = Script()
    c = AsyncRolloutCollector(
        script.rollout,
        batch_size=3,
        concurrency=4,
        retry=no_backoff(0),
        staleness=StalenessConfig(keep_versions=1),
        admission=False,  # the sink filter alone
    )
    async with c:
        await script.wait_started(4)
        script.release("v0", 0, 1)  # two v0 groups wait in the candidate batch
        script.release("v1", 2)  # a v1 group advances the window past v0
        script.release("v1", 3)
        await script.wait_started(5)
        script.release("v1", 4)
        batch = await c.next_batch()
    assert [index_of(g) for g in batch.groups] == [2, 3, 4]
    assert c.stats.totals.dropped_groups["window_advanced"] == 2


async def test_failed_group_is_retried_then_dropped() -> None:
    attempts: dict[int, list[int]] = {}

    async def rollout(index: int, attempt: int) -> Group:
        attempts.setdefault(index, []).append(attempt)
        if index == 0:
            raise GroupFailed(PARTIAL_ROLLOUT_STALENESS_EXCEEDED, "502", staleness=True)
        return group_for(index, "v0")

    c = AsyncRolloutCollector(
        rollout,
        num_prompts=3,
        batch_size=2,
        concurrency=1,
        retry=no_backoff(2),
        staleness=StalenessConfig(2),
    )
    async with c:
        batch = await c.next_batch()
        with pytest.raises(CollectorClosed):
            await c.next_batch()
    assert attempts[0] == [0, 1, 2]
    assert [index_of(g) for g in batch.groups] == [1, 2]
    assert c.stats.totals.retries == 2
    assert (
        batch.figures.retries,
        batch.figures.total("failed_attempts"),
        batch.figures.staleness_failures,
    ) == (2, 3, 3)
    assert batch.figures.dropped_groups == {RETRIES_EXHAUSTED: 1}
    assert c.stats.totals.failed_attempts[PARTIAL_ROLLOUT_STALENESS_EXCEEDED] == 3
    assert c.stats.totals.staleness_failures == 3
    assert c.stats.totals.dropped_groups[RETRIES_EXHAUSTED] == 1
    assert c.stats.staleness_failure_rate == 1.0


async def test_unexpected_errors_fail_the_group_not_the_worker() -> None:
    async def rollout(index: int, attempt: int) -> Group:
        if index == 1 and attempt == 0:
            raise ConnectionError("engine went away")
        return group_for(index, "v0")

    c = AsyncRolloutCollector(
        rollout,
        num_prompts=2,
        batch_size=2,
        concurrency=2,
        retry=no_backoff(1),
        staleness=StalenessConfig(),
    )
    async with c:
        batch = await c.next_batch()
    assert sorted(index_of(g) for g in batch.groups) == [0, 1]
    assert c.stats.totals.failed_attempts["rollout_error"] == 1


async def test_worker_keeps_generating_while_the_trainer_trains() -> None:
    """Rollout overlaps training: groups complete without anyone asking for a batch."""
    engines = Engines()
    async with collector(engines, batch=2, concurrency=2) as c:
        await c.next_batch()
        # "Training" now: no next_batch call. The worker goes on completing groups until the
        # bounded completed queue is full, then blocks instead of running away.
        for _ in range(200):
            await asyncio.sleep(0)
        assert c.stats.groups_completed == 2 + 2 + 2  # consumed + queue bound + blocked in put
        assert c.in_flight == 2


async def test_shutdown_accounts_for_every_started_group() -> None:
    engines = Engines()
    c = collector(engines, batch=2, concurrency=3)
    async with c:
        await c.next_batch()
        for _ in range(20):
            await asyncio.sleep(0)
    stats = c.stats
    assert stats.groups_started == stats.groups_trained + sum(stats.totals.dropped_groups.values())
    assert stats.totals.dropped_groups[SHUTDOWN] == stats.groups_started - stats.groups_trained
    with pytest.raises(CollectorClosed):
        await c.next_batch()


async def test_exhausted_data_ends_collection() -> None:
    engines = Engines()
    async with collector(engines, n=3, batch=2) as c:
        await c.next_batch()
        with pytest.raises(CollectorClosed):
            await c.next_batch()
        with pytest.raises(CollectorClosed):
            await c.next_batch()
    assert c.stats.totals.dropped_groups[SHUTDOWN] == 1


async def test_data_position_resumes_without_repeating_prompts() -> None:
    engines = Engines()
    first = collector(engines, batch=2, concurrency=1)
    async with first:
        await first.next_batch()
    state = first.state_dict()
    assert state["next_prompt"] >= 2
    second = collector(engines, batch=2, concurrency=1)
    second.load_state_dict(state)
    engines.started.clear()
    async with second:
        batch = await second.next_batch()
    assert min(engines.started) == state["next_prompt"]
    assert all(index_of(g) >= state["next_prompt"] for g in batch.groups)
    with pytest.raises(ValueError, match="next_prompt"):
        collector(engines).load_state_dict({"next_prompt": -1})


async def test_a_dead_rollout_path_fails_the_run_instead_of_waiting_forever() -> None:
    """Every attempt fails (the proxy is down): the breaker opens and `next_batch` raises
    `RolloutBroken` naming the failure, with every started group accounted for."""

    async def rollout(index: int, attempt: int) -> Group:
        raise GroupFailed("ConnectError", "POST /generate: ConnectError: connection refused")

    c = AsyncRolloutCollector(
        rollout,
        batch_size=2,
        concurrency=3,
        retry=no_backoff(1, breaker_after=4),
        staleness=StalenessConfig(),
    )
    async with c:
        with pytest.raises(
            RolloutBroken, match=r"4 prompt groups in a row.*failed attempts.*ConnectError \d+"
        ):
            await c.next_batch()
        with pytest.raises(RolloutBroken):
            await c.next_batch()
    stats = c.stats
    assert stats.totals.dropped_groups[RETRIES_EXHAUSTED] >= 4
    assert stats.groups_trained == 0
    assert stats.groups_started == sum(stats.totals.dropped_groups.values())
    assert set(stats.totals.dropped_groups) <= {RETRIES_EXHAUSTED, ROLLOUT_BROKEN, SHUTDOWN}


async def test_a_success_closes_the_breaker_count() -> None:
    """Drops that alternate with completed groups never open the breaker."""

    async def rollout(index: int, attempt: int) -> Group:
        if index % 2:
            raise GroupFailed("engine_error")
        return group_for(index, "v0")

    c = AsyncRolloutCollector(
        rollout,
        num_prompts=12,
        batch_size=6,
        concurrency=1,
        retry=no_backoff(0, breaker_after=2),
        staleness=StalenessConfig(),
    )
    async with c:
        batch = await c.next_batch()
    assert [index_of(g) for g in batch.groups] == [0, 2, 4, 6, 8, 10]
    assert batch.figures.dropped_groups == {RETRIES_EXHAUSTED: 5}


async def test_a_window_refusing_every_group_says_so_while_the_trainer_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Engines that keep producing a version the window has left behind: the trainer waits for
    a batch that never fills, and the log says how many groups were dropped, the window and
    the served version, instead of staying silent."""
    produced = 0
    enough = asyncio.Event()

    async def rollout(index: int, attempt: int) -> Group:
        nonlocal produced
        produced += 1
        if produced > 40:
            enough.set()
            await asyncio.Event().wait()  # parked until the collector is closed
        return group_for(index, "v2" if index == 0 else "v1")

    c = AsyncRolloutCollector(
        rollout,
        batch_size=2,
        concurrency=2,
        retry=no_backoff(0),
        staleness=StalenessConfig(keep_versions=1),
        admission=False,
    )
    c.on_weights_published("v1")
    async with c:
        waiting = asyncio.create_task(c.next_batch())
        await enough.wait()
        assert not waiting.done()
        waiting.cancel()
    warnings = [r.getMessage() for r in caplog.records if "dropped as stale" in r.getMessage()]
    assert warnings[0].startswith("16 prompt groups dropped as stale")
    assert "keepVersions 1) holds v2; the engines serve v1" in warnings[0]
    assert warnings[1].startswith("32 prompt groups")
