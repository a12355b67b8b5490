"""Training samples: version metadata, span compression, masking and batch statistics."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.data.versions import normalize_version, version_span, version_switches
from dressage.rollout.artifacts.samples import (
    VERSION_SPAN_MAX,
    VERSION_SPAN_MEAN,
    VERSION_SPAN_MIN,
    Sample,
    VersionSpan,
    compress_versions,
    expand_version_spans,
    mask_nonlast_version_tokens,
    version_span_stats,
)

labels = st.one_of(
    st.none(),
    st.sampled_from(["v1", "v2", "v10", "a", "b", "", "unknown", "-1"]),
    st.integers(min_value=-1, max_value=5),
)


def _sample(versions: list[object], mask: list[int] | None = None, prompt: int = 2) -> Sample:
    return Sample.build(
        prompt_tokens=list(range(prompt)),
        response_tokens=list(range(100, 100 + len(versions))),
        response_versions=versions,
        rollout_log_probs=[-0.5] * len(versions),
        loss_mask=mask,
        parent_traj_id="t0",
    )


@given(st.lists(labels, max_size=40))
def test_version_spans_round_trip_a_samples_full_versions(versions: list[object]) -> None:
    sample = _sample(versions, prompt=0)
    normalized = [normalize_version(v) for v in versions]
    assert list(sample.full_versions) == normalized
    spans = sample.version_spans
    assert expand_version_spans(spans) == normalized
    assert compress_versions(normalized) == spans
    # Runs are maximal: neighbours never share a version.
    assert all(a.version != b.version for a, b in itertools.pairwise(spans))


def test_non_real_labels_are_not_versions() -> None:
    for label in (None, "", "unknown", "-1", -1, "  "):
        assert normalize_version(label) is None
    assert normalize_version(3) == normalize_version("3") == "3"
    assert version_span(["v2", None, "v1", "v2", "-1"]) == 2
    assert version_switches([]) == 0
    assert version_switches(["a", "b", "c"]) == 2


def test_start_and_end_token_versions_follow_trainable_tokens() -> None:
    sample = _sample(["v1", "v1", "v2", "v3"], mask=[0, 1, 1, 0])
    assert sample.full_versions == (None, None, "v1", "v1", "v2", "v3")
    assert sample.dressage_start_token_version == "v1"
    assert sample.dressage_end_token_version == "v2"
    assert sample.version_spans == [
        VersionSpan(None, 2),
        VersionSpan("v1", 2),
        VersionSpan("v2", 1),
        VersionSpan("v3", 1),
    ]
    assert sample.to_dict()["version_spans"] == [[None, 2], ["v1", 2], ["v2", 1], ["v3", 1]]


def test_end_token_version_skips_tokens_without_real_version() -> None:
    sample = _sample(["v1", "unknown"])
    assert sample.dressage_end_token_version == "v1"
    assert _sample(["", -1]).dressage_end_token_version is None


def test_mask_nonlast_version_tokens_trains_only_the_last_version() -> None:
    sample = _sample(["v1", "v2", None, "v2", "v3", "v3"], mask=[1, 1, 0, 1, 1, 1])
    masked = mask_nonlast_version_tokens(sample)
    assert masked.loss_mask == (0, 0, 0, 0, 1, 1)
    assert masked.dressage_start_token_version == "v3"
    assert masked.dressage_end_token_version == "v3"
    # Observation order, not label order, decides the last version.
    out_of_order = _sample(["v9", "v10"])
    assert mask_nonlast_version_tokens(out_of_order).loss_mask == (0, 1)


def test_mask_nonlast_version_tokens_keeps_unversioned_samples() -> None:
    sample = _sample([None, "unknown"], mask=[1, 1])
    assert mask_nonlast_version_tokens(sample) == sample


def test_batch_version_span_stats() -> None:
    batch = [_sample(["a", "b", "c"]), _sample(["a"]), _sample(["b", "b", "c"]), _sample([None])]
    stats = version_span_stats(batch)
    assert stats == {VERSION_SPAN_MEAN: 2.0, VERSION_SPAN_MAX: 3.0, VERSION_SPAN_MIN: 1.0}
    assert version_span_stats([_sample([None])]) == {}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"loss_mask": (1,), "rollout_log_probs": (), "response_length": 1},
        {"loss_mask": (2,), "rollout_log_probs": (0.0,), "response_length": 1},
        {"loss_mask": (1,), "rollout_log_probs": (0.0,), "response_length": 5},
    ],
)
def test_inconsistent_samples_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"loss_mask|rollout_log_probs|response_length"):
        Sample(tokens=(1, 2), full_versions=(None, None), **kwargs)  # type: ignore[arg-type]
