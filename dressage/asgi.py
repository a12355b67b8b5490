"""Dressage's HTTP plumbing: a minimal ASGI application (routes, request view, answers).

The rollout proxy and the embedded engine both serve it under uvicorn. Every request they
serve costs CPU that a small deployment takes from the model (the embedded engine's HTTP loop
shares its process, and its interpreter lock, with the forward passes), so the per-request
path has no framework layers: one route lookup (a dict of fixed paths, then a few `{name}`
patterns), request headers decoded once into a dict, the body read with a size limit, and an
answer sent as two ASGI messages. What the servers need from HTTP is all here:

- routes match `scope["path"]` exactly or with `{name}` segments (`[^/]+`); a `GET` route also
  answers `HEAD` (the server drops the body); a known path with another method is told apart
  from an unknown path, so the app can answer 405 or 404;
- `Answer` is a complete body with its status and content type, sent with `Content-Length`,
  or with `stream=True` sent without it (chunked), as server-sent events are; `json_response`
  is the JSON one;
- `StreamAnswer` sends the chunks of an async iterator as they come (chunked); when the client
  goes away first, the iterator is closed at its current `await`, so its `finally` can stop
  the work that feeds it;
- `HttpRequest.disconnected()` returns once the client has gone away (after the body is read),
  for handlers that stop work nobody waits for any more;
- the lifespan protocol runs an async context manager: entered at startup, left at shutdown.

Header names arrive lower-cased (ASGI); when a header is repeated, its first value is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import orjson

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Handler = Callable[["HttpRequest"], Awaitable["Answer | StreamAnswer"]]
Fallback = Callable[["HttpRequest", bool], "Answer"]
"""Answers a request no route takes; the flag is True when the path exists for other methods."""

_PARAM = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)\}")


def _compile(path: str) -> re.Pattern[str]:
    """The regex of a route path with `{name}` segments."""
    parts = []
    position = 0
    for param in _PARAM.finditer(path):
        parts.append(re.escape(path[position : param.start()]))
        parts.append(f"(?P<{param.group(1)}>[^/]+)")
        position = param.end()
    parts.append(re.escape(path[position:]))
    return re.compile("^" + "".join(parts) + "$")


class BodyTooLarge(Exception):
    """The request body exceeds the reader's limit; `size` is how much was seen."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"request body of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class ClientDisconnected(Exception):
    """The client went away before it sent the whole request body."""


