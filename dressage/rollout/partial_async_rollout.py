"""`partial_async` rollout: interrupted generations resume under the new weights.

Same worker and batch sink as `fully_async`, with the proxy's partial rollout on: a weight
update pauses generation through the proxy, and each in-flight generation resumes from its
partial output under the new version, its tokens keeping their own versions. The proxy's
version-span limit (`--max-partial-rollout-preempts`) refuses a trajectory that would span too
many versions with HTTP 502 `partial_rollout_staleness_exceeded`; the rollout function turns
that into a `GroupFailed(staleness=True)`, and this collector retries the whole prompt group
(the old partial trajectory is never resumed) and counts the staleness failure. Both controls
may be on at once: the span limit bounds drift inside a trajectory, `keepVersions` bounds which
groups enter a batch.
"""

from __future__ import annotations

from dressage.rollout.fully_async_rollout import FullyAsyncRolloutCollector

PARTIAL_ROLLOUT_STALENESS_EXCEEDED = "partial_rollout_staleness_exceeded"
"""The proxy's error name for a trajectory over the version-span limit."""


class PartialAsyncRolloutCollector(FullyAsyncRolloutCollector):
    """The asynchronous collector with the proxy's partial rollout on."""

    partial_rollout = True

    @property
    def staleness_failure_rate(self) -> float:
        """Staleness failures per started prompt group (0 before any group started)."""
        started = self.stats.groups_started
        return self.stats.staleness_failures / started if started else 0.0
