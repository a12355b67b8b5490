"""Who is in the distributed weight sync, and under which group names: the pure part of
`dressage.weights.fleet`.

The fleet's engines change while the trainer runs (a scale-up, a replaced pod, a scale-down, a
crash). Each engine gets a weight-update group of its own with the trainer's rank 0; before
each publish the members are compared with the engine set (`plan`): an engine new to the set
joins (a group is formed with it), a member no longer in it leaves (its group is closed), the
others keep their groups.

Group names are never reused within a trainer process, nor across trainer processes
(`GroupNames`' token): SGLang keeps a group per name until `/destroy_weights_update_group`,
which 0.5.2 lacks, and `torch.distributed` refuses to create a name a process already holds
("The specified group name has already been created", `_new_process_group_helper`, reached
from both releases' `init_custom_process_group`). So an engine that survived a trainer restart,
or that left a group it could not destroy, is always offered a fresh name.
"""

from __future__ import annotations

import dataclasses
import itertools
import secrets
from collections.abc import Iterable, Sequence

ENGINE_RANK_OFFSET = 1
"""An engine's first rank in its own group: the trainer is rank 0, the engine's tensor-parallel
ranks follow it."""


@dataclasses.dataclass(frozen=True)
class MembershipPlan:
    """How the members move to a new engine set; each URL appears in exactly one field."""

    join: tuple[str, ...]
    """Engines in the set without a group: form one with each, in the set's order."""
    leave: tuple[str, ...]
    """Members no longer in the set: close their groups."""
    keep: tuple[str, ...]
    """Members still in the set, in the set's order."""

    @property
    def changed(self) -> bool:
        return bool(self.join or self.leave)


def normalise(url: str) -> str:
    """An engine's URL as the membership compares it (no trailing slash)."""
    url = url.strip().rstrip("/")
    if not url:
        raise ValueError("engine URL: must not be empty")
    return url


def plan(members: Iterable[str], engines: Sequence[str]) -> MembershipPlan:
    """Move from the current `members` to the engine set `engines` (duplicates count once)."""
    current = {normalise(url) for url in members}
    target = list(dict.fromkeys(normalise(url) for url in engines))
    wanted = set(target)
    return MembershipPlan(
        join=tuple(url for url in target if url not in current),
        leave=tuple(sorted(current - wanted)),
        keep=tuple(url for url in target if url in current),
    )


def group_world_size(ranks_per_engine: int) -> int:
    """Ranks in one engine's group: the trainer and the engine's tensor-parallel ranks."""
    if ranks_per_engine < 1:
        raise ValueError(f"ranks_per_engine: must be >= 1, got {ranks_per_engine}")
    return ENGINE_RANK_OFFSET + ranks_per_engine


class GroupNames:
    """Issues group names `<base>-<token>-<n>`: unique per trainer process (`token`, random
    unless given) and per group it forms (`n` counts up), so no engine is ever offered a name
    it may still hold."""

    def __init__(self, base: str, token: str | None = None) -> None:
        if not base:
            raise ValueError("group_name: must not be empty")
        token = secrets.token_hex(4) if token is None else token
        if not token or "-" in token:
            raise ValueError(f"token: must be non-empty without '-', got {token!r}")
        self.base = base
        self.token = token
        self._counter = itertools.count()

    def next(self) -> str:
        return f"{self.base}-{self.token}-{next(self._counter)}"
