"""The client maps transport failures and HTTP statuses to typed errors.

The HTTP boundary is emulated with `httpx.MockTransport` here; a refused connection is in
tests/integration/test_engine_client.py, the real engine process in
tests/integration/test_engine_server.py.
"""

from __future__ import annotations

import json

import httpx
import pytest

from dressage.engine import (
    EngineClient,
    EngineRequestError,
    EngineServerError,
    EngineUnavailable,
    GenerateRequest,
)


@pytest.mark.parametrize(
    ("status", "body", "error", "text"),
    [
        (400, b'{"error": {"message": "sampling_params.top_p: bad"}}', EngineRequestError, "top_p"),
        (503, b'{"error": {"message": "not loaded"}}', EngineUnavailable, "not loaded"),
        (500, b"boom", EngineServerError, "boom"),
    ],
)
async def test_http_status_maps_to_typed_error(
    status: int, body: bytes, error: type[Exception], text: str
) -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(status, content=body)

    shared = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    client = EngineClient("http://engine", client=shared)
    with pytest.raises(error, match=text) as caught:
        await client.generate(GenerateRequest(input_ids=[1]))
    assert getattr(caught.value, "status_code", None) == status
    assert calls == ["/generate"]  # a POST that reached the server is never repeated
    await client.aclose()
    assert not shared.is_closed  # an injected client belongs to the caller
    await shared.aclose()


async def test_get_is_retried_after_a_transport_error() -> None:
    attempts: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(1)
        if len(attempts) == 1:
            raise httpx.ReadError("reset", request=request)
        return httpx.Response(200, json={"weight_version": "v3"})

    transport = httpx.MockTransport(handler)
    async with httpx.AsyncClient(transport=transport) as shared:
        client = EngineClient("http://engine", client=shared, retries=2)
        assert await client.get_weight_version() == "v3"
    assert len(attempts) == 2


async def test_failed_weight_update_raises_with_the_server_message() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"success": False, "message": "model_path: /x not found", "num_paused_requests": 0}
        return httpx.Response(400, json=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as shared:
        client = EngineClient("http://engine", client=shared)
        with pytest.raises(EngineRequestError, match="model_path"):
            await client.update_weights_from_disk("/x", "v1")


async def test_a_moved_route_is_asked_by_its_newest_name_first_and_remembered() -> None:
    """An SGLang 0.5.2 engine has no `/model_info` (0.5.23's) or `/server_info`: the client
    falls back to `/get_weight_version` and `/get_server_info` after one 404 each, and asks
    the names that answered from then on."""
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path in ("/model_info", "/server_info"):
            return httpx.Response(404, json={"detail": "Not Found"})
        if request.url.path == "/get_server_info":
            return httpx.Response(200, json={"version": "0.5.2"})
        return httpx.Response(200, json={"weight_version": "v7", "model_path": "m"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as shared:
        client = EngineClient("http://engine", client=shared)
        assert await client.get_weight_version() == "v7"
        assert await client.get_weight_version() == "v7"
        assert (await client.get_model_info()).model_path == "m"
        assert await client.sglang_version() == "0.5.2"
    assert calls == [
        "/model_info",
        "/get_weight_version",
        "/get_weight_version",
        "/get_model_info",
        "/server_info",
        "/get_server_info",
    ]


@pytest.mark.parametrize(
    ("reported", "version"), [("v3", "v3"), (3, "3"), ("", None), ("-1", None)]
)
async def test_a_label_that_is_no_version_reads_as_none(
    reported: object, version: str | None
) -> None:
    """The weight version is read as the proxy reads it (`wire.weight_version_of`): a label
    that names no weights (an empty or `-1` one) is None, like a missing one."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"weight_version": reported})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as shared:
        client = EngineClient("http://engine", client=shared)
        assert await client.get_weight_version() == version


async def test_stream_chunks_with_only_the_new_tokens_are_accumulated() -> None:
    """0.5.2 streams each chunk's new `output_ids` (with cumulative `completion_tokens`);
    the client yields cumulative snapshots either way."""

    def chunk(ids: list[int], total: int, final: bool) -> str:
        finish = {"type": "length", "length": total} if final else None
        meta = {"id": "r", "finish_reason": finish, "completion_tokens": total}
        return "data: " + json.dumps({"text": "", "output_ids": ids, "meta_info": meta}) + "\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        body = chunk([4], 1, False) + chunk([5, 6], 3, False) + chunk([7], 4, True)
        return httpx.Response(200, content=(body + "data: [DONE]\n\n").encode())

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as shared:
        client = EngineClient("http://engine", client=shared)
        seen = [s.output_ids async for s in client.generate_stream(GenerateRequest(input_ids=[1]))]
    assert seen == [[4], [4, 5, 6], [4, 5, 6, 7]]
