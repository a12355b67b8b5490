"""Bad input never crashes the proxy: malformed, oversized, unauthenticated and excess requests
get a 4xx JSON error naming what is wrong; idle sessions expire."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import ProxyProcess, start_proxy

from tests.integration.proxy_support import session_busy, wait_for

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROMPT = [1, 5, 12, 23]
PACE_MS = 2.0
"""Decode pacing of the engine: a generation of N tokens lasts at least N * 2 ms, so the 800-token
generations of the concurrency test are still running (>= 1.6 s) when the test sends the
requests that must find them in flight, however loaded the machine is."""


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    cache_dir = tmp_path_factory.mktemp("cache")
    with start_engine(cache_dir=cache_dir, min_step_interval_ms=PACE_MS) as engine:
        yield engine


@pytest.fixture(scope="module")
def proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    args = ["--max-body-bytes", "4096", "--max-concurrency", "2", "--session-ttl-s", "1"]
    with start_proxy([engine.base_url], *args, env={"DRESSAGE_PROXY_TOKEN": TOKEN}) as proxy:
        yield proxy


def _error(response: httpx.Response, status: int, name: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == name
    assert error["message"]
    return error


async def test_authentication(proxy: ProxyProcess) -> None:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
        body = {"input_ids": PROMPT, "session_id": "auth-1"}
        _error(await client.post("/generate", json=body), 401, "unauthorized")
        wrong = {"Authorization": "Bearer nope"}
        response = await client.post("/generate", json=body, headers=wrong)
        assert _error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
        _error(await client.get("/segments"), 401, "unauthorized")
        _error(await client.post("/pause_generation"), 401, "unauthorized")
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200
        ok = await client.post(
            "/generate", json=body | {"sampling_params": {"max_new_tokens": 2}}, headers=AUTH
        )
        assert ok.status_code == 200, ok.text


@pytest.mark.parametrize(
    ("content", "status", "name", "names"),
    [
        (b"{not json", 400, "invalid_json", ""),
        (b"", 400, "invalid_json", "empty"),
        (b"[1, 2]", 400, "invalid_json", "object"),
        (b'{"session_id": "m"}', 400, "invalid_request", "input_ids"),
        (b'{"session_id": "m", "input_ids": ["a"]}', 400, "invalid_request", "input_ids"),
        (b'{"session_id": "m", "input_ids": [-1]}', 400, "invalid_request", "input_ids"),
        (b'{"session_id": "m", "input_ids": [true]}', 400, "invalid_request", "input_ids"),
        (b'{"session_id": "m", "input_ids": []}', 400, "invalid_request", "input_ids"),
        (b'{"session_id": "m", "input_ids": [1], "bogus": 1}', 400, "invalid_request", "bogus"),
        (b'{"session_id": "m", "input_ids": [1], "sampling_params": 3}', 400, "invalid_request",
         "sampling_params"),
        (b'{"session_id": "m", "input_ids": [1], "sampling_params": {"max_new_tokens": -2}}',
         400, "invalid_request", "max_new_tokens"),
        (b'{"session_id": "m", "input_ids": [99999]}', 400, "invalid_request", "input_ids[0]"),
        (b'{"session_id": "m", "input_ids": [1], "sampling_params": {"top_p": 7}}', 400,
         "invalid_request", "top_p"),
        (b'{"session_id": 5, "input_ids": [1]}', 400, "invalid_request", "session id"),
        (b'{"session_id": "m", "input_ids": [1], "stream": 1}', 400, "invalid_request",
         "stream"),
        (b'{"input_ids": [1], "return_routed_experts": "yes"}', 400, "invalid_request",
         "return_routed_experts"),
    ],
)  # fmt: skip
async def test_malformed_generate_requests_name_the_problem(
    proxy: ProxyProcess, content: bytes, status: int, name: str, names: str
) -> None:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
        response = await client.post("/generate", content=content, headers=AUTH)
        error = _error(response, status, name)
        assert names in error["message"]


async def test_malformed_chat_and_control_requests(proxy: ProxyProcess) -> None:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30, headers=AUTH) as client:
        # Without --model the chat endpoint says what it needs.
        chat = await client.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
        )
        assert "--model" in _error(chat, 404, "not_found")["message"]
        _error(await client.post("/pause_generation", json={"mode": "nap"}), 400, "invalid_request")
        _error(await client.post("/sessions/nope/finalize"), 404, "not_found")
        _error(await client.get("/segments", params={"drain": "maybe"}), 400, "invalid_request")
        _error(await client.get("/no/such/path"), 404, "not_found")
        _error(await client.get("/generate"), 405, "method_not_allowed")
        created = await client.post("/sessions", json={"session_id": "fin-1"})
        assert created.status_code == 201
        bad_reward = await client.post("/sessions/fin-1/finalize", json={"reward": "high"})
        assert _error(bad_reward, 400, "invalid_request")["param"] == "reward"


async def test_oversized_bodies_are_refused(proxy: ProxyProcess) -> None:
    big = {"session_id": "big", "input_ids": [5] * 5000}
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30, headers=AUTH) as client:
        _error(await client.post("/generate", json=big), 413, "request_too_large")

        async def chunks() -> Any:
            for _ in range(10):
                yield b" " * 1000

        # No Content-Length (chunked): the limit is enforced while reading.
        response = await client.post("/generate", content=chunks())
        _error(response, 413, "request_too_large")


async def test_concurrency_limit_and_busy_session(proxy: ProxyProcess) -> None:
    long = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 800, "ignore_eos": True}}
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60, headers=AUTH) as client:
        tasks = [
            asyncio.create_task(client.post("/generate", json=long | {"session_id": f"c-{i}"}))
            for i in range(2)
        ]
        for i in range(2):
            await wait_for(lambda i=i: session_busy(client, f"c-{i}"), what="both in flight")
        extra = await client.post("/generate", json=long | {"session_id": "c-extra"})
        error = _error(extra, 429, "too_many_requests")
        assert "--max-concurrency" in error["message"]
        assert extra.headers["retry-after"] == "1"
        for response in await asyncio.gather(*tasks):
            assert response.status_code == 200
        busy_task = asyncio.create_task(client.post("/generate", json=long | {"session_id": "b"}))
        await wait_for(lambda: session_busy(client, "b"), what="generation in flight")
        same = await client.post("/generate", json=long | {"session_id": "b"})
        _error(same, 409, "session_busy")
        assert (await busy_task).status_code == 200


async def test_junk_never_crashes_the_proxy(proxy: ProxyProcess) -> None:
    junk = [
        b"null", b"1e999", b'"text"', b'{"input_ids": {"a": 1}, "session_id": "j"}',
        b'{"session_id": "j", "input_ids": [1.5]}', b'{"session_id": ["x"], "input_ids": [1]}',
        b'{"session_id": "j", "input_ids": [1], "sampling_params": {"max_new_tokens": "x"}}',
        b'{"session_id": "\xff\xfe", "input_ids": [1]}', b"\x00\x01\x02",
        b'{"session_id": "j", "input_ids": [' + b"1," * 100 + b"1]" + b"}" * 3,
    ]  # fmt: skip
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30, headers=AUTH) as client:
        for content in junk:
            response = await client.post("/generate", content=content)
            assert 400 <= response.status_code < 500, (content, response.text)
            assert "error" in response.json()
        for content in junk:
            response = await client.post(
                "/v1/chat/completions", content=content, headers={"X-Session-Id": "j"}
            )
            assert 400 <= response.status_code < 500, (content, response.text)
        assert (await client.get("/health")).status_code == 200


async def test_junk_sampling_params_are_refused_by_the_proxy(proxy: ProxyProcess) -> None:
    content = b'{"session_id": "j", "input_ids": [1], "sampling_params": {"stop": 5}}'
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30, headers=AUTH) as client:
        response = await client.post("/generate", content=content)
        assert 400 <= response.status_code < 500, response.text
        response = await client.post(
            "/v1/chat/completions", content=content, headers={"X-Session-Id": "j"}
        )
        assert 400 <= response.status_code < 500, response.text


async def test_idle_sessions_expire(proxy: ProxyProcess) -> None:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30, headers=AUTH) as client:
        assert (await client.post("/sessions", json={"session_id": "idle"})).status_code == 201

        async def gone() -> bool:
            return (await client.get("/sessions/idle")).status_code == 404

        await wait_for(gone, timeout_s=10, what="session expiry")
