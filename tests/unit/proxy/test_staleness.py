"""The version rule: the partial-rollout span limit and the single-version refusal (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.proxy.config import ProxyConfig
from dressage.proxy.span_rule import (
    PartialRolloutSpanLimit,
    PartialRolloutStalenessExceeded,
    SingleVersion,
    StalenessRefusal,
    VersionChangedWithoutPartialRollout,
    _raise_if_partial_version_span_exceeded,
    partial_version_span_detail,
    raise_if_partial_version_span_exceeded,
    raise_if_version_changed,
    version_rule,
)

NON_REAL = [None, "", "unknown", "-1"]


def test_three_versions_pass_with_two_preempts_and_the_fourth_is_refused() -> None:
    raise_if_partial_version_span_exceeded(["1", "1", "2"], ["2", "3"], 2)
    with pytest.raises(PartialRolloutStalenessExceeded) as info:
        raise_if_partial_version_span_exceeded(["1", "2"], ["3", "4"], 2)
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
    raise_if_partial_version_span_exceeded([None, "unknown"], ["-1", ""], 0)


def test_limit_zero_allows_one_version_and_none_disables() -> None:
    raise_if_partial_version_span_exceeded(["a"], ["a"], 0)
    with pytest.raises(PartialRolloutStalenessExceeded):
        raise_if_partial_version_span_exceeded(["a"], ["b"], 0)
    raise_if_partial_version_span_exceeded(list("abcdefgh"), ["z"], None)


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
            raise_if_partial_version_span_exceeded(session, candidate, limit)
        assert info.value.detail["version_span"] == len(real)
    else:
        raise_if_partial_version_span_exceeded(session, candidate, limit)


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


def test_the_reference_name_of_the_span_check_is_the_public_one() -> None:
    assert _raise_if_partial_version_span_exceeded is raise_if_partial_version_span_exceeded


def _config(**fields: object) -> ProxyConfig:
    return ProxyConfig.model_validate({"engine_urls": ["http://engine:1"], **fields})


def test_the_rule_of_a_config() -> None:
    limited = version_rule(_config(partial_rollout=True, max_partial_rollout_preempts=2))
    assert limited == PartialRolloutSpanLimit(max_preempts=2)
    assert limited.resumes_partial_output
    unlimited = version_rule(_config(partial_rollout=True))
    assert unlimited == PartialRolloutSpanLimit(max_preempts=None)
    single = version_rule(_config())
    assert single == SingleVersion()
    assert not single.resumes_partial_output


def test_span_limit_counts_real_versions_in_observation_order() -> None:
    rule = PartialRolloutSpanLimit(max_preempts=1)
    rule.check(["1", None, ""], ["unknown", "2", "-1"])  # two real versions: one switch
    rule.check(NON_REAL, NON_REAL)
    with pytest.raises(PartialRolloutStalenessExceeded) as info:
        rule.check(["2", "unknown"], [None, "1", "3", "1"])
    assert info.value.detail == {
        "versions": ["2", "1", "3"],
        "version_span": 3,
        "version_switches": 2,
        "max_preempts": 1,
        "max_version_span": 2,
    }


def test_span_limit_without_a_maximum_never_refuses() -> None:
    PartialRolloutSpanLimit(max_preempts=None).check([str(v) for v in range(50)], ["50"])


def test_single_version_ignores_non_real_versions() -> None:
    rule = SingleVersion()
    rule.check(NON_REAL, ["7"])
    rule.check(["7", "unknown"], [*NON_REAL, "7"])
    rule.check([], NON_REAL)
    with pytest.raises(VersionChangedWithoutPartialRollout) as info:
        rule.check(["8", None], ["-1", "7", "8"])
    assert info.value.detail == {
        "versions": ["8", "7"],
        "session_versions": ["8"],
        "candidate_versions": ["7", "8"],
    }


def test_single_version_refuses_a_turn_that_mixes_versions_on_its_own() -> None:
    with pytest.raises(VersionChangedWithoutPartialRollout) as info:
        SingleVersion().check([], ["5", "", "4"])
    assert info.value.detail["versions"] == ["5", "4"]


def test_both_refusals_are_staleness_refusals_with_their_error_names() -> None:
    refusals = {
        PartialRolloutStalenessExceeded: ("partial_rollout_staleness_exceeded", 502),
        VersionChangedWithoutPartialRollout: ("version_changed_without_partial_rollout", 409),
    }
    for refusal, (name, status) in refusals.items():
        assert issubclass(refusal, StalenessRefusal)
        assert (refusal.error_name, refusal.status) == (name, status)
