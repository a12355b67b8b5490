"""Status conditions and timestamps, as Kubernetes writes them (pure)."""

from __future__ import annotations

from datetime import datetime

from dressage.api.status import AsyncRLJobStatus, Condition, ConditionType


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes it."""
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(value: str | None) -> datetime | None:
    """The time of a Kubernetes timestamp (`timestamp`'s format); None when unset."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class Conditions:
    """Sets conditions, keeping `lastTransitionTime` when the status does not change."""

    def __init__(self, status: AsyncRLJobStatus, now: datetime, generation: int) -> None:
        self.status = status
        self.now = timestamp(now)
        self.generation = generation

    def get(self, ctype: ConditionType) -> Condition | None:
        return next((c for c in self.status.conditions if c.type == ctype.value), None)

    def set(self, ctype: ConditionType, value: bool, reason: str, message: str = "") -> None:
        text = "True" if value else "False"
        old = self.get(ctype)
        changed = old is None or old.status != text
        new = Condition(
            type=ctype.value,
            status=text,
            reason=reason,
            message=message,
            last_transition_time=self.now if changed or old is None else old.last_transition_time,
            observed_generation=self.generation,
        )
        others = [c for c in self.status.conditions if c.type != ctype.value]
        self.status.conditions = sorted([*others, new], key=lambda c: c.type)
