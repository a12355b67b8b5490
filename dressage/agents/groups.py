"""What every agent shares to produce a prompt group: its ids, seeds and the group run.

An agent turns `(prompt index, attempt)` into a `Group` (`dressage.data.groups.GroupRollout`):
it names the group (`group_id_of`, also the proxy instance id), runs one trajectory per member
in its own proxy session (`collect_group`) and reads the group's samples back from the proxy.
Sampling seeds (`sample_seed`) are distinct per sample and reproducible across restarts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from dressage.data.groups import Group, GroupFailed
from dressage.proxy.client import ProxyRolloutClient, RolloutError

TrajectoryFn = Callable[[str, int], Awaitable[None]]
"""Runs one trajectory in proxy session `session_id` (member `i` of its group) and finalizes
the session with its reward."""


async def collect_group(
    client: ProxyRolloutClient, group_id: str, group_size: int, trajectory: TrajectoryFn
) -> Group:
    """Run `group_size` trajectories of one prompt concurrently and read back their samples.

    Each trajectory gets its own proxy session (`<group_id>-t<i>`) in instance `group_id`. If
    any trajectory fails, the group is incomplete: its sessions are discarded, what finished is
    drained, and the first error is raised, so the collector retries the whole prompt group.
    """
    sessions = [f"{group_id}-t{i}" for i in range(group_size)]
    results = await asyncio.gather(
        *(trajectory(sid, i) for i, sid in enumerate(sessions)), return_exceptions=True
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        await asyncio.gather(*(client.discard(s) for s in sessions))
        await client.segments(group_id)
        first = next((e for e in errors if isinstance(e, GroupFailed)), errors[0])
        if isinstance(first, asyncio.CancelledError | GroupFailed):
            raise first  # a GroupFailed keeps its reason (a proxy refusal, a reward failure)
        raise RolloutError(f"group {group_id}: {type(first).__name__}: {first}") from first
    samples = await client.segments(group_id)
    if len({s.parent_traj_id for s in samples}) != group_size:
        raise RolloutError(
            f"group {group_id}: proxy returned segments of "
            f"{len({s.parent_traj_id for s in samples})} trajectories, expected {group_size}"
        )
    return Group(group_id=group_id, samples=tuple(samples))


def group_id_of(run_tag: str, index: int, attempt: int) -> str:
    """The proxy instance id of attempt `attempt` at prompt `index` (its GRPO group)."""
    return f"{run_tag}-p{index}-a{attempt}"


def sample_seed(seed: int, index: int, attempt: int, member: int) -> int:
    """A sampling seed distinct per sample and reproducible across restarts."""
    return (seed * 1_000_003 + index * 1_009 + attempt * 101 + member) % (2**31 - 1)
