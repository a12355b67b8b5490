"""`metrics_texts`, the end-of-run read of the proxies' and engines' `/metrics`: each server's
text by its URL, None for one that answers an error status or does not answer at all, so
the reports built on it (the token ledger, the churn figures) can say what they could not
read. Against loopback servers through the real `httpx` client."""

from __future__ import annotations

import socket

import httpx
import pytest
from aiohttp import web

from dressage.runner.scrape import metrics_texts

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_each_servers_metrics_or_none_where_it_could_not_be_read() -> None:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="up 1\n")

    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=500, text="no")

    apps = []
    urls = []
    for handler in (metrics, broken):
        app = web.Application()
        app.router.add_get("/metrics", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        apps.append(runner)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}")
    gone = f"http://127.0.0.1:{_closed_port()}"
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            texts = await metrics_texts(client, [f" {urls[0]}/ ", urls[1], gone])
    finally:
        for runner in apps:
            await runner.cleanup()
    assert texts == {urls[0]: "up 1\n", urls[1]: None, gone: None}
