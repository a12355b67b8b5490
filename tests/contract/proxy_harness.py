"""The real proxy app (`create_app`), served in-process: its ASGI lifespan is driven by hand
and requests reach it through `httpx.ASGITransport`; it talks to engines over loopback HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from dressage.proxy.server import ProxyConfig, create_app


@asynccontextmanager
async def running_proxy(engine_url: str, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a started proxy whose only engine is `engine_url`."""
    app = create_app(ProxyConfig(engine_urls=[engine_url], **settings))
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.create_task(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    started = await outbox.get()
    assert started["type"] == "lifespan.startup.complete", started
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            yield client
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await task


async def engine_release_known(proxy: httpx.AsyncClient, timeout_s: float = 10.0) -> str:
    """Wait until the proxy's health loop has read its engine's SGLang release; return it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        engines = (await proxy.get("/health")).json()["engines"]
        if engines[0]["sglang_version"] is not None:
            return str(engines[0]["sglang_version"])
        assert loop.time() < deadline, f"the proxy never learned the engine's release: {engines}"
        await asyncio.sleep(0.02)
