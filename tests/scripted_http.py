"""A loopback HTTP/1.1 server whose answers a test scripts, for engines that must behave in a
way the embedded engine does not (block while paused, hold a weight update)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from dressage_testkit.processes import free_port


@dataclass(frozen=True)
class Status:
    """An answer with an HTTP status other than 200: `code` and its JSON `body`."""

    code: int
    body: Any


Answer = Callable[[str, bytes], Awaitable[Any]]
"""`(path, body) -> JSON-compatible answer` (status 200) or a `Status`; it may wait. One that
raises `ConnectionResetError` drops the connection without a reply."""


async def _serve_connection(
    answer: Answer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = await reader.readexactly(length)
            path = head.split(b" ", 2)[1].decode()
            result = await answer(path, body)
            code, payload = (
                (result.code, result.body) if isinstance(result, Status) else (200, result)
            )
            data = json.dumps(payload).encode()
            writer.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s"
                % (code, HTTPStatus(code).phrase.encode(), len(data), data)
            )
            await writer.drain()
    finally:
        writer.close()


@asynccontextmanager
async def scripted_server(answer: Answer) -> AsyncIterator[str]:
    """Serve `answer` on a free loopback port; yields the base URL. On exit the server stops
    listening and closes the connections it holds, as a process that exits does."""
    port = free_port()
    writers: set[asyncio.StreamWriter] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        try:
            await _serve_connection(answer, reader, writer)
        except ConnectionResetError:
            pass
        finally:
            writers.discard(writer)

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for writer in list(writers):
            writer.close()
