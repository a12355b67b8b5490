"""What every agent shares to produce a prompt group: its ids, seeds and the group run.

An agent turns `(prompt index, attempt)` into a `Group` (`dressage.data.groups.GroupRollout`):
it names the group (`group_id_of`, also the proxy instance id), runs one trajectory per member
in its own proxy session (`collect_group`), finalizes each session with the trajectory's
reward and reads the group's samples back from the proxy. A reward scored with its named parts
or its failure (`dressage.tasks.base.Scored`) is written into the metadata of the trajectory's
samples (`Scored.metadata`), so the step that trains them reports the parts and the failures of
its own batch. Sampling seeds (`sample_seed`) are
distinct per sample and reproducible across restarts. `GroupAgent` is that run, once: an agent
says only what its prompt is and how one trajectory goes.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from dressage.data.groups import Group, GroupFailed
from dressage.proxy.client import ProxyRolloutClient, RolloutError, SamplingSettings
from dressage.tasks.base import Scored

TrajectoryFn = Callable[[str, int], Awaitable[None]]
"""Runs one trajectory in proxy session `session_id` (member `i` of its group) and finalizes
the session with its reward."""


async def collect_group(
    client: ProxyRolloutClient, group_id: str, group_size: int, trajectory: TrajectoryFn
) -> Group:
    """Run `group_size` trajectories of one prompt concurrently and read back their samples.

    Each trajectory gets its own proxy session (`<group_id>-t<i>`) in instance `group_id`. If
    any trajectory fails, the group is incomplete: its sessions are discarded, what finished is
    drained (best effort), and the first error is raised, so the collector retries the whole
    prompt group.
    """
    sessions = [f"{group_id}-t{i}" for i in range(group_size)]
    results = await asyncio.gather(
        *(trajectory(sid, i) for i, sid in enumerate(sessions)), return_exceptions=True
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        await asyncio.gather(*(client.discard(s, instance_id=group_id) for s in sessions))
        # Best effort, as the discards: when the proxy replica that held the group is gone,
        # there is nothing to drain, and the group's failure keeps its own reason.
        with contextlib.suppress(RolloutError):
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


@dataclass(frozen=True)
class TrajectorySession:
    """Where one trajectory of a group runs: its proxy session, its group, its sampling seed."""

    session_id: str
    group_id: str
    """The proxy instance id (the GRPO group)."""
    seed: int
    member: int = 0
    """The trajectory's place in its group (0 .. group_size - 1)."""


P = TypeVar("P")


@dataclass(kw_only=True, eq=False)
class GroupAgent(abc.ABC, Generic[P]):
    """One prompt group of an agent: `(prompt index, attempt) -> Group`.

    Every agent is configured the same way (these fields, then its own) and runs its group the
    same way; subclasses give the group's prompt (`prompt`, once per group) and one trajectory
    (`trajectory`, returning its reward). Satisfies `dressage.data.groups.GroupRollout`, so
    every collector can use it.
    """

    client: ProxyRolloutClient
    group_size: int
    sampling: SamplingSettings
    seed: int = 0
    """Base of the sampling seeds (`sample_seed`)."""
    run_tag: str = "run"
    """Names the run's groups in the proxy (`group_id_of`)."""

    @abc.abstractmethod
    def prompt(self, index: int) -> P:
        """What every trajectory of prompt `index`'s group starts from."""

    @abc.abstractmethod
    async def trajectory(self, index: int, prompt: P, session: TrajectorySession) -> float | Scored:
        """Run one trajectory of prompt `index` in `session`; its reward (with its parts and
        failure when the task's reward says them)."""

    async def __call__(self, index: int, attempt: int) -> Group:
        group_id = group_id_of(self.run_tag, index, attempt)
        prompt = self.prompt(index)
        rewards: dict[str, Scored] = {}

        async def run(session_id: str, member: int) -> None:
            seed = sample_seed(self.seed, index, attempt, member)
            session = TrajectorySession(session_id, group_id, seed, member)
            reward = await self.trajectory(index, prompt, session)
            rewards[session_id] = reward if isinstance(reward, Scored) else Scored(reward)
            await self.client.finalize(session_id, rewards[session_id].value, instance_id=group_id)

        group = await collect_group(self.client, group_id, self.group_size, run)
        return with_reward_metadata(group, rewards)


def with_reward_metadata(group: Group, rewards: Mapping[str, Scored]) -> Group:
    """`group` with each sample's metadata carrying its trajectory's reward parts and failure
    (a sample's `parent_traj_id` is its proxy session)."""
    samples = []
    for sample in group.samples:
        scored = rewards.get(sample.parent_traj_id or "")
        extra = {} if scored is None else scored.metadata()
        samples.append(replace(sample, metadata={**sample.metadata, **extra}) if extra else sample)
    return replace(group, samples=tuple(samples))
