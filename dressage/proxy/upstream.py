"""The proxy's HTTP client for engines: keep-alive HTTP/1.1 connections, pooled per engine.

Every generation the proxy forwards is one request to an engine, so this client is on the
proxy's hot path. It does only what engine calls need, on asyncio protocols with httptools'
C parser: one write per request (head and body together), the response parsed as it arrives
(`Content-Length`, chunked, or delimited by the connection's close), and the connection put
back for the next request when both sides keep it alive.

Failures are told apart by how far the request got, because the proxy's retry rule depends on
it:

- `ConnectFailed`: no connection could be made (refused, unreachable, connect timeout); the
  engine never saw the request, so another engine may take it;
- `ConnectionLost`: the connection broke after the request was written, or the engine sent
  something that is not HTTP; the engine may have started on it;
- `ReplyTimeout`: no complete reply within the request's timeout; the connection is closed.

Idle connections are dropped after `idle_expiry_s`, shorter than the engines' own keep-alive
timeout (uvicorn's, as SGLang runs it, is 5 s): a request written into a connection the engine
is closing at that moment fails, and a POST is never retried.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

from dressage.engine.transport import KEEPALIVE_EXPIRY_S


class UpstreamError(Exception):
    """An engine call that got no reply."""


class ConnectFailed(UpstreamError):
    """No connection to the engine: the request was not sent."""


class ConnectionLost(UpstreamError):
    """The connection failed after the request was written."""


class ReplyTimeout(UpstreamError):
    """No complete reply within the timeout."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class _Origin:
    """Where one engine base URL points: scheme, host, port and path prefix."""

    host: str
    port: int
    tls: bool
    prefix: str
    host_header: bytes

    @classmethod
    def parse(cls, url: str) -> _Origin:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"engine URL {url!r} must be http(s)://HOST[:PORT][/PATH]")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        return cls(
            host=parts.hostname,
            port=port,
            tls=tls,
            prefix=parts.path.rstrip("/"),
            host_header=parts.netloc.encode("idna"),
        )


class _Connection(asyncio.Protocol):
    """One keep-alive connection; carries one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Reply] | None = None
        self._chunks: list[bytes] = []
        self._status = 0
        self._keep_alive = False
        self._headers_done = False
        self._framed = False
        """Whether the reply's headers give its length (`Content-Length` or chunked)."""

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionLost(f"the engine sent invalid HTTP: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._headers_done and not self._framed:
            self._complete()  # the body ran until the close
            return
        reason = f": {exc}" if exc is not None else ""
        self._fail(ConnectionLost(f"the engine closed the connection before its reply{reason}"))

    # --- httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        self._headers_done = True
        self._status = self._parser.get_status_code()
        if self._status in (204, 304):
            self._framed = True  # no body at all

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        self._keep_alive = self._parser.should_keep_alive()
        self._complete()

    # --- requests

    def send(self, head: bytes, body: bytes) -> asyncio.Future[Reply]:
        assert self.transport is not None
        assert self._waiter is None
        if self.gone:
            # The engine reset it between the connect (or its last reply) and this request:
            # the loop has seen the close, `connection_lost` may not have run yet.
            raise ConnectionLost("the engine closed the connection before the request was sent")
        self._waiter = asyncio.get_running_loop().create_future()
        self._chunks = []
        self._headers_done = False
        self._framed = False
        self.transport.write(head + body if body else head)
        return self._waiter

    @property
    def gone(self) -> bool:
        """Closed, or closing: its transport takes no more writes."""
        return self.closed or (self.transport is not None and self.transport.is_closing())

    @property
    def reusable(self) -> bool:
        return self._keep_alive and not self.gone and self._waiter is None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        chunks, self._chunks = self._chunks, []
        self._headers_done = False
        if waiter is not None and not waiter.done():
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            waiter.set_result(Reply(self._status, body))

    def _fail(self, exc: UpstreamError) -> None:
        waiter, self._waiter = self._waiter, None
        self._keep_alive = False
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)


class EngineConnections:
    """Pooled connections to any number of engines, keyed by base URL."""

    def __init__(
        self,
        *,
        connect_timeout_s: float = 5.0,
        idle_expiry_s: float = KEEPALIVE_EXPIRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.idle_expiry_s = idle_expiry_s
        self._clock = clock
        self._origins: dict[str, _Origin] = {}
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._tls: ssl.SSLContext | None = None

    async def request(
        self,
        method: str,
        url: str,
        path: str,
        body: bytes = b"",
        *,
        timeout_s: float | None = None,
        fresh: bool = False,
    ) -> Reply:
        """`method path` on the engine at base URL `url`; a JSON `body` when not empty.
        `fresh`: on a new connection, not an idle one (which may have been closed by the
        engine, or by its process ending, without this side having seen it yet).
        Raises `ConnectFailed`, `ConnectionLost` or `ReplyTimeout` (see the module doc)."""
        origin = self._origins.get(url)
        if origin is None:
            origin = self._origins[url] = _Origin.parse(url)
        connection = await (self._connect(origin) if fresh else self._acquire(origin))
        head = b"%s %s%s HTTP/1.1\r\nhost: %s\r\n" % (
            method.encode("ascii"),
            origin.prefix.encode(),
            path.encode(),
            origin.host_header,
        )
        if body or method in ("POST", "PUT"):
            head += b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body)
        head += b"\r\n"
        self._busy.add(connection)
        loop = asyncio.get_running_loop()
        timer = None
        try:
            reply = connection.send(head, body)
            if timeout_s is not None:
                timer = loop.call_later(timeout_s, _expire, reply, timeout_s)
            result = await reply
        except BaseException:
            connection.close()  # a reply may still be on its way: never reuse it
            raise
        finally:
            self._busy.discard(connection)
            if timer is not None:
                timer.cancel()
        if connection.reusable:
            connection.idle_since = self._clock()
            self._idle.setdefault(origin, []).append(connection)
        else:
            connection.close()
        return result

    async def close(self) -> None:
        """Close every connection, idle or busy."""
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        for connection in list(self._busy):
            connection.close()

    async def _acquire(self, origin: _Origin) -> _Connection:
        idle = self._idle.get(origin)
        if idle:
            now = self._clock()
            while idle:
                connection = idle.pop()
                if connection.gone:
                    continue
                if now - connection.idle_since > self.idle_expiry_s:
                    connection.close()
                    continue
                return connection
        return await self._connect(origin)

    async def _connect(self, origin: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if origin.tls:
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(
                    _Connection,
                    origin.host,
                    origin.port,
                    ssl=tls,
                    server_hostname=origin.host if tls else None,
                ),
                self.connect_timeout_s,
            )
        except TimeoutError:
            raise ConnectFailed(
                f"no connection to {origin.host}:{origin.port} within {self.connect_timeout_s}s"
            ) from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {origin.host}:{origin.port}: {exc}") from exc
        return connection


def _expire(reply: asyncio.Future[Reply], timeout_s: float) -> None:
    if not reply.done():
        reply.set_exception(ReplyTimeout(f"no reply within {timeout_s}s"))
