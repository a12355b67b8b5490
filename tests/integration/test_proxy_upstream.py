"""The proxy's engine client against real loopback servers whose replies each test scripts.

The servers speak raw HTTP/1.1 over asyncio streams, so a test can send what a well-behaved
engine sends (lengths, chunks, keep-alive) and what a failing one does (close mid-reply,
garbage, silence).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from dressage_testkit.processes import free_port

from dressage.proxy.upstream import (
    ConnectFailed,
    ConnectionLost,
    EngineConnections,
    ReplyTimeout,
)

Script = Callable[[bytes, bytes, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request (head, body) on the writer; returns whether to keep the connection."""


def _reply(body: bytes, status: int = 200, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        status,
        len(body),
        extra,
        body,
    )


class Server:
    """A loopback HTTP server: one script answers every request; counts connections."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.url = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                if not await self.script(head, body, writer):
                    return
        finally:
            writer.close()


@asynccontextmanager
async def serve(script: Script) -> AsyncIterator[Server]:
    server = Server(script)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    server.url = f"http://127.0.0.1:{port}"
    async with listener:
        yield server


async def _echo(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(_reply(b'{"echo":' + (body or b"null") + b"}"))
    await writer.drain()
    return True


async def test_a_reply_comes_back_and_the_connection_is_reused() -> None:
    connections = EngineConnections()
    async with serve(_echo) as server:
        first = await connections.request("POST", server.url, "/generate", b'{"a":1}')
        second = await connections.request("GET", server.url, "/health")
    await connections.close()
    assert (first.status, first.body) == (200, b'{"echo":{"a":1}}')
    assert (second.status, second.body) == (200, b'{"echo":null}')
    assert server.connections == 1
    head, body = server.requests[0]
    assert head.startswith(b"POST /generate HTTP/1.1\r\n")
    assert b"content-type: application/json\r\n" in head
    assert b"content-length: 7\r\n" in head
    assert body == b'{"a":1}'
    assert server.requests[1][0].startswith(b"GET /health HTTP/1.1\r\n")


async def test_the_url_path_is_a_prefix_and_concurrent_requests_get_their_own_replies() -> None:
    async def path_echo(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        path = head.split(b" ")[1]
        writer.write(_reply(b'"' + path + b" " + body + b'"'))
        await writer.drain()
        return True

    connections = EngineConnections()
    async with serve(path_echo) as server:
        replies = await asyncio.gather(
            *(
                connections.request("POST", server.url + "/engine/", "/generate", b"%d" % i)
                for i in range(20)
            )
        )
    await connections.close()
    assert [r.body for r in replies] == [b'"/engine/generate %d"' % i for i in range(20)]
    assert 1 <= server.connections <= 20


async def test_chunked_and_close_delimited_replies_are_read_whole() -> None:
    async def chunked(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        if b"/chunked" in head:
            writer.write(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
            )
            await writer.drain()
            return True
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end")
        await writer.drain()
        return False

    connections = EngineConnections()
    async with serve(chunked) as server:
        assert (await connections.request("GET", server.url, "/chunked")).body == b"abcde"
        assert (await connections.request("GET", server.url, "/close")).body == b"until the end"
        # The closed connection is not reused: the next request opens a new one.
        assert (await connections.request("GET", server.url, "/chunked")).body == b"abcde"
    await connections.close()
    assert server.connections == 2


async def test_connection_close_replies_and_idle_expiry_open_new_connections() -> None:
    async def closing(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        close = b"/close" in head
        writer.write(_reply(b"{}", extra=b"connection: close\r\n" if close else b""))
        await writer.drain()
        return not close

    now = [0.0]
    connections = EngineConnections(idle_expiry_s=2.0, clock=lambda: now[0])
    async with serve(closing) as server:
        await connections.request("GET", server.url, "/close")
        await connections.request("GET", server.url, "/keep")
        assert server.connections == 2
        now[0] += 1.9  # within the expiry: reused
        await connections.request("GET", server.url, "/keep")
        assert server.connections == 2
        now[0] += 2.1  # idle longer than the expiry: dropped, a new one is opened
        await connections.request("GET", server.url, "/keep")
        assert server.connections == 3
    await connections.close()


async def test_a_connection_closing_unseen_is_never_written_to() -> None:
    """An engine that resets a connection (its process ending) leaves it closing for a loop
    iteration before `connection_lost` runs. Such a connection is not handed out again, and a
    request written to it is `ConnectionLost` (which the proxy's engine commands resend), not
    the event loop's RuntimeError about a closed handle."""
    connections = EngineConnections()
    async with serve(_echo) as server:
        await connections.request("GET", server.url, "/a")
        (idle,) = [c for pool in connections._idle.values() for c in pool]  # the one kept
        assert idle.transport is not None
        idle.transport.close()  # closing now; `connection_lost` comes on a later iteration
        with pytest.raises(ConnectionLost, match="before the request was sent"):
            idle.send(b"GET /b HTTP/1.1\r\nhost: x\r\n\r\n", b"")
        reply = await connections.request("GET", server.url, "/c")
        assert reply.status == 200
        assert server.connections == 2  # a new connection, not the closing one
    await connections.close()


async def test_a_refused_connection_is_connect_failed() -> None:
    connections = EngineConnections()
    with pytest.raises(ConnectFailed, match="cannot connect"):
        await connections.request("GET", f"http://127.0.0.1:{free_port()}", "/health")


@pytest.mark.parametrize(
    ("sent", "message"),
    [
        (b"", "closed the connection before its reply"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", "closed the connection"),
        (b"this is not http\r\n\r\n", "invalid HTTP"),
    ],
)
async def test_an_engine_failing_after_the_request_is_connection_lost(
    sent: bytes, message: str
) -> None:
    async def fail(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(sent)
        await writer.drain()
        return False  # and close

    connections = EngineConnections()
    async with serve(fail) as server:
        with pytest.raises(ConnectionLost, match=message):
            await connections.request("POST", server.url, "/generate", b"{}")
        # The broken connection is gone; the next request gets a fresh one (and fails alike).
        with pytest.raises(ConnectionLost):
            await connections.request("POST", server.url, "/generate", b"{}")
    await connections.close()
    assert server.connections == 2


async def test_a_silent_engine_is_a_reply_timeout_and_its_connection_is_dropped() -> None:
    release = asyncio.Event()

    async def silent_once(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        if b"/silent" in head:
            await release.wait()
            return False
        writer.write(_reply(b"{}"))
        await writer.drain()
        return True

    connections = EngineConnections()
    async with serve(silent_once) as server:
        with pytest.raises(ReplyTimeout, match=r"no reply within 0\.1s"):
            await connections.request("GET", server.url, "/silent", timeout_s=0.1)
        release.set()
        assert (await connections.request("GET", server.url, "/ok")).status == 200
    await connections.close()
    assert server.connections == 2


async def test_a_cancelled_request_never_leaves_its_connection_for_reuse() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def late(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        if b"/late" in head:
            started.set()
            await release.wait()
        writer.write(_reply(b'"' + head.split(b" ")[1] + b'"'))
        await writer.drain()
        return True

    connections = EngineConnections()
    async with serve(late) as server:
        task = asyncio.create_task(connections.request("GET", server.url, "/late"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        # A new connection: the late reply to the cancelled request cannot be read as this one's.
        assert (await connections.request("GET", server.url, "/next")).body == b'"/next"'
    await connections.close()
    assert server.connections == 2
