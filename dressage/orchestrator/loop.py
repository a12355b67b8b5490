"""The training loop: collect a batch, train on it, publish the new weights, record the step.

The same loop runs in-process under `dressage run` (one trainer process) and in every pod of
the trainer gang under `dressage train` (torchrun). Rank 0 owns the collector and the weight
publisher; the other ranks receive rank 0's batch and train on their shard, and take part in
the publish when it gathers the weights over the gang (`weightSync: distributed`). Nothing
here knows whether rollout is synchronous or asynchronous: that is the collector's business.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from dressage.api.figures import StepFigures, trainer_keys
from dressage.data.groups import TrainBatch
from dressage.rollout.budget import BudgetSteering
from dressage.rollout.collector import Collector
from dressage.rollout.lag import batch_lag, trainer_version_order
from dressage.trainer.distributed import broadcast_object
from dressage.trainer.session import TrainerSession
from dressage.weights.base import Publisher


@dataclass(frozen=True)
class StepRecord:
    """What one step did, for progress lines, Prometheus and the run report."""

    step: int
    version: str
    figures: StepFigures = field(default_factory=StepFigures)
    """The step's declared figures: what the collector counted, what the trainer measured,
    and the step's seconds below with the ratios taken from them (`StepFigures.timed`)."""
    extras: dict[str, float] = field(default_factory=dict)
    """The trainer's figures the declaration leaves out (the span distribution): in the
    history, not exported."""
    lost_tokens: Counter[str] = field(default_factory=Counter)
    """The entries of `figures.ledger_tokens` read beside the collector: the proxies' lost
    tokens since the previous step (`dressage.rollout.proxy_ledger`)."""
    rollout_seconds: float = 0.0
    train_seconds: float = 0.0
    publish_seconds: float = 0.0

    def __post_init__(self) -> None:
        # The seconds are the loop's measures; the figures carry them (and what is derived
        # from them) to every consumer, also after `replace` changed one.
        timed = self.figures.timed(self.rollout_seconds, self.train_seconds, self.publish_seconds)
        object.__setattr__(self, "figures", timed)

    @property
    def seconds(self) -> float:
        """The step's wall seconds: waiting for the batch, training, publishing."""
        return self.rollout_seconds + self.train_seconds + self.publish_seconds

    def collected(self) -> StepFigures:
        """The figures as the collector counted them: `figures` without `lost_tokens`."""
        figures = self.figures.copy()
        figures.ledger_tokens.subtract(self.lost_tokens)
        figures.ledger_tokens = +figures.ledger_tokens  # no entry at 0
        return figures

    def to_dict(self) -> dict[str, object]:
        return {"step": self.step, "version": self.version, **self.figures.record(), **self.extras}


StepSink = Callable[[StepRecord], None]


class PublishWatcher(Protocol):
    """What must happen around each publish besides it (the held-out evaluations:
    `dressage.evaluation.schedule.Evaluations`)."""

    async def before_publish(self) -> None:
        """Return when the version the engines serve may be replaced."""

    def published(self, version: str, step: int) -> None:
        """`version`, made by `step`, is the one the engines serve now."""


async def sync_engines(
    session: TrainerSession, publisher: Publisher, *, engines_have_initial_weights: bool
) -> bool:
    """Make the session's current version the one every engine serves, before rollout starts.

    Engines outlive a trainer restart on a cluster, and an engine replaced meanwhile starts on
    the staged base model; each engine that serves another version than the checkpoint's loads
    its weights, while the proxy routes only to engines on that version
    (`DiskPublisher.sync`). Engines started from the staged base model while the trainer
    warm-started its own serve other weights under the same label `v0`
    (`engines_have_initial_weights=False`): before the first step they get the trainer's `v0`
    in a full publish. With a collective publisher (weights over the network) every rank calls
    this, rank 0 decides and the gang publishes together. Returns whether any engine loaded
    weights.
    """
    if not publisher.collective:
        if session.state.version_index == 0 and not engines_have_initial_weights:
            await publisher.publish(session.weights_dir, session.state.version)
            return True
        return await publisher.sync(session.weights_dir, session.state.version)
    due = False
    if session.env.is_main:
        if session.state.version_index == 0:
            due = not engines_have_initial_weights
        else:
            versions = await publisher.versions()
            due = any(v != session.state.version for v in versions)
    due = bool(broadcast_object(due, session.env))
    if due:
        await publisher.publish(session.weights_dir, session.state.version)
    return due


