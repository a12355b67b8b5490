"""The engine client against a loopback port nothing listens on: every call is
`EngineUnavailable`, and waiting for readiness gives up naming how long it waited."""

from __future__ import annotations

import pytest
from dressage_testkit.processes import free_port

from dressage.engine import EngineClient, EngineUnavailable, GenerateRequest


async def test_connection_refused_is_engine_unavailable() -> None:
    async with EngineClient(f"http://127.0.0.1:{free_port()}", retries=1) as client:
        with pytest.raises(EngineUnavailable):
            await client.generate(GenerateRequest(input_ids=[1]))
        assert await client.health() is False
        with pytest.raises(EngineUnavailable, match="not ready after"):
            await client.wait_until_ready(0.2, interval_s=0.05)
