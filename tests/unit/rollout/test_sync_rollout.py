"""The synchronous collector's bookkeeping: retries, drops by reason, the breaker, data position.

The agent layer is replaced by an in-process group rollout (the seam between agents and
rollout); the HTTP path through the proxy is covered by the integration tests.
"""

from __future__ import annotations

import pytest

from dressage.data.groups import Group, GroupFailed
from dressage.data.samples import Sample
from dressage.rollout.retry import RetryPolicy, RolloutBroken
from dressage.rollout.sync_rollout import SyncCollector


class Agent:
    """Groups of 3 samples; prompts in `failing` fail with `reason` on every attempt."""

    def __init__(self, failing: set[int], reason: str = "engine_unavailable", *, stale=False):
        self.failing = failing
        self.reason = reason
        self.stale = stale
        self.attempts: list[tuple[int, int]] = []

    async def __call__(self, index: int, attempt: int) -> Group:
        self.attempts.append((index, attempt))
        if index in self.failing:
            raise GroupFailed(self.reason, "HTTP 503", staleness=self.stale)
        group_id = f"p{index}-a{attempt}"
        samples = tuple(
            Sample.build(
                prompt_tokens=[10 + index],
                response_tokens=[j],
                response_versions=["v0"],
                rollout_log_probs=[-1.0],
                reward=float(j % 2),
                group_id=group_id,
                parent_traj_id=f"{group_id}-t{j}",
            )
            for j in range(3)
        )
        return Group(group_id=group_id, samples=samples)


def _collector(agent: Agent, batch_size: int = 2, breaker_after: int = 64) -> SyncCollector:
    return SyncCollector(
        agent,
        batch_size=batch_size,
        concurrency=4,
        retry=RetryPolicy(max_retries=2, backoff_s=0.0, breaker_after=breaker_after),
    )


async def test_full_groups_with_rewards_and_the_data_position() -> None:
    collector = _collector(Agent(failing=set()))
    batch = await collector.next_batch()
    assert [g.group_id for g in batch.groups] == ["p0-a0", "p1-a0"]
    assert all(len(g.samples) == 3 for g in batch.groups)
    assert batch.figures.dropped_groups == {}
    assert collector.state_dict() == {"next_prompt": 2}


async def test_a_failing_group_is_retried_then_dropped_and_replaced() -> None:
    agent = Agent(failing={1})
    collector = _collector(agent)
    batch = await collector.next_batch()
    assert [g.group_id for g in batch.groups] == ["p0-a0", "p2-a0"]
    assert batch.figures.dropped_groups == {"retries_exhausted": 1}
    assert batch.figures.total("failed_attempts") == 3  # 1 attempt + 2 retries
    assert batch.figures.retries == 2
    assert batch.figures.failed_attempts == {"engine_unavailable": 3}
    assert batch.figures.staleness_failures == 0
    assert [a for a in agent.attempts if a[0] == 1] == [(1, 0), (1, 1), (1, 2)]
    assert collector.state_dict() == {"next_prompt": 3}
    stats = collector.stats
    assert stats.groups_started == stats.groups_trained + sum(stats.totals.dropped_groups.values())


async def test_staleness_refusals_are_counted() -> None:
    agent = Agent(failing={0}, reason="partial_rollout_staleness_exceeded", stale=True)
    batch = await _collector(agent, batch_size=1).next_batch()
    assert batch.figures.staleness_failures == 3


async def test_a_dead_rollout_path_opens_the_breaker() -> None:
    agent = Agent(failing=set(range(1000)), reason="ConnectError")
    collector = _collector(agent, batch_size=2, breaker_after=5)
    with pytest.raises(RolloutBroken, match=r"in a row.*ConnectError"):
        await collector.next_batch()
    # Every prompt tried got its attempts; none beyond the breaker's count was started anew.
    stats = collector.stats
    assert stats.groups_started <= 6
    assert stats.groups_trained == 0
    assert stats.groups_started == sum(stats.totals.dropped_groups.values())


async def test_resume_from_state_continues_the_prompt_stream() -> None:
    collector = _collector(Agent(failing=set()))
    collector.load_state_dict({"next_prompt": 7})
    batch = await collector.next_batch()
    assert [g.group_id for g in batch.groups] == ["p7-a0", "p8-a0"]
    with pytest.raises(ValueError, match="next_prompt"):
        collector.load_state_dict({"next_prompt": -2})
