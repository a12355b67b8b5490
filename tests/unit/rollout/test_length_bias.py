"""The length figures: what was generated against what was trained, and drops by length.

Dropping stale groups biases training toward short responses when the groups a staleness
verdict drops are the ones with a long member. These tests pin how that shows per step: the
completed groups' samples and their lengths (`generated_samples`,
`generated_samples_by_length`), the samples of groups the sink then dropped by length
(`dropped_samples_by_length`), and the mean lengths generated and trained
(`length/generated_mean_tokens`, `length/trained_mean_tokens`).
"""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from dressage.api.figures import LENGTH_BUCKETS, StepFigures, figure, length_bucket, line_parts
from dressage.data.groups import Group
from dressage.data.samples import Sample
from dressage.rollout.collector import AsyncRolloutCollector
from dressage.rollout.retry import RetryPolicy
from dressage.rollout.staleness import StalenessConfig
from dressage.rollout.stats import CollectorStats, response_length_buckets


def _group(index: int, version: str, lengths: list[int]) -> Group:
    samples = tuple(
        Sample.build(
            prompt_tokens=[1, 2],
            response_tokens=[3] * n,
            response_versions=[version] * n,
            rollout_log_probs=[-0.1] * n,
            reward=float(j),
            group_id=f"p{index}",
            parent_traj_id=f"p{index}-{j}",
        )
        for j, n in enumerate(lengths)
    )
    return Group(group_id=f"p{index}", samples=samples)


@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=10_000))
def test_length_buckets_are_ordered_like_the_lengths(a: int, b: int) -> None:
    """Every length has one bucket, and a longer response never lands in a shorter bucket."""
    assert length_bucket(a) in LENGTH_BUCKETS
    if a <= b:
        assert LENGTH_BUCKETS.index(length_bucket(a)) <= LENGTH_BUCKETS.index(length_bucket(b))


def test_bucket_bounds_are_inclusive() -> None:
    assert [length_bucket(n) for n in (1, 16, 17, 64, 65, 256, 257)] == [
        "le16",
        "le16",
        "le64",
        "le64",
        "le256",
        "le256",
        "gt256",
    ]


def test_generated_and_dropped_samples_are_counted_by_length() -> None:
    stats = CollectorStats()
    before = stats.snapshot()
    kept, dropped = _group(0, "v0", [4, 8, 8]), _group(1, "v0", [4, 8, 160])
    stats.completed(kept)
    stats.completed(dropped)
    stats.dropped_at_sink(dropped, "stale_version")
    figures = stats.batch([kept], since=before).figures
    assert figures.generated_samples == 6
    assert figures.generated_tokens == 20 + 172
    assert figures.generated_samples_by_length == {"le16": 5, "le256": 1}
    assert figures.dropped_samples_by_length == {"le16": 2, "le256": 1}
    assert figures.dropped_groups == {"stale_version": 1}
    # The next batch counts only what happened since.
    later = stats.batch([], since=stats.snapshot()).figures
    assert later.generated_samples == 0
    assert not later.dropped_samples_by_length


def test_the_mean_lengths_generated_and_trained_are_ratios_of_the_step() -> None:
    """Generated 6 samples of 192 tokens, trained 3 of 20: the step shows 32.0 against 6.7,
    in its record and its step line."""
    figures = StepFigures(generated_tokens=192, generated_samples=6)
    figures = figures.with_trainer_figures({"trained_tokens": 20, "samples": 3}).with_ratios()
    assert figures.generated_mean_tokens == 32.0
    assert figures.trained_mean_tokens is not None
    assert round(figures.trained_mean_tokens, 3) == 6.667
    record = figures.record()
    assert record["length/generated_mean_tokens"] == 32.0
    assert "len_gen 32.0" in line_parts(figures)
    assert "len 6.7" in line_parts(figures)
    assert figure("trained_mean_tokens").metric == "dressage_length_trained_mean_tokens"
    assert StepFigures().with_ratios().generated_mean_tokens is None  # nothing generated


@given(st.lists(st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=8)))
def test_buckets_count_each_sample_once(groups: list[list[int]]) -> None:
    stats = CollectorStats()
    for i, lengths in enumerate(groups):
        stats.completed(_group(i, "v0", lengths))
    assert sum(stats.totals.generated_samples_by_length.values()) == sum(map(len, groups))
    assert stats.totals.generated_samples == sum(map(len, groups))
    for i, lengths in enumerate(groups):
        assert sum(response_length_buckets(_group(i, "v0", lengths)).values()) == len(lengths)


async def test_the_sink_counts_the_lengths_of_the_groups_it_drops() -> None:
    """A long v0 group finishing after v1 groups filled the window is dropped as stale, and a
    pending v0 group is removed when a v2 group advances the window: both show by length."""
    versions = {0: "v0", 1: "v1", 2: "v1", 3: "v0", 4: "v2", 5: "v2", 6: "v2"}
    lengths = {0: [4, 4], 1: [4, 4], 2: [4, 4], 3: [4, 200], 4: [4, 4], 5: [4, 4], 6: [4, 4]}
    gates = {i: asyncio.Event() for i in versions}

    async def rollout(index: int, attempt: int) -> Group:
        await gates[index].wait()
        return _group(index, versions[index], lengths[index])

    c = AsyncRolloutCollector(
        rollout,
        batch_size=2,
        concurrency=7,
        retry=RetryPolicy(max_retries=0, backoff_s=0.0),
        staleness=StalenessConfig(keep_versions=1),
        admission=False,
        num_prompts=7,
    )
    async with c:
        for i in (0, 1):
            gates[i].set()
        await asyncio.sleep(0.01)
        gates[2].set()
        first = await c.next_batch()  # 0 (v0) pending, then dropped when v1 arrives
        gates[3].set()  # v0, long: stale
        for i in (4, 5):
            gates[i].set()
        second = await c.next_batch()
    assert [g.group_id for g in first.groups] == ["p1", "p2"]
    assert [g.group_id for g in second.groups] == ["p4", "p5"]
    dropped = c.stats.totals.dropped_samples_by_length
    assert dropped == {"le16": 3, "le256": 1}
    assert c.stats.totals.dropped_groups["window_advanced"] == 1
    assert c.stats.totals.dropped_groups["stale_version"] == 1
    assert sum(dropped.values()) == 4  # two groups of two samples; shutdown drops not counted
