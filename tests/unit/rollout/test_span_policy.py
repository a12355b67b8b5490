"""`spanLimitPolicy`: `mask_old_tokens` on arbitrary trajectories, the job model's rules, what
the proxy and the collector are given, and the ledger's `masked` account."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from dressage.api.job import AsyncRLJob
from dressage.api.proxy_settings import proxy_settings
from dressage.data.groups import Group
from dressage.data.samples import Sample
from dressage.orchestrator.collectors import mask_keep_versions, retry_refused_of
from dressage.rollout import ledger
from dressage.rollout.collector import AsyncRolloutCollector
from dressage.rollout.retry import RetryPolicy
from dressage.rollout.span_policy import mask_old_tokens, newest_versions
from dressage.rollout.staleness import StalenessConfig

VERSIONS = ["v0", "v1", "v2", "v3", "v4"]


def trajectory(runs: list[tuple[int, int]], traj: str = "t0") -> Sample:
    """A response of `runs` (version index, tokens), versions only advancing."""
    versions = [VERSIONS[v] for v, n in sorted(runs) for _ in range(n)]
    return Sample.build(
        prompt_tokens=[1, 2],
        response_tokens=[7] * len(versions),
        response_versions=versions,
        rollout_log_probs=[-0.1] * len(versions),
        group_id="g",
        parent_traj_id=traj,
    )


runs = st.lists(
    st.tuples(st.integers(0, 4), st.integers(1, 5)),
    min_size=1,
    max_size=5,
    unique_by=lambda r: r[0],
)


@given(runs, st.integers(1, 4))
def test_only_tokens_older_than_the_newest_versions_leave_the_loss(
    response: list[tuple[int, int]], keep: int
) -> None:
    sample = trajectory(response)
    masked_group, masked = mask_old_tokens(Group("g", (sample,)), keep)
    (out,) = masked_group.samples
    newest = sorted({VERSIONS[v] for v, _ in response})[-keep:]
    assert newest_versions([sample], keep) == set(newest)
    assert out.tokens == sample.tokens  # every token stays as context
    for version, before, after in zip(
        sample.response_versions, sample.loss_mask, out.loss_mask, strict=True
    ):
        assert after == (before if version in newest else 0)
    assert masked == sum(sample.loss_mask) - sum(out.loss_mask)
    assert out.output_version_span <= sample.output_version_span


def test_a_multi_segment_trajectorys_versions_are_its_segments_together() -> None:
    first = trajectory([(0, 2), (1, 2)], "t0")
    second = trajectory([(2, 3)], "t0")
    second = Sample(**{**second.__dict__, "segment_index": 1})
    group, masked = mask_old_tokens(Group("g", (first, second)), keep=2)
    assert masked == 2  # v0's tokens, in the first segment
    assert group.samples[1] is second


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        mask_old_tokens(Group("g", ()), 0)


def job(staleness: dict[str, object]) -> AsyncRLJob:
    return AsyncRLJob.model_validate(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "j"},
            "spec": {
                "model": {"source": "builtin:tiny"},
                "task": {"name": "arithmetic"},
                "rollout": {"mode": "partial_async"},
                "staleness": staleness,
            },
        }
    )


def test_a_policy_without_a_span_limit_is_a_one_line_error_naming_the_field() -> None:
    with pytest.raises(ValidationError, match=r"staleness\.spanLimitPolicy 'mask_old_tokens'"):
        job({"spanLimitPolicy": "mask_old_tokens"})
    with pytest.raises(ValidationError, match="spanLimitPolicy"):
        job({"spanLimitPolicy": "drop_everything", "maxPartialRolloutPreempts": 1})


def test_each_policy_configures_the_proxy_the_agent_and_the_collector() -> None:
    refuse = job({"maxPartialRolloutPreempts": 2})
    assert refuse.spec.staleness.span_limit_policy.value == "refuse_group"  # the default
    assert proxy_settings(refuse)["max_partial_rollout_preempts"] == 2
    assert (retry_refused_of(refuse.spec), mask_keep_versions(refuse.spec)) == (0, None)
    retry = job({"maxPartialRolloutPreempts": 2, "spanLimitPolicy": "retry_trajectory"})
    assert proxy_settings(retry)["max_partial_rollout_preempts"] == 2
    assert retry_refused_of(retry.spec) > 0
    mask = job({"maxPartialRolloutPreempts": 2, "spanLimitPolicy": "mask_old_tokens"})
    assert proxy_settings(mask)["max_partial_rollout_preempts"] is None  # never refuses
    assert mask_keep_versions(mask.spec) == 3


async def test_the_collector_masks_at_the_sink_and_the_ledger_counts_masked_tokens() -> None:
    async def rollout(index: int, attempt: int) -> Group:
        await asyncio.sleep(0)
        return Group(f"p{index}", (trajectory([(0, 2), (1, 3), (2, 4)], f"p{index}"),))

    c = AsyncRolloutCollector(
        rollout,
        num_prompts=2,
        batch_size=2,
        concurrency=2,
        retry=RetryPolicy(max_retries=0),
        staleness=StalenessConfig(0),
        mask_keep_versions=2,
    )
    async with c:
        batch = await c.next_batch()
    assert batch.figures.ledger_tokens == {"trained": 14, "masked.old_version": 4}
    assert all(sum(s.loss_mask) == 7 for s in batch.samples)
    assert ledger.total(c.stats.totals.ledger_tokens) == 18


def test_in_auto_mode_the_preempt_limit_comes_from_the_lag_budget() -> None:
    """`mode: auto` with a policy and no `maxPartialRolloutPreempts`: the limit is the
    budget's `maxLagVersions`, so a trajectory spans at most the window the budget keeps."""
    auto = job(
        {"mode": "auto", "budget": {"maxLagVersions": 3}, "spanLimitPolicy": "mask_old_tokens"}
    )
    assert auto.spec.staleness.span_limit == 3
    assert mask_keep_versions(auto.spec) == 4
    retry = job({"mode": "auto", "spanLimitPolicy": "retry_trajectory"})
    assert proxy_settings(retry)["max_partial_rollout_preempts"] == 2  # the default budget's
    assert job({"mode": "auto"}).spec.staleness.span_limit is None  # no policy: unchanged
    assert job({"mode": "auto", "maxPartialRolloutPreempts": 1}).spec.staleness.span_limit == 1
    with pytest.raises(ValidationError, match="spanLimitPolicy needs partial rollout"):
        AsyncRLJob.model_validate(
            {
                "apiVersion": "dressage.io/v1alpha1",
                "kind": "AsyncRLJob",
                "metadata": {"name": "j"},
                "spec": {
                    "model": {"source": "builtin:tiny"},
                    "task": {"name": "arithmetic"},
                    "rollout": {"mode": "fully_async"},
                    "staleness": {"mode": "auto", "spanLimitPolicy": "retry_trajectory"},
                },
            }
        )