class HttpRequest:
    """One HTTP request: method, path, headers (a dict, lower-case names), path parameters,
    query parameters and the body (read once, with a size limit)."""

    __slots__ = ("_query", "_receive", "_scope", "headers", "method", "path", "path_params")

    def __init__(self, scope: Scope, receive: Receive, path_params: dict[str, str]) -> None:
        self._scope = scope
        self._receive = receive
        self._query: dict[str, str] | None = None
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.path_params = path_params
        # Reversed, so that the first of repeated headers wins.
        self.headers: dict[str, str] = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in reversed(scope["headers"])
        }

    @property
    def query_params(self) -> dict[str, str]:
        """Query parameters; the last value of a repeated name wins."""
        if self._query is None:
            raw = self._scope.get("query_string", b"").decode("latin-1")
            self._query = dict(parse_qsl(raw, keep_blank_values=True))
        return self._query

    async def body(self, limit: int) -> bytes:
        """The whole body; `BodyTooLarge` beyond `limit` bytes, `ClientDisconnected` when
        the client leaves first."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnected("the client disconnected before sending its body")
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(size, limit)
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def disconnected(self) -> None:
        """Return once the client has gone away; call it after the body was read."""
        while (await self._receive())["type"] != "http.disconnect":
            pass


@dataclass(slots=True)
class Answer:
    """A complete HTTP answer."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    headers: dict[str, str] | None = None
    stream: bool = False
    """Send without `Content-Length` (chunked transfer), as an event stream."""

    async def send(self, send: Send, receive: Receive) -> None:
        headers = [(b"content-type", self.content_type.encode("latin-1"))]
        if not self.stream:
            headers.append((b"content-length", str(len(self.body)).encode("latin-1")))
        if self.headers:
            headers += [(k.lower().encode("latin-1"), v.encode("latin-1"))
                        for k, v in self.headers.items()]  # fmt: skip
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        if self.stream:
            await send({"type": "http.response.body", "body": self.body, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        else:
            await send({"type": "http.response.body", "body": self.body})


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    """`data` as a JSON answer (orjson: the body is serialised once, straight to bytes)."""
    return Answer(orjson.dumps(data), status, headers=headers)


@dataclass(slots=True)
class StreamAnswer:
    """An answer whose body is the chunks of `chunks`, each sent as soon as it comes."""

    chunks: AsyncIterator[bytes]
    status: int = 200
    content_type: str = "text/event-stream"

    async def send(self, send: Send, receive: Receive) -> None:
        content_type = self.content_type.encode("latin-1")
        await send(
            {"type": "http.response.start", "status": self.status,
             "headers": [(b"content-type", content_type)]}
        )  # fmt: skip
        chunks = self.chunks
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            while True:
                following = asyncio.ensure_future(anext(chunks))
                await asyncio.wait({following, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not following.done():  # the client went away: stop the producer
                    following.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await following
                    return
                try:
                    chunk = following.result()
                except StopAsyncIteration:
                    await send({"type": "http.response.body", "body": b""})
                    return
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            gone.cancel()
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


@dataclass(frozen=True, slots=True)
class Route:
    """`path` (with `{name}` segments) served by `handler` for `methods`."""

    path: str
    handler: Handler
    methods: tuple[str, ...]


class Router:
    """Finds the handler of a method and path."""

    def __init__(self, routes: list[Route]) -> None:
        self._fixed: dict[str, dict[str, Handler]] = {}
        patterns: dict[str, tuple[re.Pattern[str], dict[str, Handler]]] = {}
        for route in routes:
            methods = set(route.methods)
            if "GET" in methods:
                methods.add("HEAD")
            if _PARAM.search(route.path):
                if route.path not in patterns:
                    patterns[route.path] = (_compile(route.path), {})
                table = patterns[route.path][1]
            else:
                table = self._fixed.setdefault(route.path, {})
            for method in methods:
                if method in table:
                    raise ValueError(f"two routes for {method} {route.path}")
                table[method] = route.handler
        self._patterns = list(patterns.values())

    def match(self, method: str, path: str) -> tuple[Handler | None, dict[str, str], bool]:
        """(handler or None, path parameters, whether the path exists for some method)."""
        table = self._fixed.get(path)
        if table is not None:
            return table.get(method), {}, True
        for regex, table in self._patterns:
            found = regex.match(path)
            if found is not None:
                return table.get(method), found.groupdict(), True
        return None, {}, False


class App:
    """The ASGI application: routes requests and runs `lifespan` around serving."""

    def __init__(
        self,
        routes: list[Route],
        *,
        fallback: Fallback,
        lifespan: Callable[[], AbstractAsyncContextManager[None]] | None = None,
    ) -> None:
        self.router = Router(routes)
        self.fallback = fallback
        self.lifespan = lifespan

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            handler, params, known_path = self.router.match(scope["method"], scope["path"])
            request = HttpRequest(scope, receive, params)
            answer: Answer | StreamAnswer
            if handler is None:
                answer = self.fallback(request, known_path)
            else:
                answer = await handler(request)
            await answer.send(send, receive)
        elif kind == "lifespan":
            await self._serve_lifespan(receive, send)
        else:
            raise RuntimeError(f"unsupported ASGI scope type {kind!r}")

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        context = self.lifespan() if self.lifespan is not None else None
        message = await receive()
        assert message["type"] == "lifespan.startup"
        try:
            if context is not None:
                await context.__aenter__()
        except Exception as exc:
            await send({"type": "lifespan.startup.failed", "message": repr(exc)})
            raise
        await send({"type": "lifespan.startup.complete"})
        message = await receive()
        assert message["type"] == "lifespan.shutdown"
        try:
            if context is not None:
                await context.__aexit__(None, None, None)
        except Exception as exc:
            await send({"type": "lifespan.shutdown.failed", "message": repr(exc)})
            raise
        await send({"type": "lifespan.shutdown.complete"})
