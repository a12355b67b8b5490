"""The HTTP protocol the engine and the proxy serve with: uvicorn's, sending each answer whole.

uvicorn writes a response's status line and headers in one `transport.write` and its body in
another. On a socket with Nagle's algorithm off each write is its own send: two TCP segments
per answer, two wakeups of the client (the first one to read headers only) and two system calls
on the server. With Nagle on, it is worse: the body waits for the client to acknowledge the
headers, and a client in delayed-ACK mode (one sending requests back to back) holds that for
about 40 ms (asyncio's default loop leaves Nagle on for accepted sockets; uvloop turns it off).

`http_protocol()` fixes both for every accepted connection: Nagle off, and a header block is
held until the body that follows it in the same event-loop pass, so a plain answer goes out as
one write and one segment. A streamed answer's header block, with no body in the same pass,
goes out at the start of the next pass, and its chunks each as soon as they are written.
Both the engine and the proxy serve with it; on uvloop (which already turns Nagle off) the
joined write only saves a system call and a client wakeup per answer, on asyncio's own loop it
also keeps answers off the delayed-ACK wait.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, cast


class CoalescingTransport:
    """A transport that sends a response's header block together with the body that follows.

    A write that is a header block (`HTTP/...` up to the blank line) is held; the next write
    joins it and both go out as one `write`. When no body follows in the same event-loop pass
    (a streamed answer whose first chunk comes later), the header block goes out alone at the
    start of the next pass. Every other write goes straight through. Everything else (pause and
    resume reading, extra info) goes to the wrapped transport; `close` sends what is held
    first, `abort` drops it.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._release: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is not None:
            data = self._held + data
            self._held = None
            if self._release is not None:
                self._release.cancel()
                self._release = None
        elif data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n":
            self._held = bytes(data)
            self._release = self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send a held header block now (a no-op when none is held)."""
        self._release = None
        if self._held is None:
            return
        held, self._held = self._held, None
        if not self._transport.is_closing():
            self._transport.write(held)

    def get_write_buffer_size(self) -> int:
        held = len(self._held) if self._held is not None else 0
        return self._transport.get_write_buffer_size() + held

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def http_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with Nagle off and each
    answer's header block sent with its body (`CoalescingTransport`); pass it as
    `uvicorn.Config(http=...)`."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class SingleWriteProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # uvloop's transports are not subclasses of asyncio.Transport, only alike.
            real = cast(asyncio.Transport, transport)
            super().connection_made(CoalescingTransport(real, asyncio.get_running_loop()))

    return SingleWriteProtocol
