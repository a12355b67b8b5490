"""`EngineState`: everything one embedded engine's endpoints share (no module globals)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from tokenizers import Tokenizer

from dressage.engine.embedded.config import EngineConfig
from dressage.engine.embedded.model import ModelShape
from dressage.engine.embedded.release_profiles import ReleaseProfile
from dressage.engine.embedded.scheduler import Scheduler
from dressage.engine.embedded.update_lock import ModelUpdateLock
from dressage.engine.weight_group import WeightUpdateGroup


@dataclasses.dataclass
class EngineState:
    """One engine: its settings, the release it plays, the scheduler and the HTTP side's own
    bookkeeping (what SGLang's tokenizer manager keeps)."""

    config: EngineConfig
    profile: ReleaseProfile
    shape: ModelShape
    tokenizer: Tokenizer
    context_length: int
    scheduler: Scheduler
    expected: dict[str, tuple[int, ...]]
    """Every parameter of the served model and its shape (what a bucket is checked against)."""
    label: str
    """The weight version the HTTP side reports (`meta_info.weight_version`, the version
    route). SGLang keeps it in the tokenizer manager and moves it only when an update
    succeeded, while the scheduler's version (per-token spans) moves with the weights: after
    0.5.23's refused flush the two differ, as they do there."""
    loaded: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    unpaused: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set unless generation is paused: new generations wait for it before they take the
    model-update lock (SGLang's `is_pause_cond`)."""
    model_lock: ModelUpdateLock = dataclasses.field(default_factory=ModelUpdateLock)
    update_lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    """One weight update at a time."""
    active_rids: set[str] = dataclasses.field(default_factory=set)
    """Generations received and not answered yet (waiting for a pause to end included)."""
    scheduled: int = 0
    """Generations handed to the scheduler and not finished (what its queue limit counts)."""
    groups: dict[str, WeightUpdateGroup] = dataclasses.field(default_factory=dict)
    session: bool = False
    """A weight-update session is open (`/begin_weight_update`, releases that have them)."""
    fatal_error: str | None = None
    on_fatal: Callable[[], None] | None = None
    background: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)

    def __post_init__(self) -> None:
        self.unpaused.set()

    @property
    def paused(self) -> bool:
        return not self.unpaused.is_set()

    async def until_unpaused(self) -> None:
        """Return once generation is not paused (at once when it is not)."""
        await until_set(self.unpaused)

    def ready(self) -> bool:
        return self.scheduler.loaded and self.scheduler.alive

    def queue_full(self) -> bool:
        """Whether one more request would wait beyond `max_queued_requests`: requests in the
        scheduler past the running batch are its waiting queue."""
        limit = self.config.max_queued_requests
        if limit is None:
            return False
        waiting = self.scheduled - self.config.max_batch_size
        return waiting >= 0 and waiting + 1 > limit


async def until_set(event: asyncio.Event) -> None:
    """Return once `event` is set and still set when this waiter runs. A pause that ends and
    starts again before the waiter runs (pause, continue, pause) keeps it waiting: SGLang
    (0.5.2 and 0.5.23 `tokenizer_manager.py`) waits with
    `is_pause_cond.wait_for(lambda: not self.is_pause)`, which checks the flag again on
    waking, where a bare `Event.wait()` returns for a set that was already undone."""
    while not event.is_set():
        await event.wait()
