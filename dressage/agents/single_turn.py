"""The single-turn agent: one answer per trajectory through the proxy's `/generate`.

Each trajectory of a group generates one answer for the prompt, is scored by the task's reward
and finalized with it; the group's samples are read back from the proxy (`collect_group`). A
task that fixes response lengths (`dressage.tasks.base.FixedLengthTask`) gives each trajectory
its exact length: that many tokens are generated, end-of-sequence ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from dressage.agents.groups import GroupAgent, TrajectorySession
from dressage.tasks.base import Scored


class PromptSource(Protocol):
    """What the collector needs from a task plus its tokenizer."""

    def prompt_ids(self, index: int) -> list[int]:
        """Token ids of prompt `index`."""
        ...

    async def ascored(self, index: int, output_ids: Sequence[int]) -> Scored:
        """Reward of the generated `output_ids` for prompt `index`, with its named parts and
        failure (a user's reward function may take a while: it must not hold up the other
        trajectories)."""
        ...


@dataclass(kw_only=True, eq=False)
class SingleTurnRollout(GroupAgent[list[int]]):
    """One prompt group of a single-turn task: `(prompt index, attempt) -> Group`.

    Every trajectory generates one answer through the proxy's `/generate`, is scored by the
    task's reward, and is finalized with it; the group's samples are read back from the proxy.
    """

    source: PromptSource
    lengths: Callable[[int, int], int] | None = None
    """`lengths(index, member)`: the exact response length of each trajectory (None: the policy
    stops at end-of-sequence or `sampling.max_new_tokens`)."""

    def prompt(self, index: int) -> list[int]:
        return self.source.prompt_ids(index)

    async def trajectory(self, index: int, prompt: list[int], session: TrajectorySession) -> Scored:
        sampling = self.sampling
        if self.lengths is not None:
            length = self.lengths(index, session.member)
            sampling = replace(sampling, max_new_tokens=length, ignore_eos=True)
        output = await self.client.generate(
            prompt,
            sampling,
            session_id=session.session_id,
            instance_id=session.group_id,
            seed=session.seed,
        )
        return await self.source.ascored(index, output)
