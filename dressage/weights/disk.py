"""Weight publishing from disk (`weightSync: disk`): engines load the checkpoint the trainer
wrote, and every engine that joins later is brought to it.

A publish, after the checkpoint of a step is written (rank 0 only):

1. the engine set, from the job's `EngineSource` (`dressage.weights.engines`): the engines the
   proxy lists, so engines added or replaced while the job runs are published to, or a fixed
   URL list;
2. pause generation: through the proxy (it closes its gate and pauses every engine), or on
   every engine of a fixed list;
3. `POST /update_weights_from_disk {model_path, weight_version}` on every healthy engine;
4. continue generation, telling the proxy the new version (`{"weight_version": V}`): from then
   on it routes only to engines serving V.

Continue is sent even when an update or the pause failed, so a failed publish never leaves
engines paused or the proxy's gate closed.
With a fixed list any failed update is raised. With the proxy's set (`EngineSource.routed`), a
publish fails only when no engine took the new weights; an engine that did not is held out by
the proxy (it serves another version) and caught up like a new one.

Catching up. Between publishes the publisher brings engines that lag (a scale-up, a replaced
pod started on its base weights, an engine that missed an update) to the current version
(`catch_up`, every `catch_up_interval_s` in the background once a version is current, with the
proxy's set): it reads the proxy's engine set, loads the current checkpoint on each healthy
engine that reports another version, then tells the proxy the version again, which reads the
engines' versions and routes to them. They take no traffic meanwhile, so no pause is needed.
The same step states the current version to a proxy that lost it (restarted). `sync` is that
step at the trainer's start.

Version labels are issued by the trainer (`TrainState`), never by the engines. This module is
torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from dressage.engine.errors import EngineError
from dressage.proxy.client import RolloutError
from dressage.weights.base import Publisher
from dressage.weights.engines import EngineSource

log = logging.getLogger("dressage.publish")

CATCH_UP_INTERVAL_S = 5.0
"""Seconds between two looks for lagging engines (the proxy's health interval by default):
an engine that joins serves the current weights within about two of them."""


class DiskPublisher(Publisher):
    """Pushes checkpoints to the engines of `source`, pausing generation around the swap, and
    catches up engines that lag."""

    def __init__(
        self,
        source: EngineSource,
        *,
        pause_mode: str = "in_place",
        update_timeout_s: float | None = None,
        catch_up_interval_s: float | None = CATCH_UP_INTERVAL_S,
    ) -> None:
        self.source = source
        self.pause_mode = pause_mode
        self.update_timeout_s = update_timeout_s
        """Bound on one engine's weight update (`spec.inference.weightUpdateTimeoutSeconds`)."""
        self.catch_up_interval_s = catch_up_interval_s
        """Seconds between background catch-ups (None: only when `catch_up` is called)."""
        self.current: tuple[Path, str] | None = None
        """The checkpoint and label of the current version, once published or synced."""
        self._lock = asyncio.Lock()
        """Publishes and catch-ups one at a time: an engine loads one checkpoint at a time."""
        self._loop: asyncio.Task[None] | None = None

    @property
    def collective(self) -> bool:
        return False

    async def publish(self, model_path: Path, version: str) -> None:
        """Make the weights in `model_path` live on every engine as `version`."""
        async with self._lock:
            urls = await self.source.targets()
            try:
                await self.source.pause(self.pause_mode)
            except Exception:
                # A pause an engine refused has still closed the proxy's gate (and paused the
                # engines that took it): continue, so no generation waits on a publish that
                # is not happening. The pause's error is the one reported.
                with contextlib.suppress(Exception):
                    await self.source.resume(None)
                raise
            failures: dict[str, BaseException] | None = None
            try:
                held = self.pause_mode != "abort"  # else nothing is held: one request each
                failures = await self._update(urls, model_path, version, held=held)
            finally:
                # The proxy routes to the new version once an engine serves it (or when there
                # was none to update: whichever engine comes is caught up to it).
                took = failures is not None and (not urls or len(failures) < len(urls))
                loaded = [url for url in urls if failures is not None and url not in failures]
                await self.source.resume(version if took else None, loaded)
            assert failures is not None
            if failures and (not self.source.routed or not took):
                raise next(iter(failures.values()))
            self.current = (model_path, version)
            for url, exc in failures.items():
                log.warning(
                    "engine %s did not take weight version %s (%s): held out until caught up",
                    url,
                    version,
                    exc,
                )
        self._start_loop()

    async def sync(self, model_path: Path, version: str) -> bool:
        """Make `version` (weights in `model_path`) the current one without a pause: the proxy
        is told it first (engines on another version stop being routed to), then the engines
        that lag load it, then generation is continued. Returns whether any engine loaded it.
        A proxy that does not answer yet is left to the background catch-up.

        Continuing is for a trainer killed inside a publish (a node lost between pause and
        continue): the proxy and its engines would stay paused until the proxy's pause
        timeout. A trainer that syncs is never inside a publish, so any pause still held is
        that dead trainer's."""
        async with self._lock:
            self.current = (model_path, version)
            try:
                updated = await self._catch_up_locked()
                await self.source.resume(version)
            except (RolloutError, EngineError) as exc:
                if not self.source.routed:
                    raise
                # The proxy (or an engine) is not up yet, as when the trainer's pod starts
                # first: rollouts cannot reach it either, and the background catch-up states
                # the version once it answers.
                log.warning("engines not synced yet, retrying in the background: %s", exc)
                updated = []
        self._start_loop()
        return bool(updated)

    async def catch_up(self) -> list[str]:
        """Bring every healthy engine that serves another version than the current one up to
        it; returns the URLs of the engines that loaded it."""
        async with self._lock:
            return await self._catch_up_locked()

    async def versions(self) -> list[str | None]:
        """The weight version each engine reports."""
        return await self.source.versions()

    async def aclose(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None
        await self.source.aclose()

    # --- internals

    async def _update(
        self, urls: Sequence[str], model_path: Path, version: str, *, held: bool = True
    ) -> dict[str, BaseException]:
        """Load `model_path` as `version` on each of `urls`; the failures by URL
        (`EngineSource.update_from_disk`). `held=False` (under an `abort` pause): each
        update flushes the cache itself, one request per engine."""
        return await self.source.update_from_disk(
            urls, str(model_path), version, held=held, timeout_s=self.update_timeout_s
        )

    async def _catch_up_locked(self) -> list[str]:
        if self.current is None:
            return []
        model_path, version = self.current
        return await self._bring_up(await self.source.lagging(version), model_path, version)

    async def _bring_up(
        self, lagging: Sequence[str], model_path: Path, version: str, what: str = "weight version"
    ) -> list[str]:
        """Load `version` on the `lagging` engines; the ones that took it. A failure is logged
        and the engine stays out of routing, or raised where nothing routes around it."""
        if not lagging:
            return []
        failures = await self._update(lagging, model_path, version)
        for url, exc in failures.items():
            log.warning("engine %s could not load %s %s: %s", url, what, version, exc)
        updated = [url for url in lagging if url not in failures]
        if updated:
            await self.source.caught_up(version)
        if failures and not self.source.routed:
            raise next(iter(failures.values()))
        return updated

    def _start_loop(self) -> None:
        """Catch up in the background from now on (with the proxy's set and an interval)."""
        if not self.source.routed or self.catch_up_interval_s is None or self._loop is not None:
            return
        self._loop = asyncio.create_task(self._catch_up_forever(self.catch_up_interval_s))

    async def _catch_up_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                updated = await self.catch_up()
            except Exception as exc:  # the proxy or an engine away: try again next time
                log.warning("catching up lagging engines failed: %s", exc)
                continue
            if updated:
                log.info("engines %s caught up", ", ".join(updated))

