"""Publishing weights over a `torch.distributed` weight-update group (`weightSync: distributed`).

Every rank of the trainer gang takes part in a publish: each parameter's full tensor is an
all-gather of its FSDP shards (`GRPOTrainer.iter_publishable`), so all ranks walk the
parameters in step, one at a time. Rank 0 holds a `DistributedPublisher`: it pauses generation,
groups the gathered tensors into buckets and broadcasts each bucket to the engines
(`DistributedWeightSender`, the version label on the last bucket), then continues generation.
The other ranks hold a `PublishFollower`, which drains the same iterator: they gather and drop
each tensor, so no rank ever holds a full copy of the model, and rank 0 at most one bucket
plus one tensor.

The group is formed once (`start`, before the first publish): every engine joins it through
`/init_weights_update_group` at its rank offset (1 + the tensor-parallel ranks of the engines
before it). Disk stays the fallback (`WeightPublisher`): the checkpoint a version is written
to exists only when the job writes one (`weightSync: disk`, or a checkpoint step).

Both classes keep `WeightPublisher.publish(model_path, version)` as their entry point (the
path is ignored: the weights come from the trainer's memory) and set `collective`, which tells
the training loop that every rank must enter `publish`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import torch

from dressage.engine.weight_group import DEFAULT_TIMEOUT_S
from dressage.orchestrator.publish import WeightPublisher
from dressage.orchestrator.weight_sync import DEFAULT_BUCKET_BYTES, DistributedWeightSender
from dressage.proxy.client import ProxyRolloutClient

NamedTensors = Callable[[], Iterable[tuple[str, torch.Tensor]]]
"""A fresh `(name, full tensor)` iterator over the trainer's weights in the serving dtype; each
item is a collective over the trainer gang (`GRPOTrainer.iter_publishable`)."""


def _drain(named: Iterator[tuple[str, torch.Tensor]]) -> None:
    # Take part in every remaining gather, keeping nothing.
    for _ in named:
        pass


class DistributedPublisher(WeightPublisher):
    """Trainer rank 0: pause, broadcast the weights bucket by bucket, continue."""

    collective = True

    def __init__(
        self,
        engine_urls: Sequence[str],
        *,
        weights: NamedTensors,
        master_address: str,
        master_port: int,
        backend: str,
        ranks_per_engine: int = 1,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        proxy: ProxyRolloutClient | None = None,
        pause_mode: str = "in_place",
        update_timeout_s: float | None = None,
    ) -> None:
        """`master_address:master_port` is where the engines reach this process (trainer
        rank 0's stable address; port 0 picks a free one, for engines on the same host)."""
        super().__init__(
            engine_urls, proxy=proxy, pause_mode=pause_mode, update_timeout_s=update_timeout_s
        )
        self.weights = weights
        self.sender = DistributedWeightSender(
            self.engines,
            master_address=master_address,
            master_port=master_port,
            backend=backend,
            bucket_bytes=bucket_bytes,
            ranks_per_engine=ranks_per_engine,
            timeout_s=DEFAULT_TIMEOUT_S if update_timeout_s is None else update_timeout_s,
        )

    async def start(self) -> None:
        """Form the weight-update group with every engine (once; later calls do nothing)."""
        await self.sender.init_group()

    async def publish(self, model_path: Path, version: str) -> None:
        """Broadcast the trainer's current weights to every engine as `version`, generation
        paused meanwhile. Every trainer rank must publish together (the other ranks through
        `PublishFollower`); on a failure rank 0 still takes part in the remaining gathers, so
        the gang's collectives stay matched, and then raises."""
        del model_path  # the weights come from the trainer's memory
        await self.start()
        named = iter(self.weights())
        try:
            await self._pause()
            sent = False
            try:
                await self.sender.send(named, version)
                sent = True
            finally:
                # After a full send the proxy routes to engines on the new version (an engine
                # that missed it, such as a replaced one outside the formed group, is held
                # out); after a failed one the engines keep their old label and the proxy its
                # routing.
                await self._resume(version if sent else None)
        finally:
            _drain(named)

    async def aclose(self) -> None:
        await self.sender.aclose()
        await super().aclose()


class PublishFollower:
    """A trainer rank other than 0: takes part in each publish's gathers and sends nothing."""

    collective = True

    def __init__(self, weights: NamedTensors) -> None:
        self.weights = weights

    async def start(self) -> None:
        """Nothing to form: only rank 0 belongs to the weight-update group."""

    async def publish(self, model_path: Path, version: str) -> None:
        del model_path, version
        _drain(iter(self.weights()))

    async def versions(self) -> list[str | None]:
        raise RuntimeError("only trainer rank 0 asks the engines for their versions")

    async def sync(self, model_path: Path, version: str) -> bool:
        raise RuntimeError("a collective publish is synced by `publish` on every rank")

    async def aclose(self) -> None:
        """Nothing to close."""
