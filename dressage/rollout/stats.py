"""Running totals of a collector, and the per-batch view the trainer's step record gets.

Every prompt group a collector starts ends in exactly one place: trained, or dropped under a
reason (a staleness verdict, exhausted retries, shutdown). Failed attempts are counted by
reason too; staleness failures (a refusal by the proxy's version-span limit) separately.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from dressage.data.groups import Group, TrainBatch


@dataclass
class CollectorStats:
    """Running totals of one collector; the orchestrator exports them as Prometheus counters.

    Invariant once closed: `groups_started == groups_trained + sum(dropped.values())`.
    """

    groups_started: int = 0
    groups_completed: int = 0
    groups_trained: int = 0
    retries: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    """Failed attempts by reason (each attempt's failure counts once)."""
    staleness_failures: int = 0
    """Failed attempts caused by a staleness control (the proxy's version-span limit)."""
    dropped: Counter[str] = field(default_factory=Counter)
    """Dropped prompt groups by reason: staleness verdicts, exhausted retries, shutdown."""
    admissions_held: int = 0
    """Prompt groups whose start admission control held back (each counted once)."""
    admission_wait_seconds: float = 0.0
    """Seconds the worker waited for admission control before starting a group."""

    @property
    def staleness_failure_rate(self) -> float:
        """Staleness failures per started prompt group (0 before any group started)."""
        return self.staleness_failures / self.groups_started if self.groups_started else 0.0

    def snapshot(self) -> CollectorStats:
        return CollectorStats(
            groups_started=self.groups_started,
            groups_completed=self.groups_completed,
            groups_trained=self.groups_trained,
            retries=self.retries,
            failures=self.failures.copy(),
            staleness_failures=self.staleness_failures,
            dropped=self.dropped.copy(),
            admissions_held=self.admissions_held,
            admission_wait_seconds=self.admission_wait_seconds,
        )

    def batch(self, groups: Sequence[Group], since: CollectorStats) -> TrainBatch:
        """`groups` as a batch carrying what was counted since the snapshot `since`."""
        failures = self.failures - since.failures
        return TrainBatch(
            groups=tuple(groups),
            dropped_groups=dict(self.dropped - since.dropped),
            failed_groups=sum(failures.values()),
            failure_reasons=dict(failures),
            retries=self.retries - since.retries,
            staleness_failures=self.staleness_failures - since.staleness_failures,
            admissions_held=self.admissions_held - since.admissions_held,
            admission_wait_seconds=self.admission_wait_seconds - since.admission_wait_seconds,
        )
