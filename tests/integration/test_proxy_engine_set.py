"""The proxy's engine set changes while it runs, and an engine is routed to only while it
serves the job's current weight version.

The engines are scripted loopback servers whose reported weight version a test sets; the proxy
is a real `dressage proxy --engine-urls-file` process. The file is rewritten the way the
kubelet updates a mounted ConfigMap key: a new file renamed over the old one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
from dressage_testkit.proxy import start_proxy

from tests.integration.proxy_support import wait_for
from tests.scripted_http import Status, scripted_server


class VersionedEngine:
    """An SGLang 0.5.2 engine: answers health, `/get_weight_version` and one-token
    `/generate` under `version` (0.5.2 has no `/model_info`: 404)."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.generations = 0
        self.drop_commands = 0
        """Commands (pause, continue) answered by closing the connection, as an engine that
        expired an idle connection does."""
        self.commands: list[str] = []

    async def answer(self, path: str, body: bytes) -> object:
        if path in ("/pause_generation", "/continue_generation"):
            if self.drop_commands:
                self.drop_commands -= 1
                raise ConnectionResetError
            self.commands.append(path)
        if path == "/get_weight_version":
            return {"weight_version": self.version}
        if path in ("/model_info", "/server_info"):
            return Status(404, {"detail": "Not Found"})
        if path == "/generate":
            self.generations += 1
            return {
                "text": "a",
                "output_ids": [7],
                "meta_info": {
                    "id": "r",
                    "finish_reason": {"type": "length", "length": 1},
                    "prompt_tokens": 1,
                    "completion_tokens": 1,
                    "cached_tokens": 0,
                    "weight_version": self.version,
                    "output_token_logprobs": [[-0.5, 7, None]],
                },
            }
        return {}


def write_engines(path: Path, urls: list[str]) -> None:
    staged = path.with_name(path.name + ".new")
    staged.write_text("# engines of the job\n" + "\n".join(urls) + "\n")
    os.replace(staged, path)


