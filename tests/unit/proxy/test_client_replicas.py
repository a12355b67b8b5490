"""The rollout client over several proxy replicas, in process: which replica each group's
calls go to, how a `dns+` source follows its answers, and how the replicas' engine sets merge."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dressage.proxy.affinity import replica_for
from dressage.proxy.client import REPLICA_REFRESH_S, ProxyRolloutClient, RolloutError
from dressage.proxy.engine_set import EngineSet, EngineView, merge_engine_sets


def test_one_proxy_takes_every_group() -> None:
    client = ProxyRolloutClient("http://p:8000/")
    assert client.replicas == ("http://p:8000",)
    assert client.replica_url("g1") == client.replica_url("g2") == "http://p:8000"
    assert client.session_base_url("s", instance_id="g") == "http://p:8000/s/s/v1"


def test_a_groups_session_url_is_its_replicas() -> None:
    replicas = ["http://p0:8000", "http://p1:8000"]
    client = ProxyRolloutClient(",".join(replicas))
    for i in range(20):
        group = f"run-p{i}-a0"
        expected = replica_for(group, replicas)
        assert client.replica_url(group) == expected
        assert client.session_base_url(f"{group}-t0", instance_id=group) == (
            f"{expected}/s/{group}-t0/v1"
        )


class FakeDns:
    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.asked = 0

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        assert (host, port) == ("job-proxy-replicas.ns.svc", 8000)
        self.asked += 1
        if not self.answers:
            raise OSError("Name or service not known")
        return list(self.answers)


async def test_a_dns_source_is_resolved_again_and_a_group_keeps_its_replica() -> None:
    now = [0.0]
    dns = FakeDns(["10.0.0.1", "10.0.0.2"])
    client = ProxyRolloutClient(
        "dns+http://job-proxy-replicas.ns.svc:8000", resolver=dns, clock=lambda: now[0]
    )
    with pytest.raises(RolloutError, match="none resolved yet"):
        client.replica_url("g")
    groups = [f"g{i}" for i in range(40)]
    for group in groups:
        await client._replica(group)
    assert dns.asked == 1
    assert client.replicas == ("http://10.0.0.1:8000", "http://10.0.0.2:8000")
    held = {g: client.replica_url(g) for g in groups}
    # A replica restarted under a new address: the groups in flight stay where they are.
    dns.answers = ["10.0.0.1", "10.0.0.3"]
    now[0] += REPLICA_REFRESH_S
    for group in groups:
        assert await client._replica(group) == held[group]
    assert dns.asked == 2
    assert "http://10.0.0.3:8000" in client.replicas
    # A new group hashes over the addresses as resolved now.
    assert client.replica_url("new") == replica_for("new", client.replicas)
    # A failed resolution keeps the last answer.
    dns.answers = []
    now[0] += REPLICA_REFRESH_S
    await client._refresh()
    assert client.replicas == ("http://10.0.0.1:8000", "http://10.0.0.3:8000")


async def test_a_group_started_while_one_replica_resolved_keeps_it_when_a_second_comes() -> None:
    now = [0.0]
    dns = FakeDns(["10.0.0.1"])
    client = ProxyRolloutClient(
        "dns+http://job-proxy-replicas.ns.svc:8000", resolver=dns, clock=lambda: now[0]
    )
    groups = [f"g{i}" for i in range(40)]
    for group in groups:
        assert await client._replica(group) == "http://10.0.0.1:8000"
    dns.answers = ["10.0.0.1", "10.0.0.2"]
    now[0] += REPLICA_REFRESH_S
    for group in groups:
        assert await client._replica(group) == "http://10.0.0.1:8000"
    # Once its segments are read a group lets go; the next one with its id hashes afresh.
    assert {replica_for(g, client.replicas) for g in groups} == set(client.replicas)


async def test_a_dns_source_that_never_resolves_fails_the_call_naming_it() -> None:
    client = ProxyRolloutClient("dns+http://job-proxy-replicas.ns.svc:8000", resolver=FakeDns([]))
    with pytest.raises(RolloutError, match=r"job-proxy-replicas\.ns\.svc resolves to no address"):
        await client._refresh()


def _view(url: str, healthy: bool, version: str | None, routable: bool = True) -> EngineView:
    return EngineView(
        url=url, healthy=healthy, routable=routable and healthy, weight_version=version
    )


def test_the_replicas_engine_sets_merge_by_engine() -> None:
    a = EngineSet("v2", (_view("http://e0", True, "v2"), _view("http://e1", False, "v1")))
    b = EngineSet("v2", (_view("http://e0", False, None), _view("http://e1", True, "v2")))
    merged = merge_engine_sets([a, b])
    assert merged.weight_version == "v2"
    assert merged.engines == (
        EngineView("http://e0", True, True, "v2"),
        EngineView("http://e1", True, True, "v2"),
    )


def test_replicas_that_disagree_on_the_version_merge_to_none_so_it_is_stated_again() -> None:
    # A restarted replica has no version yet: the publisher's catch-up sees None.
    a = EngineSet("v2", (_view("http://e0", True, "v2"),))
    restarted = EngineSet(None, (_view("http://e0", True, "v2"),))
    assert merge_engine_sets([a, restarted]).weight_version is None
    assert merge_engine_sets([a]).weight_version == "v2"
    with pytest.raises(ValueError, match="no engine set"):
        merge_engine_sets([])
