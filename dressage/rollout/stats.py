"""Running totals of a collector, and the per-batch figures the trainer's step record gets.

Every prompt group a collector starts ends in exactly one place: trained, or dropped under a
reason (a staleness verdict, exhausted retries, shutdown). Failed attempts are counted by
reason too, and those a staleness control refused (the proxy's refusals whose type is a
staleness refusal) separately. The counts are the rollout figures of the step declaration
(`dressage.api.figures.StepFigures`): `totals` holds them since the collector started, and a
batch carries what was counted since the previous one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from dressage.api.figures import StepFigures
from dressage.data.groups import Group, TrainBatch


@dataclass
class CollectorStats:
    """Running totals of one collector; the orchestrator exports them as Prometheus counters.

    Invariant once closed: `groups_started == groups_trained + sum(totals.dropped_groups)`.
    """

    groups_started: int = 0
    groups_completed: int = 0
    groups_trained: int = 0
    totals: StepFigures = field(default_factory=StepFigures)
    """The rollout figures counted since the collector started (drops and failures by reason,
    retries, staleness failures, admission)."""

    @property
    def groups_dropped(self) -> int:
        return sum(self.totals.dropped_groups.values())

    @property
    def staleness_failure_rate(self) -> float:
        """Staleness failures per started prompt group (0 before any group started)."""
        failures = self.totals.staleness_failures
        return failures / self.groups_started if self.groups_started else 0.0

    def snapshot(self) -> CollectorStats:
        return replace(self, totals=self.totals.copy())

    def batch(self, groups: Sequence[Group], since: CollectorStats) -> TrainBatch:
        """`groups` as a batch carrying what was counted since the snapshot `since`."""
        return TrainBatch(groups=tuple(groups), figures=self.totals.since(since.totals))
