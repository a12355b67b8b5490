"""The weight publisher follows the proxy's engine set: an engine added while the job runs,
an engine restarted on its base weights and an engine that missed a publish are brought to the
current version before the proxy routes to them.

Real processes on loopback: a `dressage proxy`, embedded engines (or scripted ones where an
engine must refuse an update), and the publisher in this process; publishing and catching up
run against every SGLang release the engines play (each reports its version on another
route).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.processes import free_port
from dressage_testkit.proxy import start_proxy

from dressage.engine.errors import EngineError
from dressage.proxy.client import ProxyRolloutClient, RolloutError
from dressage.weights.disk import DiskPublisher
from dressage.weights.engines import ProxyEngines
from tests.integration.proxy_support import (
    ScriptedEngine,
    engine_version,
    tiny_checkpoint,
    wait_for,
)
from tests.scripted_http import scripted_server

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


def engine(cache_dir: Path, release: str, *extra: str) -> Iterator[EngineProcess]:
    return start_engine(
        cache_dir=cache_dir, weight_version="v0", sglang_release=release, extra_args=extra
    )


async def test_an_added_and_a_restarted_engine_are_caught_up_before_they_serve(
    tmp_path: Path, cache_dir: Path, engine_release: str
) -> None:
    checkpoint = tiny_checkpoint(cache_dir)
    listing = tmp_path / "engines"
    with ExitStack() as stack:
        replaced = ExitStack()
        stack.enter_context(replaced)
        first = replaced.enter_context(engine(cache_dir, engine_release))
        write_engines(listing, [first.base_url])
        proxy = stack.enter_context(
            start_proxy(
                [], "--engine-urls-file", str(listing), "--health-interval-s", HEALTH_INTERVAL
            )
        )
        client = ProxyRolloutClient(proxy.base_url)
        publisher = DiskPublisher(ProxyEngines(client), pause_mode="abort", catch_up_interval_s=0.2)

        async def caught_up(url: str) -> bool:
            view = (await engines_of(proxy.base_url)).get(url)
            return view is not None and view["routable"] and view["weight_version"] == "v1"

        try:
            assert await publisher.sync(checkpoint, "v0") is False
            await publisher.publish(checkpoint, "v1")
            assert await engine_version(first.base_url) == "v1"

            # A scale-up: the new engine starts on the base weights as v0.
            second = stack.enter_context(engine(cache_dir, engine_release))
            assert await engine_version(second.base_url) == "v0"
            write_engines(listing, [first.base_url, second.base_url])
            await wait_for(lambda: caught_up(second.base_url), timeout_s=60, what="scale-up")
            assert await engine_version(second.base_url) == "v1"

            # The first engine's process is replaced on the same address, at base weights.
            # The proxy is let see the old process gone first, as it does when SGLang takes
            # its usual seconds to start: a forked test engine can come back within one probe
            # interval, and until the next probe the proxy's view is still the old process's.
            port = first.port
            replaced.close()

            async def gone(url: str) -> bool:
                view = (await engines_of(proxy.base_url)).get(url)
                return view is not None and not view["routable"]

            await wait_for(lambda: gone(first.base_url), timeout_s=60, what="old process gone")
            first = stack.enter_context(engine(cache_dir, engine_release, "--port", str(port)))
            await wait_for(lambda: caught_up(first.base_url), timeout_s=60, what="restart")
            assert await engine_version(first.base_url) == "v1"
        finally:
            await publisher.aclose()
            await client.aclose()


async def test_an_engine_that_misses_a_publish_is_held_out_and_caught_up(
    tmp_path: Path, engine_release: str
) -> None:
    a, b = ScriptedEngine(engine_release), ScriptedEngine(engine_release)
    async with scripted_server(a.answer) as url_a, scripted_server(b.answer) as url_b:
        with start_proxy([url_a, url_b], "--health-interval-s", HEALTH_INTERVAL) as proxy:
            client = ProxyRolloutClient(proxy.base_url)
            publisher = DiskPublisher(
                ProxyEngines(client), pause_mode="abort", catch_up_interval_s=None
            )
            try:
                assert await publisher.sync(tmp_path, "v0") is False
                b.fail = True
                await publisher.publish(tmp_path, "v1")  # one engine took it: published
                view = await engines_of(proxy.base_url)
                assert [
                    (view[u]["weight_version"], view[u]["routable"]) for u in (url_a, url_b)
                ] == [
                    ("v1", True),
                    ("v0", False),
                ]
                b.fail = False
                assert await publisher.catch_up() == [url_b]
                assert (await engines_of(proxy.base_url))[url_b]["routable"] is True

                # No engine takes a version: the publish fails and routing stays on v1.
                a.fail = b.fail = True
                with pytest.raises(EngineError, match="cannot read the checkpoint"):
                    await publisher.publish(tmp_path, "v2")
                view = await engines_of(proxy.base_url)
                assert all(e["routable"] and e["weight_version"] == "v1" for e in view.values())
                assert publisher.current == (tmp_path, "v1")
            finally:
                await publisher.aclose()
                await client.aclose()


async def test_a_listed_engine_that_is_not_up_yet_does_not_fail_a_publish(tmp_path: Path) -> None:
    """A scale-up lists the new engine before its server answers (SGLang loads the model for
    minutes): it is commanded, but neither its pause nor its update can fail the publish."""
    engine = ScriptedEngine()
    listing = tmp_path / "engines"
    starting = f"http://127.0.0.1:{free_port()}"
    async with scripted_server(engine.answer) as url:
        write_engines(listing, [url])
        args = ("--engine-urls-file", str(listing), "--health-interval-s", HEALTH_INTERVAL)
        with start_proxy([], *args) as proxy:
            client = ProxyRolloutClient(proxy.base_url)
            publisher = DiskPublisher(
                ProxyEngines(client), pause_mode="abort", catch_up_interval_s=None
            )
            try:
                assert await publisher.sync(tmp_path, "v0") is False
                write_engines(listing, [url, starting])

                async def listed() -> bool:
                    return starting in await engines_of(proxy.base_url)

                await wait_for(listed, what="the starting engine to be listed")
                await publisher.publish(tmp_path, "v1")
                view = await engines_of(proxy.base_url)
                assert (view[url]["weight_version"], view[url]["routable"]) == ("v1", True)
                assert (view[starting]["healthy"], view[starting]["routable"]) == (False, False)
                assert await publisher.catch_up() == []  # nothing healthy lags
            finally:
                await publisher.aclose()
                await client.aclose()


async def test_a_refused_pause_fails_the_publish_and_leaves_the_proxy_open(tmp_path: Path) -> None:
    """A healthy engine that refuses the pause fails the publish, but the proxy's gate, which
    the pause closed, is opened again: generations do not wait on a publish that is not
    happening (the trainer that raised it may be restarted, or never publish again)."""
    a, b = ScriptedEngine(), ScriptedEngine()
    async with scripted_server(a.answer) as url_a, scripted_server(b.answer) as url_b:
        with start_proxy([url_a, url_b], "--health-interval-s", HEALTH_INTERVAL) as proxy:
            client = ProxyRolloutClient(proxy.base_url)
            publisher = DiskPublisher(
                ProxyEngines(client), pause_mode="abort", catch_up_interval_s=None
            )
            try:
                assert await publisher.sync(tmp_path, "v0") is False
                b.refuse_pause = True
                with pytest.raises(RolloutError, match=r"pause_generation.*did not take"):
                    await publisher.publish(tmp_path, "v1")
                async with httpx.AsyncClient(timeout=10) as http:
                    health = (await http.get(proxy.base_url + "/health")).json()
                assert health["paused"] is False
                assert (a.version, b.version) == ("v0", "v0")
                assert publisher.current == (tmp_path, "v0")
            finally:
                await publisher.aclose()
                await client.aclose()


async def test_a_restarted_trainer_continues_a_pause_its_killed_predecessor_left(
    tmp_path: Path,
) -> None:
    """A trainer killed between pause and continue leaves the proxy's gate closed; the next
    trainer's start (`sync`) opens it, rather than rollouts waiting for the pause timeout."""
    a = ScriptedEngine()
    async with scripted_server(a.answer) as url_a:
        with start_proxy([url_a], "--health-interval-s", HEALTH_INTERVAL) as proxy:
            client = ProxyRolloutClient(proxy.base_url)
            try:
                await client.pause("abort")  # the killed trainer's publish, never continued
                async with httpx.AsyncClient(timeout=10) as http:
                    assert (await http.get(proxy.base_url + "/health")).json()["paused"] is True
                publisher = DiskPublisher(
                    ProxyEngines(client), pause_mode="abort", catch_up_interval_s=None
                )
                try:
                    assert await publisher.sync(tmp_path, "v0") is False
                finally:
                    await publisher.aclose()
                async with httpx.AsyncClient(timeout=10) as http:
                    assert (await http.get(proxy.base_url + "/health")).json()["paused"] is False
            finally:
                await client.aclose()
