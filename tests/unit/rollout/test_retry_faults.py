"""The retry policy and the job's own code: a failure the job says to stop on stops rollout at
its first occurrence, unretried; a breaker opened by failing user code names that code and
where it raised, not the infrastructure."""

from __future__ import annotations

import pytest

from dressage.data.groups import Group, GroupFailed
from dressage.rollout.collector import AsyncRolloutCollector
from dressage.rollout.retry import GroupAttempts, RetryPolicy, RolloutBroken
from dressage.rollout.staleness import StalenessConfig
from dressage.rollout.stats import CollectorStats
from dressage.tasks.faults import UserCodeFailed, UserCodeFault, UserFrame
from dressage.tasks.rewards import STOP_SETTING, RewardError

FAULT = UserCodeFault(
    "spec.task.reward",
    "rewards:score",
    "reward_raised",
    "'answer'",
    error_type="KeyError",
    frame=UserFrame("/jobs/rewards.py", 9, "helper", 'row["answer"]'),
)
STEP = UserCodeFault(
    "spec.task.environment",
    "envs:Maze",
    "environment_raised",
    "oops",
    error_type="RuntimeError",
    call="step()",
    frame=UserFrame("/jobs/envs.py", 6, "step"),
)


async def _no_sleep(seconds: float) -> None:
    return None


async def test_a_failure_the_job_stops_on_opens_the_breaker_at_once() -> None:
    calls: list[tuple[int, int]] = []

    async def rollout(index: int, attempt: int) -> Group:
        calls.append((index, attempt))
        raise RewardError(FAULT, stop=STOP_SETTING)

    stats = CollectorStats()
    attempts = GroupAttempts(rollout, RetryPolicy(max_retries=3), stats, sleep=_no_sleep)
    assert await attempts.run(0) is None
    assert calls == [(0, 0)]
    assert stats.totals.retries == 0
    assert stats.totals.dropped_groups == {"rollout_broken": 1}
    assert str(attempts.broken) == (
        "rollout stopped at the first failure (spec.task.onRewardError is stop): "
        "spec.task.reward rewards:score raised KeyError: 'answer' (at /jobs/rewards.py:9, in "
        "helper)"
    )
    with pytest.raises(RolloutBroken):
        await attempts.run(1)
    assert calls == [(0, 0)]


async def test_the_collector_fails_its_batch_after_one_attempt() -> None:
    attempts: list[int] = []

    async def rollout(index: int, attempt: int) -> Group:
        attempts.append(index)
        raise RewardError(FAULT, stop=STOP_SETTING)

    collector = AsyncRolloutCollector(
        rollout,
        batch_size=4,
        concurrency=1,
        retry=RetryPolicy(max_retries=3, backoff_s=0.0, breaker_after=16),
        staleness=StalenessConfig(keep_versions=0),
    )
    async with collector:
        with pytest.raises(RolloutBroken, match=r"stopped at the first failure"):
            await collector.next_batch()
    assert attempts == [0]


async def test_a_breaker_opened_by_user_code_names_it_not_the_infrastructure() -> None:
    async def rollout(index: int, attempt: int) -> Group:
        raise UserCodeFailed(STEP)

    attempts = GroupAttempts(
        rollout, RetryPolicy(max_retries=1, breaker_after=2), CollectorStats(), sleep=_no_sleep
    )
    assert await attempts.run(0) is None
    assert await attempts.run(1) is None
    message = str(attempts.broken)
    assert message.endswith(
        "4 failed attempts since a group last completed (all groups in flight), by reason: "
        "environment_raised 4. User code failed: spec.task.environment envs:Maze: "
        "step() raised RuntimeError: oops (at /jobs/envs.py:6, in step) (4 failed attempts)."
    )
    assert "proxy" not in message


async def test_user_code_and_infrastructure_failures_together_name_both() -> None:
    async def rollout(index: int, attempt: int) -> Group:
        if attempt == 0:
            raise UserCodeFailed(STEP)
        raise GroupFailed("no_healthy_engine")

    attempts = GroupAttempts(
        rollout, RetryPolicy(max_retries=1, breaker_after=1), CollectorStats(), sleep=_no_sleep
    )
    assert await attempts.run(0) is None
    message = str(attempts.broken)
    assert "User code failed: spec.task.environment envs:Maze: step() raised" in message
    assert message.endswith("(1 failed attempts). Is the proxy or an engine down?")


async def test_infrastructure_failures_keep_their_hint() -> None:
    async def rollout(index: int, attempt: int) -> Group:
        raise GroupFailed("no_healthy_engine")

    attempts = GroupAttempts(
        rollout, RetryPolicy(max_retries=0, breaker_after=1), CollectorStats(), sleep=_no_sleep
    )
    assert await attempts.run(0) is None
    assert str(attempts.broken).endswith(
        "1 failed attempt since a group last completed (all groups in flight), by reason: "
        "no_healthy_engine 1. Is the proxy, an engine or the agent program down?"
    )


async def test_a_success_forgets_the_user_code_failures_before_it() -> None:
    async def rollout(index: int, attempt: int) -> Group:
        if index == 0 and attempt == 0:
            raise UserCodeFailed(STEP)
        if index == 0:
            return Group(group_id="p0", samples=())
        raise GroupFailed("no_healthy_engine")

    attempts = GroupAttempts(
        rollout, RetryPolicy(max_retries=0, breaker_after=1), CollectorStats(), sleep=_no_sleep
    )
    assert await attempts.run(0) is None  # its only attempt failed: dropped, breaker opens
    assert "User code failed" in str(attempts.broken)
    retried = GroupAttempts(
        rollout, RetryPolicy(max_retries=1, breaker_after=1), CollectorStats(), sleep=_no_sleep
    )
    assert await retried.run(0) is not None  # failed once, then succeeded
    assert await retried.run(1) is None
    assert "User code" not in str(retried.broken)
