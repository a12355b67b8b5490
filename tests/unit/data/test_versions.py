"""Version labels: distinct real versions in observation order (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dressage.data.versions import (
    distinct_real_versions,
    normalize_version,
    normalized_versions,
)

_LABELS = st.one_of(
    st.none(),
    st.sampled_from(["v1", " v1", "v2", " v2 ", "3", "", "unknown", "-1", "none", "NULL"]),
    st.integers(-2, 3),
    st.booleans(),
    st.lists(st.integers(), max_size=1),
)


def _reference(versions: list[object]) -> list[str]:
    seen: list[str] = []
    for version in versions:
        label = normalize_version(version)
        if label is not None and label not in seen:
            seen.append(label)
    return seen


@given(st.lists(_LABELS, max_size=40))
def test_distinct_real_versions_keep_first_appearances(versions: list[object]) -> None:
    assert distinct_real_versions(versions) == _reference(versions)
    assert distinct_real_versions(iter(versions)) == _reference(versions)
    assert distinct_real_versions(tuple(versions)) == _reference(versions)


def test_repeated_per_token_labels_count_once_in_order() -> None:
    tokens = ["7"] * 500 + [None] * 3 + ["unknown"] + ["3"] * 200 + ["7"]
    assert distinct_real_versions(tokens) == ["7", "3"]


@given(st.lists(_LABELS, max_size=40))
def test_normalized_versions_equal_normalizing_each_token(versions: list[object]) -> None:
    assert normalized_versions(versions) == [normalize_version(v) for v in versions]
