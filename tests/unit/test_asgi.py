"""The ASGI layer of the proxy and the embedded engine: routing, request view, answers,
streams and lifespan, driven through the ASGI interface itself (the server side is faked by
lists of messages)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dressage.asgi import (
    Answer,
    App,
    BodyTooLarge,
    ClientDisconnected,
    HttpRequest,
    Message,
    Route,
    Router,
    StreamAnswer,
    json_response,
)


async def _echo(request: HttpRequest) -> Answer:
    return Answer(repr((request.method, request.path, request.path_params)).encode())


async def _other(request: HttpRequest) -> Answer:
    return Answer(b"other", 201)


def _fallback(request: HttpRequest, known_path: bool) -> Answer:
    return Answer(b"405" if known_path else b"404", 405 if known_path else 404)


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None,
           query: bytes = b"") -> dict[str, Any]:  # fmt: skip
    return {"type": "http", "method": method, "path": path, "headers": headers or [],
            "query_string": query}  # fmt: skip


async def _call(
    app: App, scope: dict[str, Any], body: list[Message] | None = None
) -> list[Message]:
    incoming = list(body or [{"type": "http.request", "body": b""}])
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def test_router_fixed_paths_params_and_methods() -> None:
    router = Router(
        [
            Route("/health", _echo, ("GET",)),
            Route("/sessions/{session_id}", _echo, ("GET",)),
            Route("/sessions/{session_id}", _other, ("DELETE",)),
            Route("/s/{session_id}/v1/models", _echo, ("GET",)),
        ]
    )
    assert router.match("GET", "/health") == (_echo, {}, True)
    assert router.match("HEAD", "/health") == (_echo, {}, True)
    assert router.match("POST", "/health") == (None, {}, True)
    assert router.match("DELETE", "/sessions/a.b") == (_other, {"session_id": "a.b"}, True)
    assert router.match("GET", "/s/x/v1/models") == (_echo, {"session_id": "x"}, True)
    assert router.match("GET", "/sessions/a/b") == (None, {}, False)
    assert router.match("GET", "/sessions/") == (None, {}, False)
    assert router.match("GET", "/healthz") == (None, {}, False)
    with pytest.raises(ValueError, match="two routes"):
        Router([Route("/a", _echo, ("GET",)), Route("/a", _other, ("GET",))])


async def test_answers_carry_status_type_length_and_headers() -> None:
    async def teapot(request: HttpRequest) -> Answer:
        return Answer(b'{"a":1}', 418, headers={"Retry-After": "1"})

    app = App([Route("/t", teapot, ("POST",))], fallback=_fallback)
    start, body = await _call(app, _scope("POST", "/t"))
    assert start["status"] == 418
    assert dict(start["headers"]) == {
        b"content-type": b"application/json",
        b"content-length": b"7",
        b"retry-after": b"1",
    }
    assert body == {"type": "http.response.body", "body": b'{"a":1}'}


async def test_stream_answers_have_no_length_and_end_with_an_empty_chunk() -> None:
    async def events(request: HttpRequest) -> Answer:
        return Answer(b"data: x\n\n", content_type="text/event-stream", stream=True)

    app = App([Route("/e", events, ("GET",))], fallback=_fallback)
    start, first, last = await _call(app, _scope("GET", "/e"))
    assert b"content-length" not in dict(start["headers"])
    assert first == {"type": "http.response.body", "body": b"data: x\n\n", "more_body": True}
    assert last == {"type": "http.response.body", "body": b""}


async def test_stream_answer_sends_each_chunk_then_an_empty_end() -> None:
    closed: list[str] = []

    async def chunks() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\n\n"
            yield b"data: 2\n\n"
        finally:
            closed.append("closed")

    async def events(request: HttpRequest) -> StreamAnswer:
        return StreamAnswer(chunks())

    sent: list[Message] = []
    stay = asyncio.Event()  # the client never leaves

    async def receive() -> Message:
        await stay.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    app = App([Route("/e", events, ("GET",))], fallback=_fallback)
    await app(_scope("GET", "/e"), receive, send)
    assert dict(sent[0]["headers"]) == {b"content-type": b"text/event-stream"}
    assert [m["body"] for m in sent[1:]] == [b"data: 1\n\n", b"data: 2\n\n", b""]
    assert [m.get("more_body", False) for m in sent[1:]] == [True, True, False]
    assert closed == ["closed"]


async def test_stream_answer_closes_its_producer_when_the_client_leaves() -> None:
    stopped: list[str] = []
    first_sent = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\n\n"
            await asyncio.Event().wait()  # nothing more for a long time
            yield b"never"
        except asyncio.CancelledError:
            stopped.append("cancelled")
            raise

    async def events(request: HttpRequest) -> StreamAnswer:
        return StreamAnswer(chunks())

    sent: list[Message] = []

    async def receive() -> Message:
        await first_sent.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message.get("more_body"):
            first_sent.set()

    app = App([Route("/e", events, ("GET",))], fallback=_fallback)
    await asyncio.wait_for(app(_scope("GET", "/e"), receive, send), 5)
    assert stopped == ["cancelled"]
    assert [m["body"] for m in sent[1:]] == [b"data: 1\n\n"]  # no end chunk: nobody reads


async def test_disconnected_returns_once_the_client_leaves() -> None:
    seen: list[str] = []

    async def wait(request: HttpRequest) -> Answer:
        await request.body(limit=10)
        await request.disconnected()
        seen.append("gone")
        return Answer(b"")

    app = App([Route("/w", wait, ("POST",))], fallback=_fallback)
    messages: list[Message] = [
        {"type": "http.request", "body": b"x"},
        {"type": "http.disconnect"},
    ]
    await _call(app, _scope("POST", "/w"), messages)
    assert seen == ["gone"]


async def test_unknown_path_and_wrong_method_go_to_the_fallback() -> None:
    app = App([Route("/x/{id}", _echo, ("GET",))], fallback=_fallback)
    assert (await _call(app, _scope("GET", "/nope")))[0]["status"] == 404
    assert (await _call(app, _scope("POST", "/x/1")))[0]["status"] == 405
    sent = await _call(app, _scope("GET", "/x/1"))
    assert sent[1]["body"] == repr(("GET", "/x/1", {"id": "1"})).encode()


async def test_request_headers_query_and_body() -> None:
    seen: dict[str, Any] = {}

    async def look(request: HttpRequest) -> Answer:
        seen["headers"] = request.headers
        seen["query"] = request.query_params
        seen["body"] = await request.body(limit=10)
        return Answer(b"")

    app = App([Route("/l", look, ("POST",))], fallback=_fallback)
    headers = [(b"x-session-id", b"first"), (b"x-session-id", b"second"), (b"host", b"h")]
    chunks: list[Message] = [
        {"type": "http.request", "body": b"12345", "more_body": True},
        {"type": "http.request", "body": b"678", "more_body": False},
    ]
    await _call(app, _scope("POST", "/l", headers, b"drain=false&a=1&a=2&empty="), chunks)
    assert seen["headers"] == {"x-session-id": "first", "host": "h"}
    assert seen["query"] == {"drain": "false", "a": "2", "empty": ""}
    assert seen["body"] == b"12345678"


async def test_body_beyond_the_limit_or_cut_by_a_disconnect_raises() -> None:
    async def read(request: HttpRequest) -> Answer:
        try:
            await request.body(limit=4)
        except BodyTooLarge as exc:
            return Answer(str(exc.size).encode(), 413)
        except ClientDisconnected:
            return Answer(b"gone", 400)
        return Answer(b"ok")

    app = App([Route("/r", read, ("POST",))], fallback=_fallback)
    big: list[Message] = [
        {"type": "http.request", "body": b"123", "more_body": True},
        {"type": "http.request", "body": b"45", "more_body": True},
    ]
    sent = await _call(app, _scope("POST", "/r"), big)
    assert (sent[0]["status"], sent[1]["body"]) == (413, b"5")
    cut: list[Message] = [
        {"type": "http.request", "body": b"12", "more_body": True},
        {"type": "http.disconnect"},
    ]
    assert (await _call(app, _scope("POST", "/r"), cut))[0]["status"] == 400


async def test_lifespan_enters_at_startup_and_leaves_at_shutdown() -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    app = App([], fallback=_fallback, lifespan=lifespan)
    sent = await _call(
        app, {"type": "lifespan"}, [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    )
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert events == ["enter", "exit"]


async def test_a_failing_startup_is_reported_to_the_server() -> None:
    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        raise RuntimeError("no engines")
        yield

    app = App([], fallback=_fallback, lifespan=lifespan)
    with pytest.raises(RuntimeError, match="no engines"):
        await _call(app, {"type": "lifespan"}, [{"type": "lifespan.startup"}])


def test_a_json_answer_is_the_compact_body_with_its_status_and_headers() -> None:
    answer = json_response({"a": [1, 2], "b": "é"}, 201, headers={"Retry-After": "1"})
    assert json.loads(answer.body) == {"a": [1, 2], "b": "é"}
    assert answer.body == b'{"a":[1,2],"b":"\xc3\xa9"}'
    assert (answer.status, answer.content_type, answer.headers) == (
        201,
        "application/json",
        {"Retry-After": "1"},
    )
    assert json_response(None).status == 200
