"""The single-turn agent: one answer per trajectory through the proxy's `/generate`.

Each trajectory of a group generates one answer for the prompt, is scored by the task's reward
and finalized with it; the group's samples are read back from the proxy (`collect_group`). A
task that fixes response lengths (`dressage.tasks.base.FixedLengthTask`) gives each trajectory
its exact length: that many tokens are generated, end-of-sequence ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from dressage.agents.groups import collect_group, group_id_of, sample_seed
from dressage.data.groups import Group
from dressage.proxy.client import ProxyRolloutClient, SamplingSettings


class PromptSource(Protocol):
    """What the collector needs from a task plus its tokenizer."""

    def prompt_ids(self, index: int) -> list[int]:
        """Token ids of prompt `index`."""
        ...

    async def areward(self, index: int, output_ids: Sequence[int]) -> float:
        """Reward of the generated `output_ids` for prompt `index` (a user's reward function
        may take a while: it must not hold up the other trajectories)."""
        ...


class SingleTurnRollout:
    """One prompt group of a single-turn task: `(prompt index, attempt) -> Group`.

    Every trajectory generates one answer through the proxy's `/generate`, is scored by the
    task's reward, and is finalized with it; the group's samples are read back from the proxy.
    Used by every collector (it satisfies `dressage.data.groups.GroupRollout`).
    """

    def __init__(
        self,
        *,
        source: PromptSource,
        client: ProxyRolloutClient,
        group_size: int,
        sampling: SamplingSettings,
        seed: int = 0,
        run_tag: str = "run",
        lengths: Callable[[int, int], int] | None = None,
    ) -> None:
        """`lengths(index, member)`: the exact response length of each trajectory (None: the
        policy stops at end-of-sequence or `sampling.max_new_tokens`)."""
        self.source = source
        self.client = client
        self.group_size = group_size
        self.sampling = sampling
        self.seed = seed
        self.run_tag = run_tag
        self.lengths = lengths

    async def __call__(self, index: int, attempt: int) -> Group:
        group_id = group_id_of(self.run_tag, index, attempt)
        prompt_ids = self.source.prompt_ids(index)

        async def trajectory(session_id: str, member: int) -> None:
            sampling = self.sampling
            if self.lengths is not None:
                length = self.lengths(index, member)
                sampling = replace(sampling, max_new_tokens=length, ignore_eos=True)
            output = await self.client.generate(
                prompt_ids,
                sampling,
                session_id=session_id,
                instance_id=group_id,
                seed=sample_seed(self.seed, index, attempt, member),
            )
            await self.client.finalize(session_id, await self.source.areward(index, output))

        return await collect_group(self.client, group_id, self.group_size, trajectory)
