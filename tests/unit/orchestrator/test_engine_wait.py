"""A fresh run's collective publisher waits for a first engine before forming its weight-update
groups: with weights over the network there is no storage a later engine could load the
trainer's first weights from, so groups formed with none left the run without an engine that
serves `v0` (found by the kind quickstart, whose trainer pod was ready before its engine)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from dressage.proxy.client import ProxyRolloutClient
from dressage.proxy.engine_set import EngineSet, EngineView
from dressage.weights.collective import CollectivePublisher
from dressage.weights.engines import engine_source


class _Proxy:
    """The proxy's engine list as `GET /dressage/engines` answers it, one answer per call."""

    def __init__(self, answers: list[list[EngineView]]) -> None:
        self.answers = answers
        self.calls = 0

    async def engines(self) -> EngineSet:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return EngineSet(None, tuple(answer))


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0  # one second per look: the deadline is reached in a known number
        return self.now


def _publisher(proxy: Any) -> CollectivePublisher:
    def weights() -> Iterator[tuple[str, torch.Tensor]]:
        yield "w", torch.zeros(1)

    return CollectivePublisher(
        engine_source(["http://127.0.0.1:9"], proxy),
        weights=weights,
        master_address="127.0.0.1",
        master_port=0,
        backend="gloo",
    )


def _engine(url: str, healthy: bool) -> EngineView:
    return EngineView(url=url, healthy=healthy, routable=healthy, weight_version=None)


async def test_it_waits_until_the_proxy_lists_a_healthy_engine() -> None:
    proxy = _Proxy([[], [_engine("http://e0:1", False)], [_engine("http://e0:1", True)]])
    found = await _publisher(proxy).wait_for_an_engine(60, poll_s=0, clock=_Clock())
    assert found == ["http://e0:1"]
    assert proxy.calls == 3


async def test_it_gives_up_at_its_deadline_and_forms_the_groups_with_none() -> None:
    proxy = _Proxy([[]])
    found = await _publisher(proxy).wait_for_an_engine(5, poll_s=0, clock=_Clock())
    assert found == []
    assert 2 <= proxy.calls <= 6  # looked until the deadline, then stopped


async def test_without_a_proxy_there_is_nothing_to_wait_for() -> None:
    publisher = _publisher(None)
    assert await publisher.wait_for_an_engine(60, poll_s=0, clock=_Clock()) == []


def test_the_proxy_stand_in_has_the_clients_method() -> None:
    assert callable(getattr(ProxyRolloutClient, "engines", None))
