"""A request that meets a pooled connection the engine closed while it sat idle (SGLang's
uvicorn closes one after `timeout_keep_alive=5` s, 0.5.2 and 0.5.23 alike) is sent once more
on a fresh connection where that is safe, counted; never twice, and never a non-idempotent
request the engine may have read.

The engine here is a real loopback server that answers the first request on a connection and
closes it, unanswered, when a second one arrives on it: the idle timeout firing just as a busy
client reuses the connection (its own expiry clock started late).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from dressage.engine import EngineClient, EngineUnavailable

ANSWER = b'{"success": true, "message": "ok"}'


class ClosingEngine:
    """Loopback HTTP/1.1 server: one answer per connection, then the connection is closed."""

    def __init__(self) -> None:
        self.connections = 0
        self.answered: list[str] = []
        self.dropped: list[str] = []
        self.server: asyncio.Server | None = None
        self.answer_new = True
        """Whether a new connection's first request is answered (False: every one dropped)."""

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            served = False
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                lines = head.split("\r\n")
                target = " ".join(lines[0].split(" ")[:2])
                length = next(
                    (int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length")),
                    0,
                )
                await reader.readexactly(length)
                if served or not self.answer_new:
                    self.dropped.append(target)
                    return
                served = True
                self.answered.append(target)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
                )
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


@pytest.fixture
async def engine() -> AsyncIterator[ClosingEngine]:
    engine = ClosingEngine()
    engine.server = await asyncio.start_server(engine.serve, "127.0.0.1", 0)
    async with engine.server:
        yield engine


async def test_an_idempotent_post_on_a_closed_pooled_connection_goes_again_on_a_fresh_one(
    engine: ClosingEngine,
) -> None:
    async with EngineClient(engine.url, sglang_version="0.5.2") as client:
        await client.update_weights_from_disk("/ckpt/1", "1")
        await client.update_weights_from_disk("/ckpt/1", "1")
        await client.continue_generation()  # the resend's connection is not pooled: a new one
        await client.continue_generation()
        assert client.stale_retries == 2
    assert engine.dropped == ["POST /update_weights_from_disk", "POST /continue_generation"]
    assert engine.answered.count("POST /update_weights_from_disk") == 2
    assert engine.answered.count("POST /continue_generation") == 2
    assert engine.connections == 4


async def test_an_injected_client_sends_again_on_a_new_connection_of_its_pool(
    engine: ClosingEngine,
) -> None:
    async with httpx.AsyncClient() as http:
        client = EngineClient(engine.url, client=http, sglang_version="0.5.23")
        assert await client.flush_cache()
        assert await client.flush_cache()
        assert client.stale_retries == 1
    assert engine.answered == ["POST /flush_cache", "POST /flush_cache"]


async def test_a_non_idempotent_request_the_engine_read_is_not_sent_again(
    engine: ClosingEngine,
) -> None:
    async with EngineClient(engine.url, sglang_version="0.5.23") as client:
        await client.end_weight_update()
        with pytest.raises(EngineUnavailable, match=r"RemoteProtocolError|ReadError"):
            await client.end_weight_update()
        assert client.stale_retries == 0
    assert engine.answered == ["POST /end_weight_update"]
    assert engine.dropped == ["POST /end_weight_update"]


async def test_a_request_is_sent_at_most_twice(engine: ClosingEngine) -> None:
    """The resend's fresh connection is closed as well: the error surfaces, no third try."""
    async with EngineClient(engine.url, sglang_version="0.5.2") as client:
        await client.continue_generation()
        engine.answer_new = False
        with pytest.raises(EngineUnavailable, match=r"RemoteProtocolError|ReadError"):
            await client.continue_generation()
        assert client.stale_retries == 1
    assert engine.answered == ["POST /continue_generation"]
    assert engine.dropped == ["POST /continue_generation"] * 2
    assert engine.connections == 2
