"""The publishers' one interface and the engine set they read: a fixed URL list, or the
proxy's engine registry (pure: the proxy is a recording stand-in)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from dressage.proxy.client import ProxyRolloutClient
from dressage.proxy.engine_set import EngineSet, EngineView
from dressage.weights.base import Publisher
from dressage.weights.collective import CollectiveFollower, CollectivePublisher
from dressage.weights.disk import DiskPublisher
from dressage.weights.engines import FixedEngines, ProxyEngines, engine_source


def _view(url: str, version: str | None, healthy: bool = True) -> EngineView:
    return EngineView(url=url, healthy=healthy, routable=healthy, weight_version=version)


class _Proxy:
    """The proxy's engine registry: a fixed list, a current version, and what it was told."""

    def __init__(self, engines: list[EngineView], version: str | None) -> None:
        self.engines_ = engines
        self.version = version
        self.told: list[str] = []

    async def engines(self) -> EngineSet:
        return EngineSet(self.version, tuple(self.engines_))

    async def set_weight_version(self, version: str) -> EngineSet:
        self.told.append(version)
        self.version = version
        return await self.engines()


def _weights() -> Iterator[tuple[str, torch.Tensor]]:
    yield "w", torch.zeros(1)


async def test_each_publisher_declares_whether_every_trainer_rank_takes_part() -> None:
    disk = DiskPublisher(FixedEngines(["http://e:1"]))
    collective = CollectivePublisher(
        FixedEngines(["http://e:1"]),
        weights=_weights,
        master_address="127.0.0.1",
        master_port=0,
        backend="gloo",
    )
    follower = CollectiveFollower(_weights)
    assert [isinstance(p, Publisher) for p in (disk, collective, follower)] == [True] * 3
    assert [p.collective for p in (disk, collective, follower)] == [False, True, True]
    for p in (disk, collective, follower):
        await p.aclose()


def test_the_engine_set_is_the_proxys_when_there_is_one_else_the_fixed_list() -> None:
    proxy = ProxyRolloutClient("http://proxy:8000")
    assert isinstance(engine_source(["http://e:1"], proxy), ProxyEngines)
    fixed = engine_source(["http://e:1/", "http://e:2"])
    assert isinstance(fixed, FixedEngines)
    assert fixed.urls == ["http://e:1", "http://e:2"]
    assert not fixed.routed
    assert [c.base_url for c in fixed.clients] == ["http://e:1", "http://e:2"]
    with pytest.raises(ValueError, match="engine URLs or a proxy"):
        engine_source([])


async def test_the_proxys_set_publishes_to_its_healthy_engines_and_catches_up_the_laggards() -> (
    None
):
    proxy = _Proxy(
        [_view("http://a:1", "v1"), _view("http://b:1", "v0"), _view("http://c:1", None, False)],
        version=None,  # a restarted proxy lost the current version
    )
    source = ProxyEngines(proxy)  # type: ignore[arg-type]
    assert source.routed
    assert await source.targets() == ["http://a:1", "http://b:1"]
    assert await source.versions() == ["v1", "v0", None]
    # The proxy is told the current version first, then the healthy engines off it lag.
    assert await source.lagging("v1") == ["http://b:1"]
    assert proxy.told == ["v1"]
    await source.caught_up("v1")
    assert proxy.told == ["v1", "v1"]  # it reads the engines' versions again
