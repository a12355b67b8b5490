"""The proxy loads a checkpoint on its engines (`POST /dressage/weights/update_from_disk`), so a
publish costs the trainer one request per proxy replica; and a continue that names the engines
seen to load the version (`"serving"`) does not read their versions again.

Real `dressage proxy` processes on loopback in front of scripted engines that record what they
are sent, for each SGLang release the engines play: before 0.5.6 an update flushes the cache
itself; from 0.5.6 on, with requests held by a pause, it loads with `flush_cache: false` and
the cache is flushed by a request of its own (`EngineClient.update_weights_from_disk` sends
the same).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from dressage_testkit.processes import free_port
from dressage_testkit.proxy import start_proxy

from dressage.api.sglang import UPDATE_FLUSH_CACHE
from dressage.engine.sglang_support import supports
from dressage.proxy.client import ProxyRolloutClient
from dressage.weights.disk import DiskPublisher
from dressage.weights.engines import ProxyEngines
from tests.integration.proxy_support import ScriptedEngine, wait_for
from tests.scripted_http import scripted_server

pytestmark = pytest.mark.integration

HEALTH_INTERVAL = "0.5"
ROUTE = "/dressage/weights/update_from_disk"


@asynccontextmanager
async def _four_engines() -> AsyncIterator[tuple[list[ScriptedEngine], list[str]]]:
    """Four scripted engines playing SGLang 0.5.23 on loopback, and their URLs."""
    engines = [ScriptedEngine("0.5.23") for _ in range(4)]
    async with AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(scripted_server(e.answer)) for e in engines]
        yield engines, urls


async def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url, json=body)


async def test_the_proxy_loads_each_engine_as_its_release_takes_it(
    tmp_path: Path, engine_release: str
) -> None:
    a, b = ScriptedEngine(engine_release), ScriptedEngine(engine_release)
    async with scripted_server(a.answer) as url_a, scripted_server(b.answer) as url_b:
        with start_proxy([url_a, url_b], "--health-interval-s", HEALTH_INTERVAL) as proxy:
            b.fail = True
            body = {"model_path": str(tmp_path), "weight_version": "v1", "held": True}
            answer = await _post(proxy.base_url + ROUTE, body)
            unknown = "http://127.0.0.1:9"
            other = await _post(proxy.base_url + ROUTE, {**body, "engines": [unknown]})
    assert answer.status_code == 200
    assert answer.json() == {
        "weight_version": "v1",
        "engines": {url_a: None, url_b: "the engine did not load it: cannot read the checkpoint"},
    }
    assert other.json()["engines"][unknown].startswith("not_in_pool: ")
    assert (a.version, b.version) == ("v1", "v0")
    updates = a.sent("/update_weights_from_disk", "/flush_cache")
    if supports(engine_release, UPDATE_FLUSH_CACHE):
        assert updates == [
            (
                "/update_weights_from_disk",
                {"model_path": str(tmp_path), "weight_version": "v1", "flush_cache": False},
            ),
            ("/flush_cache", {}),
        ]
    else:
        assert updates == [
            ("/update_weights_from_disk", {"model_path": str(tmp_path), "weight_version": "v1"})
        ]


async def test_an_update_whose_connection_the_engine_closes_is_sent_again(tmp_path: Path) -> None:
    """The update goes out on an idle connection when there is one; one the engine closes
    before answering (it had closed it while idle, or its process is ending) is sent again
    on a new connection: the same checkpoint under the same label is the same weights."""
    engine = ScriptedEngine("0.5.23")
    dropped: list[str] = []

    async def answer(path: str, body: bytes) -> object:
        if path == "/update_weights_from_disk" and not dropped:
            dropped.append(path)
            engine.requests.append((path, json.loads(body)))
            raise ConnectionResetError  # no reply: the connection is dropped
        return await engine.answer(path, body)

    async with scripted_server(answer) as url:
        with start_proxy([url], "--health-interval-s", HEALTH_INTERVAL) as proxy:
            body = {"model_path": str(tmp_path), "weight_version": "v1"}
            reply = await _post(proxy.base_url + ROUTE, body)
    assert reply.json()["engines"] == {url: None}
    assert len(engine.sent("/update_weights_from_disk")) == 2
    assert engine.version == "v1"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"weight_version": "v1"}, "model_path"),
        ({"model_path": "/m"}, "weight_version"),
        ({"model_path": "/m", "weight_version": "v1", "held": "yes"}, "held"),
        ({"model_path": "/m", "weight_version": "v1", "timeout_s": 0}, "timeout_s"),
        ({"model_path": "/m", "weight_version": "v1", "engines": "http://e"}, "engines"),
    ],
)
async def test_a_bad_field_is_refused_by_name_and_nothing_is_loaded(
    body: dict[str, Any], field: str
) -> None:
    engine = ScriptedEngine("0.5.23")
    async with scripted_server(engine.answer) as url:
        with start_proxy([url], "--health-interval-s", HEALTH_INTERVAL) as proxy:
            answer = await _post(proxy.base_url + ROUTE, body)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == field
    assert engine.sent("/update_weights_from_disk") == []


async def test_a_publish_through_two_replicas_loads_a_share_on_each_and_reads_no_loaded_engine(
    tmp_path: Path,
) -> None:
    """Every engine is loaded once, by one replica or the other; the continue names the
    engines that loaded the version, so no replica reads their versions again, and both
    route to them."""
    async with _four_engines() as (engines, urls):
        with (
            start_proxy(urls, "--health-interval-s", "30") as p1,
            start_proxy(urls, "--health-interval-s", "30") as p2,
        ):
            client = ProxyRolloutClient([p1.base_url, p2.base_url])
            publisher = DiskPublisher(ProxyEngines(client), catch_up_interval_s=None)
            try:

                async def both_read_every_version() -> bool:
                    views = [await client_view(p.base_url) for p in (p1, p2)]
                    return all(e["weight_version"] == "v0" for v in views for e in v.values())

                # each replica's first health check reads every engine's version; the next is
                # 30 s away
                await wait_for(both_read_every_version, what="the replicas' first health checks")
                reads = [e.version_reads() for e in engines]
                await publisher.publish(tmp_path, "v1")
                views = [await client_view(p.base_url) for p in (p1, p2)]
            finally:
                await publisher.aclose()
                await client.aclose()
    assert [len(e.sent("/update_weights_from_disk")) for e in engines] == [1, 1, 1, 1]
    assert [e.version_reads() for e in engines] == reads
    for view in views:
        assert {u: (e["weight_version"], e["routable"]) for u, e in view.items()} == {
            u: ("v1", True) for u in urls
        }


async def test_the_share_of_a_replica_that_is_down_is_loaded_by_the_publisher(
    tmp_path: Path,
) -> None:
    """A replica that takes no connection fails its share of the load, and the publisher
    loads those engines through their own clients: a replica down holds no engine back."""
    async with _four_engines() as (engines, urls):
        with start_proxy(urls, "--health-interval-s", HEALTH_INTERVAL) as live:
            down = f"http://127.0.0.1:{free_port()}"
            client = ProxyRolloutClient([live.base_url, down])
            publisher = DiskPublisher(ProxyEngines(client), catch_up_interval_s=None)
            try:
                await publisher.publish(tmp_path, "v1")
            finally:
                await publisher.aclose()
                await client.aclose()
    assert [e.version for e in engines] == ["v1"] * 4
    assert [len(e.sent("/update_weights_from_disk")) for e in engines] == [1, 1, 1, 1]
    assert client.unreachable[down] >= 1


async def client_view(proxy_url: str) -> dict[str, dict[str, Any]]:
    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.get(proxy_url + "/dressage/engines")
    return {e["url"]: e for e in answer.json()["engines"]}


async def test_a_continue_naming_engines_needs_the_version_they_serve() -> None:
    engine = ScriptedEngine("0.5.23")
    async with scripted_server(engine.answer) as url:
        with start_proxy([url], "--health-interval-s", HEALTH_INTERVAL) as proxy:
            answer = await _post(proxy.base_url + "/continue_generation", {"serving": [url]})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "serving"


@asynccontextmanager
async def _proxy_without_the_route() -> AsyncIterator[str]:
    """A proxy of a release before the route: 404 `not_found` for it (as the proxy answers
    a path it does not know)."""

    async def missing(request: web.Request) -> web.Response:
        error = {"type": "not_found", "code": "not_found", "message": f"no endpoint {ROUTE}"}
        return web.json_response({"error": error}, status=404)

    app = web.Application()
    app.router.add_post(ROUTE, missing)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_behind_a_proxy_without_the_route_each_engine_is_loaded_directly(
    tmp_path: Path,
) -> None:
    engine = ScriptedEngine("0.5.23")
    async with scripted_server(engine.answer) as url, _proxy_without_the_route() as proxy:
        client = ProxyRolloutClient(proxy)
        source = ProxyEngines(client)
        try:
            failures = await source.update_from_disk([url], str(tmp_path), "v1")
            again = await source.update_from_disk([url], str(tmp_path), "v2")
        finally:
            await source.aclose()
            await client.aclose()
    assert failures == again == {}
    assert source.proxy_loads is False
    assert engine.version == "v2"
