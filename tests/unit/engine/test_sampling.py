"""Sampling returns the logprob of the distribution it actually drew from."""

from __future__ import annotations

import math

import torch

from dressage.engine.embedded.sampling import SamplingSpec, filtered_logprobs, request_seed, sample

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])


def test_greedy_returns_argmax_and_raw_log_softmax() -> None:
    token, logprob = sample(LOGITS, SamplingSpec(temperature=0.0), torch.Generator())
    assert token == 0
    assert math.isclose(logprob, float(torch.log_softmax(LOGITS, -1)[0]), rel_tol=1e-6)


def test_top_k_top_p_temperature_renormalise_over_kept_tokens() -> None:
    spec = SamplingSpec(temperature=0.5, top_k=3)
    logprobs = filtered_logprobs(LOGITS, spec)
    kept = torch.log_softmax(LOGITS[:3] / 0.5, -1)
    torch.testing.assert_close(logprobs[:3], kept)
    assert torch.isinf(logprobs[3:]).all()

    probs = torch.softmax(LOGITS, -1)  # about [.55, .20, .12, .07, .03, .004]
    spec = SamplingSpec(temperature=1.0, top_p=0.8)
    logprobs = filtered_logprobs(LOGITS, spec)
    assert torch.isfinite(logprobs[:3]).all()
    assert torch.isinf(logprobs[3:]).all()
    torch.testing.assert_close(logprobs[:3].exp(), probs[:3] / probs[:3].sum())


def test_sampled_logprob_is_that_of_the_sampling_distribution() -> None:
    spec = SamplingSpec(temperature=0.7, top_k=4, top_p=0.95)
    expected = filtered_logprobs(LOGITS, spec)
    gen = torch.Generator().manual_seed(1)
    for _ in range(50):
        token, logprob = sample(LOGITS, spec, gen)
        assert math.isfinite(logprob)
        assert logprob == float(expected[token])


def test_seeded_generators_reproduce_and_differ_across_seeds() -> None:
    spec = SamplingSpec(temperature=1.0)

    def draw(seed: int) -> list[int]:
        gen = torch.Generator().manual_seed(seed)
        return [sample(LOGITS, spec, gen)[0] for _ in range(30)]

    assert draw(request_seed(0, None, 1)) == draw(request_seed(0, None, 1))
    assert draw(request_seed(0, None, 1)) != draw(request_seed(0, None, 2))
    assert request_seed(0, 5, 1) == request_seed(0, 5, 99)  # sampling_seed ignores arrival
    assert request_seed(0, 5, 1) != request_seed(1, 5, 1)
