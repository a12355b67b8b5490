"""The REST client reads the API server's `Status` answers into errors that say what failed."""

from __future__ import annotations

import httpx
from dressage_operator.kube import Conflict, KubeError


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
