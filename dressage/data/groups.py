"""Messages between agents, rollout and training: prompt groups and trainer batches.

A *prompt group* is one prompt rolled out `group_size` times (the GRPO group). It is the drop
unit everywhere: GRPO normalises advantages within a group, so dropping part of one would bias
the update. Agents produce groups (`GroupRollout`), rollout schedules and filters them, and the
trainer consumes one `TrainBatch` per optimizer step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from dressage.api.figures import StepFigures
from dressage.data.samples import Sample


@dataclass(frozen=True)
class Group:
    """One GRPO group: the samples of the trajectories generated for one prompt.

    Every sample carries its reward. A trajectory may have several samples (segments), which
    share `parent_traj_id`; advantages are computed per group over the samples' rewards.
    """

    group_id: str
    samples: tuple[Sample, ...]
    replaced: tuple[Sample, ...] = ()
    """Samples of trajectories that were run again once the group completed (a short one that
    ended under an older version, `dressage.agents.groups.stale_short_members`) and are no
    longer the group's: their tokens were generated and are never trained (the token ledger's
    `dropped.refreshed`)."""

    def rewards(self) -> list[float]:
        """Rewards of the samples (a sample without one counts 0)."""
        return [0.0 if s.reward is None else float(s.reward) for s in self.samples]


@dataclass(frozen=True)
class TrainBatch:
    """The groups of one optimizer step, with the figures the collector counted while
    assembling them (drops, failures, retries, admission: `StepFigures`' rollout figures)."""

    groups: tuple[Group, ...]
    figures: StepFigures = field(default_factory=StepFigures)

    @property
    def samples(self) -> list[Sample]:
        return [s for g in self.groups for s in g.samples]

    def rewards(self) -> list[float]:
        return [r for g in self.groups for r in g.rewards()]


class GroupFailed(Exception):
    """A prompt group could not be completed; collectors retry it as a whole.

    `reason` is the stable name counted in metrics (for example the proxy's
    `partial_rollout_staleness_exceeded`); `staleness` marks failures caused by a staleness
    control, which are counted separately as staleness failures; `dropped` names the drop
    reason of a failure that drops the group at once, unretried (`reward_error` under
    `onRewardError: drop`).
    """

    def __init__(
        self,
        reason: str,
        message: str = "",
        *,
        staleness: bool = False,
        dropped: str | None = None,
    ) -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.staleness = staleness
        self.dropped = dropped
        self.tokens = 0
        """Tokens the failed attempt's trajectories generated that reached the agent (its
        finished trajectories' samples), which the token ledger counts as refused or
        aborted; 0 where the agent could not read them back."""


EVALUATION_GROUP_PREFIX = "eval."
"""The first characters of every evaluation group's id (its proxy instance id): the proxy
never resumes such a group's generations across a weight update and keeps each of its
trajectories to one version (`dressage.proxy.span_rule.rule_for_session`), whatever its
partial-rollout setting, so that an evaluation's every token comes from the version it names."""


def is_evaluation_group(group_id: str | None) -> bool:
    """Whether `group_id` names an evaluation group (`EVALUATION_GROUP_PREFIX`)."""
    return bool(group_id) and str(group_id).startswith(EVALUATION_GROUP_PREFIX)


GroupRollout = Callable[[int, int], Awaitable[Group]]
"""Rolls out one prompt group: `(prompt_index, attempt) -> Group`, raising `GroupFailed`.
Every agent implements it; every collector schedules it."""
