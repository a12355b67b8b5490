"""The asynchronous collector shared by the fully and partial async rollout modes.

Two halves, as in the reference's filtering flow:

1. A background worker keeps pulling prompt groups from the data buffer (prompt indices from
   the data position on) and rolls them out concurrently, at most `concurrency` groups in
   flight; completed groups go into a bounded completed queue, so a worker far ahead of the
   trainer blocks instead of piling up work. The worker never waits for training: rollout and
   training overlap.
2. `next_batch()`, called by the training loop, drains completed groups into the candidate
   batch through `StalenessGroupFilter.admit`: a group revealing a new version advances the
   window, pending groups outside it are removed, and each new group is checked once more.
   Groups are dropped whole and every drop is counted by reason.

A failed group (`GroupFailed`, for example the proxy's 502 `partial_rollout_staleness_exceeded`)
is retried as a whole prompt group up to `max_retries` times and dropped after that. Nothing is
lost silently: `CollectorStats` accounts for every prompt group that was started.

Data position: `state_dict()` records the next prompt index the worker would start. Groups in
flight or queued at a checkpoint are not replayed after a restart (they are counted as dropped
for shutdown when the collector closes), so a resumed run never trains on a prompt twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dressage.rollout.artifacts.samples import Sample
from dressage.rollout.groups import Group, GroupFailed, GroupRollout, TrainBatch
from dressage.rollout.staleness import StalenessConfig, StalenessGroupFilter

log = logging.getLogger(__name__)

RETRIES_EXHAUSTED = "retries_exhausted"
SHUTDOWN = "shutdown"
ROLLOUT_ERROR = "rollout_error"


@dataclass
class CollectorStats:
    """Running totals of one collector; the runner exports them as Prometheus counters.

    Invariant once closed: `groups_started == groups_trained + sum(dropped.values())`.
    """

    groups_started: int = 0
    groups_completed: int = 0
    groups_trained: int = 0
    retries: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    """Failed attempts by reason (each attempt's failure counts once)."""
    staleness_failures: int = 0
    """Failed attempts caused by a staleness control (the proxy's version-span limit)."""
    dropped: Counter[str] = field(default_factory=Counter)
    """Dropped prompt groups by reason: staleness verdicts, exhausted retries, shutdown."""

    def snapshot(self) -> CollectorStats:
        return CollectorStats(
            groups_started=self.groups_started,
            groups_completed=self.groups_completed,
            groups_trained=self.groups_trained,
            retries=self.retries,
            failures=self.failures.copy(),
            staleness_failures=self.staleness_failures,
            dropped=self.dropped.copy(),
        )


class CollectorClosed(Exception):
    """`next_batch` was called on a closed collector or after the data ran out."""


class AsyncRolloutCollector:
    """Background rollout worker plus the staleness-filtered batch sink."""

    def __init__(
        self,
        rollout: GroupRollout,
        *,
        batch_size: int,
        concurrency: int,
        max_retries: int,
        staleness: StalenessConfig,
        num_prompts: int | None = None,
        queue_size: int | None = None,
    ) -> None:
        if batch_size < 1 or concurrency < 1 or max_retries < 0:
            raise ValueError("batch_size and concurrency must be >= 1, max_retries >= 0")
        self._rollout = rollout
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.num_prompts = num_prompts
        """Stop after this many prompts (None: the prompt stream is endless)."""
        self.filter = StalenessGroupFilter(staleness)
        self.stats = CollectorStats()
        self.next_prompt = 0
        self.version: str | None = None
        self._completed: asyncio.Queue[Group | None] = asyncio.Queue(
            maxsize=queue_size if queue_size is not None else max(batch_size, concurrency)
        )
        self._pending: list[Group] = []
        self._slots = asyncio.Semaphore(concurrency)
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
        """Stop the worker, cancel in-flight groups and account for everything not trained."""
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
        while not self._completed.empty():
            if self._completed.get_nowait() is not None:
                leftovers += 1
        self._pending = []
        if leftovers:
            self.stats.dropped[SHUTDOWN] += leftovers

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def pending(self) -> int:
        """Groups admitted to the candidate batch but not yet handed to the trainer."""
        return len(self._pending)

    # --- Collector protocol: checkpoints and versions ------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"next_prompt": self.next_prompt}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self._worker is not None:
            raise RuntimeError("load_state_dict must be called before the collector starts")
        position = state.get("next_prompt", 0)
        if not isinstance(position, int) or position < 0:
            raise ValueError(f"collector state next_prompt must be an int >= 0, got {position!r}")
        self.next_prompt = position

    def on_weights_published(self, version: str) -> None:
        """Record the live version. The staleness window only moves on *observed* versions
        (from completed groups), as the reference prescribes, so nothing else changes here."""
        self.version = version

    # --- the worker ----------------------------------------------------------------------

    async def _work(self) -> None:
        try:
            while self.num_prompts is None or self.next_prompt < self.num_prompts:
                await self._slots.acquire()
                index = self.next_prompt
                self.next_prompt += 1
                self.stats.groups_started += 1
                task = asyncio.create_task(self._run_group(index), name=f"group-{index}")
                self._in_flight.add(task)
                task.add_done_callback(self._group_done)
        finally:
            self._exhausted = True
            self._signal_if_finished()

    def _group_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("rollout task crashed", exc_info=task.exception())
        self._signal_if_finished()

    def _signal_if_finished(self) -> None:
        if self._exhausted and not self._in_flight and not self._closed:
            # Wakes next_batch() when the data is used up; the queue may be full, so this
            # must not block the callback that calls it.
            asyncio.get_running_loop().create_task(self._completed.put(None))

    async def _run_group(self, index: int) -> None:
        for attempt in range(self.max_retries + 1):
            try:
                group = await self._rollout(index, attempt)
            except GroupFailed as exc:
                self._record_failure(exc.reason, staleness=exc.staleness)
            except asyncio.CancelledError:
                self.stats.dropped[SHUTDOWN] += 1
                raise
            except Exception:
                log.exception("prompt group %d failed (attempt %d)", index, attempt)
                self._record_failure(ROLLOUT_ERROR, staleness=False)
            else:
                self.stats.groups_completed += 1
                try:
                    await self._completed.put(group)
                except asyncio.CancelledError:
                    self.stats.dropped[SHUTDOWN] += 1
                    raise
                return
            if attempt < self.max_retries:
                self.stats.retries += 1
        self.stats.dropped[RETRIES_EXHAUSTED] += 1

    def _record_failure(self, reason: str, *, staleness: bool) -> None:
        self.stats.failures[reason] += 1
        if staleness:
            self.stats.staleness_failures += 1

    # --- the batch sink ------------------------------------------------------------------

    async def next_batch(self) -> TrainBatch:
        """The next trainer batch of `batch_size` groups, all inside the staleness window.

        Raises `CollectorClosed` when the data is exhausted before a full batch is collected.
        The batch carries the drops, failures and retries counted since the previous batch.
        """
        if self._closed:
            raise CollectorClosed("collector is closed")
        if self._drained:
            raise CollectorClosed("the data buffer is exhausted")
        self.start()
        while len(self._pending) < self.batch_size:
            group = await self._completed.get()
            if group is None:
                self._drained = True
                raise CollectorClosed("the data buffer is exhausted")
            self._admit(group)
        groups, self._pending = self._pending[: self.batch_size], self._pending[self.batch_size :]
        self.stats.groups_trained += len(groups)
        before, now = self._last_batch_stats, self.stats.snapshot()
        self._last_batch_stats = now
        return TrainBatch(
            groups=tuple(groups),
            dropped_groups=dict(now.dropped - before.dropped),
            failed_groups=sum((now.failures - before.failures).values()),
            failure_reasons=dict(now.failures - before.failures),
            retries=now.retries - before.retries,
            staleness_failures=now.staleness_failures - before.staleness_failures,
        )

    def _admit(self, group: Group) -> None:
        before = self.filter.drop_counts.copy()
        self._pending, _ = self.filter.admit(group, self._pending, samples_of=_samples_of)
        for reason, count in (self.filter.drop_counts - before).items():
            self.stats.dropped[reason] += count


def _samples_of(group: Group) -> Sequence[Sample]:
    return group.samples
