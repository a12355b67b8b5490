"""Off-policy correction: weights, masks and mismatch metrics on small hand-checked tensors.

The batch used throughout has two sequences; on trained tokens the ratio
`exp(train - rollout)` is 1, 2, 4 in the first and 1/4, 2 in the second (5 trained tokens).
Padding carries non-finite logprobs, which must not leak into anything.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.api.job import OffPolicyCorrectionSpec
from dressage.trainer.correction import (
    MODES,
    CorrectionConfig,
    effective_sample_size,
    icepop_mask,
    mismatch_kl,
    off_policy_correction,
    sequence_geometric_mask,
    truncated_importance_weights,
)

LN2 = math.log(2.0)


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rollout = torch.tensor(
        [[-1.0, -2.0, -3.0, float("nan")], [-0.5, -1.5, float("-inf"), float("nan")]],
        dtype=torch.float64,
    )
    delta = torch.tensor([[0.0, LN2, 2 * LN2, 0.0], [-2 * LN2, LN2, 0.0, 0.0]], dtype=torch.float64)
    train = rollout + delta
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    return train, rollout, mask


def rows(t: torch.Tensor) -> list[list[float]]:
    return [[round(float(x), 9) for x in row] for row in t]


def test_truncated_importance_weights_clip_above_and_below() -> None:
    train, rollout, mask = batch()
    weights, clipped = truncated_importance_weights(train, rollout, mask, clip=2.0)
    assert rows(weights) == [[1.0, 2.0, 2.0, 0.0], [0.25, 2.0, 0.0, 0.0]]
    assert rows(clipped) == [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    weights, clipped = truncated_importance_weights(train, rollout, mask, clip=2.0, clip_low=0.5)
    assert rows(weights)[1] == [0.5, 2.0, 0.0, 0.0]
    assert float(clipped.sum()) == 2.0


def test_tis_correction_metrics() -> None:
    train, rollout, mask = batch()
    out = off_policy_correction(CorrectionConfig(mode="tis", tis_clip=2.0), train, rollout, mask)
    assert rows(out.weights) == [[1.0, 2.0, 2.0, 0.0], [0.25, 2.0, 0.0, 0.0]]
    assert rows(out.loss_mask) == [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    m = out.metrics
    assert m["tokens"] == 5.0
    assert m["clipped_fraction"] == pytest.approx(1 / 5)
    assert m["masked_fraction"] == 0.0
    # (1 + 2 + 2 + 0.25 + 2)^2 / (1 + 4 + 4 + 0.0625 + 4)
    assert m["ess"] == pytest.approx(7.25**2 / 13.0625)
    # log ratios 0, ln2, 2ln2, -2ln2, ln2: k1 = -(2 ln2) / 5
    assert m["mismatch_kl_k1"] == pytest.approx(-2 * LN2 / 5)
    # ratio - 1 - log ratio: 0, 1 - ln2, 3 - 2ln2, -0.75 + 2ln2, 1 - ln2
    assert m["mismatch_kl_k3"] == pytest.approx((4.25 - 2 * LN2) / 5)


def test_icepop_masks_tokens_outside_the_band_inclusive() -> None:
    train, rollout, mask = batch()
    kept = icepop_mask(train, rollout, mask, low=0.5, high=2.0)
    assert rows(kept) == [[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
    out = off_policy_correction(CorrectionConfig(mode="icepop"), train, rollout, mask)
    assert torch.equal(out.weights, kept)
    assert out.metrics["masked_fraction"] == pytest.approx(2 / 5)
    assert out.metrics["clipped_fraction"] == 0.0
    assert out.metrics["ess"] == pytest.approx(3.0)  # three weights of 1


def test_sequence_mask_uses_the_geometric_mean_over_trained_tokens() -> None:
    train, rollout, mask = batch()
    # Geometric means: (1 * 2 * 4)^(1/3) = 2 and (1/4 * 2)^(1/2) = 0.707...
    kept = sequence_geometric_mask(train, rollout, mask, low=0.8, high=2.5)
    assert rows(kept) == [[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    kept = sequence_geometric_mask(train, rollout, mask, low=0.7, high=1.9)
    assert rows(kept) == [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    out = off_policy_correction(
        CorrectionConfig(mode="seq_mask", low=0.8, high=2.5), train, rollout, mask
    )
    assert out.metrics["masked_fraction"] == pytest.approx(2 / 5)
    assert out.metrics["ess"] == pytest.approx(3.0)


def test_none_mode_weights_are_the_loss_mask_and_metrics_still_measure() -> None:
    train, rollout, mask = batch()
    out = off_policy_correction(CorrectionConfig(), train, rollout, mask)
    assert rows(out.weights) == [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    assert out.metrics["ess"] == 5.0
    assert out.metrics["mismatch_kl_k3"] == pytest.approx((4.25 - 2 * LN2) / 5)


def test_weights_carry_no_gradient() -> None:
    train, rollout, mask = batch()
    train = train.clone().requires_grad_(True)
    out = off_policy_correction(CorrectionConfig(mode="tis"), train, rollout, mask)
    assert not out.weights.requires_grad


def test_empty_batch_and_zero_weights_are_zero_not_nan() -> None:
    zeros = torch.zeros(2, 3, dtype=torch.float64)
    out = off_policy_correction(CorrectionConfig(mode="icepop"), zeros, zeros, zeros)
    assert out.metrics == {
        "mismatch_kl_k1": 0.0,
        "mismatch_kl_k3": 0.0,
        "clipped_fraction": 0.0,
        "masked_fraction": 0.0,
        "ess": 0.0,
        "tokens": 0.0,
    }
    k1, k3 = mismatch_kl(zeros, zeros, zeros)
    assert float(k1) == float(k3) == 0.0
    assert float(effective_sample_size(zeros, torch.ones(2, 3))) == 0.0


def test_bad_inputs_name_the_field() -> None:
    train, rollout, mask = batch()
    with pytest.raises(ValueError, match="loss_mask shape"):
        off_policy_correction(CorrectionConfig(), train, rollout, mask[:, :2])
    with pytest.raises(ValueError, match="mode"):
        CorrectionConfig(mode="is")
    with pytest.raises(ValueError, match="low"):
        CorrectionConfig(low=3.0, high=2.0)
    with pytest.raises(ValueError, match="tisClipLow"):
        CorrectionConfig(tis_clip=1.0, tis_clip_low=1.5)


def test_config_from_the_job_spec() -> None:
    spec = OffPolicyCorrectionSpec.model_validate({"mode": "icepop", "low": 0.25, "high": 4.0})
    assert CorrectionConfig.from_spec(spec) == CorrectionConfig(mode="icepop", low=0.25, high=4.0)
    assert CorrectionConfig.from_spec(OffPolicyCorrectionSpec()).mode == "none"
    with pytest.raises(ValueError, match="offPolicyCorrection"):
        OffPolicyCorrectionSpec.model_validate({"low": 3.0})


shapes = st.tuples(st.integers(1, 4), st.integers(1, 6))


@settings(max_examples=100, deadline=None)
@given(shape=shapes, data=st.data(), mode=st.sampled_from(MODES))
def test_identical_logprobs_need_no_correction(
    shape: tuple[int, int], data: st.DataObject, mode: str
) -> None:
    """When rollout and training agree, every weight is 1, nothing is clipped or masked, the
    KL estimates are 0 and the ESS is the trained token count."""
    count = shape[0] * shape[1]
    values = data.draw(st.lists(st.floats(-20.0, 0.0), min_size=count, max_size=count))
    bits = data.draw(st.lists(st.booleans(), min_size=count, max_size=count))
    logprobs = torch.tensor(values, dtype=torch.float64).reshape(shape)
    mask = torch.tensor(bits).reshape(shape)
    out = off_policy_correction(CorrectionConfig(mode=mode), logprobs, logprobs.clone(), mask)
    assert torch.equal(out.weights, mask.to(torch.float64))
    assert torch.equal(out.loss_mask, mask.to(torch.float64))
    m = out.metrics
    assert m["clipped_fraction"] == m["masked_fraction"] == 0.0
    assert m["mismatch_kl_k1"] == m["mismatch_kl_k3"] == 0.0
    assert m["ess"] == pytest.approx(float(sum(bits)))
    assert m["tokens"] == float(sum(bits))


@settings(max_examples=100, deadline=None)
@given(shape=shapes, data=st.data(), clip=st.floats(1.0, 5.0))
def test_weights_are_bounded_and_ess_at_most_the_token_count(
    shape: tuple[int, int], data: st.DataObject, clip: float
) -> None:
    count = shape[0] * shape[1]
    lps = st.lists(st.floats(-10.0, 0.0), min_size=count, max_size=count)
    train = torch.tensor(data.draw(lps), dtype=torch.float64).reshape(shape)
    rollout = torch.tensor(data.draw(lps), dtype=torch.float64).reshape(shape)
    bits = data.draw(st.lists(st.booleans(), min_size=count, max_size=count))
    mask = torch.tensor(bits).reshape(shape)
    out = off_policy_correction(CorrectionConfig(mode="tis", tis_clip=clip), train, rollout, mask)
    assert float(out.weights.max()) <= clip
    assert float(out.weights[~mask].abs().sum()) == 0.0
    assert out.metrics["ess"] <= out.metrics["tokens"] + 1e-9
    assert out.metrics["mismatch_kl_k3"] >= 0.0


def test_k3_is_not_negative_for_log_ratios_below_float_epsilon() -> None:
    """`exp(x) - 1 - x` rounds to `-x` when |x| is below float epsilon (hypothesis found a
    log-ratio of about 1e-38 giving k3 = -1.2e-38); the estimator is non-negative exactly."""
    train = torch.tensor([[-1e-30, -2.0]], dtype=torch.float64)
    rollout = torch.tensor([[-2e-30, -2.0]], dtype=torch.float64)
    mask = torch.ones_like(train, dtype=torch.bool)
    _, k3 = mismatch_kl(train, rollout, mask)
    assert float(k3) >= 0.0
