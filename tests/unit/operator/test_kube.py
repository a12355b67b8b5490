"""The REST client reads the API server's `Status` answers into errors that say what failed."""

from __future__ import annotations

import httpx
from dressage_operator.kube import Conflict, Kube, KubeError


def test_a_status_answer_gives_message_reason_and_fields() -> None:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": 'Pod "a" is invalid: spec.containers[0].env[0].name: Invalid value: "1X"',
        "reason": "Invalid",
        "details": {
            "name": "a",
            "kind": "Pod",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": 'Invalid value: "1X"',
                    "field": "spec.containers[0].env[0].name",
                }
            ],
        },
        "code": 422,
    }
    error = KubeError.from_response(httpx.Response(422, json=body))
    assert not isinstance(error, Conflict)
    assert (error.status, error.reason) == (422, "Invalid")
    assert error.message == body["message"]
    assert error.causes == (("spec.containers[0].env[0].name", 'Invalid value: "1X"'),)


def test_a_conflict_is_its_own_type_and_plain_text_is_kept() -> None:
    conflict = KubeError.from_response(
        httpx.Response(409, json={"kind": "Status", "message": "exists", "reason": "AlreadyExists"})
    )
    assert isinstance(conflict, Conflict)
    assert conflict.message == "exists"
    text = KubeError.from_response(httpx.Response(502, text="bad gateway " * 50))
    assert (text.status, text.causes) == (502, ())
    assert text.message == ("bad gateway " * 50)[:300]


async def _version(handler: httpx.MockTransport) -> str | None:
    async with httpx.AsyncClient(transport=handler, base_url="http://api") as client:
        return await Kube(client).server_version()


async def test_the_api_servers_version_is_read_and_its_absence_is_none() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/version"
        return httpx.Response(200, json={"major": "1", "minor": "31", "gitVersion": "v1.31.2"})

    assert await _version(httpx.MockTransport(answer)) == "v1.31.2"
    assert await _version(httpx.MockTransport(lambda r: httpx.Response(404))) is None
    assert await _version(httpx.MockTransport(lambda r: httpx.Response(200, text="x"))) is None

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    assert await _version(httpx.MockTransport(down)) is None
