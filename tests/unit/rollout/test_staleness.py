"""Batch-level staleness control, pinned through the public API of dressage.rollout.staleness."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.data.versions import issued_index, normalize_version, version_label
from dressage.rollout.artifacts.samples import Sample
from dressage.rollout.staleness import (
    DropReason,
    StalenessConfig,
    StalenessGroupFilter,
    StalenessTracker,
    apply_custom_config,
    config_from_args,
    trajectory_version_infos,
)

REPO = Path(__file__).resolve().parents[3]


def seg(traj: str | None, version: object, segment: int = 0) -> Sample:
    """A one-token segment of trajectory `traj` whose end-token version is `version`."""
    return Sample.build(
        prompt_tokens=[1],
        response_tokens=[2],
        response_versions=[version],
        rollout_log_probs=[-1.0],
        parent_traj_id=traj,
        segment_index=segment,
    )


def group(*versions: object) -> list[Sample]:
    return [seg(f"t{i}", v) for i, v in enumerate(versions)]


# --- config --------------------------------------------------------------------------------


def test_config_from_args_reads_keep_versions() -> None:
    assert (
        config_from_args(argparse.Namespace(dressage_staleness_keep_versions=2)).keep_versions == 2
    )
    assert not config_from_args(argparse.Namespace()).enabled


def test_negative_keep_versions_is_rejected_with_the_setting_named() -> None:
    with pytest.raises(ValueError, match="dressage_staleness_keep_versions"):
        config_from_args(argparse.Namespace(dressage_staleness_keep_versions=-1))


def test_shipped_custom_config_loads_into_the_same_config(tmp_path: Path) -> None:
    shipped = REPO / "examples/scripts/default/dressage_staleness.yaml"
    args = apply_custom_config(argparse.Namespace(), shipped)
    assert config_from_args(args) == StalenessConfig(keep_versions=0)

    custom = tmp_path / "staleness.yaml"
    custom.write_text("dressage_staleness_keep_versions: 2\n")
    args = apply_custom_config(argparse.Namespace(dressage_staleness_keep_versions=0), custom)
    assert config_from_args(args).keep_versions == 2

    bad = tmp_path / "bad.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="mapping"):
        apply_custom_config(argparse.Namespace(), bad)


# --- tracker -------------------------------------------------------------------------------


def test_tracker_orders_by_observation_not_label() -> None:
    tracker = StalenessTracker(keep_versions=2)
    for version in ["v9", "v10", "b", "a"]:
        assert tracker.observe(version)
    assert tracker.versions == ["v9", "v10", "b", "a"]
    assert tracker.window() == ["b", "a"]
    assert tracker.latest == "a"
    assert not tracker.is_fresh("v10")
    assert tracker.is_fresh("b")


def test_tracker_ignores_non_real_and_repeated_versions() -> None:
    tracker = StalenessTracker(keep_versions=1)
    assert tracker.observe("v1")
    for version in [None, "", "unknown", "-1", -1, "v1"]:
        assert not tracker.observe(version)
    assert tracker.versions == ["v1"]
    assert tracker.is_fresh("unknown")


# --- trajectory versions -------------------------------------------------------------------


def test_trajectory_version_is_the_last_segment_end_version() -> None:
    samples = [
        seg("a", "v1", segment=0),
        seg("a", "v3", segment=2),
        seg("a", "v2", segment=1),
        seg("b", "v1", segment=1),
        seg("b", "v2", segment=1),  # same segment index: the later sample wins
        seg(None, "v9"),  # no trajectory id: ignored
    ]
    infos = trajectory_version_infos(samples)
    assert [(i.parent_traj_id, i.segment_index, i.version) for i in infos] == [
        ("a", 2, "v3"),
        ("b", 1, "v2"),
    ]


# --- group filter --------------------------------------------------------------------------


def test_stale_group_is_dropped_whole_and_counted() -> None:
    f = StalenessGroupFilter(StalenessConfig(keep_versions=2))
    pending: list[list[Sample]] = []
    for version in ["v1", "v2", "v3"]:
        pending, verdict = f.admit(group(version), pending)
        assert verdict.keep
    # v1 left the window when v3 arrived.
    assert [g[0].dressage_end_token_version for g in pending] == ["v2", "v3"]
    pending, verdict = f.admit(group("v3", "v1", "v3"), pending)
    assert not verdict.keep
    assert verdict.reason is DropReason.STALE_VERSION
    assert verdict.stale_versions == ("v1",)
    assert f.drop_counts == {"window_advanced": 1, "stale_version": 1}
    assert f.dropped_groups == 2


def test_window_advance_refilters_pending_groups() -> None:
    f = StalenessGroupFilter(StalenessConfig(keep_versions=1))
    pending, _ = f.admit(group("v1", "v1"), [])
    pending, _ = f.admit(group("v1"), pending)
    assert len(pending) == 2
    pending, verdict = f.admit(group("v2"), pending)
    assert verdict.keep
    assert len(pending) == 1
    assert f.drop_counts[DropReason.WINDOW_ADVANCED] == 2


def test_a_version_no_group_showed_advances_the_window_over_pending_groups() -> None:
    """`advance`: the trainer's published version moves the window like a completed group's."""
    f = StalenessGroupFilter(StalenessConfig(keep_versions=2))
    pending, _ = f.admit(group("v1"), [])
    assert f.advance("v2", pending) == pending  # v1 is still one of the 2 newest
    assert f.advance("v2", pending) == pending  # a version seen again moves nothing
    assert f.advance("v3", pending) == []
    assert f.drop_counts[DropReason.WINDOW_ADVANCED] == 1
    off = StalenessGroupFilter(StalenessConfig(keep_versions=0))
    kept, _ = off.admit(group("v1"), [])
    assert off.advance("v9", kept) == kept
    assert off.dropped_groups == 0


def test_keep_versions_zero_keeps_everything() -> None:
    f = StalenessGroupFilter(StalenessConfig(keep_versions=0))
    pending: list[list[Sample]] = []
    for version in ["v1", "v2", "v3", "v1"]:
        pending, verdict = f.admit(group(version), pending)
        assert verdict.keep
    assert len(pending) == 4
    assert f.dropped_groups == 0


def test_incomplete_metadata_never_drops_or_advances() -> None:
    f = StalenessGroupFilter(StalenessConfig(keep_versions=1))
    pending, _ = f.admit(group("v1"), [])
    pending, verdict = f.admit(
        [seg(None, "v2"), seg("x", "unknown"), seg("y", -1), seg("z", "")], pending
    )
    assert verdict.keep
    assert f.tracker.versions == ["v1"]
    assert len(pending) == 2


def test_filter_pending_accepts_richer_group_objects() -> None:
    f = StalenessGroupFilter(StalenessConfig(keep_versions=1))
    f.observe_group(group("v1"))
    f.observe_group(group("v2"))
    items = [("g1", group("v1")), ("g2", group("v2"))]
    kept = f.filter_pending(items, samples_of=lambda item: item[1])
    assert [name for name, _ in kept] == ["g2"]


# --- properties ----------------------------------------------------------------------------

version_labels = st.one_of(
    st.sampled_from(["v0", "v1", "v2", "v3", "v4", "v5", "v10", "a"]),
    st.sampled_from(["", "unknown", "-1"]),
    st.just(-1),
    st.none(),
)
groups_strategy = st.lists(
    st.lists(version_labels, min_size=1, max_size=4), min_size=1, max_size=25
)


def _replay(
    keep: int, groups: list[list[object]], built: list[list[Sample]] | None = None
) -> tuple[StalenessGroupFilter, list[list[Sample]]]:
    f = StalenessGroupFilter(StalenessConfig(keep_versions=keep))
    pending: list[list[Sample]] = []
    for g in groups:
        samples = group(*g)
        if built is not None:
            built.append(samples)
        pending, _ = f.admit(samples, pending)
    return f, pending


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=4), groups_strategy)
def test_kept_batch_never_holds_a_trajectory_outside_the_window(
    keep: int, groups: list[list[object]]
) -> None:
    f, pending = _replay(keep, groups)
    window = set(f.tracker.window())
    for g in pending:
        for sample in g:
            version = sample.dressage_end_token_version
            assert version is None or version in window


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=4), groups_strategy)
def test_groups_are_never_split_and_drops_are_all_counted(
    keep: int, groups: list[list[object]]
) -> None:
    built: list[list[Sample]] = []
    f, pending = _replay(keep, groups, built)
    # Every kept group is one of the completed groups, whole and unmodified, in arrival order.
    positions = [next(i for i, b in enumerate(built) if b is g) for g in pending]
    assert positions == sorted(positions)
    assert all(len(g) == len(built[i]) for g, i in zip(pending, positions, strict=True))
    assert len(pending) + f.dropped_groups == len(groups)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=4), groups_strategy)
def test_non_real_versions_never_advance_or_drop(keep: int, groups: list[list[object]]) -> None:
    f, _ = _replay(keep, groups)
    real_in_order: list[str] = []
    for g in groups:
        for v in g:
            label = normalize_version(v)
            if label is not None and label not in real_in_order:
                real_in_order.append(label)
    # Every real label once; the trainer's own labels in issue order, others as first seen.
    assert sorted(f.tracker.versions) == sorted(real_in_order)
    issued = [v for v in f.tracker.versions if issued_index(v) is not None]
    assert issued == sorted(issued, key=lambda v: issued_index(v) or 0)
    foreign = [v for v in real_in_order if issued_index(v) is None]
    assert [v for v in f.tracker.versions if issued_index(v) is None] == foreign
    # Groups made only of non-real versions are always kept.
    only_unreal = StalenessGroupFilter(StalenessConfig(keep_versions=keep or 1))
    only_unreal.tracker.observe("x")
    only_unreal.tracker.observe("y")
    assert only_unreal.keep_group(group("", None, -1, "unknown")).keep


@settings(max_examples=100, deadline=None)
@given(groups_strategy)
def test_keep_versions_zero_keeps_every_group(groups: list[list[object]]) -> None:
    f, pending = _replay(0, groups)
    assert len(pending) == len(groups)
    assert f.dropped_groups == 0


# --- issue order ---------------------------------------------------------------------------


def test_a_group_revealing_several_new_versions_keeps_the_served_one_fresh() -> None:
    """A group whose trajectories ended on v13, v12 and v9 (trajectory order) after the
    tracker saw only v0..v2: appended as they came, v9 would be the newest and every later
    group of v13, the version the engines serve, stale; the trainer would then wait for a
    batch that never comes."""
    f = StalenessGroupFilter(StalenessConfig(keep_versions=2))
    for label in ["v0", "v1", "v2"]:
        f.observe_group(group(label))
    pending, verdict = f.admit(group("v13", "v12", "v9"), [])
    assert f.tracker.versions == ["v0", "v1", "v2", "v9", "v12", "v13"]
    assert not verdict.keep
    assert f.admit(group("v13", "v13"), pending)[1].keep


def test_only_the_trainers_own_label_form_takes_its_issue_place() -> None:
    tracker = StalenessTracker(keep_versions=1)
    for label in ["v5", "v012", "12", "v3", "a"]:
        tracker.observe(label)
    assert tracker.versions == ["v3", "v5", "v012", "12", "a"]
    assert issued_index("v12") == 12
    assert [issued_index(x) for x in ["v012", "v-1", "12", "v", "v١"]] == [None] * 5


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.permutations([version_label(i) for i in range(8)]), st.integers(1, 4))
def test_issued_labels_are_ordered_by_issue_whatever_order_they_arrive_in(
    arrival: list[str], keep: int
) -> None:
    tracker = StalenessTracker(keep_versions=keep)
    for label in arrival:
        tracker.observe(label)
    assert tracker.versions == [version_label(i) for i in range(8)]
    assert tracker.is_fresh(version_label(7))
    assert tracker.window() == [version_label(i) for i in range(8 - keep, 8)]


def test_observing_versions_in_issue_order_stays_linear() -> None:
    """A resumed trainer observes its whole history at once (`trainer_version_order`): fifty
    thousand versions in issue order, each appended, not placed by a scan."""
    tracker = StalenessTracker(keep_versions=2)
    for index in range(50_000):
        tracker.observe(version_label(index))
    assert tracker.position("v49999") == 49_999
    assert tracker.window() == ["v49998", "v49999"]
