"""Two real proxy processes over eight simulated engines (`dressage_testkit.sim_fleet`): a
pause and a continue through both are sharded, each replica commanding the engines of one
shard (`dressage.proxy.affinity.shard_of`), every engine exactly once, and a shard's continue
leaves its replica's gate closed until the client opens every gate."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from dressage_testkit.proxy import start_proxy
from dressage_testkit.sim_fleet import SimFleet

from dressage.proxy.affinity import shard_of
from dressage.proxy.client import ProxyRolloutClient

pytestmark = pytest.mark.integration


async def _health(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as probe:
        return dict((await probe.get("/health")).json())


async def test_a_pause_and_a_continue_through_two_replicas_command_each_engine_once() -> None:
    async with SimFleet(8) as fleet:
        with start_proxy(fleet.urls) as p0, start_proxy(fleet.urls) as p1:
            client = ProxyRolloutClient([p0.base_url, p1.base_url])
            try:
                await client.pause("in_place")
                assert all(e.paused for e in fleet.engines)
                assert [(await _health(p.base_url))["paused"] for p in (p0, p1)] == [True, True]
                # One shard's continue: its engines run, the others stay paused, and the
                # replica's gate stays closed.
                async with httpx.AsyncClient(base_url=p0.base_url, timeout=30) as http:
                    answer = await http.post(
                        "/continue_generation", json={"shard": [0, 2], "gate": False}
                    )
                assert answer.status_code == 200
                shard0 = {url for url in fleet.urls if shard_of(url, 2) == 0}
                assert set(answer.json()["engines"]) == shard0
                assert answer.json()["paused"] is True
                assert [e.paused for e in fleet.engines] == [
                    url not in shard0 for url in fleet.urls
                ]
                await client.resume("0")
                assert not any(e.paused for e in fleet.engines)
                for p in (p0, p1):
                    health = await _health(p.base_url)
                    assert (health["paused"], health["weight_version"]) == (False, "0")
            finally:
                await client.aclose()
            # The client's pause and continue reached each engine once, plus the direct shard
            # continue above.
            assert 0 < len(shard0) < 8, "the test's engines all hash to one shard"
            for url, engine in zip(fleet.urls, fleet.engines, strict=True):
                twice = url in shard0
                assert engine.calls["/pause_generation"] == 1, url
                assert engine.calls["/continue_generation"] == 1 + twice, url


async def test_a_bad_shard_or_gate_is_refused_naming_the_field() -> None:
    async with SimFleet(1) as fleet:
        with start_proxy(fleet.urls) as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as http:
                for path, body, field in (
                    ("/pause_generation", {"mode": "in_place", "shard": [2, 2]}, "shard"),
                    ("/pause_generation", {"mode": "in_place", "shard": "0/2"}, "shard"),
                    ("/pause_generation", {"mode": "abort", "engines": False, "shard": [0, 2]},
                     "shard"),
                    ("/continue_generation", {"shard": [0, True]}, "shard"),
                    ("/continue_generation", {"gate": "closed"}, "gate"),
                    ("/continue_generation", {"engines": False, "gate": False}, "gate"),
                ):  # fmt: skip
                    answer = await http.post(path, json=body)
                    assert answer.status_code == 400, (path, body)
                    assert answer.json()["error"]["param"] == field, (path, body)
                assert (await http.get("/health")).json()["paused"] is False
        # Nothing refused commanded the engine.
        assert not fleet.engines[0].paused
        assert fleet.engines[0].calls["/pause_generation"] == 0
