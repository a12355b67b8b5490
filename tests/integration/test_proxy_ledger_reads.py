"""The token ledger's proxy side read over HTTP (`ProxyLostTokens.read`, the rollout
client's `replica_metrics`): every proxy replica's `/metrics` on loopback, one GET each per
step; a replica down is left for a later read, never an error."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from prometheus_client import generate_latest

from dressage.proxy.client import ProxyRolloutClient
from dressage.proxy.errors import PARTIAL_ROLLOUT_STALENESS_EXCEEDED
from dressage.proxy.metrics import ProxyMetrics
from dressage.rollout.proxy_ledger import ProxyLostTokens

pytestmark = pytest.mark.integration
REFUSED = (PARTIAL_ROLLOUT_STALENESS_EXCEEDED, False)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Replica:
    """A proxy replica's `/metrics` on loopback, serving its registry's page."""

    def __init__(self) -> None:
        self.metrics = ProxyMetrics(active_sessions=lambda: 0.0)
        self.url = ""

    async def page(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry))


@pytest.fixture
async def replica() -> AsyncIterator[Replica]:
    served = Replica()
    app = web.Application()
    app.router.add_get("/metrics", served.page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    served.url = f"http://127.0.0.1:{port}"
    yield served
    await runner.cleanup()


async def test_each_step_reads_every_replica_and_one_down_is_read_later(
    replica: Replica,
) -> None:
    down = f"http://127.0.0.1:{_closed_port()}"
    proxy = ProxyRolloutClient([replica.url, down])
    reader = ProxyLostTokens(timeout_s=5.0)
    try:
        replica.metrics.lost_tokens.labels(PARTIAL_ROLLOUT_STALENESS_EXCEEDED, "false").inc(4)
        await reader.start(proxy)  # what a previous trainer's steps recorded
        assert reader.last == {replica.url: {REFUSED: 4.0}}
        replica.metrics.lost_tokens.labels(PARTIAL_ROLLOUT_STALENESS_EXCEEDED, "false").inc(6)
        replica.metrics.lost_tokens.labels("cancelled", "true").inc(2)
        assert await reader.read(proxy) == {
            f"refused.{PARTIAL_ROLLOUT_STALENESS_EXCEEDED}": 6,
            "evaluation": 2,
        }
        assert await reader.read(proxy) == {}
        assert reader.attributed.total() == 8
        assert down not in reader.last
    finally:
        await proxy.aclose()
