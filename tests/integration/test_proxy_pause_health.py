"""A weight-update pause never makes the proxy mark its engines down.

The engine here is a scripted loopback server that behaves as SGLang v0.5.2 does around a
pause: `/health` generates a token (`http_server.health_generate`), so while the engine is
paused it does not answer until continue (`tokenizer_manager.generate_request` waits on
`is_pause_cond`). A generation parked at the proxy's gate during a pause longer than the
health timeout must still be served after continue, not answered 503 `no_healthy_engine`.
"""

from __future__ import annotations

import asyncio

import httpx
from dressage_testkit.proxy import start_proxy

from tests.scripted_http import scripted_server


class PausableEngine:
    """Answers `/generate` (one token), `/health` (blocked while paused), pause/continue."""

    def __init__(self) -> None:
        self.resumed = asyncio.Event()
        self.resumed.set()
        self.paused_health_checks = 0

    async def answer(self, path: str, body: bytes) -> object:
        if path == "/health":
            if not self.resumed.is_set():
                self.paused_health_checks += 1
            await self.resumed.wait()
            return {}
        if path == "/pause_generation":
            self.resumed.clear()
            return {}
        if path == "/continue_generation":
            self.resumed.set()
            return {}
        await self.resumed.wait()
        return {
            "text": "a",
            "output_ids": [7],
            "meta_info": {
                "id": "r",
                "finish_reason": {"type": "length", "length": 1},
                "prompt_tokens": 1,
                "completion_tokens": 1,
                "cached_tokens": 0,
                "weight_version": "v1",
                "output_token_logprobs": [[-0.5, 7, None]],
            },
        }


async def test_a_pause_longer_than_the_health_timeout_keeps_engines_routable() -> None:
    engine = PausableEngine()
    async with scripted_server(engine.answer) as url:
        with start_proxy([url], "--health-interval-s", "0.05") as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
                paused = await client.post("/pause_generation", json={"mode": "abort"})
                assert paused.status_code == 200, paused.text
                parked = asyncio.create_task(
                    client.post(
                        "/generate",
                        json={"input_ids": [1], "sampling_params": {"max_new_tokens": 1}},
                        headers={"X-Session-Id": "s1"},
                    )
                )
                # The pause lasts fifty health intervals, twice the probe's timeout (1 s).
                await asyncio.sleep(2.5)
                resumed = await client.post("/continue_generation", json={})
                assert resumed.status_code == 200, resumed.text
                answer = await parked
                health = await client.get("/health")
            engine.resumed.set()
    assert answer.status_code == 200, answer.text
    assert answer.json()["output_ids"] == [7]
    assert health.json()["status"] == "ok"
    assert engine.paused_health_checks == 0
