"""Two real proxy processes over one embedded engine behind one rollout client: the control
calls fan out to both, and a replica killed mid-rollout costs only the groups it held.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest
from dressage_testkit.engine import start_engine
from dressage_testkit.processes import free_port
from dressage_testkit.proxy import start_proxy

from dressage.agents.groups import GroupAgent, TrajectorySession
from dressage.proxy.affinity import replica_for
from dressage.proxy.client import ProxyRolloutClient, RolloutError, SamplingSettings
from dressage.rollout.retry import RetryPolicy
from dressage.rollout.sync_rollout import SyncCollector
from dressage.weights.disk import DiskPublisher
from dressage.weights.engines import ProxyEngines
from tests.integration.proxy_support import wait_for
from tests.scripted_http import Answer, Status, scripted_server

pytestmark = pytest.mark.integration


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def _health(url: str) -> dict[str, object]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as probe:
        return dict((await probe.get("/health")).json())


async def test_pause_continue_and_the_version_reach_every_replica_and_a_dead_one_is_counted(
    tmp_path: Path,
) -> None:
    dead = _closed_port_url()
    with (
        start_engine(cache_dir=tmp_path) as engine,
        start_proxy([engine.base_url]) as p0,
        start_proxy([engine.base_url]) as p1,
    ):
        client = ProxyRolloutClient([p0.base_url, p1.base_url, dead])
        try:
            await client.pause("in_place")
            assert [(await _health(p.base_url))["paused"] for p in (p0, p1)] == [True, True]
            await client.resume("v0")
            for p in (p0, p1):
                health = await _health(p.base_url)
                assert health["paused"] is False
                assert health["weight_version"] == "v0"
            view = await client.engines()
            assert view.weight_version == "v0"
            assert [(e.url, e.healthy) for e in view.engines] == [(engine.base_url, True)]
            # Every fan-out left the dead replica out and counted it (the pause and the
            # continue once each: their shards go only to the replicas that answered), and none
            # failed for it.
            assert client.unreachable[dead] == 3
            assert set(client.unreachable) == {dead}
        finally:
            await client.aclose()


async def test_a_replica_answering_an_error_fails_the_fan_out_after_all_were_asked(
    tmp_path: Path,
) -> None:
    with (
        start_engine(cache_dir=tmp_path) as engine,
        start_proxy([engine.base_url]) as p0,
        start_proxy([engine.base_url], env={**os.environ, "DRESSAGE_PROXY_TOKEN": "secret"}) as p1,
    ):
        client = ProxyRolloutClient([p0.base_url, p1.base_url])
        try:
            with pytest.raises(RolloutError, match=f"proxy replica {p1.base_url}") as refused:
                await client.resume("v0")
            assert refused.value.status == 401
            # The replica that answered still took the continue.
            assert (await _health(p0.base_url))["weight_version"] == "v0"
        finally:
            await client.aclose()


class CountingAgent(GroupAgent[list[int]]):
    """One generation per trajectory; remembers which replica each successful group used."""

    def prompt(self, index: int) -> list[int]:
        return [1, 5 + index % 7, 6]

    async def trajectory(self, index: int, prompt: list[int], session: TrajectorySession) -> float:
        await self.client.generate(
            prompt,
            self.sampling,
            session_id=session.session_id,
            instance_id=session.group_id,
            seed=session.seed,
        )
        return 1.0


async def test_a_killed_replica_costs_only_its_groups_which_are_retried_and_counted(
    tmp_path: Path,
) -> None:
    """Two replicas; one is killed while both have generations in flight. The batch still
    completes: the killed replica's groups fail (counted by reason) and are retried under new
    attempt ids, which hash afresh; every group that ran on the survivor is trained from its
    first attempt."""
    with (
        start_engine(cache_dir=tmp_path, min_step_interval_ms=20) as engine,
        start_proxy([engine.base_url]) as p0,
        start_proxy([engine.base_url]) as p1,
    ):
        replicas = [p0.base_url, p1.base_url]
        client = ProxyRolloutClient(replicas)
        agent = CountingAgent(
            client=client,
            group_size=2,
            sampling=SamplingSettings(max_new_tokens=60, ignore_eos=True),
            run_tag="kill",
        )
        collector = SyncCollector(
            agent,
            batch_size=12,
            concurrency=12,
            retry=RetryPolicy(max_retries=12, backoff_s=0.05, max_backoff_s=0.2),
        )
        try:
            batch_task = asyncio.create_task(collector.next_batch())

            async def both_generating() -> bool:
                loads = [int((await _health(url))["inflight"]) for url in replicas]
                return all(n > 0 for n in loads)

            await wait_for(both_generating, timeout_s=120, what="generations on both replicas")
            p1.process.kill()
            p1.process.wait(timeout=30)
            batch = await asyncio.wait_for(batch_task, timeout=300)
        finally:
            await client.aclose()
    groups = {g.group_id for g in batch.groups}
    assert len(groups) == 12
    for group in batch.groups:
        assert len({s.parent_traj_id for s in group.samples}) == 2
    first_attempts = {f"kill-p{i}-a0" for i in range(12)}
    on_survivor = {g for g in first_attempts if replica_for(g, replicas) == p0.base_url}
    on_killed = first_attempts - on_survivor
    assert on_survivor
    assert on_killed
    # Nothing of the survivor's was lost: each of its groups trained from its first attempt.
    assert on_survivor <= groups
    # The killed replica's first attempts failed, were counted by reason and retried.
    assert not on_killed & groups
    failed: Counter[str] = collector.stats.totals.failed_attempts
    assert sum(failed.values()) >= len(on_killed)
    assert collector.stats.totals.retries >= len(on_killed)
    assert collector.stats.groups_dropped == 0
    # The turns in flight on the killed replica fail with their own reason, the connection
    # lost (`ServerDisconnected`), not the reason of the group's cleanup on the gone replica
    # (`connection refused`, which retries hashed to it until it is gone also meet).
    assert set(failed) - {"connection refused"}, failed


async def test_a_pause_of_two_replicas_resumes_every_turn_at_full_length(tmp_path: Path) -> None:
    """An engine paused by one replica aborts the generations of both; every replica's gate is
    closed before any engine is paused, so each takes the abort for a pause's and resumes the
    turn (a replica whose gate were still open would end it short, as a client's abort)."""
    with (
        start_engine(cache_dir=tmp_path, min_step_interval_ms=20) as engine,
        start_proxy([engine.base_url], "--dressage-partial-rollout") as p0,
        start_proxy([engine.base_url], "--dressage-partial-rollout") as p1,
    ):
        replicas = [p0.base_url, p1.base_url]
        client = ProxyRolloutClient(replicas)
        sampling = SamplingSettings(max_new_tokens=40, ignore_eos=True)
        try:
            tasks = [
                asyncio.create_task(
                    client.generate([1, 5, 6], sampling, session_id=f"s{i}", instance_id=f"g{i}")
                )
                for i in range(16)
            ]

            async def both_generating() -> bool:
                loads = [int((await _health(url))["inflight"]) for url in replicas]
                return all(n > 0 for n in loads)

            await wait_for(both_generating, timeout_s=120, what="generations on both replicas")
            await client.pause("abort")
            await client.resume("v0")
            outputs = await asyncio.wait_for(asyncio.gather(*tasks), timeout=300)
        finally:
            await client.aclose()
    assert [len(o) for o in outputs] == [40] * 16


async def test_the_engines_drain_hook_drains_it_on_every_replica(tmp_path: Path) -> None:
    """The engine pod's `preStop` program, run as the kubelet runs it, with both replicas in
    `DRESSAGE_PROXY_URL`: each replica stops routing to the engine."""
    from dressage_operator.children.engine import DRAIN_HOOK, ENGINE_URL_ENV, PROXY_URL_ENV

    with (
        start_engine(cache_dir=tmp_path) as engine,
        start_engine(cache_dir=tmp_path) as other,
        start_proxy([engine.base_url, other.base_url]) as p0,
        start_proxy([engine.base_url, other.base_url]) as p1,
    ):
        env = {
            **os.environ,
            ENGINE_URL_ENV: engine.base_url,
            PROXY_URL_ENV: f"{p0.base_url},{p1.base_url}",
        }
        hook = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            DRAIN_HOOK,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(hook.communicate(), timeout=120)
        assert hook.returncode == 0, out
        assert out.decode().count("drained:") == 2, out
        for p in (p0, p1):
            async with httpx.AsyncClient(base_url=p.base_url, timeout=30) as probe:
                engines = (await probe.get("/dressage/engines")).json()["engines"]
            by_url = {e["url"]: e for e in engines}
            assert by_url[engine.base_url]["draining"] is True
            assert by_url[engine.base_url]["routable"] is False
            assert by_url[other.base_url]["routable"] is True


async def test_every_replicas_gate_closes_before_any_replica_pauses_its_shard() -> None:
    """The order the client keeps, seen by two scripted replicas on loopback: the gate-only
    pause (`"engines": false`) reaches both before any engine pause reaches either, and the
    second replica answers its gate-only pause late, so a client that did not wait would show
    it here. Then each replica pauses one shard of the engines: a publish costs one request
    per engine, spread over the replicas."""
    seen: list[tuple[str, dict[str, object]]] = []

    def replica(name: str, delay_s: float) -> Answer:
        async def answer(path: str, body: bytes) -> object:
            request = json.loads(body or b"{}")
            if request.get("engines") is False:
                await asyncio.sleep(delay_s)
            seen.append((name, request))
            return {"paused": True, "epoch": 1, "engines": {}}

        return answer

    async with (
        scripted_server(replica("a", 0.0)) as a,
        scripted_server(replica("b", 0.3)) as b,
    ):
        client = ProxyRolloutClient([a, b])
        try:
            await client.pause("abort")
        finally:
            await client.aclose()
    gates = [i for i, (_, r) in enumerate(seen) if r.get("engines") is False]
    pauses = [i for i, (_, r) in enumerate(seen) if "engines" not in r]
    assert sorted((name, r["shard"]) for name, r in seen if "engines" not in r) == [
        ("a", [0, 2]),
        ("b", [1, 2]),
    ]
    assert len(gates) == 2
    assert max(gates) < min(pauses), seen


@pytest.mark.parametrize("first_refuses", [False, True], ids=["answers", "refuses"])
async def test_each_replica_continues_a_shard_before_any_gate_opens(first_refuses: bool) -> None:
    """Continue: each replica continues one shard with its gate left closed, and only once
    every shard is continued does every replica take the version and open its gate. A shard
    a replica refuses (an engine did not take the continue) still opens every gate, and its
    error is raised."""
    seen: list[tuple[str, dict[str, object]]] = []

    def replica(name: str, refuse: bool, delay_s: float) -> Answer:
        async def answer(path: str, body: bytes) -> object:
            request = json.loads(body or b"{}")
            if "shard" in request:
                await asyncio.sleep(delay_s)
            seen.append((name, request))
            if refuse and "shard" in request:
                return Status(502, {"error": {"message": "an engine did not continue"}})
            return {"paused": False, "epoch": 1, "engines": {}}

        return answer

    async with (
        scripted_server(replica("a", first_refuses, 0.0)) as a,
        scripted_server(replica("b", False, 0.3)) as b,
    ):
        client = ProxyRolloutClient([a, b])
        try:
            if first_refuses:
                with pytest.raises(RolloutError, match="did not continue"):
                    await client.resume("v1")
            else:
                await client.resume("v1")
        finally:
            await client.aclose()
    shards = sorted(call for call in seen[:2])
    assert shards == [
        ("a", {"gate": False, "shard": [0, 2]}),
        ("b", {"gate": False, "shard": [1, 2]}),
    ]
    gate = {"weight_version": "v1", "engines": False}
    assert sorted(seen[2:], key=lambda call: call[0]) == [("a", gate), ("b", gate)]


async def test_the_shard_of_a_replica_that_does_not_answer_goes_to_another() -> None:
    """A replica down: its shard of the pause and of the continue is sent to the one that
    answers, so no engine stays paused or running through a publish."""
    seen: list[dict[str, object]] = []

    async def answer(path: str, body: bytes) -> object:
        seen.append({"path": path, **json.loads(body or b"{}")})
        return {"paused": False, "epoch": 1, "engines": {}}

    dead = _closed_port_url()
    async with scripted_server(answer) as live:
        client = ProxyRolloutClient([dead, live])
        try:
            await client.pause("in_place")
            await client.resume("v2")
        finally:
            await client.aclose()
    pause_shards = [c["shard"] for c in seen if c["path"] == "/pause_generation" and "shard" in c]
    continue_shards = [
        c["shard"] for c in seen if c["path"] == "/continue_generation" and "shard" in c
    ]
    # The pause shards over the replicas that closed their gates (the live one: [0, 1]); the
    # continue, over the replicas that answered last (the dead one did not answer the pause).
    assert pause_shards == [[0, 1]]
    assert continue_shards == [[0, 1]]
    assert client.unreachable[dead] == 2  # the pause's gate and the continue's gate


async def test_a_restarted_replica_is_told_the_current_version_by_the_catch_up(
    tmp_path: Path,
) -> None:
    """The publisher states the version to every replica; one that restarts has lost it, the
    merged engine set then says None, and the next catch-up states it to every replica."""
    port = free_port()
    with (
        start_engine(cache_dir=tmp_path) as engine,
        start_proxy([engine.base_url]) as p0,
    ):
        with start_proxy([engine.base_url], "--port", str(port)) as p1:
            client = ProxyRolloutClient([p0.base_url, p1.base_url])
            publisher = DiskPublisher(ProxyEngines(client), catch_up_interval_s=None)
            try:
                await publisher.sync(tmp_path / "weights", "v0")
                for p in (p0, p1):
                    assert (await _health(p.base_url))["weight_version"] == "v0"
                p1.process.kill()
                p1.process.wait(timeout=30)
            except BaseException:
                await publisher.aclose()
                await client.aclose()
                raise
        try:
            with start_proxy([engine.base_url], "--port", str(port)) as again:
                assert again.base_url == p1.base_url
                assert (await _health(again.base_url))["weight_version"] is None
                assert (await client.engines()).weight_version is None
                assert await publisher.catch_up() == []  # the engine already serves v0
                assert (await _health(again.base_url))["weight_version"] == "v0"
                assert (await client.engines()).weight_version == "v0"
        finally:
            await publisher.aclose()
            await client.aclose()


async def test_the_gate_only_pause_and_the_mark_only_drain_name_a_bad_value(
    tmp_path: Path,
) -> None:
    with start_engine(cache_dir=tmp_path) as engine, start_proxy([engine.base_url]) as p:
        async with httpx.AsyncClient(base_url=p.base_url, timeout=30) as http:
            bad = await http.post("/pause_generation", json={"mode": "abort", "engines": "no"})
            assert bad.status_code == 400
            assert bad.json()["error"]["param"] == "engines"
            gate = await http.post("/pause_generation", json={"mode": "abort", "engines": False})
            assert gate.status_code == 200
            assert gate.json()["engines"] == {}  # no engine was commanded
            assert (await _health(p.base_url))["paused"] is True
            bad = await http.post("/continue_generation", json={"engines": "no"})
            assert bad.status_code == 400
            assert bad.json()["error"]["param"] == "engines"
            gate = await http.post("/continue_generation", json={"engines": False})
            assert gate.status_code == 200
            assert gate.json()["engines"] == {}
            assert (await _health(p.base_url))["paused"] is False
            bad = await http.post(
                "/dressage/engines/drain", json={"url": engine.base_url, "abort": 1}
            )
            assert bad.status_code == 400
            assert bad.json()["error"]["param"] == "abort"
            mark = await http.post(
                "/dressage/engines/drain", json={"url": engine.base_url, "abort": False}
            )
            assert mark.status_code == 200
            assert mark.json()["routable"] is False
