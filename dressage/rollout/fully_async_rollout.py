"""`fully_async` rollout: generation never waits for training.

The background worker keeps `concurrency` prompt groups in flight while the trainer trains on
the previous batch; weight updates land on the engines between tokens. Without partial rollout
a trajectory never continues across versions (the proxy refuses it), so each trajectory is
single-version and batch-level staleness control (`keepVersions`) is what keeps old groups out
of the trainer.
"""

from __future__ import annotations

from collections.abc import Iterator

from dressage.api.job import AsyncRLJobSpec
from dressage.rollout.collector import AsyncRolloutCollector
from dressage.rollout.groups import GroupRollout, PromptItem
from dressage.rollout.staleness import StalenessConfig


class FullyAsyncRolloutCollector(AsyncRolloutCollector):
    """The asynchronous collector with the proxy's partial rollout off."""

    partial_rollout = False

    @classmethod
    def from_spec(
        cls, spec: AsyncRLJobSpec, prompts: Iterator[PromptItem], rollout: GroupRollout
    ) -> AsyncRolloutCollector:
        """Build the collector a job asks for; settings come from the job model only."""
        return cls(
            prompts,
            rollout,
            batch_size=spec.rollout.batch_size,
            concurrency=spec.rollout.concurrency,
            max_retries=spec.rollout.max_retries,
            staleness=StalenessConfig(keep_versions=spec.staleness.keep_versions),
        )
