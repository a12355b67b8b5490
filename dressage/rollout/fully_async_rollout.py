"""`fully_async` rollout: generation never waits for training.

The background worker keeps `concurrency` prompt groups in flight while the trainer trains on
the previous batch. A weight update pauses generation through the proxy in `abort` mode;
without partial rollout the proxy regenerates each interrupted turn from its prompt under the
new weights, and refuses a trajectory whose later turn would come from another version than its
earlier ones. Every trajectory is therefore single-version, and batch-level staleness control
(`keepVersions`) is what keeps groups of old versions out of the trainer.
"""

from __future__ import annotations

from dressage.rollout.collector import AsyncRolloutCollector


class FullyAsyncRolloutCollector(AsyncRolloutCollector):
    """The asynchronous collector with the proxy's partial rollout off."""

    partial_rollout = False
