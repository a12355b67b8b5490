"""Messages exchanged by collectors: prompt items, completed groups, trainer batches.

A *prompt group* is one prompt rolled out `group_size` times (the GRPO group). Collectors pass
whole groups around and never split them: GRPO normalises advantages within a group, so dropping
part of one would bias the update.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dressage.rollout.artifacts.samples import Sample, version_span_stats


@dataclass(frozen=True)
class PromptItem:
    """One entry of the data buffer: a prompt (task instance) to roll out as a group."""

    index: int
    """Position in the data stream; the checkpointed data position counts these."""
    prompt_id: str
    """Stable identity of the prompt instance (`X-Instance-Id` at the proxy)."""
    payload: Any = None
    """The task instance (question, environment seed, ...), opaque to collectors."""


@dataclass(frozen=True)
class Group:
    """A completed prompt group: every sample of every trajectory of one prompt."""

    prompt: PromptItem
    samples: tuple[Sample, ...]
    attempt: int = 0
    """0 for the first try; n for the n-th retry of the whole prompt group."""

    @property
    def rewards(self) -> list[float]:
        return [s.reward if s.reward is not None else 0.0 for s in self.samples]


@dataclass(frozen=True)
class TrainBatch:
    """The groups of one trainer step, with the rollout statistics of those groups."""

    groups: tuple[Group, ...]
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def samples(self) -> list[Sample]:
        return [s for g in self.groups for s in g.samples]

    @classmethod
    def of(cls, groups: Sequence[Group]) -> TrainBatch:
        batch = cls(groups=tuple(groups))
        batch.stats.update(version_span_stats(batch.samples))
        return batch


class GroupFailed(Exception):
    """A prompt group could not be completed; the collector retries it as a whole.

    `reason` is the stable name counted in metrics (for example the proxy's
    `partial_rollout_staleness_exceeded`); `staleness` marks failures caused by a staleness
    control, which the partial-async path counts separately.
    """

    def __init__(self, reason: str, message: str = "", *, staleness: bool = False) -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.staleness = staleness


GroupRollout = Callable[[PromptItem, int], Awaitable[Sequence[Sample]]]
"""Rolls out one prompt group: `(prompt, attempt) -> samples`, raising `GroupFailed`."""
