"""The one retry policy of every collector: whole-group retries, backoff, a breaker.

A prompt group whose rollout fails (`GroupFailed`: an HTTP error, the proxy's 502
`partial_rollout_staleness_exceeded`, an agent program that crashed) is retried whole, with
fresh sessions, up to `max_retries` times; attempt `k` waits `backoff_s * 2**(k-1)` seconds
(capped at `max_backoff_s`) times a jitter factor in [0.5, 1.5), so a brief outage (an engine
restarting) does not burn every retry at once and retries of many groups do not arrive
together. An attempt a staleness control refused (`GroupFailed.staleness`: the partial-rollout
span limit) is retried at once instead: it is no outage, the refusal comes at a publish, and a
group started then has the new version's whole interval to finish inside the span limit,
where a backoff spends part of it (a long trajectory refused again is generated again). A
group that exhausts its retries is dropped as `retries_exhausted`. A failure that names a drop
reason (`GroupFailed.dropped`: under `onRewardError: drop`, a reward or environment failure
that is the infrastructure's, `reward_error` or `environment_error`) drops its group at once,
unretried: a rerun would generate the group again for a service that just failed it.

The breaker: when `breaker_after` groups in a row are dropped either way, rollout is broken (the
proxy or every engine is down, the agent program cannot start) rather than unlucky, and
`RolloutBroken` is raised to the training loop with the failure reasons, instead of the
collector waiting forever for a batch. Its message counts failed *attempts* (each retry one, of
every group that failed since a group last completed, concurrent groups included), and says so;
the step figures count the same attempts (`failed_attempts`) and, separately, the groups they
belong to (`failed_groups`, each group once per reason). When the failures come from the job's
own code (a `UserCodeFailed`: a reward, an environment, an agent program), the message names
each distinct error with where it was raised, rather than pointing at the infrastructure; one
whose job setting says to stop on it (`onRewardError: stop`) opens the breaker at once,
unretried.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Final

from dressage.data.groups import Group, GroupFailed, GroupRollout
from dressage.rollout.stats import CollectorStats
from dressage.tasks.faults import FaultTally, UserCodeFailed

log = logging.getLogger(__name__)

RETRIES_EXHAUSTED: Final = "retries_exhausted"
ROLLOUT_BROKEN: Final = "rollout_broken"
"""The drop reason of a group abandoned because the breaker had opened."""
ROLLOUT_ERROR: Final = "rollout_error"
"""The failure reason of an unexpected exception in an agent (logged with its traceback)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How failed prompt groups are retried, and when rollout counts as broken."""

    max_retries: int = 3
    """Retries after the first attempt (`spec.rollout.maxRetries`)."""
    backoff_s: float = 0.5
    """Wait before the first retry; doubles with every further retry."""
    max_backoff_s: float = 10.0
    breaker_after: int = 64
    """Consecutive prompt groups dropped after exhausting their retries that open the breaker."""

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("backoff_s and max_backoff_s must be >= 0")
        if self.breaker_after < 1:
            raise ValueError(f"breaker_after must be >= 1, got {self.breaker_after}")

    def delay(self, attempt: int, jitter: float) -> float:
        """Seconds to wait before `attempt` (1 = the first retry); `jitter` is in [0, 1)."""
        if attempt < 1:
            return 0.0
        base = min(self.max_backoff_s, self.backoff_s * 2.0 ** (attempt - 1))
        return float(base * (0.5 + jitter))


class RolloutBroken(RuntimeError):
    """The breaker opened: rollout keeps failing, so the run stops with the reasons."""


class GroupAttempts:
    """Runs prompt groups under a `RetryPolicy`, counting into a collector's `CollectorStats`.

    Shared by the synchronous and the asynchronous collector. `sleep` and `jitter` are
    injectable so tests can run the backoff on a fake clock.
    """

    def __init__(
        self,
        rollout: GroupRollout,
        policy: RetryPolicy,
        stats: CollectorStats,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.rollout = rollout
        self.policy = policy
        self.stats = stats
        self._sleep = sleep
        self._jitter = jitter
        self._dropped_in_a_row = 0
        self._drops_in_a_row: Counter[str] = Counter()
        self._recent: Counter[str] = Counter()
        self._recent_faults = FaultTally()
        self.broken: RolloutBroken | None = None
        """Set once the breaker opened; every later `run` raises it."""

    async def run(self, index: int) -> Group | None:
        """Prompt `index` as a group, or None when it was dropped after its last retry (the
        drop that opens the breaker returns None too, with `broken` set).

        Raises `RolloutBroken` when the breaker is already open at an attempt; the group is
        then counted as dropped under `rollout_broken`.
        """
        failed: set[str] = set()
        """The reasons this group failed under so far (counted once each in failed_groups)."""
        refused = False
        """The last attempt was refused by a staleness control (no outage: retried at once)."""
        for attempt in range(self.policy.max_retries + 1):
            if self.broken is not None:
                self.stats.totals.dropped_groups[ROLLOUT_BROKEN] += 1
                raise self.broken
            if attempt:
                self.stats.totals.retries += 1
                if not refused:
                    await self._sleep(self.policy.delay(attempt, self._jitter()))
            refused = False
            try:
                group = await self.rollout(index, attempt)
            except GroupFailed as exc:
                refused = exc.staleness
                self._failed(exc.reason, failed, staleness=exc.staleness)
                self.stats.failed_attempt(exc.tokens, exc.reason, staleness=exc.staleness)
                if isinstance(exc, UserCodeFailed):
                    self._recent_faults.add(exc.fault)
                    if exc.stop is not None:
                        self._stop(exc)
                        return None
                if exc.dropped is not None:
                    self._drop(exc.dropped)
                    return None
            except Exception:
                log.exception("prompt group %d failed (attempt %d)", index, attempt)
                self._failed(ROLLOUT_ERROR, failed, staleness=False)
            else:
                self.stats.completed(group)
                self._dropped_in_a_row = 0
                self._drops_in_a_row.clear()
                self._recent.clear()
                self._recent_faults.clear()
                # Counted: the replaced samples go no further than the ledger.
                return replace(group, replaced=()) if group.replaced else group
        self._drop(RETRIES_EXHAUSTED)
        return None

    def _drop(self, reason: str) -> None:
        """Count the group dropped under `reason`; open the breaker when that makes
        `breaker_after` in a row."""
        self.stats.totals.dropped_groups[reason] += 1
        self._dropped_in_a_row += 1
        self._drops_in_a_row[reason] += 1
        if self._dropped_in_a_row >= self.policy.breaker_after and self.broken is None:
            attempts = sum(self._recent.values())
            reasons = ", ".join(f"{r} {n}" for r, n in self._recent.most_common(5))
            self.broken = RolloutBroken(
                f"rollout is failing: {self._dropped_in_a_row} prompt groups in a row were "
                f"dropped {self._how_dropped()}; "
                f"{attempts} failed attempt{'s' if attempts != 1 else ''} since a group last "
                f"completed (all groups in flight), by reason: {reasons}. {self._hint()}"
            )

    def _how_dropped(self) -> str:
        """How the groups in a row were dropped: after every retry, or at once by reason."""
        retried = f"after {self.policy.max_retries + 1} attempts each"
        if set(self._drops_in_a_row) == {RETRIES_EXHAUSTED}:
            return retried
        parts = [
            f"{count} {retried}" if reason == RETRIES_EXHAUSTED else f"{count} at once as {reason}"
            for reason, count in self._drops_in_a_row.most_common()
        ]
        return f"({', '.join(parts)})"

    def _hint(self) -> str:
        """Who to suspect: the user code that failed, else the infrastructure."""
        if not self._recent_faults:
            return "Is the proxy, an engine or the agent program down?"
        user = sum(entry.count for entry in self._recent_faults.entries())
        others = sum(self._recent.values()) - user
        hint = f"User code failed: {self._recent_faults.summary(unit='failed attempts')}."
        return f"{hint} Is the proxy or an engine down?" if others > 0 else hint

    def _stop(self, failed: UserCodeFailed) -> None:
        """Open the breaker at `failed`'s first occurrence, as its job setting asks."""
        self.stats.totals.dropped_groups[ROLLOUT_BROKEN] += 1
        if self.broken is None:
            self.broken = RolloutBroken(
                f"rollout stopped at the first failure ({failed.stop}): {failed.fault}"
            )

    def _failed(self, reason: str, group_reasons: set[str], *, staleness: bool) -> None:
        """Count one failed attempt under `reason`, and its group once per reason."""
        self.stats.totals.failed_attempts[reason] += 1
        if reason not in group_reasons:
            group_reasons.add(reason)
            self.stats.totals.failed_groups[reason] += 1
        self._recent[reason] += 1
        if staleness:
            self.stats.totals.staleness_failures += 1
