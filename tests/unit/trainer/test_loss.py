"""GRPO loss math on small hand-checked tensors: advantages, clipping, masks, logprob diff."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.trainer.loss import (
    LossInputs,
    chunked_token_logprobs_and_entropy,
    group_advantages,
    grpo_loss,
    masked_mean,
    token_logprobs_and_entropy,
)

LOG = math.log


def test_group_advantages_normalise_within_each_group() -> None:
    adv = group_advantages([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 2.0]], eps=0.0)
    assert adv[0] == pytest.approx([1.0, -1.0, -1.0, 1.0])
    s = math.sqrt(2.0 / 3.0)  # population std of 0, 1, 2
    assert adv[1] == pytest.approx([-1 / s, 0.0, 1 / s])


def test_group_advantages_eps_shrinks_towards_zero() -> None:
    (adv,) = group_advantages([[1.0, 0.0]], eps=0.5)
    assert adv == pytest.approx([0.5 / 1.0, -0.5 / 1.0])  # std 0.5 + eps 0.5


def test_group_with_equal_rewards_or_one_member_has_zero_advantage() -> None:
    assert group_advantages([[1.0, 1.0, 1.0], [0.0, 0.0], [3.0], []]) == [
        [0.0, 0.0, 0.0],
        [0.0, 0.0],
        [0.0],
        [],
    ]


def _hand_checked_inputs() -> LossInputs:
    # Row 0, advantage +1: token ratios 1 and 2 (the second is clipped to 1.2).
    # Row 1, advantage -1: token ratio 0.5 (clipped to 0.8), then a masked padding token whose
    # garbage rollout value would overflow exp() if it were not masked out.
    logprobs = torch.tensor([[LOG(0.5), LOG(0.5)], [LOG(0.25), 0.0]], requires_grad=True)
    rollout = torch.tensor([[LOG(0.5), LOG(0.25)], [LOG(0.5), -1000.0]])
    return LossInputs(
        logprobs=logprobs,
        rollout_logprobs=rollout,
        advantages=torch.tensor([1.0, -1.0]),
        loss_mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
        clip_epsilon=0.2,
    )


def test_clipped_surrogate_on_hand_checked_tensors() -> None:
    out = grpo_loss(_hand_checked_inputs())
    # per-token losses: -1 (ratio 1), -1.2 (2 clipped to 1.2), +0.8 (-min(-0.5, -0.8)).
    assert out.loss.item() == pytest.approx((-1.0 - 1.2 + 0.8) / 3)
    assert out.clip_fraction.item() == pytest.approx(2 / 3)
    assert out.logprob_abs_diff.item() == pytest.approx(2 * LOG(2) / 3)
    assert out.trained_tokens.item() == 3


def test_gradient_flows_only_through_unclipped_trained_tokens() -> None:
    inputs = _hand_checked_inputs()
    grpo_loss(inputs).loss.backward()
    grad = inputs.logprobs.grad
    assert grad is not None
    # d(-ratio * A / 3)/d logprob = -ratio * A / 3 for the unclipped token; 0 elsewhere.
    expected = torch.tensor([[-1.0 / 3, 0.0], [0.0, 0.0]])
    torch.testing.assert_close(grad, expected)
    assert torch.isfinite(grad).all()


def test_loss_denominator_uses_the_global_token_count() -> None:
    inputs = _hand_checked_inputs()
    local = grpo_loss(inputs).loss.item()
    wider = LossInputs(**{**inputs.__dict__, "loss_denominator": 6.0})
    assert grpo_loss(wider).loss.item() == pytest.approx(local * 3 / 6)


def test_token_weights_scale_each_tokens_surrogate_and_nothing_else() -> None:
    """Off-policy correction multiplies each trained token's surrogate by its weight; the
    denominator and the diagnostics stay those of the loss mask."""
    inputs = _hand_checked_inputs()
    weighted = LossInputs(
        **{**inputs.__dict__, "token_weights": torch.tensor([[0.5, 0.0], [2.0, 0.0]])}
    )
    out = grpo_loss(weighted)
    # per-token losses -1, -1.2, +0.8 weighted 0.5, 0, 2 over the same 3 trained tokens.
    assert out.loss.item() == pytest.approx((-0.5 + 0.0 + 1.6) / 3)
    assert out.clip_fraction.item() == pytest.approx(2 / 3)
    assert out.trained_tokens.item() == 3


def test_on_policy_batch_has_no_clipping_and_zero_logprob_diff() -> None:
    lp = torch.tensor([[-0.3, -1.2, -2.0]])
    out = grpo_loss(
        LossInputs(
            logprobs=lp,
            rollout_logprobs=lp.clone(),
            advantages=torch.tensor([2.0]),
            loss_mask=torch.tensor([[0.0, 1.0, 1.0]]),
        )
    )
    assert out.loss.item() == pytest.approx(-2.0)  # ratio 1 on both trained tokens
    assert out.clip_fraction.item() == 0.0
    assert out.logprob_abs_diff.item() == 0.0


def test_empty_mask_gives_zero_loss_not_nan() -> None:
    out = grpo_loss(
        LossInputs(
            logprobs=torch.zeros(1, 2),
            rollout_logprobs=torch.zeros(1, 2),
            advantages=torch.ones(1),
            loss_mask=torch.zeros(1, 2),
        )
    )
    assert out.loss.item() == 0.0
    assert out.logprob_abs_diff.item() == 0.0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("rollout_logprobs", torch.zeros(1, 3), "rollout_logprobs shape"),
        ("loss_mask", torch.zeros(2, 2), "loss_mask shape"),
        ("advantages", torch.zeros(2), "advantages must be"),
        ("logprobs", torch.zeros(2), "logprobs must be"),
    ],
)
def test_shape_errors_name_the_tensor(field: str, value: torch.Tensor, message: str) -> None:
    base = {
        "logprobs": torch.zeros(1, 2),
        "rollout_logprobs": torch.zeros(1, 2),
        "advantages": torch.zeros(1),
        "loss_mask": torch.zeros(1, 2),
    }
    base[field] = value
    with pytest.raises(ValueError, match=message):
        grpo_loss(LossInputs(**base))


def test_token_logprobs_and_entropy_of_uniform_and_peaked_logits() -> None:
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]])
    logprobs, entropy = token_logprobs_and_entropy(logits, torch.tensor([[2, 0]]))
    torch.testing.assert_close(logprobs, torch.tensor([[LOG(0.25), 0.0]]))
    torch.testing.assert_close(entropy, torch.tensor([[LOG(4.0), 0.0]]))


def test_masked_mean() -> None:
    values = torch.tensor([[1.0, 2.0], [3.0, 100.0]])
    assert masked_mean(values, torch.tensor([[1.0, 1.0], [1.0, 0.0]])).item() == 2.0


def test_chunked_logprobs_and_entropy_of_hand_checked_logits() -> None:
    # The head reads hidden [a, b] as logits [a, 0, 0, 0]: uniform at a=0, peaked at a=100.
    head = torch.zeros(4, 2)
    head[0, 0] = 1.0
    hidden = torch.tensor([[[0.0, 7.0], [100.0, -3.0]], [[100.0, 1.0], [0.0, 0.0]]])
    targets = torch.tensor([[2, 0], [1, 3]])
    for chunk in (1, 2, 3, 4, 100):
        logprobs, entropy = chunked_token_logprobs_and_entropy(
            hidden, lambda x: x @ head.T, targets, chunk
        )
        torch.testing.assert_close(logprobs, torch.tensor([[LOG(0.25), 0.0], [-100.0, LOG(0.25)]]))
        torch.testing.assert_close(entropy, torch.tensor([[LOG(4.0), 0.0], [0.0, LOG(4.0)]]))


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 3),
    t=st.integers(1, 5),
    h=st.integers(1, 4),
    v=st.integers(2, 7),
    chunk=st.integers(1, 16),
    seed=st.integers(0, 2**16),
)
def test_chunked_logprobs_equal_unchunked_values_and_gradients(
    b: int, t: int, h: int, v: int, chunk: int, seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(b, t, h, generator=gen, dtype=torch.float64)
    weight = torch.randn(v, h, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, v, (b, t), generator=gen)
    upstream = torch.randn(b, t, generator=gen, dtype=torch.float64)

    def run(chunked: bool) -> tuple[torch.Tensor, ...]:
        x = hidden.clone().requires_grad_(True)
        w = weight.clone().requires_grad_(True)
        if chunked:
            lp, ent = chunked_token_logprobs_and_entropy(x, lambda y: y @ w.T, targets, chunk)
        else:
            lp, ent = token_logprobs_and_entropy(x @ w.T, targets)
        (lp * upstream).sum().backward()
        assert x.grad is not None
        assert w.grad is not None
        return lp.detach(), ent, x.grad, w.grad

    for ours, theirs in zip(run(True), run(False), strict=True):
        torch.testing.assert_close(ours, theirs.to(ours.dtype), rtol=1e-5, atol=1e-6)


def test_chunked_logprobs_refuse_a_bad_chunk_size_or_shape() -> None:
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_token_logprobs_and_entropy(
            torch.zeros(1, 1, 2), torch.nn.Identity(), torch.zeros(1, 1, dtype=torch.long), 0
        )
    with pytest.raises(ValueError, match="targets"):
        chunked_token_logprobs_and_entropy(
            torch.zeros(1, 2, 2), torch.nn.Identity(), torch.zeros(1, 1, dtype=torch.long), 1
        )
