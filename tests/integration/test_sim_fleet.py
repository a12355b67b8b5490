"""The simulated engine fleet (`dressage_testkit.sim_fleet`) answers Dressage's engine client as
an engine of its release does: over real loopback HTTP, with per-token weight versions that
follow an update landing mid-generation. (That its routes and answers are the release's is the
contract tier's `tests/contract/test_sim_engine.py`.)"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from dressage_testkit.sim_engine import SimSettings, uniform_lengths
from dressage_testkit.sim_fleet import SimFleet

from dressage.engine import EngineClient
from dressage.engine.errors import EngineError
from dressage.engine.protocol import GenerateRequest, SamplingParams

pytestmark = pytest.mark.integration


def _request(tokens: int) -> GenerateRequest:
    return GenerateRequest(
        input_ids=[1, 2, 3],
        sampling_params=SamplingParams(max_new_tokens=tokens),
        return_logprob=True,
    )


@pytest.mark.parametrize("release", ["0.5.2", "0.5.23"])
async def test_each_engine_answers_on_its_own_port_as_its_release(release: str) -> None:
    settings = SimSettings(release=release, token_latency_s=0.0, lengths=uniform_lengths(4, 4))
    async with SimFleet(3, settings) as fleet:
        assert len(set(fleet.urls)) == 3
        for url in fleet.urls:
            async with EngineClient(url) as client:
                assert await client.sglang_version() == release
                answer = await client.generate(_request(8))
                assert len(answer.output_ids) == 4
                assert answer.meta_info.weight_version == "0"
                await client.update_weights_from_disk("/ckpt/1", "1")
                assert await client.get_weight_version() == "1"
                assert (await client.generate(_request(8))).meta_info.weight_version == "1"
        assert [e.requests for e in fleet.engines] == [2, 2, 2]


async def test_an_update_mid_generation_splits_its_tokens_by_version() -> None:
    """An `in_place` pause holds a generation; the tokens after the update carry the new label
    (`meta_info.weight_versions` spans, 0.5.19+), as SGLang reports them."""
    settings = SimSettings(
        release="0.5.23", token_latency_s=0.001, lengths=uniform_lengths(50, 50), step_tokens=5
    )
    async with SimFleet(1, settings) as fleet:
        engine = fleet.engines[0]
        async with EngineClient(fleet.urls[0]) as client:
            task = asyncio.create_task(client.generate(_request(50)))
            await engine.progressed()  # admitted
            await engine.progressed()  # its first tokens counted
            await client.pause_generation("in_place")
            await client.update_weights_from_disk("/ckpt/1", "1")
            await client.continue_generation()
            answer = await task
    spans = answer.meta_info.weight_versions
    assert spans is not None
    assert [s.version for s in spans] == ["0", "1"]
    assert spans[0].start == 0
    assert spans[-1].end == len(answer.output_ids) == 50
    assert answer.meta_info.weight_version == "1"


async def test_an_abort_pause_ends_running_generations_with_the_release_abort() -> None:
    settings = SimSettings(
        release="0.5.23", token_latency_s=0.05, lengths=uniform_lengths(100, 100)
    )
    async with SimFleet(1, settings) as fleet:
        engine = fleet.engines[0]
        async with EngineClient(fleet.urls[0]) as client:
            task = asyncio.create_task(client.generate(_request(100)))
            await engine.progressed()
            await client.pause_generation("abort")
            answer = await task
            await client.continue_generation()
    assert answer.aborted
    assert answer.meta_info.finish_reason is not None
    assert answer.meta_info.finish_reason.message == "Aborted"


async def test_a_killed_engine_refuses_and_a_restarted_one_serves_its_start_up_weights() -> None:
    settings = SimSettings(token_latency_s=0.0)
    async with SimFleet(2, settings) as fleet:
        url = fleet.urls[1]
        async with EngineClient(url) as client:
            await client.update_weights_from_disk("/ckpt/1", "1")
            await fleet.kill(1)
            with pytest.raises(EngineError):
                await client.get_weight_version()
            await fleet.restart(1)
            assert fleet.urls[1] == url
        async with EngineClient(url) as client:
            assert await client.get_weight_version() == "0"


async def test_distributed_updates_need_a_session_and_a_group_on_0_5_23() -> None:
    settings = SimSettings(release="0.5.23")
    async with SimFleet(1, settings) as fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as http:
        update = {
            "names": ["w"],
            "dtypes": ["bfloat16"],
            "shapes": [[1]],
            "group_name": "g",
            "weight_version": "2",
        }
        refused = await http.post("/update_weights_from_distributed", json=update)
        assert refused.status_code == 400
        assert "begin_weight_update" in refused.json()["message"]
        group = {"group_name": "g"}
        assert (await http.post("/init_weights_update_group", json=group)).is_success
        assert (await http.post("/begin_weight_update", json={})).is_success
        assert (await http.post("/update_weights_from_distributed", json=update)).is_success
        assert (await http.post("/end_weight_update", json={})).is_success
        assert (await http.get("/model_info")).json()["weight_version"] == "2"
        assert (await http.get("/get_weight_version")).status_code == 404  # not a 0.5.23 route
        metrics = (await http.get("/metrics")).text
        labels = 'model_name="sim",engine_type="unified",is_streaming="false"'
        assert f"sglang:num_requests_total{{{labels}}}" in metrics


async def test_a_client_whose_idle_clock_runs_late_meets_no_closed_connection() -> None:
    """Engines close an idle connection after `keepalive_timeout_s` (SGLang's uvicorn: 5 s);
    a client that keeps its pooled connections longer (a publisher whose busy loop starts
    that clock late) sends its next update and flush after the engines closed them: they
    succeed (a new connection, or the same request once more), no ReadError."""
    settings = SimSettings(token_latency_s=0.0, release="0.5.23")
    limits = httpx.Limits(keepalive_expiry=60.0)
    async with (
        SimFleet(2, settings, keepalive_timeout_s=0.05) as fleet,
        httpx.AsyncClient(limits=limits) as http,
    ):
        clients = [EngineClient(url, client=http) for url in fleet.urls]
        for version in ("1", "2", "3"):
            await asyncio.gather(*(c.update_weights_from_disk("/ckpt", version) for c in clients))
            async with asyncio.timeout(10):
                # The engines' idle timeout closes them all (aiohttp tells no one: polled).
                while fleet.open_connections:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
        assert [await c.get_weight_version() for c in clients] == ["3", "3"]
