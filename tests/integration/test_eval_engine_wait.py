"""`dressage eval` waits for the version a proxy's engines serve: an engine the command started
itself may pass the proxy's first health check late on a loaded machine (its first probe timed
out, and the engine was marked down until the next), so the command asks again until its
deadline; a running job's proxy is asked once. Against a loopback server answering the proxy's
`GET /dressage/engines` as the proxy does, through the real client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from dressage.proxy.client import ProxyRolloutClient
from dressage.runner.eval_cli import ENGINES_POLL_S, BadInput, serving_version

pytestmark = pytest.mark.integration



def _engine(
    healthy: bool, version: str | None, error: str | None = None, port: int = 9
) -> dict[str, object]:
    return {
        "url": f"http://127.0.0.1:{port}",
        "healthy": healthy,
        "routable": healthy,
        "draining": False,
        "weight_version": version,
        "inflight": 0,
        "last_error": error,
    }


class _Clock:
    """One second per look, so a deadline is reached after a known number of answers."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += 1.0


@contextlib.asynccontextmanager
async def _proxy(answers: list[dict[str, object]]) -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback server answering `GET /dressage/engines` with `answers` in turn (the last one
    again once they run out); the URL and the number of requests answered."""
    served = [0]

    async def engines(request: web.Request) -> web.Response:
        answer = answers[min(served[0], len(answers) - 1)]
        served[0] += 1
        return web.json_response(answer)

    app = web.Application()
    app.router.add_get("/dressage/engines", engines)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", served
    finally:
        await runner.cleanup()


async def test_an_engine_that_passes_its_health_check_late_is_waited_for() -> None:
    down = {"weight_version": None, "engines": [_engine(False, None, "health check failed")]}
    up = {"weight_version": None, "engines": [_engine(True, "v2")]}
    clock = _Clock()
    async with _proxy([down, down, up]) as (url, served):
        client = ProxyRolloutClient(url)
        try:
            version = await serving_version(client, url, 60.0, clock=clock, sleep=clock.sleep)
        finally:
            await client.aclose()
    assert version == "v2"
    assert served[0] == 3
    assert clock.sleeps == [ENGINES_POLL_S, ENGINES_POLL_S]


async def test_no_engine_serving_by_the_deadline_names_the_proxy_and_why_each_is_down() -> None:
    down = {"weight_version": None, "engines": [_engine(False, None, "health check failed: x")]}
    clock = _Clock()
    async with _proxy([down]) as (url, served):
        client = ProxyRolloutClient(url)
        try:
            with pytest.raises(BadInput) as refused:
                await serving_version(client, url, 3.0, clock=clock, sleep=clock.sleep)
        finally:
            await client.aclose()
    message = str(refused.value)
    assert message.startswith(f"--proxy {url}: its engines serve no single version after 3 s")
    assert "none healthy; http://127.0.0.1:9: health check failed: x" in message
    assert served[0] == 4  # at 0, 1, 2 and 3 s


async def test_a_running_jobs_proxy_is_asked_once() -> None:
    split = {"weight_version": None, "engines": [_engine(True, "v1"), _engine(True, "v2", port=10)]}
    clock = _Clock()
    async with _proxy([split]) as (url, served):
        client = ProxyRolloutClient(url)
        try:
            with pytest.raises(BadInput, match=r"no single version \(v1, v2\)$"):
                await serving_version(client, url, 0.0, clock=clock, sleep=clock.sleep)
        finally:
            await client.aclose()
    assert served[0] == 1
    assert clock.sleeps == []
