"""Admission control: start a prompt group only if it can still be trained inside the window.

Batch-level staleness control (`dressage.rollout.staleness`) drops, at the batch sink, groups
whose trajectory version is no longer among the `keep_versions` most recent observed versions.
Every such drop is rollout thrown away. Admission control keeps those groups from being started
at all: the async collector's worker asks `AdmissionPolicy.admits` before it starts a group,
and waits while the answer is no. The sink filter stays in place as the guarantee; admission
only makes its drops rare.

The rule (the batch-count analogue of AReaL's `(max_head_offpolicyness + version + 1) *
batch_size > rollouts started`, with `keep_versions - 1` as the off-policyness bound):

    started - dropped < (published + keep_versions) * batch_size

counted from the collector's start, where `published` is the number of new weight versions
published since then, `started - dropped` the groups started and not dropped (trained, waiting
in the candidate batch or the completed queue, or in flight), equivalently
`taken * batch_size + ahead` with `taken` the batches handed to the trainer and `ahead` the
groups not yet handed out. The version live at the collector's start has index 0, the `n`-th
published version index `n`.

What it guarantees. Assume the training loop's contract: one publish per trainer step, after
the step, notified once the version is live (`published <= taken` always, and the engines
never serve a version with index above `taken`). A group started while `published = p`
carries a version index `g >= p`. If it is the `j`-th group (from 0) to reach the sink that
is not dropped, it lands in batch `b = j // batch_size`, and `j <= taken * batch_size + ahead`
at its start when groups reach the sink in the order they were started, so `b <= p +
keep_versions - 1`. Every staleness check of the group happens while batch `b` is being
filled or earlier, when no version newer than `b` exists; if versions are observed in
publication order, at most `b - g + 1 <= keep_versions` observed versions are as new as `g`,
so the group is inside the window and is never dropped as `stale_version` or
`window_advanced`. The same holds under *any* completion order when every group carries the
version live when it reaches the sink (the position of a group then is below
`(published + keep_versions) * batch_size` by the invariant the rule keeps, with `published`
counted at its arrival). By induction no
admitted group is dropped for staleness in either case.

What it cannot guarantee: a group that reaches the sink after groups started later than it
and carries a version older than the one live at its arrival (a long tail after its last
token, a retry that finishes late, a multi-turn agent whose last turn started before a
publish) may land in a batch `keep_versions` or more versions after its own; the sink filter
drops it. Nor anything when versions are published more often than batches are taken.

The same counts project the version lag a group will have when trained
(`AdmissionPolicy.projected_lag`, reported per step as `staleness/admission_lag_*`); the rule
admits a group exactly while that projection is below `keep_versions`.

Liveness: with `published == taken` (the trainer waiting for its next batch) the rule admits
up to `keep_versions * batch_size >= batch_size` groups ahead, enough to fill the batch; drops
free capacity. If a caller asks for batches without publishing (breaking the contract), the
policy still admits a group while the trainer waits and the groups ahead cannot fill a batch
(`sink_waiting and ahead < batch_size`), so a batch is always eventually produced.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdmissionPolicy:
    """When the async collector's worker may start another prompt group."""

    keep_versions: int
    """The staleness window (`StalenessConfig.keep_versions`); 0 disables admission control."""
    batch_size: int
    """Prompt groups per trainer batch."""
    enabled: bool = True
    """Admission control requested; it only acts when `keep_versions > 0`."""

    def __post_init__(self) -> None:
        if isinstance(self.keep_versions, bool) or self.keep_versions < 0:
            raise ValueError(f"keep_versions must be an int >= 0, got {self.keep_versions!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")

    @property
    def active(self) -> bool:
        return self.enabled and self.keep_versions > 0

    def capacity(self, *, published: int, taken: int, ahead: int) -> int | None:
        """Groups that may still be started now (may be <= 0); None when unlimited.

        `published`: new versions published since the collector started; `taken`: batches
        handed to the trainer; `ahead`: groups started, not dropped and not yet handed out.
        """
        if not self.active:
            return None
        return (published + self.keep_versions - taken) * self.batch_size - ahead

    def projected_lag(self, *, published: int, taken: int, ahead: int) -> int:
        """The version lag a group started now will have when trained, if it carries the live
        version and reaches the sink in the order it was started: it lands in batch
        `taken + ahead // batch_size`, trained from that version index (one publish per
        step), against `published`, the live version's index; never below 0.

        The rule above is this projection's bound: with `keep_versions > 0`,
        `capacity(...) > 0` exactly when `projected_lag(...) < keep_versions`. Computed
        whether or not admission control acts, so a job without it sees how far ahead
        rollout runs.
        """
        return max(0, taken + ahead // self.batch_size - published)

    def admits(self, *, published: int, taken: int, ahead: int, sink_waiting: bool = False) -> bool:
        """Whether one more group may start now.

        `sink_waiting`: the trainer is waiting for a batch; then a group is admitted whenever
        the groups ahead cannot fill it, so collection never stalls.
        """
        for name, value in (("published", published), ("taken", taken), ("ahead", ahead)):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        capacity = self.capacity(published=published, taken=taken, ahead=ahead)
        if capacity is None or capacity > 0:
            return True
        return sink_waiting and ahead < self.batch_size
