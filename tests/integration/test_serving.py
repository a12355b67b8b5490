"""`http_protocol` served by uvicorn on loopback: the raw bytes a client reads are the writes
that reached the server's socket, one write per plain answer, the head of a stream at once.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import uvicorn

from dressage.asgi import Answer, App, HttpRequest, Route, StreamAnswer
from dressage.serving import http_protocol


async def next_pass() -> None:
    """Return after every callback already scheduled with `call_soon` has run."""
    loop = asyncio.get_running_loop()
    passed = loop.create_future()
    loop.call_soon(passed.set_result, None)
    await passed


async def _plain(request: HttpRequest) -> Answer:
    return Answer(b'{"ok":true}')


async def _stream(request: HttpRequest) -> StreamAnswer:
    async def chunks() -> AsyncIterator[bytes]:
        for index in range(3):
            await next_pass()
            yield b"data: %d\n\n" % index

    return StreamAnswer(chunks())


def _no_route(request: HttpRequest, known_path: bool) -> Answer:
    return Answer(b'{"error":"no route"}', 404)


class Wire:
    """What the server handed to its sockets: every write, and each connection's TCP_NODELAY."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.nodelay: list[int] = []


class _Tap:
    """The real transport, with its writes copied into a `Wire`."""

    def __init__(self, transport: asyncio.BaseTransport, wire: Wire) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._wire = wire

    def write(self, data: bytes) -> None:
        self._wire.writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[int, Wire]]:
    """uvicorn with `http_protocol()` on a loopback port, in this test's event loop; yields the
    port and what reaches the sockets."""
    wire = Wire()

    class Tapped(http_protocol()):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(_Tap(transport, wire))
            sock = transport.get_extra_info("socket")
            wire.nodelay.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    app = App(
        [Route("/plain", _plain, ("GET",)), Route("/stream", _stream, ("GET",))],
        fallback=_no_route,
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    started = asyncio.Event()

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            started.set()

        def install_signal_handlers(self) -> None:
            pass

    config = uvicorn.Config(app, http=Tapped, lifespan="off", log_level="warning", access_log=False)
    server = Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await started.wait()
    try:
        yield port, wire
    finally:
        server.should_exit = True
        await task


async def _request(writer: asyncio.StreamWriter, path: str) -> None:
    writer.write(b"GET %s HTTP/1.1\r\nhost: test\r\n\r\n" % path.encode())
    await writer.drain()


async def test_each_plain_answer_reaches_the_socket_as_one_write() -> None:
    async with serving() as (port, wire):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        answers = []
        for _ in range(3):  # one kept-alive connection
            await _request(writer, "/plain")
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            body = await reader.readexactly(length)
            assert head.startswith(b"HTTP/1.1 200")
            assert body == b'{"ok":true}'
            answers.append(head + body)
        writer.close()
        await writer.wait_closed()
    assert wire.writes == answers
    assert wire.nodelay == [1]


async def test_a_streamed_answer_sends_its_head_and_each_chunk_without_waiting() -> None:
    async with serving() as (port, wire):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await _request(writer, "/stream")
        received = await reader.readuntil(b"0\r\n\r\n")
        writer.close()
        await writer.wait_closed()
    head, _, body = received.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    events = [line.strip() for line in body.split(b"\r\n") if line.startswith(b"data:")]
    assert events == [b"data: 0", b"data: 1", b"data: 2"]
    # The head went out before the first chunk existed, then one write per chunk.
    assert wire.writes[0] == head + b"\r\n\r\n"
    assert b"".join(wire.writes) == received
    assert len(wire.writes) == 5  # head, three chunks, the end of the stream
