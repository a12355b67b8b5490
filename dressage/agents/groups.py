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
from dressage.data.samples import Sample
from dressage.data.versions import normalize_version
from dressage.proxy.client import ProxyRolloutClient, RolloutError, SamplingSettings
from dressage.proxy.errors import PARTIAL_ROLLOUT_STALENESS_EXCEEDED
from dressage.tasks.base import Scored

TrajectoryFn = Callable[[str, int], Awaitable[None]]
"""Runs one trajectory in proxy session `session_id` (member `i` of its group) and finalizes
the session with its reward."""


async def collect_group(
    client: ProxyRolloutClient,
    group_id: str,
    group_size: int,
    trajectory: TrajectoryFn,
    *,
    retry_refused: int = 0,
) -> Group:
    """Run `group_size` trajectories of one prompt concurrently and read back their samples.

    Each trajectory gets its own proxy session (`<group_id>-t<i>`) in instance `group_id`. If
    any trajectory fails, the group is incomplete: its sessions are discarded, what finished is
    drained (best effort), and the first error is raised, so the collector retries the whole
    prompt group.

    `retry_refused` (`spanLimitPolicy: retry_trajectory`): a trajectory the span limit refused
    (`partial_rollout_staleness_exceeded`) is run again alone, in a new session
    (`<session>-s<k>`) from its prompt, up to this many times before it fails the group; its
    finished siblings are kept.
    """
    sessions = [f"{group_id}-t{i}" for i in range(group_size)]

    async def member(i: int, session_id: str) -> None:
        for retry in range(retry_refused + 1):
            current = session_id if not retry else f"{session_id}-s{retry}"
            if retry:
                sessions.append(current)  # discarded with the others if the group fails
            try:
                return await trajectory(current, i)
            except RolloutError as exc:
                if exc.code != PARTIAL_ROLLOUT_STALENESS_EXCEEDED or retry == retry_refused:
                    raise
                await client.discard(current, instance_id=group_id)

    results = await asyncio.gather(
        *(member(i, sid) for i, sid in enumerate(list(sessions))), return_exceptions=True
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        # Best effort, as the discards: when the proxy replica that held the group is gone,
        # there is nothing to drain, and the group's failure keeps its own reason. Drained
        # before the discards, which drop a finished session's records too: the token ledger
        # counts what the finished trajectories generated.
        finished: list[Sample] = []
        with contextlib.suppress(RolloutError):
            finished = await client.segments(group_id)
        await asyncio.gather(*(client.discard(s, instance_id=group_id) for s in sessions))
        first = next((e for e in errors if isinstance(e, GroupFailed)), errors[0])
        if isinstance(first, asyncio.CancelledError):
            raise first
        failed = first if isinstance(first, GroupFailed) else RolloutError(
            f"group {group_id}: {type(first).__name__}: {first}"
        )
        failed.tokens = sum(sum(s.loss_mask) for s in finished)  # the token ledger's
        if failed is first:
            raise failed  # a GroupFailed keeps its reason (a proxy refusal, a reward failure)
        raise failed from first
    samples = await client.segments(group_id)
    if len({s.parent_traj_id for s in samples}) != group_size:
        raise RolloutError(
            f"group {group_id}: proxy returned segments of "
            f"{len({s.parent_traj_id for s in samples})} trajectories, expected {group_size}"
        )
    return Group(group_id=group_id, samples=tuple(samples))


REFRESH_SHARE = 0.25
"""`GroupAgent.refresh_share`'s default: a rerun of a quarter of the longest trajectory's
length, or less, beats losing the group."""


def stale_short_members(group: Group, share: float) -> dict[str, int]:
    """The trajectories of `group` (session id: member) worth running again before the batch
    sink sees it: those that ended under another weight version than its longest trajectory
    (the one that ended last) and whose response is at most `share` of that one's tokens.

    Why: a group completes when its longest trajectory does; its short ones ended versions
    earlier, and with partial rollout its long one spans versions up to the span limit. The
    sink judges each trajectory by its end-token version, so the group is dropped whole for
    its short members when the window moves past their version while it waits, and that is
    the group with the long member: training is biased toward short responses, and the
    group's tokens are wasted. Running the short ones again under the live version costs a
    small share of the group's tokens and keeps it inside the window.
    """
    if share <= 0:
        return {}
    lengths: dict[str, int] = {}
    last: dict[str, tuple[int, str | None]] = {}
    """Each trajectory's last segment: its index and end-token version (as the sink reads
    a trajectory's version, `dressage.rollout.staleness.trajectory_version_infos`)."""
    for sample in group.samples:
        traj = sample.parent_traj_id
        if not traj:
            continue
        lengths[traj] = lengths.get(traj, 0) + sum(sample.loss_mask)
        if traj not in last or sample.segment_index >= last[traj][0]:
            last[traj] = (
                sample.segment_index,
                normalize_version(sample.dressage_end_token_version),
            )
    if len({version for _, version in last.values()}) < 2:
        return {}
    longest = max(last, key=lambda traj: lengths[traj])
    newest, limit = last[longest][1], share * lengths[longest]
    return {
        traj: _member_of(traj)
        for traj, (_, version) in last.items()
        if version is not None
        and version != newest
        and lengths[traj] <= limit
        and _member_of(traj) >= 0
    }


def _member_of(session_id: str) -> int:
    """The member index of a session `<group_id>-t<i>` (`collect_group`); -1 for another."""
    _, sep, tail = session_id.rpartition("-t")
    return int(tail) if sep and tail.isdigit() else -1


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
    refresh_share: float = REFRESH_SHARE
    """Run a trajectory again once its group completed when it ended under another weight
    version than the group's longest one and is at most this share of its length
    (`stale_short_members`); 0 never does."""
    retry_refused: int = 0
    """`staleness.spanLimitPolicy: retry_trajectory`: times a trajectory the span limit
    refused is run again alone before its group fails (`collect_group`); 0 fails the group."""

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
            rerun = session_id.endswith("-r")
            seed = sample_seed(self.seed, index, attempt, member + rerun * self.group_size)
            session = TrajectorySession(session_id, group_id, seed, member)
            reward = await self.trajectory(index, prompt, session)
            rewards[session_id] = reward if isinstance(reward, Scored) else Scored(reward)
            await self.client.finalize(session_id, rewards[session_id].value, instance_id=group_id)

        group = await collect_group(
            self.client, group_id, self.group_size, run, retry_refused=self.retry_refused
        )
        stale = stale_short_members(group, self.refresh_share)
        if stale:
            group = await self._refreshed(group, stale, run)
        return with_reward_metadata(group, rewards)

    async def _refreshed(
        self, group: Group, stale: Mapping[str, int], run: Callable[[str, int], Awaitable[None]]
    ) -> Group:
        """`group` with the trajectories `stale` (session id: member) run again, each in a new
        session, and their samples in place of the old ones (which go to `Group.replaced`, for
        the token ledger); `group` as it was when a rerun fails (its old samples are still
        trajectories of the group, the sink judges them)."""
        fresh = {f"{sid}-r": member for sid, member in stale.items()}
        results = await asyncio.gather(
            *(run(sid, member) for sid, member in fresh.items()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, asyncio.CancelledError):
                raise result
        if any(isinstance(r, BaseException) for r in results):
            await asyncio.gather(
                *(self.client.discard(s, instance_id=group.group_id) for s in fresh)
            )
            with contextlib.suppress(RolloutError):
                await self.client.segments(group.group_id)
            return group
        samples = await self.client.segments(group.group_id)
        if {s.parent_traj_id for s in samples} != set(fresh):
            return group
        kept = tuple(s for s in group.samples if s.parent_traj_id not in stale)
        replaced = tuple(s for s in group.samples if s.parent_traj_id in stale)
        return replace(group, samples=kept + tuple(samples), replaced=group.replaced + replaced)


def with_reward_metadata(group: Group, rewards: Mapping[str, Scored]) -> Group:
    """`group` with each sample's metadata carrying its trajectory's reward parts and failure
    (a sample's `parent_traj_id` is its proxy session)."""
    samples = []
    for sample in group.samples:
        scored = rewards.get(sample.parent_traj_id or "")
        extra = {} if scored is None else scored.metadata()
        samples.append(replace(sample, metadata={**sample.metadata, **extra}) if extra else sample)
    return replace(group, samples=tuple(samples))
