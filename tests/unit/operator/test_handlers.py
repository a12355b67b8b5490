"""The handlers' reading of a write's failure: the API server's answer, or none at all."""

from __future__ import annotations

import httpx
from dressage_operator.handlers import _refused
from dressage_operator.kube import Conflict, KubeError
from dressage_operator.plan import Applied


def test_no_answer_is_a_temporary_failure_without_a_code() -> None:
    request = httpx.Request("POST", "http://api/api/v1/namespaces/ns/pods")
    result = _refused("Pod", "p", "create", httpx.ReadTimeout("timed out", request=request))
    assert (result.applied, result.code, result.permanent) == (Applied.REFUSED, None, False)
    assert result.describe() == "Pod p: create failed: ReadTimeout: timed out"


def test_an_answer_keeps_its_code_and_first_field() -> None:
    invalid = KubeError(422, "is invalid", "Invalid", (("spec.volumes[3].name", "dup"),))
    result = _refused("Pod", "p", "create", invalid)
    assert (result.code, result.field, result.permanent) == (422, "spec.volumes[3].name", True)
    assert _refused("Pod", "p", "create", Conflict(409, "exists")).applied is Applied.CONFLICT
