"""The retry policy: backoff with jitter, failures counted by reason, the breaker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.data.groups import Group, GroupFailed
from dressage.rollout.retry import GroupAttempts, RetryPolicy, RolloutBroken
from dressage.rollout.stats import CollectorStats


def test_backoff_doubles_is_capped_and_jittered_by_half_either_way() -> None:
    policy = RetryPolicy(backoff_s=0.5, max_backoff_s=3.0)
    assert policy.delay(0, 0.99) == 0.0
    assert [policy.delay(k, 0.5) for k in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.delay(1, 0.0) == 0.25
    assert policy.delay(2, 0.999) == pytest.approx(1.499)


@given(attempt=st.integers(1, 40), jitter=st.floats(0, 1, exclude_max=True))
def test_every_delay_stays_within_half_and_one_and_a_half_of_its_base(
    attempt: int, jitter: float
) -> None:
    policy = RetryPolicy(backoff_s=0.25, max_backoff_s=8.0)
    base = min(8.0, 0.25 * 2 ** (attempt - 1))
    assert 0.5 * base <= policy.delay(attempt, jitter) <= 1.5 * base


@pytest.mark.parametrize(
    ("field", "value"), [("max_retries", -1), ("backoff_s", -0.1), ("breaker_after", 0)]
)
def test_invalid_policies_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        RetryPolicy(**{field: value})  # type: ignore[arg-type]


async def test_attempts_wait_the_policy_delays_and_count_by_reason() -> None:
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    async def rollout(index: int, attempt: int) -> Group:
        if attempt < 2:
            raise GroupFailed("engine_error" if attempt == 0 else "stale", staleness=attempt == 1)
        return Group(group_id=f"p{index}", samples=())

    stats = CollectorStats()
    attempts = GroupAttempts(
        rollout, RetryPolicy(max_retries=3, backoff_s=1.0), stats, sleep=sleep, jitter=lambda: 0.5
    )
    group = await attempts.run(7)
    assert group is not None
    assert group.group_id == "p7"
    assert waited == [1.0]  # the retry after the staleness refusal starts at once
    assert stats.totals.retries == 2
    assert stats.totals.failed_attempts == {"engine_error": 1, "stale": 1}
    assert stats.totals.failed_groups == {"engine_error": 1, "stale": 1}
    assert stats.totals.staleness_failures == 1
    assert stats.groups_completed == 1


async def test_the_breaker_opens_after_consecutive_drops_and_stays_open() -> None:
    async def rollout(index: int, attempt: int) -> Group:
        raise GroupFailed("no_healthy_engine")

    stats = CollectorStats()
    attempts = GroupAttempts(
        rollout, RetryPolicy(max_retries=1, backoff_s=0.0, breaker_after=3), stats
    )
    assert await attempts.run(0) is None
    assert await attempts.run(1) is None
    assert attempts.broken is None
    assert await attempts.run(2) is None
    assert attempts.broken is not None
    assert "6 failed attempts since a group last completed" in str(attempts.broken)
    assert "by reason: no_healthy_engine 6." in str(attempts.broken)
    with pytest.raises(RolloutBroken):
        await attempts.run(3)
    assert stats.totals.dropped_groups == {"retries_exhausted": 3, "rollout_broken": 1}


async def test_failures_are_counted_per_attempt_and_per_group_under_their_own_names() -> None:
    # Two groups, each failing all of its 4 attempts: 8 failed attempts, 2 failed groups, 2
    # dropped; the step figures say which is which (each retry counts one attempt, a group
    # counts once per reason).
    async def rollout(index: int, attempt: int) -> Group:
        raise GroupFailed("reward_raised")

    stats = CollectorStats()
    attempts = GroupAttempts(rollout, RetryPolicy(max_retries=3, backoff_s=0.0), stats)
    assert await attempts.run(0) is None
    assert await attempts.run(1) is None
    assert stats.totals.failed_attempts == {"reward_raised": 8}
    assert stats.totals.failed_groups == {"reward_raised": 2}
    assert stats.totals.dropped_groups == {"retries_exhausted": 2}
    assert stats.totals.retries == 6