async def engine_view(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/dressage/engines")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def generate(client: httpx.AsyncClient, session: str) -> httpx.Response:
    return await client.post(
        "/generate",
        json={"input_ids": [1], "sampling_params": {"max_new_tokens": 1}},
        headers={"X-Session-Id": session},
    )


async def test_an_added_engine_is_routed_to_only_on_the_current_version_and_a_removed_one_never(
    tmp_path: Path,
) -> None:
    first, second = VersionedEngine("v1"), VersionedEngine("v0")
    listing = tmp_path / "engines"
    async with scripted_server(first.answer) as url_a, scripted_server(second.answer) as url_b:
        write_engines(listing, [url_a])
        args = ("--engine-urls-file", str(listing), "--health-interval-s", "0.5")
        with start_proxy([], *args) as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
                stated = await client.post(
                    "/dressage/weight_version", json={"weight_version": "v1"}
                )
                assert stated.status_code == 200, stated.text
                first_answer = await generate(client, "s0")
                assert first_answer.status_code == 200, first_answer.text
                assert first_answer.json()["dressage"]["engine"] == url_a

                # A new engine on its base weights joins: healthy, but held out.
                write_engines(listing, [url_a, url_b])

                async def joined() -> bool:
                    engines = {e["url"]: e for e in (await engine_view(client))["engines"]}
                    return url_b in engines and engines[url_b]["healthy"]

                await wait_for(joined, what="the added engine to pass its health check")
                view = await engine_view(client)
                added = next(e for e in view["engines"] if e["url"] == url_b)
                assert view["weight_version"] == "v1"
                assert (added["weight_version"], added["routable"]) == ("v0", False)
                for i in range(4):
                    assert (await generate(client, f"s{i + 1}")).json()["dressage"][
                        "engine"
                    ] == url_a

                # The first engine leaves: nothing serves v1, so nothing is routed to.
                write_engines(listing, [url_b])

                async def left() -> bool:
                    return [e["url"] for e in (await engine_view(client))["engines"]] == [url_b]

                await wait_for(left, what="the removed engine to leave the pool")
                served_by_first = first.generations
                refused = await generate(client, "s9")
                assert refused.status_code == 503, refused.text
                assert refused.json()["error"]["code"] == "no_healthy_engine"
                assert "v1" in refused.json()["error"]["message"]

                # Once the second engine serves v1 it takes the trajectories.
                second.version = "v1"

                async def routable() -> bool:
                    return bool((await engine_view(client))["engines"][0]["routable"])

                await wait_for(routable, what="the caught-up engine to become routable")
                answer = await generate(client, "s10")
                assert answer.status_code == 200, answer.text
                assert answer.json()["dressage"]["engine"] == url_b
                assert answer.json()["meta_info"]["weight_version"] == "v1"
    assert first.generations == served_by_first
    assert second.generations == 1


async def test_a_continue_names_the_new_version_and_a_bad_label_is_refused(
    tmp_path: Path,
) -> None:
    engine = VersionedEngine("v0")
    async with scripted_server(engine.answer) as url:
        with start_proxy([url]) as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
                assert (await engine_view(client))["weight_version"] is None
                bad = await client.post("/dressage/weight_version", json={"weight_version": 3})
                assert bad.status_code == 400
                assert bad.json()["error"]["param"] == "weight_version"
                assert (await client.post("/pause_generation", json={})).status_code == 200
                engine.version = "v1"
                resumed = await client.post("/continue_generation", json={"weight_version": "v1"})
                assert resumed.status_code == 200, resumed.text
                view = await engine_view(client)
    assert view["weight_version"] == "v1"
    assert [(e["weight_version"], e["routable"]) for e in view["engines"]] == [("v1", True)]


async def test_an_engine_whose_process_is_gone_is_marked_down_and_fails_no_pause(
    tmp_path: Path,
) -> None:
    """An engine that exits between two health checks (evicted, node lost) takes no
    connection: a pause or continue sent before a health check noticed marks it down, and its
    failure does not fail the command the live engines took. An engine that merely closed the
    connection is asked again and takes the command."""
    live, gone = VersionedEngine("v0"), VersionedEngine("v0")
    async with scripted_server(live.answer) as url_live, AsyncExitStack() as process:
        url_gone = await process.enter_async_context(scripted_server(gone.answer))
        with start_proxy([url_live, url_gone], "--health-interval-s", "600") as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:

                async def both_healthy() -> bool:
                    return all(e["healthy"] for e in (await engine_view(client))["engines"])

                await wait_for(both_healthy, what="the first health check of both engines")
                # A command on a connection the engine closes is sent again on a new one.
                live.drop_commands = 1
                paused = await client.post("/pause_generation", json={"mode": "abort"})
                assert paused.status_code == 200, paused.text
                assert (await client.post("/continue_generation", json={})).status_code == 200
                assert live.commands == ["/pause_generation", "/continue_generation"]

                await process.aclose()  # the engine's process exits

                paused = await client.post("/pause_generation", json={"mode": "abort"})
                assert paused.status_code == 200, paused.text
                shown = paused.json()["engines"]
                assert shown[url_live] == "ok"
                assert shown[url_gone].startswith("not routed (unhealthy), ConnectFailed")
                view = {e["url"]: e for e in (await engine_view(client))["engines"]}
                assert view[url_gone]["healthy"] is False
                assert view[url_gone]["routable"] is False
                assert view[url_live]["healthy"] is True

                resumed = await client.post("/continue_generation", json={})
                assert resumed.status_code == 200, resumed.text
                assert resumed.json()["paused"] is False
                answer = await generate(client, "s1")
                assert answer.status_code == 200, answer.text
                assert answer.json()["dressage"]["engine"] == url_live


def test_the_engine_list_or_its_file_is_required_and_not_both(tmp_path: Path) -> None:
    import argparse

    import pytest
    from pydantic import ValidationError

    from dressage.proxy.cli import add_arguments, build_config

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    listing = tmp_path / "engines"
    listing.write_text("http://e0:30000\nhttp://e1:30000  # second\n")
    config = build_config(parser.parse_args(["--engine-urls-file", str(listing)]), {})
    assert config.engine_urls_file == listing
    for argv in ([], ["--engine-urls", "http://a", "--engine-urls-file", str(listing)]):
        with pytest.raises(ValidationError, match="engine_urls"):
            build_config(parser.parse_args(argv), {})


class SlowToAnswerEngine(VersionedEngine):
    """A healthy engine whose `/health` takes `health_s` to answer, as on a loaded node."""

    def __init__(self, version: str, health_s: float) -> None:
        super().__init__(version)
        self.health_s = health_s

    async def answer(self, path: str, body: bytes) -> object:
        if path == "/health":
            await asyncio.sleep(self.health_s)
        return await super().answer(path, body)


async def test_an_engine_joins_while_publishes_follow_each_other_without_a_gap(
    tmp_path: Path,
) -> None:
    """Publishes back to back leave gaps between pauses shorter than a health check of the
    joining engine, so every check of it overlaps a pause. A check that passed is trusted
    whatever overlapped it (only a failure may be a pause's doing: SGLang 0.5.2's `/health`
    blocks while paused), so the engine is taken in, and routed to once it has the version."""
    first, joining = VersionedEngine("v1"), SlowToAnswerEngine("v1", health_s=0.3)
    listing = tmp_path / "engines"
    async with scripted_server(first.answer) as url_a, scripted_server(joining.answer) as url_b:
        write_engines(listing, [url_a])
        args = ("--engine-urls-file", str(listing), "--health-interval-s", "0.05")
        with start_proxy([], *args) as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
                stated = await client.post(
                    "/dressage/weight_version", json={"weight_version": "v1"}
                )
                assert stated.status_code == 200, stated.text
                publishing = asyncio.Event()
                publishes = 0

                async def publish_without_a_gap() -> None:
                    nonlocal publishes
                    while True:
                        assert (await client.post("/pause_generation", json={})).status_code == 200
                        publishing.set()
                        await asyncio.sleep(0.1)  # the weight update
                        resumed = await client.post(
                            "/continue_generation", json={"weight_version": "v1"}
                        )
                        assert resumed.status_code == 200, resumed.text
                        publishes += 1
                        await asyncio.sleep(0.02)  # the trainer's next step

                publisher = asyncio.create_task(publish_without_a_gap())
                try:
                    await publishing.wait()
                    write_engines(listing, [url_a, url_b])

                    async def joined() -> bool:
                        engines = {e["url"]: e for e in (await engine_view(client))["engines"]}
                        return url_b in engines and bool(engines[url_b]["routable"])

                    await wait_for(joined, timeout_s=20, what="the joining engine to be routed to")
                    assert publishes > 0
                finally:
                    publisher.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await publisher
