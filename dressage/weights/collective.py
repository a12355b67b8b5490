"""Publishing weights over a `torch.distributed` weight-update group (`weightSync: distributed`).

Every rank of the trainer gang takes part in a publish: each parameter's full tensor is an
all-gather of its FSDP shards (`GRPOTrainer.iter_publishable`), so all ranks walk the
parameters in step, one at a time. Rank 0 holds a `CollectivePublisher`: it pauses generation,
groups the gathered tensors into buckets and broadcasts each bucket to the engines
(`DistributedWeightSender`, the version label on the last bucket), then continues generation.
The other ranks hold a `CollectiveFollower`, which drains the same iterator: they gather and drop
each tensor, so no rank ever holds a full copy of the model, and rank 0 at most one bucket
plus one tensor.

Membership follows the engine set (`dressage.weights.fleet`): each engine has a
weight-update group of its own with rank 0, formed when it first appears in the job's
`EngineSource` (the proxy's healthy engines, or a fixed URL list) and closed when it leaves it
or stops answering. So
an engine added, replaced or removed while the job runs changes the membership at the next
publish, with no restart of the trainer gang. An engine that joins is held out by the proxy
(it serves another version label) until that publish has sent it the current weights; where the
current version was also written to storage (a checkpoint step, or every version with
`disk`), the background catch-up the publisher keeps from `DiskPublisher` loads it from there
sooner. A publish fails only when no engine took the new weights (with the proxy's set; with a
fixed list, when any engine did not); an engine that did not is held out, and offered a fresh
group at the next publish.

Both classes are `Publisher`s (`publish(model_path, version)`, the path ignored: the weights
come from the trainer's memory) whose `collective` is true: the training loop has every rank
enter `publish`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch

from dressage.engine.weight_group import DEFAULT_TIMEOUT_S
from dressage.proxy.client import RolloutError
from dressage.weights.base import Publisher
from dressage.weights.broadcast import DEFAULT_BUCKET_BYTES, WeightSyncError
from dressage.weights.disk import DiskPublisher
from dressage.weights.engines import EngineSource
from dressage.weights.fleet import FleetWeightSender, MembershipChange

log = logging.getLogger("dressage.publish")

NamedTensors = Callable[[], Iterable[tuple[str, torch.Tensor]]]
"""A fresh `(name, full tensor)` iterator over the trainer's weights in the serving dtype; each
item is a collective over the trainer gang (`GRPOTrainer.iter_publishable`)."""


def _drain(named: Iterator[tuple[str, torch.Tensor]]) -> None:
    # Take part in every remaining gather, keeping nothing.
    for _ in named:
        pass


class CollectivePublisher(DiskPublisher):
    """Trainer rank 0: pause, broadcast the weights bucket by bucket, continue. A
    `DiskPublisher` for what it keeps of that transport: engines that lag load a version also
    written to storage from there, between publishes."""

    def __init__(
        self,
        source: EngineSource,
        *,
        weights: NamedTensors,
        master_address: str,
        master_port: int,
        backend: str,
        ranks_per_engine: int = 1,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        pause_mode: str = "in_place",
        update_timeout_s: float | None = None,
    ) -> None:
        """`master_address:master_port` is where the engines reach this process (trainer
        rank 0's stable address; port 0 picks a free one, for engines on the same host)."""
        super().__init__(source, pause_mode=pause_mode, update_timeout_s=update_timeout_s)
        self.weights = weights
        self._sent: str | None = None
        """The version the last publish sent: every member took it (the others left)."""
        self.sender = FleetWeightSender(
            master_address=master_address,
            master_port=master_port,
            backend=backend,
            bucket_bytes=bucket_bytes,
            ranks_per_engine=ranks_per_engine,
            timeout_s=DEFAULT_TIMEOUT_S if update_timeout_s is None else update_timeout_s,
        )

    @property
    def collective(self) -> bool:
        return True

    async def wait_for_an_engine(
        self, deadline_s: float, *, poll_s: float = 1.0, clock: Callable[[], float] | None = None
    ) -> list[str]:
        """Wait until the proxy lists at least one healthy engine, at most `deadline_s`; the
        engines it lists then (empty when none came in time, or with a fixed list).

        Over the network there is no storage an engine that comes later could load the first
        weights from: the trainer's initial `v0` reaches an engine only by a collective
        publish, and the next publish needs a trained step, which needs an engine serving
        `v0`. On a cluster the trainer's pod may be ready before any engine's (an engine loads
        its model first), so the groups are formed once one engine is there instead of with
        none."""
        if not self.source.routed:
            return []
        now = clock or asyncio.get_running_loop().time
        end = now() + deadline_s
        said = False
        while True:
            with contextlib.suppress(RolloutError):
                urls = await self.source.targets()
                if urls:
                    return urls
            if now() >= end:
                log.warning(
                    "no engine was ready after %.0f s: weight-update groups formed with none; "
                    "an engine that comes later gets the weights at the next publish",
                    deadline_s,
                )
                return []
            if not said:
                log.info("waiting for an engine to be ready before forming weight-update groups")
                said = True
            await asyncio.sleep(poll_s)

    async def start(self) -> MembershipChange:
        """Form a weight-update group with every engine of the engine set that has none yet
        (and close those of engines gone from it); what changed. With a fixed list every engine
        must join (else `WeightSyncError`); with the proxy's set, an engine that cannot is held
        out and tried again at the next publish."""
        urls = await self.source.targets()
        engines = [self.source.client(url) for url in urls]
        restarted: list[str] = []
        if self.source.routed and self.sender.members:
            # A member the proxy still lists healthy may have died since its last check: one
            # cheap read of its version tells, before a broadcast would wait for it.
            alive = await asyncio.gather(
                *(e.get_weight_version() for e in engines), return_exceptions=True
            )
            members = set(self.sender.members)
            # A member that answers another version than the last one it was sent is a new
            # process under the same URL (a pod recreated between two publishes, before any
            # publish saw the old one gone): the old one's group went with it, and a broadcast
            # would wait on it until the timeout. It leaves, and joins again below.
            restarted = [
                e.base_url
                for e, answer in zip(engines, alive, strict=True)
                if not isinstance(answer, BaseException)
                and e.base_url in members
                and self._sent is not None
                and answer != self._sent
            ]
            engines = [
                e
                for e, answer in zip(engines, alive, strict=True)
                if not isinstance(answer, BaseException)
            ]
        if restarted:
            log.info("engines %s restarted since the last publish: new groups", restarted)
            await self.sender.update_members([e for e in engines if e.base_url not in restarted])
        change = await self.sender.update_members(engines)
        if restarted:
            change = MembershipChange(change.joined, (*restarted, *change.left), change.failed)
        for url, why in change.failed.items():
            log.warning("engine %s could not join a weight-update group: %s", url, why)
        if change.failed and not self.source.routed:
            raise WeightSyncError(
                "weight-update groups were not formed: "
                + "; ".join(f"{url}: {why}" for url, why in change.failed.items())
            )
        if change.joined or change.left:
            log.info(
                "weight-update membership: joined %s, left %s; %d members",
                list(change.joined),
                list(change.left),
                len(self.sender.members),
            )
        return change

    async def publish(self, model_path: Path, version: str) -> None:
        """Broadcast the trainer's current weights to every engine as `version`, generation
        paused meanwhile, after bringing the membership up to the engine set. Every trainer
        rank must publish together (the other ranks through `CollectiveFollower`); on a failure
        rank 0 still takes part in the remaining gathers, so the gang's collectives stay
        matched, and then raises."""
        named = iter(self.weights())
        try:
            async with self._lock:
                await self.start()
                try:
                    await self.source.pause(self.pause_mode)
                except Exception:
                    # As `DiskPublisher.publish`: a refused pause still closed the proxy's
                    # gate; continue, and report the pause's error.
                    with contextlib.suppress(Exception):
                        await self.source.resume(None)
                    raise
                took = False
                failed: dict[str, str] = {}
                try:
                    if self.sender.members:
                        result = await self.sender.send(named, version)
                        failed = result.failed
                        took = bool(result.loaded)
                    else:
                        took = True  # no engine yet: whichever comes is sent the next version
                finally:
                    # The proxy routes to engines on the new version: one that missed it (it
                    # failed, or joined too late) is held out until it has it.
                    await self.source.resume(version if took else None)
                if took:
                    self._sent = version
                for url, why in failed.items():
                    log.warning(
                        "engine %s did not take weight version %s (%s): held out until the "
                        "next publish",
                        url,
                        version,
                        why,
                    )
                if failed and (not self.source.routed or not took):
                    raise WeightSyncError(
                        f"weight version {version} was not loaded: "
                        + "; ".join(f"{url}: {why}" for url, why in failed.items())
                    )
                if (model_path / "config.json").is_file():
                    # Written to storage too: engines that join before the next publish load
                    # it from there (the background catch-up).
                    self.current = (model_path, version)
                else:
                    self.current = None
        finally:
            _drain(named)
        self._start_loop()

    async def aclose(self) -> None:
        await self.sender.aclose()
        await super().aclose()


class CollectiveFollower(Publisher):
    """A trainer rank other than 0: takes part in each publish's gathers and sends nothing."""

    def __init__(self, weights: NamedTensors) -> None:
        self.weights = weights

    @property
    def collective(self) -> bool:
        return True

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
