"""`version_span_histogram`: a batch's samples by output version span."""

from __future__ import annotations

from dressage.data.samples import Sample, version_span_histogram, version_span_stats


def _sample(*versions: str | None) -> Sample:
    n = len(versions)
    return Sample.build(
        prompt_tokens=[1],
        response_tokens=list(range(2, 2 + n)),
        response_versions=list(versions),
        rollout_log_probs=[-0.5] * n,
    )


def test_samples_are_counted_by_the_real_versions_their_responses_span() -> None:
    samples = [
        _sample("v1", "v1"),
        _sample("v1", "v2"),
        _sample("v2", "v3", "v4"),
        _sample("v3", "unknown", "v3"),  # a non-real label spans nothing
        _sample("unknown", None),  # no real version: not counted
    ]
    assert version_span_histogram(samples) == {
        "staleness/version_span_samples/1": 2.0,
        "staleness/version_span_samples/2": 1.0,
        "staleness/version_span_samples/3": 1.0,
    }
    assert version_span_stats(samples)["staleness/version_span_max"] == 3.0
    assert version_span_histogram([]) == {}
