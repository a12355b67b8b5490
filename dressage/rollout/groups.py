"""Messages between rollout and training: prompt groups, trainer batches, the collector seam.

A *prompt group* is one prompt rolled out `group_size` times (the GRPO group). Collectors pass
whole groups around and never split them: GRPO normalises advantages within a group, so dropping
part of one would bias the update. A collector hands the trainer one `TrainBatch` per optimizer
step; the synchronous and the asynchronous collectors implement the same `Collector` protocol,
so the loop that wires collector, trainer and weight publisher never depends on how rollout is
scheduled. This module is torch-free.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dressage.rollout.artifacts.samples import Sample


@dataclass(frozen=True)
class Group:
    """One GRPO group: the samples of the trajectories generated for one prompt.

    Every sample carries its reward. A trajectory may have several samples (segments), which
    share `parent_traj_id`; advantages are computed per group over the samples' rewards.
    """

    group_id: str
    samples: tuple[Sample, ...]

    def rewards(self) -> list[float]:
        """Rewards of the samples (a sample without one counts 0)."""
        return [0.0 if s.reward is None else float(s.reward) for s in self.samples]


@dataclass(frozen=True)
class TrainBatch:
    """The groups of one optimizer step, with what the collector saw while assembling them."""

    groups: tuple[Group, ...]
    dropped_groups: Mapping[str, int] = field(default_factory=dict)
    """Groups dropped while collecting this batch, by reason (e.g. `stale_version`)."""
    failed_groups: int = 0
    """Groups whose rollout failed (each retry counts)."""
    retries: int = 0
    """Prompt-group retries performed."""
    staleness_failures: int = 0
    """Rollouts refused by a staleness control (e.g. `partial_rollout_staleness_exceeded`)."""
    failure_reasons: Mapping[str, int] = field(default_factory=dict)
    """Failed group attempts by reason (the proxy's error code, else the error's first words)."""

    @property
    def samples(self) -> list[Sample]:
        return [s for g in self.groups for s in g.samples]

    def rewards(self) -> list[float]:
        return [r for g in self.groups for r in g.rewards()]


def merge_drops(*drops: Mapping[str, int]) -> dict[str, int]:
    """Sum drop counters by reason."""
    total: Counter[str] = Counter()
    for d in drops:
        total.update(d)
    return dict(total)


class Collector(Protocol):
    """Produces one `TrainBatch` per trainer step.

    `state_dict()`/`load_state_dict()` carry the data position (which prompts were already
    used) through checkpoints, so a resumed run neither repeats nor skips prompts.
    `on_weights_published(version)` tells the collector a new weight version is live on the
    engines (the synchronous collector only records it; async ones advance staleness windows).
    """

    async def next_batch(self) -> TrainBatch: ...

    def on_weights_published(self, version: str) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    async def aclose(self) -> None: ...


def batch_groups(groups: Sequence[Group]) -> TrainBatch:
    """A batch of `groups` with no drops or failures (convenience for tests and sync rollout)."""
    return TrainBatch(groups=tuple(groups))


class GroupFailed(Exception):
    """A prompt group could not be completed; collectors retry it as a whole.

    `reason` is the stable name counted in metrics (for example the proxy's
    `partial_rollout_staleness_exceeded`); `staleness` marks failures caused by a staleness
    control, which the partial-async path counts separately.
    """

    def __init__(self, reason: str, message: str = "", *, staleness: bool = False) -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.staleness = staleness


GroupRollout = Callable[[int, int], Awaitable[Group]]
"""Rolls out one prompt group: `(prompt_index, attempt) -> Group`, raising `GroupFailed`."""
