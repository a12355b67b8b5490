"""SGLang's HTTP API as both engine clients send and read it (`dressage.engine.wire`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dressage.engine.errors import EngineRequestError, EngineServerError, EngineUnavailable
from dressage.engine.sglang_support import ROUTED_EXPERTS, STOP_REGEX
from dressage.engine.wire import (
    UnsupportedField,
    body_for_release,
    first_served,
    refused_field,
    release_of,
    status_error,
    weight_version_of,
)


def _body(**params: Any) -> dict[str, Any]:
    return {"input_ids": [1], "sampling_params": params, "return_logprob": True}


def test_a_body_is_sent_to_each_release_as_it_takes_it() -> None:
    both = _body(max_new_tokens=4, top_k=None, temperature=0.5, sampling_seed=3)
    assert body_for_release(both, "0.5.23") is both
    assert body_for_release(both, "0.5.2")["sampling_params"] == {
        "max_new_tokens": 4,
        "temperature": 0.5,
    }  # no seed before 0.5.3; a null top_k is the default, left out where it is a TypeError
    assert body_for_release(_body(max_new_tokens=None), "0.5.2")["sampling_params"] == {
        "max_new_tokens": None
    }
    with pytest.raises(UnsupportedField) as refused:
        body_for_release(_body(stop_regex="[0-9]"), "0.5.2")
    assert refused.value.field == "sampling_params.stop_regex"
    assert refused.value.feature is STOP_REGEX
    assert "SGLang 0.5.2" in str(refused.value)
    assert str(refused.value).startswith("sampling_params.stop_regex: ")


def test_routed_experts_are_left_out_for_a_release_without_them_unless_strict() -> None:
    body = {**_body(max_new_tokens=1), "return_routed_experts": True}
    assert "return_routed_experts" not in body_for_release(body, "0.5.2")
    assert body_for_release(body, "0.5.23") is body
    with pytest.raises(UnsupportedField) as refused:
        body_for_release(body, "0.5.2", strict=True)
    assert refused.value.field == "return_routed_experts"
    assert refused.value.feature is ROUTED_EXPERTS
    with pytest.raises(UnsupportedField):
        body_for_release(_body(sampling_seed=1), "0.5.2", strict=True)


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (
            "unknown field `temperatur`, expected one of `max_new_tokens`",
            "sampling_params.temperatur",
        ),
        ("sampling_params.top_p: Input should be less than or equal to 1", "sampling_params.top_p"),
        ("input_ids[3]: token id 99999 is outside [0, 96)", "input_ids[3]"),
        ('invalid type: string "0.5", expected f64', None),
    ],
)
def test_the_field_an_engine_refusal_names_is_found(message: str, field: str | None) -> None:
    assert refused_field(message) == field


def test_a_status_is_read_as_busy_refused_or_failed_with_the_bodys_message() -> None:
    assert status_error(200, b"{}", url="u") is None
    # SGLang v0.5.2 `http_server` renders its full queue as an OpenAI-style error.
    busy = status_error(
        503, b'{"object": "error", "message": "The request queue is full.", "code": 503}', url="u"
    )
    assert isinstance(busy, EngineUnavailable)
    assert busy.message == "The request queue is full."
    refused = status_error(400, b'{"error": "unknown field `x`"}', url="u")
    assert isinstance(refused, EngineRequestError)
    assert refused.message == "unknown field `x`"
    failed = status_error(500, b"Internal Server Error", url="u")
    assert isinstance(failed, EngineServerError)
    assert failed.status_code == 500
    assert status_error(502, b"", url="u", reason="Bad Gateway").message == "Bad Gateway"  # type: ignore[union-attr]


def test_a_moved_route_is_found_newest_first_and_the_known_one_asked_alone() -> None:
    served = {"/get_server_info": 200}
    asked: list[str] = []

    async def get(path: str) -> int:
        asked.append(path)
        return served.get(path, 404)

    def absent(status: int) -> bool:
        return status == 404

    routes = ("/server_info", "/get_server_info")
    assert asyncio.run(first_served(routes, get, absent)) == ("/get_server_info", 200)
    assert asked == ["/server_info", "/get_server_info"]
    asked.clear()
    assert asyncio.run(first_served(routes, get, absent, known="/get_server_info")) == (
        "/get_server_info",
        200,
    )
    assert asked == ["/get_server_info"]
    # Served by none: the last candidate's answer, whatever it is.
    assert asyncio.run(first_served(("/a", "/b"), get, absent)) == ("/b", 404)


def test_the_weight_version_and_the_release_are_read_from_the_control_answers() -> None:
    assert weight_version_of({"weight_version": "v3"}) == "v3"
    assert weight_version_of({"weight_version": None}) is None
    assert weight_version_of("v3") is None
    assert release_of({"version": "0.5.23", "tp_size": 1}) == "0.5.23"
    with pytest.raises(ValueError, match="no SGLang release"):
        release_of({"tp_size": 1})
    with pytest.raises(ValueError, match="not an SGLang release"):
        release_of({"version": "main"})
