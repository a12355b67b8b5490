"""`partial_async` rollout: interrupted generations resume under the new weights.

Same worker and batch sink as `fully_async` (`dressage.rollout.collector`), with the proxy's
partial rollout on: a weight update pauses generation through the proxy, and each in-flight
generation resumes from its partial output under the new version, its tokens keeping their own
versions. The proxy's version-span limit (`--max-partial-rollout-preempts`) refuses a
trajectory that would span too many versions with HTTP 502
`partial_rollout_staleness_exceeded`; the proxy client raises that as a staleness
`GroupFailed`, and the collector's retry policy retries the whole prompt group at once (the old
partial trajectory is never resumed) and counts the staleness failure
(`CollectorStats.totals.staleness_failures`, `staleness_failure_rate`). The proxy refuses at
the resume, before the engine generates a piece under the version that exceeds the limit.
Both controls may be on at once: the span limit bounds drift inside a trajectory,
`keepVersions` bounds which groups enter a batch; a completed group's short trajectories that
ended versions before its long one are run again before the sink
(`dressage.agents.groups.stale_short_members`), so the window does not drop the group holding
the long response for them.
"""

from dressage.proxy.errors import PARTIAL_ROLLOUT_STALENESS_EXCEEDED
from dressage.rollout.collector import AsyncRolloutCollector

PartialAsyncRolloutCollector = AsyncRolloutCollector
"""The asynchronous collector, as the design (`docs/staleness.md`) names it for this mode."""

__all__ = ["PARTIAL_ROLLOUT_STALENESS_EXCEEDED", "PartialAsyncRolloutCollector"]
