"""Engines that die mid-request: a retry elsewhere when no token came back, a clear error when
no engine can take over; never a hang."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import start_proxy

from tests.integration.proxy_support import metric_value, session_busy, wait_for

pytestmark = pytest.mark.integration

PROMPT = [1, 5, 12, 23]
LONG = {"max_new_tokens": 1500, "ignore_eos": True}
PACE_MS = 2.0
"""Decode pacing of the engines: a LONG generation lasts at least 3 s, so it is still running
when the test kills its engine, however loaded the machine is (the survivor then generates it
again, which is what the retry test pays for that guarantee)."""


@pytest.fixture
def two_engines(cache_dir: Path) -> Iterator[tuple[EngineProcess, EngineProcess]]:
    with (
        start_engine(cache_dir=cache_dir, min_step_interval_ms=PACE_MS) as a,
        start_engine(cache_dir=cache_dir, min_step_interval_ms=PACE_MS) as b,
    ):
        yield a, b


async def _generate_and_kill(
    client: httpx.AsyncClient, engines: dict[str, EngineProcess], session_id: str
) -> tuple[httpx.Response, str]:
    headers = {"X-Session-Id": session_id}
    task = asyncio.create_task(
        client.post(
            "/generate", headers=headers, json={"input_ids": PROMPT, "sampling_params": LONG}
        )
    )
    await wait_for(lambda: session_busy(client, session_id), what="generation in flight")
    # Busy means the proxy has picked an engine; give the request a moment to reach it so that
    # the kill lands mid-request (nothing observable says the engine has it). The assertions
    # do not depend on it, and pacing guarantees the generation cannot end meanwhile.
    await asyncio.wait({task}, timeout=0.2)
    assert not task.done(), "the generation should still be running"
    victim = (await client.get(f"/sessions/{session_id}")).json()["engine_url"]
    engines[victim].process.send_signal(signal.SIGKILL)
    response = await asyncio.wait_for(task, timeout=60)
    return response, victim


async def test_engine_killed_before_answering_is_retried_on_another(
    two_engines: tuple[EngineProcess, EngineProcess],
) -> None:
    engines = {e.base_url: e for e in two_engines}
    with start_proxy(list(engines), "--record-token-versions") as proxy:
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
            response, victim = await _generate_and_kill(client, engines, "kill-1")
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["dressage"]["engine"] != victim
            assert len(body["output_ids"]) == LONG["max_new_tokens"]
            health = (await client.get("/health")).json()
            state = {e["url"]: e["healthy"] for e in health["engines"]}
            assert state[victim] is False
            # The session now sticks to the survivor.
            summary = (await client.get("/sessions/kill-1")).json()
            assert summary["engine_url"] == body["dressage"]["engine"]
            metrics = (await client.get("/metrics")).text
            assert metric_value(metrics, "dressage_proxy_engine_retries_total") >= 1


async def test_last_engine_killed_mid_request_is_a_clear_502(cache_dir: Path) -> None:
    with (
        start_engine(cache_dir=cache_dir, min_step_interval_ms=PACE_MS) as engine,
        start_proxy([engine.base_url]) as proxy,
    ):
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
            response, victim = await _generate_and_kill(client, {engine.base_url: engine}, "kill-2")
            assert response.status_code == 502, response.text
            error = response.json()["error"]
            assert error["type"] == "engine_failed"
            assert victim in error["detail"]["engines"]
            # Later requests fail fast with 503 while no engine is healthy.
            again = await client.post(
                "/generate",
                headers={"X-Session-Id": "kill-3"},
                json={"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}},
            )
            assert again.status_code in (502, 503)
            assert again.json()["error"]["type"] in ("engine_failed", "no_healthy_engine")
