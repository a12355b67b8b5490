"""The weight publisher follows the proxy's engine set: an engine added while the job runs,
and an engine restarted on its base weights, are brought to the current version before the
proxy routes to them.

Real processes on loopback: embedded engines, a `dressage proxy --engine-urls-file`, and the
publisher in this process with its background catch-up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from dressage.engine.testing import EngineProcess, start_engine
from dressage.orchestrator.publish import WeightPublisher
from dressage.proxy.client import ProxyRolloutClient
from dressage.proxy.testing import start_proxy
from tests.integration.proxy_support import engine_version, tiny_checkpoint, wait_for

HEALTH_INTERVAL = "0.5"
"""The proxy's health interval; its probes time out after twice that, which a loaded test
machine needs."""


def write_engines(path: Path, urls: list[str]) -> None:
    staged = path.with_name(path.name + ".new")
    staged.write_text("\n".join(urls) + "\n")
    os.replace(staged, path)


async def engines_of(proxy_url: str) -> dict[str, dict[str, Any]]:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(proxy_url + "/dressage/engines")
        response.raise_for_status()
        return {e["url"]: e for e in response.json()["engines"]}


def engine(cache_dir: Path, *extra: str) -> Iterator[EngineProcess]:
    return start_engine(cache_dir=cache_dir, weight_version="v0", extra_args=extra)


async def test_an_added_and_a_restarted_engine_are_caught_up_before_they_serve(
    tmp_path: Path, cache_dir: Path
) -> None:
    checkpoint = tiny_checkpoint(cache_dir)
    listing = tmp_path / "engines"
    with ExitStack() as stack:
        replaced = ExitStack()
        stack.enter_context(replaced)
        first = replaced.enter_context(engine(cache_dir))
        write_engines(listing, [first.base_url])
        proxy = stack.enter_context(
            start_proxy(
                [], "--engine-urls-file", str(listing), "--health-interval-s", HEALTH_INTERVAL
            )
        )
        client = ProxyRolloutClient(proxy.base_url)
        publisher = WeightPublisher(proxy=client, pause_mode="abort", catch_up_interval_s=0.2)

        async def caught_up(url: str) -> bool:
            view = (await engines_of(proxy.base_url)).get(url)
            return view is not None and view["routable"] and view["weight_version"] == "v1"

        try:
            assert await publisher.sync(checkpoint, "v0") is False
            await publisher.publish(checkpoint, "v1")
            assert await engine_version(first.base_url) == "v1"

            # A scale-up: the new engine starts on the base weights as v0.
            second = stack.enter_context(engine(cache_dir))
            assert await engine_version(second.base_url) == "v0"
            write_engines(listing, [first.base_url, second.base_url])
            await wait_for(lambda: caught_up(second.base_url), timeout_s=60, what="scale-up")
            assert await engine_version(second.base_url) == "v1"

            # The first engine's process is replaced on the same address, at base weights.
            port = first.port
            replaced.close()
            first = stack.enter_context(engine(cache_dir, "--port", str(port)))
            await wait_for(lambda: caught_up(first.base_url), timeout_s=60, what="restart")
            assert await engine_version(first.base_url) == "v1"
        finally:
            await publisher.aclose()
            await client.aclose()
