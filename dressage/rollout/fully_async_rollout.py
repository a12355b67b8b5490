"""`fully_async` rollout: generation never waits for training.

The background worker keeps `concurrency` prompt groups in flight while the trainer trains on
the previous batch. A weight update pauses generation through the proxy in `abort` mode;
without partial rollout the proxy regenerates each interrupted turn from its prompt under the
new weights, and refuses a trajectory whose later turn would come from another version than its
earlier ones. Every trajectory is therefore single-version, and batch-level staleness control
(`keepVersions`) is what keeps groups of old versions out of the trainer.
"""

from __future__ import annotations

from dressage.api.job import AsyncRLJobSpec
from dressage.rollout.collector import AsyncRolloutCollector
from dressage.rollout.groups import GroupRollout
from dressage.rollout.staleness import StalenessConfig


class FullyAsyncRolloutCollector(AsyncRolloutCollector):
    """The asynchronous collector with the proxy's partial rollout off."""

    partial_rollout = False

    @classmethod
    def from_spec(cls, spec: AsyncRLJobSpec, rollout: GroupRollout) -> AsyncRolloutCollector:
        """Build the collector a job asks for; settings come from the job model only."""
        return cls(
            rollout,
            batch_size=spec.rollout.batch_size,
            concurrency=spec.rollout.concurrency,
            max_retries=spec.rollout.max_retries,
            staleness=StalenessConfig(keep_versions=spec.staleness.keep_versions),
        )