async def train_loop(
    session: TrainerSession,
    *,
    steps: int,
    collector: Collector | None,
    publisher: Publisher | None,
    sink: StepSink,
    clock: Callable[[], float] = time.monotonic,
    steering: BudgetSteering | None = None,
    watcher: PublishWatcher | None = None,
    lost_tokens: Callable[[], Awaitable[Counter[str]]] | None = None,
) -> None:
    """Run steps until `session.state.step == steps` (rank 0 must pass collector and publisher;
    the other ranks pass the publisher only when it is `collective`).
    `steering`: rank 0's staleness budget controller (`staleness.mode: auto`), which sets the
    collector's depth and window after each step and adds its decision to the step's figures.
    `watcher`: rank 0's evaluations, which the publish waits for and which hear of each
    published version. `lost_tokens`: rank 0's read of the token ledger's entries that only
    the proxies count (`ProxyLostTokens.read`), made while the step trains and added to its
    `ledger_tokens`."""
    main = session.env.is_main
    if main and (collector is None or publisher is None):
        raise ValueError("rank 0 needs a collector and a weight publisher")
    # The versions in the order the trainer issued them, which the version lag counts in.
    order = trainer_version_order(session.state.version_index)
    while session.state.step < steps:
        started = clock()
        batch: TrainBatch | None = None
        if main:
            assert collector is not None
            batch = await collector.next_batch()
        batch = broadcast_object(batch, session.env)
        assert batch is not None
        collected = clock()
        # One GET per proxy replica, while the trainer works: it never delays the step.
        reading = asyncio.ensure_future(lost_tokens()) if main and lost_tokens else None
        try:
            measured = await asyncio.to_thread(session.trainer.train_step, batch)
            lost: Counter[str] = Counter(await reading) if reading is not None else Counter()
        finally:
            if reading is not None and not reading.done():
                reading.cancel()
        position = collector.state_dict() if collector is not None else {}
        declared = trainer_keys(type(batch.figures))
        order.observe(session.state.version)
        lag = batch_lag(batch.samples, order, session.state.version).figures()
        figures = batch.figures.copy().with_trainer_figures({**measured, **lag})
        figures.ledger_tokens.update(lost)
        record = StepRecord(
            step=session.state.step + 1,
            version=session.state.next_version(),
            figures=figures,
            extras={k: v for k, v in measured.items() if k not in declared},
            lost_tokens=lost,
            rollout_seconds=collected - started,
            train_seconds=clock() - collected,
        )
        # The checkpoint carries the record: a run killed between the commit and `sink`
        # (while publishing) restores it on resume instead of losing the step's line.
        version, path = await asyncio.to_thread(
            session.commit_step, position, record.to_dict(), wait=False
        )
        trained = clock()
        if main:
            assert collector is not None
            assert publisher is not None
            if watcher is not None:
                await watcher.before_publish()
            await publisher.publish(path, version)
            collector.on_weights_published(version)
            if watcher is not None:
                watcher.published(version, record.step)
        elif publisher is not None and publisher.collective:
            await publisher.publish(path, version)
        # A checkpoint written in line completes after the publish (which never waits for the
        # optimizer state) and before the step's record, which then always has its checkpoint.
        published = clock()
        await asyncio.to_thread(session.finish_commit)
        done = replace(
            record, train_seconds=trained - collected, publish_seconds=published - trained
        )
        if steering is not None:
            done = replace(done, figures=steering.after_step(done.figures))
        sink(done)
