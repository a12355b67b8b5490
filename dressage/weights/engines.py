"""Where a publisher finds the engines it publishes to, and how it pauses and continues them.

One `EngineSource` per job, of two kinds:

- `ProxyEngines`: the engines the proxy lists (`GET /dressage/engines`), so engines added or
  replaced while the job runs are published to. The proxy pauses and continues generation for
  all of them (it closes its gate, then pauses each engine) and routes only to engines serving
  the version it was told: an engine that misses a version is held out, not a failure, and is
  caught up later (`routed`).
- `FixedEngines`: a fixed list of URLs, paused and continued one by one; nothing routes around
  an engine that misses a version, so every engine must take every version.

The source also keeps one `EngineClient` per engine URL (`client`) for the publishers' own
requests to the engines (a weight-update group, an adapter, a checkpoint where no proxy loads
it). A checkpoint is loaded by `update_from_disk`: with `ProxyEngines` the proxy replicas load
it on their engines (`POST /dressage/weights/update_from_disk`, each replica a share), so a
publish costs the trainer a request per replica, not one per engine; an engine a replica does
not hold, and every engine behind a proxy without the route, is loaded through its own client.
Torch-free.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sequence

from dressage.engine.client import EngineClient
from dressage.engine.errors import EngineError
from dressage.proxy.client import REPLICA_UNREACHABLE, ProxyRolloutClient, RolloutError
from dressage.proxy.errors import NOT_IN_POOL


class EngineSource(abc.ABC):
    """The engine set of a job, as a publisher reads and pauses it."""

    def __init__(self) -> None:
        self._clients: dict[str, EngineClient] = {}

    @property
    @abc.abstractmethod
    def routed(self) -> bool:
        """Whether a router holds out engines on another version than the current one: then an
        engine that misses a version does not fail the publish (some engine must take it),
        and engines that lag are caught up in the background."""

    @abc.abstractmethod
    async def targets(self) -> list[str]:
        """The URLs of the engines a publish updates now."""

    @abc.abstractmethod
    async def pause(self, mode: str) -> None:
        """Pause generation on every engine (`mode`: SGLang's `pause_generation` mode)."""

    @abc.abstractmethod
    async def resume(self, version: str | None, serving: Sequence[str] = ()) -> None:
        """Continue generation; `version`: the version the engines now serve, when a publish
        made one current (None: the engines keep the one they had); `serving`: the engines
        the publish saw load it."""

    @abc.abstractmethod
    async def lagging(self, version: str) -> list[str]:
        """The URLs of the engines that serve another version than `version` and can load it."""

    async def caught_up(self, version: str) -> None:
        """Engines loaded `version` outside a publish (a catch-up)."""
        del version

    @abc.abstractmethod
    async def versions(self) -> list[str | None]:
        """The weight version each engine reports."""

    async def update_from_disk(
        self,
        urls: Sequence[str],
        model_path: str,
        version: str,
        *,
        held: bool = True,
        timeout_s: float | None = None,
    ) -> dict[str, BaseException]:
        """Load the checkpoint `model_path` as `version` on each of `urls`; the failures by
        URL. Here each engine through its own client, all at once (one connection pool each:
        a pool shared by a thousand engines costs more CPU per request than it saves).
        `held=False` (under an `abort` pause): each update flushes the cache itself."""
        results = await asyncio.gather(
            *(
                self.client(url).update_weights_from_disk(
                    model_path, version, held=held, timeout_s=timeout_s
                )
                for url in urls
            ),
            return_exceptions=True,
        )
        return failures_by_url(urls, results)

    def client(self, url: str) -> EngineClient:
        """The client of the engine at `url` (one per URL, kept until `aclose`)."""
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = EngineClient(url)
        return client

    @property
    def clients(self) -> list[EngineClient]:
        """The clients made so far."""
        return list(self._clients.values())

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self._clients.values()))


