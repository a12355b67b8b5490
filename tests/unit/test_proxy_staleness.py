"""The partial-rollout span limit and the non-partial refusal (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.proxy.staleness import (
    PartialRolloutStalenessExceeded,
    VersionChangedWithoutPartialRollout,
    _raise_if_partial_version_span_exceeded,
    partial_version_span_detail,
    raise_if_version_changed,
)


def test_three_versions_pass_with_two_preempts_and_the_fourth_is_refused() -> None:
    _raise_if_partial_version_span_exceeded(["1", "1", "2"], ["2", "3"], 2)
    with pytest.raises(PartialRolloutStalenessExceeded) as info:
        _raise_if_partial_version_span_exceeded(["1", "2"], ["3", "4"], 2)
    assert info.value.detail == {
        "versions": ["1", "2", "3", "4"],
        "version_span": 4,
        "version_switches": 3,
        "max_preempts": 2,
        "max_version_span": 3,
    }
    assert info.value.error_name == "partial_rollout_staleness_exceeded"
    assert info.value.status == 502


def test_versions_are_merged_in_observation_order_and_non_real_ones_dropped() -> None:
    detail = partial_version_span_detail(
        ["10", None, "unknown", "9"], ["-1", "", "10", 2], max_preempts=5
    )
    assert detail["versions"] == ["10", "9", "2"]
    assert detail["version_span"] == 3
    assert detail["version_switches"] == 2


def test_no_real_version_never_refuses() -> None:
    _raise_if_partial_version_span_exceeded([None, "unknown"], ["-1", ""], 0)


def test_limit_zero_allows_one_version_and_none_disables() -> None:
    _raise_if_partial_version_span_exceeded(["a"], ["a"], 0)
    with pytest.raises(PartialRolloutStalenessExceeded):
        _raise_if_partial_version_span_exceeded(["a"], ["b"], 0)
    _raise_if_partial_version_span_exceeded(list("abcdefgh"), ["z"], None)


@given(
    st.lists(st.sampled_from(["1", "2", "3", "4", "5", None, "unknown", "-1"]), max_size=12),
    st.lists(st.sampled_from(["1", "2", "3", "4", "5", None, "unknown", "-1"]), max_size=12),
    st.integers(min_value=0, max_value=5),
)
def test_refused_exactly_when_switches_exceed_the_limit(
    session: list[str | None], candidate: list[str | None], limit: int
) -> None:
    real = {v for v in [*session, *candidate] if v not in (None, "unknown", "-1")}
    if max(0, len(real) - 1) > limit:
        with pytest.raises(PartialRolloutStalenessExceeded) as info:
            _raise_if_partial_version_span_exceeded(session, candidate, limit)
        assert info.value.detail["version_span"] == len(real)
    else:
        _raise_if_partial_version_span_exceeded(session, candidate, limit)


def test_non_partial_refuses_a_second_version() -> None:
    raise_if_version_changed(["3", "3"], ["3", None])
    raise_if_version_changed([], ["4"])
    with pytest.raises(VersionChangedWithoutPartialRollout) as info:
        raise_if_version_changed(["3"], ["4"])
    assert info.value.detail == {
        "versions": ["3", "4"],
        "session_versions": ["3"],
        "candidate_versions": ["4"],
    }
    assert info.value.error_name == "version_changed_without_partial_rollout"
    assert info.value.status == 409
