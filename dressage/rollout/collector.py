"""The asynchronous collector of the `fully_async` and `partial_async` rollout modes.

Two halves, as in the design's filtering flow (`docs/staleness.md`):

1. A background worker keeps pulling prompt groups from the data buffer (prompt indices from
   the data position on) and rolls them out concurrently, at most `concurrency` groups in
   flight; completed groups go into a bounded completed queue, so a worker far ahead of the
   trainer blocks instead of piling up work. The worker never waits for training as such:
   rollout and training overlap. With batch-level staleness control on, admission control
   (`dressage.rollout.admission`) holds a group back until it could still be trained inside
   the version window; the worker is woken by a publish and by drops that free capacity.
2. `next_batch()`, called by the training loop, drains completed groups into the candidate
   batch through `StalenessGroupFilter.admit`: a group revealing a new version advances the
   window, pending groups outside it are removed, and each new group is checked once more.
   Groups are dropped whole and every drop is counted by reason.

The two modes differ only in the proxy (partial rollout on or off), not here. Failed groups
follow the one retry policy (`dressage.rollout.retry`): whole-group retries with backoff and
jitter, and a breaker that fails `next_batch` with `RolloutBroken` when rollout keeps failing.
Nothing is lost silently: `CollectorStats` accounts for every prompt group that was started.

Data position: `state_dict()` records the next prompt index the worker would start. Groups in
flight or queued at a checkpoint are not replayed after a restart (they are counted as dropped
for shutdown when the collector closes), so a resumed run never trains on a prompt twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from dressage.data.groups import Group, GroupRollout, TrainBatch
from dressage.data.samples import Sample
from dressage.data.versions import normalize_version
from dressage.rollout.admission import AdmissionPolicy
from dressage.rollout.retry import GroupAttempts, RetryPolicy, RolloutBroken
from dressage.rollout.staleness import DropReason, StalenessConfig, StalenessGroupFilter
from dressage.rollout.stats import CollectorStats

log = logging.getLogger(__name__)

SHUTDOWN: Final = "shutdown"
STALE_DROPS_WARN_BATCHES: Final = 8
"""Stale drops worth this many batches while the trainer waits for one batch are logged (and
again at every doubling): a window that keeps refusing what the engines produce is otherwise a
run that generates and drops without a line on screen."""


class Collector(Protocol):
    """What the training loop needs from a collector: one `TrainBatch` per trainer step.

    `state_dict()`/`load_state_dict()` carry the data position (which prompts were already
    used) through checkpoints, so a resumed run neither repeats nor skips prompts.
    `on_weights_published(version)` tells the collector a new weight version is live on the
    engines. `stats` are the running totals the job's metrics export.
    """

    stats: CollectorStats

    async def next_batch(self) -> TrainBatch: ...

    def on_weights_published(self, version: str) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    async def aclose(self) -> None: ...


class CollectorClosed(Exception):
    """`next_batch` was called on a closed collector or after the data ran out."""


class PromptPosition:
    """A collector's data position: the index of the next prompt it would start. It is the
    whole state a checkpoint keeps of a collector (`state_dict`/`load_state_dict`)."""

    next_prompt: int = 0

    def state_dict(self) -> dict[str, Any]:
        return {"next_prompt": self.next_prompt}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        position = state.get("next_prompt", 0)
        if not isinstance(position, int) or position < 0:
            raise ValueError(f"collector state next_prompt must be an int >= 0, got {position!r}")
        self.next_prompt = position


class AsyncRolloutCollector(PromptPosition):
    """Background rollout worker plus the staleness-filtered batch sink."""

    def __init__(
        self,
        rollout: GroupRollout,
        *,
        batch_size: int,
        concurrency: int,
        retry: RetryPolicy,
        staleness: StalenessConfig,
        num_prompts: int | None = None,
        queue_size: int | None = None,
        admission: bool | None = None,
        window_on_published: bool = False,
        mask_keep_versions: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`admission`: admission control on or off; None turns it on exactly when the
        staleness control is (`staleness.keep_versions > 0`). `window_on_published`: the
        window also moves on every version the trainer publishes, not only on versions seen in
        completed groups (the staleness budget's rule: with `keep_versions = maxLagVersions +
        1` no handed-out sample then lags the trainer's version by more than
        `maxLagVersions`). `mask_keep_versions`: `spanLimitPolicy: mask_old_tokens`, the
        newest versions of a trajectory whose tokens are trained (`dressage.rollout.
        span_policy`). `clock` measures the seconds rollout waited for admission."""
        if batch_size < 1 or concurrency < 1:
            raise ValueError("batch_size and concurrency must be >= 1")
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.num_prompts = num_prompts
        """Stop after this many prompts (None: the prompt stream is endless)."""
        self.filter = StalenessGroupFilter(staleness)
        self.admission = AdmissionPolicy(
            keep_versions=staleness.keep_versions,
            batch_size=batch_size,
            enabled=staleness.enabled if admission is None else admission,
        )
        self._clock = clock
        self.mask_keep_versions = mask_keep_versions
        self._window_on_published = window_on_published
        self._published: set[str] = set()
        """Distinct new versions published since the collector started."""
        self._batches_taken = 0
        self._sink_waiting = False
        self._capacity_changed = asyncio.Event()
        self._forced_warned = False
        self.stats = CollectorStats()
        self._attempts = GroupAttempts(rollout, retry, self.stats)
        self.next_prompt = 0
        self.version: str | None = None
        # Groups, or None: a wake-up for `next_batch` (data exhausted, or the breaker opened).
        self._completed: asyncio.Queue[Group | None] = asyncio.Queue(
            maxsize=queue_size if queue_size is not None else max(batch_size, concurrency)
        )
        self._pending: list[Group] = []
        self._in_flight: set[asyncio.Task[None]] = set()
        self._worker: asyncio.Task[None] | None = None
        self._last_batch_stats = self.stats.snapshot()
        self._exhausted = False
        self._drained = False
        self._closed = False

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the background worker (idempotent; `next_batch` starts it too)."""
        if self._worker is None and not self._closed:
            self._worker = asyncio.create_task(self._work(), name="rollout-worker")

    async def __aenter__(self) -> AsyncRolloutCollector:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the worker, cancel in-flight groups and account for everything not trained
        (completed groups' tokens as the token ledger's `surplus`)."""
        if self._closed:
            return
        self._closed = True
        tasks: list[asyncio.Task[None]] = list(self._in_flight)
        if self._worker is not None:
            tasks.append(self._worker)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        leftovers = len(self._pending)
        for group in self._pending:
            self.stats.left_over(group, "pending")
        while not self._completed.empty():
            if (queued := self._completed.get_nowait()) is not None:
                leftovers += 1
                self.stats.left_over(queued, "queued")
        self._pending = []
        if leftovers:
            self.stats.totals.dropped_groups[SHUTDOWN] += leftovers

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def steer(self, concurrency: int, keep_versions: int) -> None:
        """Change the groups in flight and the staleness window from the next group started
        on (the staleness budget's controller, `dressage.rollout.budget`). Groups in flight
        above a lower `concurrency` finish; no new one starts until they are below it. A
        narrower window takes effect at the next group the sink checks."""
        if concurrency < 1 or keep_versions < 1:
            raise ValueError("concurrency and keep_versions must be >= 1 when steered")
        self.concurrency = concurrency
        if keep_versions != self.filter.config.keep_versions:
            self.filter.set_keep_versions(keep_versions)
            self.admission = dataclasses.replace(self.admission, keep_versions=keep_versions)
        self._free_capacity()

    @property
    def pending(self) -> int:
        """Groups admitted to the candidate batch but not yet handed to the trainer."""
        return len(self._pending)

    # --- Collector protocol: checkpoints and versions ------------------------------------

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self._worker is not None:
            raise RuntimeError("load_state_dict must be called before the collector starts")
        super().load_state_dict(state)

    def on_weights_published(self, version: str) -> None:
        """Record the live version. The staleness window moves on *observed* versions (from
        completed groups), as the design prescribes, and a new version widens what admission
        control lets the worker start. With `window_on_published` (the staleness budget) the
        published version is observed too, and the pending groups it moved the window past are
        dropped (`window_advanced`): the next batch is trained on this version, and the budget
        counts lag from it. A label published again is not a new version.
        """
        self.version = version
        label = normalize_version(version)
        if label is None or label in self._published:
            return
        self._published.add(label)
        if self._window_on_published:
            before = self._pending
            self._pending = self.filter.advance(label, before, samples_of=_samples_of)
            self._count_dropped_pending(before)
        self._free_capacity()

    @property
    def ahead(self) -> int:
        """Groups started and neither trained nor dropped: in flight, queued or pending."""
        stats = self.stats
        return stats.groups_started - stats.groups_trained - stats.groups_dropped

    def _free_capacity(self) -> None:
        self._capacity_changed.set()

    def _admits(self) -> bool:
        return self.admission.admits(
            published=len(self._published),
            taken=self._batches_taken,
            ahead=self.ahead,
            sink_waiting=self._sink_waiting,
        )

    async def _wait_for_admission(self) -> None:
        """Return once admission control lets one more group start (or the breaker opened).

        Woken by `_free_capacity` (a publish, a drop, a finished task, the trainer starting to
        wait for a batch), never by a timer.
        """
        if not self._admits():
            self.stats.totals.admissions_held += 1
            started = self._clock()
            try:
                while not self._admits() and self._attempts.broken is None:
                    self._capacity_changed.clear()
                    await self._capacity_changed.wait()
            finally:
                self.stats.totals.admission_wait_seconds += self._clock() - started
        if self._attempts.broken is not None or self._forced_warned:
            return
        capacity = self.admission.capacity(
            published=len(self._published), taken=self._batches_taken, ahead=self.ahead
        )
        if capacity is not None and capacity <= 0:
            self._forced_warned = True
            log.warning(
                "admission control let a group start beyond the staleness window because the "
                "trainer is waiting with too few groups ahead: %d batches were taken but only "
                "%d new weight versions published (expected one publish per step); said once, "
                "later such starts are not logged",
                self._batches_taken,
                len(self._published),
            )

    # --- the worker ----------------------------------------------------------------------

    async def _work(self) -> None:
        try:
            while self.num_prompts is None or self.next_prompt < self.num_prompts:
                await self._wait_for_slot()
                if self._attempts.broken is None:
                    await self._wait_for_admission()
                if self._attempts.broken is not None:
                    break
                index = self.next_prompt
                self.next_prompt += 1
                self.stats.admission_lags.append(
                    self.admission.projected_lag(
                        published=len(self._published), taken=self._batches_taken, ahead=self.ahead
                    )
                )
                self.stats.groups_started += 1
                task = asyncio.create_task(self._run_group(index), name=f"group-{index}")
                self._in_flight.add(task)
                task.add_done_callback(self._group_done)
        finally:
            self._exhausted = True
            self._signal_if_finished()

    async def _wait_for_slot(self) -> None:
        """Return once fewer than `concurrency` groups are in flight (or the breaker opened);
        woken by a finished group and by `steer`."""
        while len(self._in_flight) >= self.concurrency and self._attempts.broken is None:
            self._capacity_changed.clear()
            await self._capacity_changed.wait()

    def _group_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._free_capacity()  # a dropped group (retries exhausted, shutdown) frees capacity
        if not task.cancelled() and task.exception() is not None:
            log.error("rollout task crashed", exc_info=task.exception())
        self._signal_if_finished()

    def _signal_if_finished(self) -> None:
        if self._exhausted and not self._in_flight and not self._closed:
            self._wake()

    def _wake(self) -> None:
        # The queue may be full, so waking `next_batch` must not block the caller.
        if not self._closed:
            asyncio.get_running_loop().create_task(self._completed.put(None))

    async def _run_group(self, index: int) -> None:
        group: Group | None = None
        try:
            group = await self._attempts.run(index)
            if group is not None:
                await self._completed.put(group)
                group = None  # queued: the queue's, counted where it ends
            elif self._attempts.broken is not None:
                self._wake()
        except asyncio.CancelledError:
            self.stats.totals.dropped_groups[SHUTDOWN] += 1
            if group is not None:  # completed, waiting for room in the full queue
                self.stats.left_over(group, "queued")
            raise
        except RolloutBroken:
            self._wake()

    # --- the batch sink ------------------------------------------------------------------

    async def next_batch(self) -> TrainBatch:
        """The next trainer batch of `batch_size` groups, all inside the staleness window.

        Raises `CollectorClosed` when the data is exhausted before a full batch is collected,
        and `RolloutBroken` when the retry policy's breaker opened. The batch carries the
        drops, failures and retries counted since the previous batch.
        """
        if self._closed:
            raise CollectorClosed("collector is closed")
        if self._drained:
            raise CollectorClosed("the data buffer is exhausted")
        self.start()
        self._sink_waiting = True
        self._free_capacity()
        dropped_waiting, warn_at = 0, STALE_DROPS_WARN_BATCHES * self.batch_size
        try:
            while len(self._pending) < self.batch_size:
                if self._attempts.broken is not None:
                    raise self._attempts.broken
                group = await self._completed.get()
                if group is None:
                    if self._attempts.broken is not None:
                        raise self._attempts.broken
                    if self._exhausted and not self._in_flight:
                        self._drained = True
                        raise CollectorClosed("the data buffer is exhausted")
                    continue
                dropped_waiting += self._admit(group)
                if dropped_waiting >= warn_at:
                    self._warn_stale_drops(dropped_waiting)
                    warn_at *= 2
        finally:
            self._sink_waiting = False
        groups, self._pending = self._pending[: self.batch_size], self._pending[self.batch_size :]
        if self.mask_keep_versions is not None:
            groups = [self.stats.masked(g, self.mask_keep_versions) for g in groups]
        self.stats.groups_trained += len(groups)
        self._batches_taken += 1
        batch = self.stats.batch(groups, since=self._last_batch_stats)
        self._last_batch_stats = self.stats.snapshot()  # after what `batch` counted
        return batch

    def _warn_stale_drops(self, dropped: int) -> None:
        log.warning(
            "%d prompt groups dropped as stale while the trainer waits for one batch of %d: "
            "the window (keepVersions %d) holds %s; the engines serve %s",
            dropped,
            self.batch_size,
            self.filter.config.keep_versions,
            ", ".join(self.filter.tracker.window()) or "no version yet",
            self.version or "an unknown version",
        )

    def _admit(self, group: Group) -> int:
        """Take a completed group at the sink; returns how many groups it cost (itself, if
        dropped, and pending ones the window advanced past)."""
        before = self._pending
        self._pending, verdict = self.filter.admit(group, before, samples_of=_samples_of)
        dropped = self._count_dropped_pending(before)
        if not verdict.keep and verdict.reason is not None:
            self.stats.dropped_at_sink(group, verdict.reason.value)
        if dropped or not verdict.keep:
            self._free_capacity()
        return dropped + (0 if verdict.keep else 1)

    def _count_dropped_pending(self, before: list[Group]) -> int:
        """Count the groups of `before` no longer pending as `window_advanced` drops."""
        kept = {id(g) for g in self._pending}
        dropped = [g for g in before if id(g) not in kept]
        for pending in dropped:
            self.stats.dropped_at_sink(pending, DropReason.WINDOW_ADVANCED.value)
        return len(dropped)


def _samples_of(group: Group) -> Sequence[Sample]:
    return group.samples
