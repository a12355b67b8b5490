"""What a step reports of the reward comes from the batch it trained.

The issue this pins: a step's reward parts were means over every reward call since the last
step (groups still in flight, groups dropped), so a step showed reward 0.62 with parts 0.81
and 1.0; and reward failures were counted per call, so a step showed more failures than it had
samples. The samples now carry their reward's parts and failure (`Scored.metadata`, written by
the agent), and the batch's figures are computed from the batch's own samples.
"""

from __future__ import annotations

import asyncio
from statistics import fmean

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.agents.groups import with_reward_metadata
from dressage.data.groups import Group
from dressage.data.samples import Sample
from dressage.rollout.collector import AsyncRolloutCollector
from dressage.rollout.retry import RetryPolicy
from dressage.rollout.staleness import StalenessConfig
from dressage.rollout.stats import CollectorStats, reward_failures, reward_part_means
from dressage.tasks.base import Scored
from dressage.tasks.rewards import REWARD_RAISED, REWARD_TIMEOUT

WEIGHTS = {"correct": 1.0, "short": 0.5}


def _group(index: int, scores: list[Scored]) -> Group:
    """A group as the agent hands it over: the proxy's samples, then the reward metadata."""
    samples = tuple(
        Sample.build(
            prompt_tokens=[1],
            response_tokens=[2],
            response_versions=["v0"],
            rollout_log_probs=[-0.1],
            reward=s.value,
            group_id=f"p{index}",
            parent_traj_id=f"p{index}-t{j}",
        )
        for j, s in enumerate(scores)
    )
    group = Group(group_id=f"p{index}", samples=samples)
    return with_reward_metadata(group, {f"p{index}-t{j}": s for j, s in enumerate(scores)})


def _scored(correct: float, short: float) -> Scored:
    parts = {"correct": correct, "short": short}
    return Scored(sum(WEIGHTS[k] * v for k, v in parts.items()), parts)


async def test_reward_parts_are_means_over_the_trained_batch_not_over_every_call() -> None:
    # Prompt 0 is trained first; prompts 1-3 are scored meanwhile (in flight, queued) with
    # quite different parts. The first batch's parts are prompt 0's alone, and its reward is
    # their weighted sum, as the trainer computes it from the same samples.
    by_prompt = {
        0: [_scored(1.0, 0.2), _scored(0.0, 0.6)],
        1: [_scored(0.0, 1.0), _scored(0.0, 1.0)],
        2: [_scored(0.0, 1.0), _scored(0.0, 1.0)],
        3: [_scored(0.0, 1.0), _scored(0.0, 1.0)],
    }
    released = asyncio.Event()

    async def rollout(index: int, attempt: int) -> Group:
        if index > 0:
            await released.wait()
        return _group(index, by_prompt[index])

    collector = AsyncRolloutCollector(
        rollout,
        batch_size=1,
        concurrency=4,
        retry=RetryPolicy(),
        staleness=StalenessConfig(),
        num_prompts=4,
    )
    async with collector:
        first = await collector.next_batch()
        released.set()
        second = await collector.next_batch()
    parts = first.figures.reward_parts
    assert parts is not None
    assert parts == pytest.approx({"correct": 0.5, "short": 0.4})
    reward = fmean(first.rewards())
    assert reward == pytest.approx(sum(WEIGHTS[k] * v for k, v in parts.items()))
    assert second.figures.reward_parts == pytest.approx({"correct": 0.0, "short": 1.0})


async def test_reward_failures_count_the_batch_samples_trained_with_zero() -> None:
    # Two prompts of 4 samples: 3 failed reward calls in the first, none in the second. The
    # first batch says 3 (of its 4 samples), the second 0, whatever else was scored meanwhile.
    failed = Scored(0.0, failure=REWARD_RAISED)
    by_prompt = {
        0: [failed, failed, Scored(0.0, failure=REWARD_TIMEOUT), Scored(1.0)],
        1: [Scored(1.0)] * 4,
    }

    async def rollout(index: int, attempt: int) -> Group:
        return _group(index, by_prompt[index])

    collector = AsyncRolloutCollector(
        rollout,
        batch_size=1,
        concurrency=2,
        retry=RetryPolicy(),
        staleness=StalenessConfig(),
        num_prompts=2,
    )
    async with collector:
        first = await collector.next_batch()
        second = await collector.next_batch()
    assert first.figures.reward_failed_samples == {REWARD_RAISED: 2, REWARD_TIMEOUT: 1}
    assert not second.figures.reward_failed_samples
    assert second.figures.reward_parts is None  # a plain-number reward has no parts
    assert collector.stats.totals.reward_failed_samples == {REWARD_RAISED: 2, REWARD_TIMEOUT: 1}


@given(
    st.lists(
        st.tuples(
            st.none() | st.sampled_from([REWARD_RAISED, REWARD_TIMEOUT]),
            st.floats(0, 1),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_batch_reward_figures_never_exceed_the_batch_and_average_its_parts(
    outcomes: list[tuple[str | None, float]],
) -> None:
    scores = [
        Scored(0.0, failure=f) if f is not None else Scored(v, {"correct": v}) for f, v in outcomes
    ]
    group = _group(0, scores)
    stats = CollectorStats()
    figures = stats.batch([group], since=stats.snapshot()).figures
    assert sum(figures.reward_failed_samples.values()) <= len(group.samples)
    assert figures.reward_failed_samples == reward_failures(group.samples)
    values = [v for f, v in outcomes if f is None]
    if values:
        assert reward_part_means(group.samples) == pytest.approx({"correct": fmean(values)})
        assert figures.reward_parts == pytest.approx({"correct": fmean(values)})
    else:
        assert figures.reward_parts is None
