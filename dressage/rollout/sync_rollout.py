"""`sync` rollout: generate one trainer batch of GRPO groups, then stop until asked again.

`next_batch` rolls out `batch_size` prompt groups concurrently (at most `concurrency` at a
time) through the job's agent (`dressage.data.groups.GroupRollout`), and waits for all of them;
nothing is generated while the trainer trains, so every batch comes from the current weights.
A failed group follows the one retry policy (`dressage.rollout.retry`); a group dropped after
its last retry is replaced by the next prompt, and the breaker stops the run with
`RolloutBroken` when groups keep failing. The data position (`next_prompt`) is the collector's
whole state, so a checkpoint resumes the prompt stream exactly.
"""

from __future__ import annotations

import asyncio

from dressage.data.groups import Group, GroupRollout, TrainBatch
from dressage.rollout.collector import PromptPosition
from dressage.rollout.retry import ROLLOUT_BROKEN, GroupAttempts, RetryPolicy, RolloutBroken
from dressage.rollout.stats import CollectorStats


class SyncCollector(PromptPosition):
    """The collector of `rollout.mode: sync` (a `dressage.rollout.collector.Collector`)."""

    def __init__(
        self,
        rollout: GroupRollout,
        *,
        batch_size: int,
        concurrency: int,
        retry: RetryPolicy,
    ) -> None:
        if batch_size < 1 or concurrency < 1:
            raise ValueError("batch_size and concurrency must be >= 1")
        self.batch_size = batch_size
        self.stats = CollectorStats()
        self.next_prompt = 0
        self.version: str | None = None
        self._attempts = GroupAttempts(rollout, retry, self.stats)
        self._slots = asyncio.Semaphore(concurrency)

    async def next_batch(self) -> TrainBatch:
        """Roll out `batch_size` complete groups (dropped groups are replaced by new prompts)."""
        before = self.stats.snapshot()
        groups: list[Group] = []
        while len(groups) < self.batch_size:
            wanted = self.batch_size - len(groups)
            indices = range(self.next_prompt, self.next_prompt + wanted)
            self.next_prompt += wanted
            self.stats.groups_started += wanted
            results = await asyncio.gather(
                *(self._group(i) for i in indices), return_exceptions=True
            )
            for result in results:
                if isinstance(result, Group):
                    groups.append(result)
                elif isinstance(result, BaseException) and not isinstance(result, RolloutBroken):
                    raise result
            if self._attempts.broken is not None:
                # Every started group ends somewhere: the completed ones are abandoned with it.
                self.stats.totals.dropped_groups[ROLLOUT_BROKEN] += len(groups)
                for group in groups:
                    self.stats.left_over(group, ROLLOUT_BROKEN)
                raise self._attempts.broken
        self.stats.groups_trained += len(groups)
        return self.stats.batch(groups, since=before)

    async def _group(self, index: int) -> Group | None:
        async with self._slots:  # spec.rollout.concurrency: groups in flight
            return await self._attempts.run(index)

    def on_weights_published(self, version: str) -> None:
        self.version = version

    async def aclose(self) -> None:
        """Nothing to stop: no group is in flight between batches."""
