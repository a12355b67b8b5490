"""Weight publishing: make a new weight version live on every engine, and keep every engine
that joins later on it.

A publish, after the checkpoint of a step is written (rank 0 only):

1. the engine set: the engines the proxy lists (`GET /dressage/engines`), so engines added or
   replaced while the job runs are published to; without a proxy, the fixed URL list;
2. pause generation: through the proxy when there is one (it closes its gate and pauses every
   engine), else on every engine;
3. `POST /update_weights_from_disk {model_path, weight_version}` on every healthy engine;
4. continue generation, telling the proxy the new version (`{"weight_version": V}`): from then
   on it routes only to engines serving V.

Continue is sent even when an update or the pause failed, so a failed publish never leaves
engines paused or the proxy's gate closed.
Without a proxy any failed update is raised. With one, a publish fails only when no engine took
the new weights; an engine that did not is held out by the proxy (it serves another version)
and caught up like a new one.

Catching up. Between publishes the publisher brings engines that lag (a scale-up, a replaced
pod started on its base weights, an engine that missed an update) to the current version
(`catch_up`, every `catch_up_interval_s` in the background once a version is current): it
reads the proxy's engine set, loads the current checkpoint on each healthy engine that reports
another version, then tells the proxy the version again, which reads the engines' versions and
routes to them. They take no traffic meanwhile, so no pause is needed. The same step states the
current version to a proxy that lost it (restarted). `sync` is that step at the trainer's
start.

Version labels are issued by the trainer (`TrainState`), never by the engines. This module is
torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from dressage.engine.client import EngineClient
from dressage.engine.errors import EngineError
from dressage.proxy.client import EngineSet, ProxyRolloutClient, RolloutError

log = logging.getLogger("dressage.publish")

CATCH_UP_INTERVAL_S = 5.0
"""Seconds between two looks for lagging engines (the proxy's health interval by default):
an engine that joins serves the current weights within about two of them."""


class WeightPublisher:
    """Pushes checkpoints to engines, pausing generation around the swap, and catches up
    engines that lag. `engine_urls`: the engines when there is no proxy; with a proxy, the
    engine set is the proxy's."""

    def __init__(
        self,
        engine_urls: Sequence[str] = (),
        *,
        proxy: ProxyRolloutClient | None = None,
        pause_mode: str = "in_place",
        update_timeout_s: float | None = None,
        catch_up_interval_s: float | None = CATCH_UP_INTERVAL_S,
    ) -> None:
        if not engine_urls and proxy is None:
            raise ValueError("a weight publisher needs engine URLs or a proxy that lists them")
        self._fixed_urls = [url.rstrip("/") for url in engine_urls]
        self._clients: dict[str, EngineClient] = {}
        self.proxy = proxy
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
    def engines(self) -> list[EngineClient]:
        """Clients of the engines published to so far (and of the fixed list)."""
        for url in self._fixed_urls:
            self._client(url)
        return list(self._clients.values())

    async def publish(self, model_path: Path, version: str) -> None:
        """Make the weights in `model_path` live on every engine as `version`."""
        async with self._lock:
            urls = await self._publish_targets()
            try:
                await self._pause()
            except Exception:
                # A pause an engine refused has still closed the proxy's gate (and paused the
                # engines that took it): continue, so no generation waits on a publish that
                # is not happening. The pause's error is the one reported.
                with contextlib.suppress(Exception):
                    await self._resume(None)
                raise
            failures: dict[str, BaseException] | None = None
            try:
                failures = await self._update(urls, model_path, version)
            finally:
                # The proxy routes to the new version once an engine serves it (or when there
                # was none to update: whichever engine comes is caught up to it).
                took = failures is not None and (not urls or len(failures) < len(urls))
                await self._resume(version if took else None)
            assert failures is not None
            if failures and (self.proxy is None or not took):
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
                await self._resume(version)
            except (RolloutError, EngineError) as exc:
                if self.proxy is None:
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
        if self.proxy is not None:
            return [e.weight_version for e in (await self.proxy.engines()).engines]
        clients = [self._client(url) for url in self._fixed_urls]
        return list(await asyncio.gather(*(c.get_weight_version() for c in clients)))

    async def aclose(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None
        await asyncio.gather(*(c.aclose() for c in self._clients.values()))

    # --- internals

    def _client(self, url: str) -> EngineClient:
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = EngineClient(url)
        return client

    async def _publish_targets(self) -> list[str]:
        """The engines a publish updates: the proxy's healthy ones (the others are caught up
        once they pass its health checks), else the fixed list."""
        if self.proxy is None:
            return list(self._fixed_urls)
        view = await self.proxy.engines()
        return [e.url for e in view.engines if e.healthy]

    async def _update(
        self, urls: Sequence[str], model_path: Path, version: str
    ) -> dict[str, BaseException]:
        """Load `model_path` as `version` on each of `urls`; the failures by URL."""
        results = await asyncio.gather(
            *(
                self._client(url).update_weights_from_disk(
                    str(model_path), version, timeout_s=self.update_timeout_s
                )
                for url in urls
            ),
            return_exceptions=True,
        )
        failures: dict[str, BaseException] = {}
        for url, result in zip(urls, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):
                failures[url] = result
        return failures

    async def _catch_up_locked(self) -> list[str]:
        if self.current is None:
            return []
        model_path, version = self.current
        if self.proxy is None:
            clients = [self._client(url) for url in self._fixed_urls]
            served = await asyncio.gather(*(c.get_weight_version() for c in clients))
            lagging = [u for u, v in zip(self._fixed_urls, served, strict=True) if v != version]
        else:
            view: EngineSet = await self.proxy.engines()
            if view.weight_version != version:
                view = await self.proxy.set_weight_version(version)
            lagging = [e.url for e in view.engines if e.healthy and e.weight_version != version]
        if not lagging:
            return []
        failures = await self._update(lagging, model_path, version)
        for url, exc in failures.items():
            log.warning("engine %s could not load weight version %s: %s", url, version, exc)
        updated = [url for url in lagging if url not in failures]
        if updated and self.proxy is not None:
            await self.proxy.set_weight_version(version)  # it reads their versions again
        if failures and self.proxy is None:
            raise next(iter(failures.values()))
        return updated

    def _start_loop(self) -> None:
        """Catch up in the background from now on (with a proxy and an interval)."""
        if self.proxy is None or self.catch_up_interval_s is None or self._loop is not None:
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

    async def _pause(self) -> None:
        if self.proxy is not None:
            await self.proxy.pause(self.pause_mode)
        else:
            clients = [self._client(url) for url in self._fixed_urls]
            await asyncio.gather(*(c.pause_generation(self.pause_mode) for c in clients))

    async def _resume(self, version: str | None) -> None:
        if self.proxy is not None:
            await self.proxy.resume(version)
        else:
            clients = [self._client(url) for url in self._fixed_urls]
            await asyncio.gather(*(c.continue_generation() for c in clients))
