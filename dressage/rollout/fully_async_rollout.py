"""`fully_async` rollout: generation never waits for training.

The background worker keeps `concurrency` prompt groups in flight while the trainer trains on
the previous batch. A weight update pauses generation through the proxy in `abort` mode;
without partial rollout the proxy regenerates each interrupted turn from its prompt under the
new weights, and refuses a trajectory whose later turn would come from another version than its
earlier ones. Every trajectory is therefore single-version, and batch-level staleness control
(`keepVersions`) is what keeps groups of old versions out of the trainer.

The collector is `dressage.rollout.collector.AsyncRolloutCollector`, shared with
`partial_async`: the modes differ in the proxy's settings, not in how groups are scheduled.
"""

from dressage.rollout.collector import AsyncRolloutCollector

FullyAsyncRolloutCollector = AsyncRolloutCollector
"""The asynchronous collector, as the design (`docs/staleness.md`) names it for this mode."""

__all__ = ["FullyAsyncRolloutCollector"]
