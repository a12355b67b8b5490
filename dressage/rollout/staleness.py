"""Batch-level staleness control: keep trainer batches within the most recent weight versions.

Semantics (the rules and their reasons: `docs/staleness.md`):

- `StalenessConfig.keep_versions` is `dressage_staleness_keep_versions`: 0 disables the control;
  N > 0 lets a trainer batch hold trajectories from the N most recent *observed* versions only.
- `StalenessTracker` records real versions in the order they are first observed (never sorted
  by label) and exposes the window of the N most recent. A label the trainer issued
  (`v<index>`, `dressage.data.versions.version_label`) that is first observed after a later
  one takes its place in issue order instead: one completed group can reveal several new
  versions at once, in trajectory order, and appending them as they come would make an older
  version the newest and the version the engines serve stale (`issued_index`).
- A trajectory's version is the `dressage_end_token_version` of its last segment
  (`trajectory_version_infos`). Samples without `parent_traj_id` or without a real version
  never advance the tracker and never cause a drop by themselves.
- The drop unit is the GRPO group: `StalenessGroupFilter.keep_group` drops the whole group when
  any versioned trajectory in it is outside the window, and `filter_pending` re-checks the
  candidate batch when the window advances. Every drop is counted by reason.

Everything here is pure bookkeeping over version labels; the collectors call it at the batch
sink, which is the one place staleness is enforced.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from dressage.data.versions import issued_index, normalize_version

KEEP_VERSIONS_SETTING = "dressage_staleness_keep_versions"


class DropReason(StrEnum):
    """Why a group was kept out of a trainer batch."""

    STALE_VERSION = "stale_version"
    """A trajectory's end-token version fell outside the window when the group completed."""
    WINDOW_ADVANCED = "window_advanced"
    """The group was pending in the candidate batch when the window moved past its version."""


# --- configuration -----------------------------------------------------------------------


@dataclass(frozen=True)
class StalenessConfig:
    """Batch-level staleness settings."""

    keep_versions: int = 0
    """Most recent observed versions a batch may hold; 0 disables the control."""

    def __post_init__(self) -> None:
        if isinstance(self.keep_versions, bool) or not isinstance(self.keep_versions, int):
            raise ValueError(
                f"{KEEP_VERSIONS_SETTING} must be an integer, got {self.keep_versions!r}"
            )
        if self.keep_versions < 0:
            raise ValueError(
                f"{KEEP_VERSIONS_SETTING} must be >= 0 (0 disables), got {self.keep_versions}"
            )

    @property
    def enabled(self) -> bool:
        return self.keep_versions > 0


def config_from_args(args: argparse.Namespace | Any) -> StalenessConfig:
    """Build the config from `args.dressage_staleness_keep_versions` (absent: disabled)."""
    value = getattr(args, KEEP_VERSIONS_SETTING, 0)
    return StalenessConfig(keep_versions=0 if value is None else value)


