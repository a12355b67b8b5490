"""`judge_generate`: a `/generate` body judged as each release judges it, and 0.5.23's
schema gate text (`schema_error`) for the fields Dressage models."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.engine.embedded.release_profiles import PROFILE_0_5_2, PROFILE_0_5_23, ReleaseProfile
from dressage.engine.embedded.validation import (
    INTERNAL_SERVER_ERROR,
    Refusal,
    judge_generate,
    schema_error,
)

KEYS = PROFILE_0_5_23.sampling_param_keys


def judged(profile: ReleaseProfile, params: dict[str, Any]) -> tuple[int, Any]:
    try:
        judge_generate(profile, {"input_ids": [1], "sampling_params": params})
    except Refusal as refusal:
        return refusal.status, refusal.body
    return 200, None


@pytest.mark.parametrize(
    ("params", "old", "new"),
    [
        ({"temperature": 0.5}, 200, 200),
        ({"temperatur": 0.5}, 500, 400),
        ({"temperature": "0.5"}, 500, 400),
        ({"top_k": None}, 500, 200),
        ({"temperature": None}, 500, 200),
        ({"n": None}, 200, 200),
        ({"top_p": 1.5}, 400, 400),
        ({"top_k": 0}, 400, 400),
        ({"stop_regex": "x"}, 500, 200),
        ({"sampling_seed": 3}, 500, 200),
        ({"choice": ["a"]}, 500, 500),
    ],
)
def test_each_release_answers_bad_sampling_params_with_its_own_status(
    params: dict[str, Any], old: int, new: int
) -> None:
    assert judged(PROFILE_0_5_2, params)[0] == old
    assert judged(PROFILE_0_5_23, params)[0] == new


def test_a_null_token_budget_is_no_limit_and_other_nulls_the_defaults() -> None:
    """0.5.23's schema decoder reads `max_new_tokens: null` as null (no limit, as every
    release does) and a null temperature or top_k as the default."""
    body = {"input_ids": [1], "sampling_params": {"max_new_tokens": None, "top_k": None}}
    req = judge_generate(PROFILE_0_5_23, body)
    assert req.sampling_params.max_new_tokens is None
    assert req.sampling_params.top_k == -1


def test_the_bodies_are_the_releases_shapes() -> None:
    assert judged(PROFILE_0_5_2, {"bogus": 1}) == (500, INTERNAL_SERVER_ERROR)
    status, body = judged(PROFILE_0_5_23, {"bogus": 1})
    assert status == 400
    assert body["error"].startswith("unknown field `bogus`, expected one of `max_new_tokens`")
    assert judged(PROFILE_0_5_23, {"temperature": "hot"}) == (
        400,
        {"error": 'invalid type: string "hot", expected f64'},
    )
    status, body = judged(PROFILE_0_5_23, {"top_p": 1.5})
    assert status == 400
    assert "sampling_params.top_p" in body["error"]["message"]


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (
            {"input_ids": "1"},
            'invalid type: string "1", expected a value or an array of values for TokenIdsOrList',
        ),
        ({"input_ids": [1.5]}, "invalid type: floating point `1.5`, expected i64"),
        ({"input_ids": [1], "stream": 1}, "invalid type: integer `1`, expected a boolean"),
        (
            {"input_ids": [1], "sampling_params": 3},
            "invalid type: integer `3`, expected a "
            "value or an array of values for SamplingParamsOrList",
        ),
        (
            {"input_ids": [1], "sampling_params": {"stop": [1]}},
            "invalid type: integer `1`, expected a string",
        ),
        (
            {"input_ids": [1], "sampling_params": {"ignore_eos": "no"}},
            'invalid type: string "no", expected a boolean',
        ),
        (
            {"input_ids": [1], "sampling_params": {"watermark": {"x": 1}}},
            "unknown field `x`, expected one of `enabled`, `key`, `context_window`",
        ),
        ([1], "invalid type: sequence, expected struct GenerateRequest"),
    ],
)
def test_the_schema_gate_says_what_0_5_23_says(body: Any, text: str) -> None:
    assert schema_error(body, KEYS) == text


SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "max_new_tokens": st.integers(0, 100),
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.01, 1),
    "top_k": st.integers(1, 50),
    "ignore_eos": st.booleans(),
    "stop": st.lists(st.text(max_size=3), max_size=2),
    "stop_token_ids": st.lists(st.integers(0, 99), max_size=3),
}


@given(st.fixed_dictionaries({}, optional=SCALARS))
def test_well_typed_sampling_params_pass_the_schema_gate(params: dict[str, Any]) -> None:
    assert schema_error({"input_ids": [1], "sampling_params": params}, KEYS) is None
