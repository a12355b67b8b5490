"""An engine whose request queue is full is busy, not dead: the proxy keeps routing to it.

SGLang v0.5.2 turns a request away when its waiting queue holds `--max-queued-requests`
(`python/sglang/srt/managers/scheduler.py`, `handle_generate_request`'s caller):

    if len(self.waiting_queue) + 1 > self.max_queued_requests:
        abort_req = AbortReq(recv_req.rid, finished_reason={"type": "abort",
            "status_code": HTTPStatus.SERVICE_UNAVAILABLE,
            "message": "The request queue is full."})

`tokenizer_manager._wait_one_response` raises that as `fastapi.HTTPException(503, message)`,
and `entrypoints/http_server.py`'s `HTTPException` handler renders it as an `ErrorResponse`:
HTTP 503 with `QUEUE_FULL` below. The proxy must try another engine or back off and retry,
count the 503 in `dressage_proxy_engine_busy_total`, and never mark the engine down for it.
The engines here are scripted loopback servers; the proxy is the real `dressage proxy` process.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from dressage_testkit.proxy import start_proxy

from dressage import metrics as names
from tests.integration.proxy_support import metric_value
from tests.scripted_http import Status, scripted_server

QUEUE_FULL = {
    "object": "error",
    "message": "The request queue is full.",
    "type": "503",
    "param": None,
    "code": 503,
}
# The health loop never runs during a test: an engine marked down stays down, so routing
# shows what the generation path itself decided.
NO_HEALTH_LOOP = ("--health-interval-s", "3600")


def _generated(token: int) -> dict[str, Any]:
    return {
        "text": "a",
        "output_ids": [token],
        "meta_info": {
            "id": "r",
            "finish_reason": {"type": "length", "length": 1},
            "prompt_tokens": 1,
            "completion_tokens": 1,
            "cached_tokens": 0,
            "weight_version": "v1",
            "output_token_logprobs": [[-0.5, token, None]],
        },
    }


class QueueEngine:
    """Answers `/generate` with 503 queue-full `full` times, then with token `token`."""

    def __init__(self, token: int, full: int = 0) -> None:
        self.token = token
        self.full = full
        self.generates = 0

    async def answer(self, path: str, body: bytes) -> object:
        if path != "/generate":
            return {}
        self.generates += 1
        if self.full > 0:
            self.full -= 1
            return Status(503, QUEUE_FULL)
        return _generated(self.token)


async def _generate(client: httpx.AsyncClient, session: str) -> httpx.Response:
    return await client.post(
        "/generate",
        json={"input_ids": [1], "sampling_params": {"max_new_tokens": 1}},
        headers={"X-Session-Id": session},
    )


def _healthy(health: httpx.Response) -> dict[str, bool]:
    return {e["url"]: e["healthy"] for e in health.json()["engines"]}


async def test_a_full_queue_moves_the_turn_to_another_engine_and_keeps_both_routable() -> None:
    first, second = QueueEngine(token=7, full=1), QueueEngine(token=8)
    async with scripted_server(first.answer) as a, scripted_server(second.answer) as b:
        with start_proxy([a, b], *NO_HEALTH_LOOP) as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
                moved = await _generate(client, "s1")
                # A new session goes to the least-loaded engine, the first one: still routable.
                later = await _generate(client, "s2")
                health = await client.get("/health")
                text = (await client.get("/metrics")).text
    assert moved.status_code == 200, moved.text
    assert moved.json()["output_ids"] == [8]
    assert later.status_code == 200, later.text
    assert later.json()["output_ids"] == [7]
    assert (first.generates, second.generates) == (2, 1)
    assert _healthy(health) == {a: True, b: True}
    busy = names.PROXY_ENGINE_BUSY
    assert metric_value(text, f'{busy}{{engine="{a}"}}') == 1
    assert metric_value(text, names.PROXY_ENGINE_RETRIES) == 0


async def test_a_lone_busy_engine_is_retried_after_a_backoff() -> None:
    engine = QueueEngine(token=7, full=3)
    async with scripted_server(engine.answer) as url:
        with start_proxy([url], *NO_HEALTH_LOOP) as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
                answer = await _generate(client, "s1")
                health = await client.get("/health")
                text = (await client.get("/metrics")).text
    assert answer.status_code == 200, answer.text
    assert answer.json()["output_ids"] == [7]
    assert engine.generates == 4
    assert _healthy(health) == {url: True}
    assert metric_value(text, f'{names.PROXY_ENGINE_BUSY}{{engine="{url}"}}') == 3


async def test_an_engine_busy_beyond_the_timeout_answers_engine_busy_with_sglangs_message() -> None:
    engine = QueueEngine(token=7, full=10**6)
    async with scripted_server(engine.answer) as url:
        with start_proxy([url], *NO_HEALTH_LOOP, "--engine-busy-timeout-s", "0.3") as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
                answer = await _generate(client, "s1")
                health = await client.get("/health")
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "1"
    error = answer.json()["error"]
    assert error["type"] == "engine_busy"
    assert "The request queue is full." in error["message"]
    assert json.dumps(error["detail"]["engines"]) == json.dumps(
        {url: "HTTP 503: The request queue is full."}
    )
    assert engine.generates >= 2  # retried after backing off, not given up at once
    assert _healthy(health) == {url: True}