def load_custom_config(path: str | Path) -> dict[str, Any]:
    """Read a `--custom-config-path` YAML file: a mapping of argument names to values."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"{path}: a custom config must be a mapping of setting names to values")
    return dict(data)


def apply_custom_config(args: argparse.Namespace, path: str | Path) -> argparse.Namespace:
    """Set every entry of the custom config file as an attribute of `args` (file wins)."""
    for key, value in load_custom_config(path).items():
        setattr(args, key, value)
    return args


# --- versions per trajectory --------------------------------------------------------------


class VersionedSample(Protocol):
    """What staleness control reads from a sample (satisfied by `Sample`)."""

    @property
    def parent_traj_id(self) -> str | None: ...

    @property
    def segment_index(self) -> int: ...

    @property
    def dressage_end_token_version(self) -> str | None: ...


S = TypeVar("S", bound=VersionedSample)
G = TypeVar("G")


@dataclass(frozen=True)
class TrajectoryVersionInfo:
    """The version that represents one trajectory of a group."""

    parent_traj_id: str
    segment_index: int
    version: str | None
    """End-token version of the last segment; None when it is not a real version."""


def trajectory_version_infos(group: Sequence[VersionedSample]) -> list[TrajectoryVersionInfo]:
    """One entry per trajectory of `group`, in order of the trajectory's first sample.

    The representative sample is the one with the highest `segment_index`; among samples with
    the same index the later one in `group` wins. Samples without `parent_traj_id` are skipped.
    """
    chosen: dict[str, VersionedSample] = {}
    for sample in group:
        traj = sample.parent_traj_id
        if traj is None or traj == "":
            continue
        current = chosen.get(traj)
        if current is None or sample.segment_index >= current.segment_index:
            chosen[traj] = sample
    return [
        TrajectoryVersionInfo(
            parent_traj_id=traj,
            segment_index=sample.segment_index,
            version=normalize_version(sample.dressage_end_token_version),
        )
        for traj, sample in chosen.items()
    ]


def group_versions(group: Sequence[VersionedSample]) -> list[str]:
    """Real trajectory versions of a group, in trajectory order (duplicates kept)."""
    return [info.version for info in trajectory_version_infos(group) if info.version is not None]


# --- the tracker --------------------------------------------------------------------------


class StalenessTracker:
    """Real versions in observation order and the window of the most recent ones."""

    def __init__(self, keep_versions: int) -> None:
        self._config = StalenessConfig(keep_versions)
        self._order: list[str] = []
        self._positions: dict[str, int] = {}
        self._newest_issued = -1
        """The highest `issued_index` observed (-1: none yet)."""

    @property
    def keep_versions(self) -> int:
        return self._config.keep_versions

    def set_keep_versions(self, keep_versions: int) -> None:
        """Move the window's width (the staleness budget's controller does, between batches):
        the observed order is kept, the next check uses the new width."""
        self._config = StalenessConfig(keep_versions)

    @property
    def versions(self) -> list[str]:
        """Every real version observed so far, oldest first."""
        return list(self._order)

    @property
    def latest(self) -> str | None:
        return self._order[-1] if self._order else None

    def window(self) -> list[str]:
        """The versions a batch may currently hold (all observed ones when disabled)."""
        versions = self.versions
        if not self._config.enabled:
            return versions
        return versions[-self._config.keep_versions :]

    def observe(self, version: object) -> bool:
        """Record `version`; True when it is a real version seen for the first time.

        A new version moves the window: it becomes the newest, unless it is a label the trainer
        issued (`v<index>`) and a later issued label was observed before it; then it is placed
        before the first of those, where the trainer issued it. Non-real and already seen
        versions change nothing.
        """
        label = normalize_version(version)
        if label is None or label in self._positions:
            return False
        index = issued_index(label)
        if index is not None and index > self._newest_issued:
            self._newest_issued = index
        elif index is not None:  # a later issued label came first: insert at the issue place
            self._order.insert(self._place(index), label)
            self._positions = {seen: i for i, seen in enumerate(self._order)}
            return True
        self._positions[label] = len(self._order)  # the common case: O(1)
        self._order.append(label)
        return True

    def _place(self, index: int) -> int:
        """Where a label of issue `index`, older than the newest issued one seen, goes."""
        for position, seen in enumerate(self._order):
            seen_index = issued_index(seen)
            if seen_index is not None and seen_index > index:
                return position
        return len(self._order)

    def position(self, version: object) -> int | None:
        """Where `version` stands in observation order (0: the first observed); None when it
        is not a real version or was never observed."""
        label = normalize_version(version)
        return None if label is None else self._positions.get(label)

    def is_fresh(self, version: object) -> bool:
        """Whether a trajectory of `version` may enter a batch now.

        Non-real versions are always fresh (no evidence), as is everything when the control
        is disabled. A real version not observed yet is fresh: observing it would make it the
        newest.
        """
        label = normalize_version(version)
        if label is None or not self._config.enabled:
            return True
        position = self._positions.get(label)
        if position is None:
            return True
        return position >= len(self._order) - self._config.keep_versions


# --- the group filter ---------------------------------------------------------------------


@dataclass(frozen=True)
class FilterVerdict:
    """Whether a group may enter the batch, and why not."""

    keep: bool
    reason: DropReason | None = None
    stale_versions: tuple[str, ...] = ()

    @classmethod
    def kept(cls) -> FilterVerdict:
        return cls(keep=True)


class StalenessGroupFilter:
    """Applies batch-level staleness control to completed GRPO groups.

    Use `admit(group, pending)` at the batch sink: it observes the group's versions, re-filters
    the pending candidate batch if the window advanced, then decides for the group itself;
    `advance(version, pending)` does the same for a version no group showed. The pieces are
    also public (`observe_group`, `filter_pending`, `keep_group`) for collectors that need
    them separately. `drop_counts` counts dropped groups by reason.
    """

    def __init__(self, config: StalenessConfig, tracker: StalenessTracker | None = None) -> None:
        self.config = config
        self.tracker = tracker if tracker is not None else StalenessTracker(config.keep_versions)
        self.drop_counts: Counter[str] = Counter()

    def set_keep_versions(self, keep_versions: int) -> None:
        """Use a window of `keep_versions` from the next check on (0 disables the control)."""
        self.config = StalenessConfig(keep_versions)
        self.tracker.set_keep_versions(keep_versions)

    def observe_group(self, group: Sequence[VersionedSample]) -> bool:
        """Observe every real trajectory version of `group`; True if the window advanced."""
        advanced = False
        for version in group_versions(group):
            advanced = self.tracker.observe(version) or advanced
        return advanced

    def check_group(self, group: Sequence[VersionedSample]) -> FilterVerdict:
        """The verdict for `group` against the current window, without counting anything."""
        if not self.config.enabled:
            return FilterVerdict.kept()
        stale = tuple(v for v in group_versions(group) if not self.tracker.is_fresh(v))
        if stale:
            return FilterVerdict(keep=False, reason=DropReason.STALE_VERSION, stale_versions=stale)
        return FilterVerdict.kept()

    def keep_group(self, group: Sequence[VersionedSample]) -> FilterVerdict:
        """Decide for a newly completed group; a drop is counted under its reason."""
        verdict = self.check_group(group)
        if not verdict.keep and verdict.reason is not None:
            self.drop_counts[verdict.reason.value] += 1
        return verdict

    def filter_pending(
        self,
        pending: Iterable[G],
        samples_of: Callable[[G], Sequence[VersionedSample]] | None = None,
    ) -> list[G]:
        """The pending groups still inside the window; each removed group is counted.

        `samples_of` maps a pending item to its samples (identity by default), so a collector
        can keep richer group objects in its candidate batch.
        """
        kept: list[G] = []
        for item in pending:
            samples: Sequence[VersionedSample] = (
                samples_of(item) if samples_of is not None else item  # type: ignore[assignment]
            )
            if self.check_group(samples).keep:
                kept.append(item)
            else:
                self.drop_counts[DropReason.WINDOW_ADVANCED.value] += 1
        return kept

    def advance(
        self,
        version: str,
        pending: list[G],
        samples_of: Callable[[G], Sequence[VersionedSample]] | None = None,
    ) -> list[G]:
        """Observe a version no completed group showed (the trainer's own, as it publishes);
        if the window advanced, re-filter `pending` as `admit` does. Returns the new pending
        list."""
        if self.tracker.observe(version) and self.config.enabled:
            return self.filter_pending(pending, samples_of)
        return pending

    def admit(
        self,
        group: G,
        pending: list[G],
        samples_of: Callable[[G], Sequence[VersionedSample]] | None = None,
    ) -> tuple[list[G], FilterVerdict]:
        """The sink's flow for one completed group (`docs/staleness.md`).

        Observe its versions; if the window advanced, re-filter `pending`; then check the group
        and append it when kept. Returns the new pending list and the group's verdict.
        """
        samples: Sequence[VersionedSample] = (
            samples_of(group) if samples_of is not None else group  # type: ignore[assignment]
        )
        if self.observe_group(samples) and self.config.enabled:
            pending = self.filter_pending(pending, samples_of)
        verdict = self.keep_group(samples)
        if verdict.keep:
            pending = [*pending, group]
        return pending, verdict

    @property
    def dropped_groups(self) -> int:
        return sum(self.drop_counts.values())
