"""SGLang-shaped request/response models and the per-token version view."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from dressage.engine.protocol import (
    GenerateRequest,
    GenerateResponse,
    InitWeightsUpdateGroupRequest,
    SamplingParams,
    UpdateWeightsFromDistributedRequest,
    error_message,
)

SGLANG_RESPONSE = {
    "text": "ab",
    "output_ids": [40, 41, 2],
    "meta_info": {
        "id": "r1",
        "finish_reason": {"type": "stop", "matched": 2},
        "prompt_tokens": 4,
        "completion_tokens": 3,
        "cached_tokens": 0,
        "weight_version": "v2",
        "weight_versions": [
            {"version": "v1", "start": 0, "end": 2},
            {"version": "v2", "start": 2, "end": 3},
        ],
        "output_token_logprobs": [[-0.1, 40, None], [-0.2, 41, None], [-0.3, 2, None]],
        "e2e_latency": 0.5,
        "num_retractions": 0,
    },
}


def test_response_parses_and_expands_version_spans() -> None:
    response = GenerateResponse.model_validate(SGLANG_RESPONSE)
    assert response.finished
    assert not response.aborted
    assert response.token_versions() == ["v1", "v1", "v2"]
    assert response.output_logprobs() == [-0.1, -0.2, -0.3]
    assert response.meta_info.finish_reason is not None
    assert response.meta_info.finish_reason.matched == 2


def test_token_versions_fall_back_to_weight_version_then_unknown() -> None:
    data = {**SGLANG_RESPONSE, "meta_info": {**SGLANG_RESPONSE["meta_info"]}}  # type: ignore[dict-item]
    del data["meta_info"]["weight_versions"]
    assert GenerateResponse.model_validate(data).token_versions() == ["v2"] * 3
    del data["meta_info"]["weight_version"]
    assert GenerateResponse.model_validate(data).token_versions() == ["unknown"] * 3


def test_token_versions_refuse_spans_that_do_not_cover_the_output() -> None:
    data = {**SGLANG_RESPONSE, "meta_info": {**SGLANG_RESPONSE["meta_info"]}}  # type: ignore[dict-item]
    data["meta_info"]["weight_versions"] = [{"version": "v1", "start": 0, "end": 2}]
    with pytest.raises(ValueError, match="cover 2 tokens, output has 3"):
        GenerateResponse.model_validate(data).token_versions()


def test_request_body_holds_only_what_the_caller_set() -> None:
    req = GenerateRequest(
        input_ids=[1, 2], sampling_params=SamplingParams(temperature=0.0), return_logprob=True
    )
    assert req.to_json() == {
        "input_ids": [1, 2],
        "sampling_params": {"temperature": 0.0},
        "return_logprob": True,
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "text or input_ids"),
        ({"input_ids": []}, "input_ids cannot be empty"),
        ({"input_ids": [[1], [2]]}, "batched input_ids"),
        ({"input_ids": [1], "sampling_params": {"top_k": 0}}, "top_k"),
        ({"input_ids": [1], "sampling_params": {"top_p": 0}}, "top_p"),
        ({"input_ids": [1], "sampling_params": {"max_new_tokens": 2, "min_new_tokens": 3}}, "min"),
        ({"input_ids": [1], "sampling_params": {"seed": 3}}, "seed"),
    ],
)
def test_invalid_requests_are_refused_naming_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        GenerateRequest.model_validate(body)


@pytest.mark.parametrize(
    ("model", "body", "field"),
    [
        (
            InitWeightsUpdateGroupRequest,
            {"master_address": "h", "master_port": 1, "rank_offset": 2, "world_size": 2},
            "rank_offset: 2 is outside the world of 2 ranks",
        ),
        (
            InitWeightsUpdateGroupRequest,
            {"master_address": "h", "master_port": 0, "rank_offset": 1, "world_size": 2},
            "master_port",
        ),
        (
            UpdateWeightsFromDistributedRequest,
            {"names": ["a", "b"], "dtypes": ["float32"], "shapes": [[1], [1]]},
            "dtypes: 1 entries for 2 names",
        ),
        (
            UpdateWeightsFromDistributedRequest,
            {"names": [], "dtypes": [], "shapes": []},
            "names",
        ),
    ],
)
def test_invalid_weight_group_requests_are_refused_naming_the_field(
    model: type[BaseModel], body: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError, match=field):
        model.model_validate(body)


def test_error_message_reads_nested_and_flat_sglang_errors() -> None:
    assert error_message(b'{"error": {"message": "top_p bad"}}') == "top_p bad"
    assert error_message(b'{"object": "error", "message": "flat", "code": 400}') == "flat"
    assert error_message(b"plain text") == "plain text"


def test_error_message_reads_the_schema_gates_string_error() -> None:
    """0.5.23's `/generate` schema gate answers 400 `{"error": "<text>"}`: the text, not the
    JSON, is the message."""
    body = b'{"error": "unknown field `temperatur`, expected one of `max_new_tokens`"}'
    assert error_message(body) == "unknown field `temperatur`, expected one of `max_new_tokens`"
    assert error_message(b'"just a string"') == "just a string"


def test_a_null_sampling_value_is_its_default_except_the_token_budget() -> None:
    """As 0.5.23's schema decoder reads them: null temperature, top_k, ... are the defaults;
    `max_new_tokens: null` is no limit (in every release)."""
    params = SamplingParams.model_validate(
        {"top_k": None, "temperature": None, "ignore_eos": None, "max_new_tokens": None}
    )
    assert (params.top_k, params.temperature, params.ignore_eos) == (-1, 1.0, False)
    assert params.max_new_tokens is None
    assert params.model_dump(exclude_unset=True) == {"max_new_tokens": None}
    with pytest.raises(ValidationError, match="choice"):
        SamplingParams.model_validate({"choice": ["a"]})  # no release's SamplingParams takes it
