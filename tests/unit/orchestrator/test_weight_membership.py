"""The membership of distributed weight sync: how members move to a changed engine set, and
group names that no engine is ever offered twice."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.weights.membership import (
    GroupNames,
    group_world_size,
    normalise,
    plan,
)

urls = st.lists(st.sampled_from([f"http://e{i}:30000" for i in range(6)]), max_size=8)


@given(members=urls, engines=urls)
def test_after_a_plan_the_members_are_exactly_the_engine_set(
    members: list[str], engines: list[str]
) -> None:
    moved = plan(members, engines)
    after = (set(members) - set(moved.leave)) | set(moved.join)
    assert after == set(engines)
    # Each URL in one field only, and nothing joins that already had a group.
    fields = [*moved.join, *moved.leave, *moved.keep]
    assert len(fields) == len(set(fields))
    assert not set(moved.join) & set(members)
    assert set(moved.leave) <= set(members)
    assert moved.changed == (set(members) != set(engines))


def test_a_scale_up_a_replacement_and_a_scale_down_in_one_plan() -> None:
    moved = plan(
        ["http://a:1", "http://b:1", "http://c:1"],
        ["http://a:1/", "http://c:1", "http://d:1", "http://d:1"],
    )
    assert moved.join == ("http://d:1",)
    assert moved.leave == ("http://b:1",)
    assert moved.keep == ("http://a:1", "http://c:1")


def test_an_unchanged_set_changes_nothing() -> None:
    moved = plan(["http://a:1"], ["http://a:1"])
    assert not moved.changed
    assert moved.keep == ("http://a:1",)


def test_group_names_are_never_reused_within_or_across_trainer_processes() -> None:
    first = GroupNames("weights")
    again = GroupNames("weights")  # a restarted trainer
    names = [first.next() for _ in range(50)] + [again.next() for _ in range(50)]
    assert len(set(names)) == 100
    assert all(name.startswith("weights-") for name in names)
    assert GroupNames("w", token="abc").next() == "w-abc-0"


@pytest.mark.parametrize(("base", "token"), [("", None), ("w", ""), ("w", "a-b")])
def test_bad_group_name_parts_are_refused(base: str, token: str | None) -> None:
    with pytest.raises(ValueError, match=r"group_name|token"):
        GroupNames(base, token)


def test_an_engines_group_has_the_trainer_and_its_tensor_parallel_ranks() -> None:
    assert group_world_size(1) == 2
    assert group_world_size(4) == 5
    with pytest.raises(ValueError, match="ranks_per_engine"):
        group_world_size(0)
    with pytest.raises(ValueError, match="engine URL"):
        normalise(" / ")
