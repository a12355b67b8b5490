"""The client maps transport failures and HTTP statuses to typed errors.

The HTTP boundary is emulated with `httpx.MockTransport` here; a refused connection is in
tests/integration/test_engine_client.py, the real engine process in
tests/integration/test_engine_server.py.
"""

from __future__ import annotations

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
