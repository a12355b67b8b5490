"""Samples to padded tensors: shifted alignment, loss masks, advantages and sharding."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dressage.data.groups import Group, TrainBatch
from dressage.rollout.artifacts.samples import Sample
from dressage.trainer.batch import (
    ScoredSample,
    micro_batches,
    score_batch,
    shard,
    to_tensors,
)


def padded_tokens(scored: list[ScoredSample]) -> int:
    """Tokens of `scored` once padded to its longest sample (what the model processes, and what
    `micro_batches` bounds)."""
    return len(scored) * max((len(s.sample.tokens) for s in scored), default=0)


def _sample(
    tokens: list[int], response: int, mask: list[int], lps: list[float], **kw: object
) -> Sample:
    versions = kw.pop("versions", ["v1"] * response)
    return Sample.build(
        prompt_tokens=tokens[:-response],
        response_tokens=tokens[-response:],
        response_versions=versions,  # type: ignore[arg-type]
        rollout_log_probs=lps,
        loss_mask=mask,
        **kw,
    )


def test_response_tokens_align_with_the_logits_that_predict_them() -> None:
    a = _sample([10, 11, 12, 13], 2, [1, 0], [-0.5, -0.7])
    b = _sample([20, 21, 22], 1, [1], [-0.1])
    t = to_tensors([ScoredSample(a, 1.5), ScoredSample(b, -1.0)], pad_id=0)
    assert t.input_ids.tolist() == [[10, 11, 12, 13], [20, 21, 22, 0]]
    assert t.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert t.targets.tolist() == [[11, 12, 13], [21, 22, 0]]
    # Response token 12 is predicted at position 1; token 13 is masked by the sample.
    assert t.loss_mask.tolist() == [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    torch.testing.assert_close(
        t.rollout_logprobs, torch.tensor([[0.0, -0.5, 0.0], [0.0, -0.1, 0.0]])
    )
    assert t.advantages.tolist() == [1.5, -1.0]


def test_score_batch_normalises_per_group() -> None:
    g1 = Group(
        "a",
        (_sample([1, 2], 1, [1], [0.0], reward=1.0), _sample([1, 3], 1, [1], [0.0], reward=0.0)),
    )
    g2 = Group(
        "b",
        (_sample([1, 2], 1, [1], [0.0], reward=1.0), _sample([1, 3], 1, [1], [0.0], reward=1.0)),
    )
    scored = score_batch(TrainBatch(groups=(g1, g2)))
    assert [round(s.advantage, 4) for s in scored] == [1.0, -1.0, 0.0, 0.0]


def test_mask_nonlast_version_tokens_masks_older_versions() -> None:
    s = _sample(
        [1, 2, 3, 4], 3, [1, 1, 1], [0.0, 0.0, 0.0], versions=["v1", "v2", "v2"], reward=1.0
    )
    group = Group("g", (s,))
    plain = score_batch(TrainBatch(groups=(group,)))
    masked = score_batch(TrainBatch(groups=(group,)), mask_nonlast_version=True)
    assert plain[0].sample.loss_mask == (1, 1, 1)
    assert masked[0].sample.loss_mask == (0, 1, 1)


def test_shard_interleaves_and_mutes_an_empty_rank() -> None:
    scored = [ScoredSample(_sample([1, 2], 1, [1], [0.0]), float(i)) for i in range(3)]
    assert [s.advantage for s in shard(scored, 0, 2)] == [0.0, 2.0]
    assert [s.advantage for s in shard(scored, 1, 2)] == [1.0]
    (muted,) = shard(scored[:1], 1, 2)
    assert muted.sample.loss_mask == (0,)
    assert muted.advantage == 0.0


def test_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="empty batch"):
        to_tensors([], pad_id=0)


def _of_length(n: int, tag: int) -> ScoredSample:
    return ScoredSample(_sample([tag] * n, 1, [1], [-1.0]), float(tag))


def test_micro_batches_respect_the_token_budget_and_group_similar_lengths() -> None:
    items = [_of_length(n, i) for i, n in enumerate([3, 9, 4, 9, 2, 20])]
    parts = micro_batches(items, 18)
    # Longest first: the 20-token sample alone (over budget), then 9+9, then 4+3+2 (padded 12).
    assert [[len(s.sample.tokens) for s in p] for p in parts] == [[20], [9, 9], [4, 3, 2]]
    assert [padded_tokens(p) for p in parts] == [20, 18, 12]


@given(st.lists(st.integers(2, 30), min_size=1, max_size=20), st.integers(1, 64))
def test_micro_batches_partition_the_samples_within_budget(lengths: list[int], budget: int) -> None:
    items = [_of_length(n, i) for i, n in enumerate(lengths)]
    parts = micro_batches(items, budget)
    flat = sorted(s.advantage for p in parts for s in p)
    assert flat == sorted(s.advantage for s in items)
    assert all(len(p) == 1 or padded_tokens(p) <= budget for p in parts)


def test_micro_batch_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="maxTokensPerMicroBatch"):
        micro_batches([_of_length(3, 0)], 0)