class FixedEngines(EngineSource):
    """A fixed list of engines, each paused, updated and continued by its own URL."""

    def __init__(self, urls: Sequence[str]) -> None:
        super().__init__()
        if not urls:
            raise ValueError("a weight publisher needs engine URLs or a proxy that lists them")
        self.urls = [url.rstrip("/") for url in urls]
        for url in self.urls:
            self.client(url)

    @property
    def routed(self) -> bool:
        return False

    async def targets(self) -> list[str]:
        return list(self.urls)

    def _all(self) -> list[EngineClient]:
        return [self.client(url) for url in self.urls]

    async def pause(self, mode: str) -> None:
        await asyncio.gather(*(c.pause_generation(mode) for c in self._all()))

    async def resume(self, version: str | None, serving: Sequence[str] = ()) -> None:
        del version, serving  # each engine reports its own; nothing routes by it
        await asyncio.gather(*(c.continue_generation() for c in self._all()))

    async def lagging(self, version: str) -> list[str]:
        served = await self.versions()
        return [url for url, v in zip(self.urls, served, strict=True) if v != version]

    async def versions(self) -> list[str | None]:
        return list(await asyncio.gather(*(c.get_weight_version() for c in self._all())))


class ProxyEngines(EngineSource):
    """The engines the proxy lists; the proxy pauses, continues and routes them. The proxy's
    client is the caller's: `aclose` leaves it open."""

    def __init__(self, proxy: ProxyRolloutClient) -> None:
        super().__init__()
        self.proxy = proxy
        self.proxy_loads = True
        """Whether the proxy loads checkpoints (False once it answered 404: an older proxy)."""

    @property
    def routed(self) -> bool:
        return True

    async def targets(self) -> list[str]:
        """The proxy's healthy engines: the others are caught up once they pass its health
        checks."""
        view = await self.proxy.engines()
        return [e.url for e in view.engines if e.healthy]

    async def pause(self, mode: str) -> None:
        await self.proxy.pause(mode)

    async def resume(self, version: str | None, serving: Sequence[str] = ()) -> None:
        await self.proxy.resume(version, serving)

    async def lagging(self, version: str) -> list[str]:
        """The healthy engines on another version; a proxy that lost the current version (it
        restarted) is told it first."""
        view = await self.proxy.engines()
        if view.weight_version != version:
            view = await self.proxy.set_weight_version(version)
        return [e.url for e in view.engines if e.healthy and e.weight_version != version]

    async def caught_up(self, version: str) -> None:
        await self.proxy.set_weight_version(version)  # it reads their versions again

    async def update_from_disk(
        self,
        urls: Sequence[str],
        model_path: str,
        version: str,
        *,
        held: bool = True,
        timeout_s: float | None = None,
    ) -> dict[str, BaseException]:
        """The proxy replicas load it on their engines; an engine its replica does not hold
        (its listing changed meanwhile) or whose replica did not answer (a replica down must
        not keep its share of the engines from every version) through its own client."""
        if not self.proxy_loads:
            return await super().update_from_disk(
                urls, model_path, version, held=held, timeout_s=timeout_s
            )
        try:
            results = await self.proxy.update_weights_from_disk(
                urls, model_path, version, held=held, timeout_s=timeout_s
            )
        except RolloutError as exc:
            if exc.status != 404:
                raise
            self.proxy_loads = False  # a proxy without the route: each engine directly
            return await self.update_from_disk(
                urls, model_path, version, held=held, timeout_s=timeout_s
            )
        direct = [
            url
            for url, why in results.items()
            if why is not None and why.startswith((NOT_IN_POOL, REPLICA_UNREACHABLE))
        ]
        failures: dict[str, BaseException] = {
            url: EngineError(why, url=url)
            for url, why in results.items()
            if why is not None and url not in direct
        }
        if direct:
            failures |= await super().update_from_disk(
                direct, model_path, version, held=held, timeout_s=timeout_s
            )
        return failures

    async def versions(self) -> list[str | None]:
        return [e.weight_version for e in (await self.proxy.engines()).engines]


def engine_source(
    engine_urls: Sequence[str] = (), proxy: ProxyRolloutClient | None = None
) -> EngineSource:
    """The proxy's engine set when there is a proxy, else the fixed `engine_urls`."""
    return ProxyEngines(proxy) if proxy is not None else FixedEngines(engine_urls)


def failures_by_url(urls: Sequence[str], results: Sequence[object]) -> dict[str, BaseException]:
    """The failures of one `gather(..., return_exceptions=True)` over `urls`, by URL; a
    cancellation is raised, not counted as an engine's failure."""
    failures: dict[str, BaseException] = {}
    for url, result in zip(urls, results, strict=True):
        if isinstance(result, asyncio.CancelledError):
            raise result
        if isinstance(result, BaseException):
            failures[url] = result
    return failures
