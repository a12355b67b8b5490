"""The engine's and the proxy's HTTP protocol: a header block leaves with the body after it.

`CoalescingTransport` is tested against a transport that records its writes; the protocol served
by uvicorn on loopback is in tests/integration/test_serving.py.
"""

from __future__ import annotations

import asyncio
from typing import cast

from dressage.serving import CoalescingTransport

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"


class Recorder:
    """The transport side: records writes, knows whether it was closed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.paused = True


async def next_pass() -> None:
    """Return after every callback already scheduled with `call_soon` has run."""
    loop = asyncio.get_running_loop()
    passed = loop.create_future()
    loop.call_soon(passed.set_result, None)
    await passed


def _wrap() -> tuple[Recorder, CoalescingTransport]:
    recorder = Recorder()
    wrapped = CoalescingTransport(cast(asyncio.Transport, recorder), asyncio.get_running_loop())
    return recorder, wrapped


async def test_a_header_block_and_its_body_go_out_as_one_write() -> None:
    recorder, transport = _wrap()
    transport.write(HEAD)
    assert recorder.writes == []
    assert transport.get_write_buffer_size() == len(HEAD)
    transport.write(b"hello")
    assert recorder.writes == [HEAD + b"hello"]
    await next_pass()
    assert recorder.writes == [HEAD + b"hello"]  # the cancelled release sends nothing


async def test_a_header_block_alone_goes_out_at_the_next_pass() -> None:
    recorder, transport = _wrap()
    transport.write(HEAD)
    await next_pass()
    assert recorder.writes == [HEAD]
    transport.write(b"chunk one")
    transport.write(b"chunk two")
    assert recorder.writes == [HEAD, b"chunk one", b"chunk two"]


async def test_body_chunks_go_straight_through() -> None:
    recorder, transport = _wrap()
    transport.writelines([b"5\r\nhello\r\n", b"0\r\n\r\n"])
    assert recorder.writes == [b"5\r\nhello\r\n", b"0\r\n\r\n"]


async def test_close_sends_the_held_header_first_and_abort_drops_it() -> None:
    recorder, transport = _wrap()
    transport.write(HEAD)
    transport.close()
    assert recorder.writes == [HEAD]
    assert recorder.closed

    recorder, transport = _wrap()
    transport.write(HEAD)
    transport.abort()
    await next_pass()
    assert recorder.writes == []
    assert recorder.aborted


async def test_nothing_is_written_to_a_transport_already_closing() -> None:
    recorder, transport = _wrap()
    transport.write(HEAD)
    recorder.closed = True
    await next_pass()
    assert recorder.writes == []


async def test_everything_else_reaches_the_wrapped_transport() -> None:
    recorder, transport = _wrap()
    transport.pause_reading()
    assert recorder.paused
    assert not transport.is_closing()
