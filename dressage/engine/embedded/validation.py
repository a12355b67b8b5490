"""Judging a `/generate` body the way the release the engine plays judges it (pure).

Two styles (`ReleaseProfile.validation`):

- `dataclass` (0.5.2): the tokenizer manager builds `SamplingParams(**sampling_params)`. A key
  that class does not take, or a value its checks cannot compare (a string where a number
  goes, `null` where a number goes), raises `TypeError`, which the `/generate` handler does not
  catch (it turns only `ValueError` into 400): HTTP 500 with Starlette's plain-text
  `Internal Server Error`. `verify`'s range checks raise `ValueError`: HTTP 400
  `{"error": {"message"}}`.
- `schema-gate` (0.5.23): the body first passes the API schema (`api_contract.
  generate_contract_error`, decoding with `api/v1/api_types.py`): an unknown `sampling_params`
  key or a value of the wrong JSON type is HTTP 400 `{"error": "<text>"}`, the text in the
  schema decoder's serde-style words (`unknown field `x`, expected one of ...`,
  `invalid type: string "0.5", expected f64`), which `schema_error` reproduces for the fields
  Dressage models; `null` means the default. Range checks stay `verify`'s 400
  `{"error": {"message"}}`.

Either way the embedded engine's own refusals (a feature it does not implement, a token id
outside the vocabulary) are HTTP 400 `{"error": {"message"}}` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from dressage.engine.embedded.release_profiles import ReleaseProfile
from dressage.engine.protocol import GenerateRequest


class Refusal(Exception):
    """A request the engine answers with an error: `status` and the JSON (or text) body."""

    def __init__(self, status: int, body: Any, *, log: str | None = None) -> None:
        super().__init__(log or str(body))
        self.status = status
        self.body = body
        """A dict for a JSON body, a str for a plain-text one."""
        self.log = log
        """What the engine logs about it (a plain-text 500 names nothing to the client)."""


def bad_request(message: str, status: int = 400) -> Refusal:
    """SGLang's `_create_error_response` shape, `{"error": {"message": ...}}`."""
    return Refusal(status, {"error": {"message": message}})


INTERNAL_SERVER_ERROR = "Internal Server Error"
"""Starlette's body for an exception a handler did not catch."""


def judge_generate(profile: ReleaseProfile, body: dict[str, Any]) -> GenerateRequest:
    """The request `body` describes, or the `Refusal` the release answers it with."""
    params = body.get("sampling_params")
    if profile.validation == "schema-gate":
        error = schema_error(body, profile.sampling_param_keys)
        if error is not None:
            raise Refusal(400, {"error": error})
        unknown = [key for key in params or () if key in profile.schema_only_keys]
        if isinstance(params, dict) and unknown:
            raise Refusal(
                500,
                INTERNAL_SERVER_ERROR,
                log=f"sampling_params.{unknown[0]}: the schema admits it but SamplingParams "
                f"does not take it (SGLang {profile.release})",
            )
    elif isinstance(params, dict):
        unknown = [key for key in params if key not in profile.sampling_param_keys]
        nulls = [k for k, v in params.items() if v is None and k in profile.null_refusing_keys]
        if nulls:
            raise Refusal(
                500,
                INTERNAL_SERVER_ERROR,
                log=f"sampling_params.{nulls[0]}: null cannot be compared (TypeError, SGLang "
                f"{profile.release})",
            )
        if unknown:
            raise Refusal(
                500,
                INTERNAL_SERVER_ERROR,
                log=f"sampling_params.{unknown[0]}: SamplingParams.__init__() got an "
                f"unexpected keyword argument {unknown[0]!r} (SGLang {profile.release})",
            )
    try:
        return GenerateRequest.model_validate(body)
    except ValidationError as exc:
        message = describe_validation_error(exc)
        if profile.validation == "dataclass" and raises_type_error(exc):
            raise Refusal(500, INTERNAL_SERVER_ERROR, log=f"{message} (TypeError)") from None
        raise bad_request(message) from None


_TYPE_ERRORS = frozenset({"extra_forbidden", "int_from_float"})


def raises_type_error(exc: ValidationError) -> bool:
    """Whether a `sampling_params` error is one 0.5.2 raises as `TypeError`: a key its
    `SamplingParams` does not take, or a value of the wrong type (a string or `null` where
    `verify` compares a number)."""
    for error in exc.errors():
        loc = error["loc"]
        if not loc or loc[0] != "sampling_params":
            continue
        kind = str(error["type"])
        if kind in _TYPE_ERRORS or kind.endswith("_type"):
            return True
    return False


def describe_validation_error(exc: ValidationError) -> str:
    """`field.path: problem` for each error, e.g. `sampling_params.top_p: Input should be ...`."""
    parts = []
    for error in exc.errors()[:3]:
        path = ""
        for item in error["loc"]:
            path += f"[{item}]" if isinstance(item, int) else (f".{item}" if path else str(item))
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{path}: {message}" if path else message)
    return "; ".join(parts)


# --- 0.5.23's schema gate, in its decoder's words (serde's `Unexpected` display)


class _SchemaError(ValueError):
    pass


def _unexpected(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f'string "{value}"'
    if isinstance(value, list):
        return "sequence"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _invalid(value: Any, expected: str) -> _SchemaError:
    return _SchemaError(f"invalid type: {_unexpected(value)}, expected {expected}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int(value: Any, expected: str = "i64") -> None:
    if not _is_int(value):
        raise _invalid(value, expected)


def _float(value: Any) -> None:
    if not _is_number(value):
        raise _invalid(value, "f64")


def _bool(value: Any, expected: str = "a boolean") -> None:
    if not isinstance(value, bool):
        raise _invalid(value, expected)


def _str(value: Any, expected: str = "a string") -> None:
    if not isinstance(value, str):
        raise _invalid(value, expected)


def _seq(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _invalid(value, "a sequence")
    return value


def _str_or_list(value: Any) -> None:
    if isinstance(value, list):
        for item in value:
            _str(item)
    else:
        _str(value, "a value or an array of values for StringOrList")


def _int_list(value: Any) -> None:
    for item in _seq(value):
        _int(item)


def _float_map(value: Any) -> None:
    if not isinstance(value, dict):
        raise _invalid(value, "a map")
    for item in value.values():
        _float(item)


def _watermark(value: Any) -> None:
    if not isinstance(value, dict):
        raise _invalid(value, "struct WatermarkRequestConfig")
    checks: dict[str, Callable[[Any], None]] = {
        "enabled": _bool,
        "key": _str,
        "context_window": _int,
    }
    for key, item in value.items():
        check = checks.get(key)
        if check is None:
            raise _unknown_field(key, tuple(checks))
        if item is not None:
            check(item)


def _str_seq(value: Any) -> None:
    for item in _seq(value):
        _str(item)


def _anything(value: Any) -> None:
    return None


_SAMPLING_CHECKS: dict[str, Callable[[Any], None]] = {
    **{k: _int for k in ("max_new_tokens", "top_k", "min_new_tokens", "n", "stream_interval")},
    **{k: _int for k in ("sampling_seed", "beam_width")},
    **{
        k: _float
        for k in (
            "temperature",
            "top_p",
            "min_p",
            "frequency_penalty",
            "presence_penalty",
            "repetition_penalty",
        )
    },
    **{k: _bool for k in ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens")},
    "no_stop_trim": _bool,
    **{k: _str for k in ("json_schema", "regex", "ebnf", "structural_tag")},
    "stop": _str_or_list,
    "stop_regex": _str_or_list,
    "stop_token_ids": _int_list,
    "logit_bias": _float_map,
    "custom_params": _anything,
    "watermark": _watermark,
    "choice": _str_seq,
}
"""The schema's JSON type of each `sampling_params` key (`api_types.decode_SamplingParams`)."""


def _unknown_field(key: str, fields: tuple[str, ...]) -> _SchemaError:
    if not fields:
        return _SchemaError(f"unknown field `{key}`, there are no fields")
    if len(fields) == 1:
        return _SchemaError(f"unknown field `{key}`, expected `{fields[0]}`")
    if len(fields) == 2:
        return _SchemaError(f"unknown field `{key}`, expected `{fields[0]}` or `{fields[1]}`")
    listed = ", ".join(f"`{f}`" for f in fields)
    return _SchemaError(f"unknown field `{key}`, expected one of {listed}")


def _sampling_params(value: Any, keys: tuple[str, ...]) -> None:
    if not isinstance(value, dict):
        raise _invalid(value, "struct SamplingParams")
    for key, item in value.items():
        check = _SAMPLING_CHECKS.get(key) if key in keys else None
        if check is None:
            raise _unknown_field(key, keys)
        if item is not None or key == "custom_params":
            check(item)


def _sampling_params_or_list(value: Any, keys: tuple[str, ...]) -> None:
    if isinstance(value, list):
        for item in value:
            _sampling_params(item, keys)
    elif isinstance(value, dict):
        _sampling_params(value, keys)
    else:
        raise _invalid(value, "a value or an array of values for SamplingParamsOrList")


def _token_ids_or_list(value: Any) -> None:
    if not isinstance(value, list):
        raise _invalid(value, "a value or an array of values for TokenIdsOrList")
    if not value or _is_number(value[0]):
        _int_list(value)
    else:
        for row in value:
            _int_list(row)


def _bool_or_list(value: Any) -> None:
    if isinstance(value, list):
        for item in value:
            _bool(item)
    else:
        _bool(value, "a value or an array of values for BoolOrList")


def _int_or_list(value: Any) -> None:
    if isinstance(value, list):
        _int_list(value)
    else:
        _int(value, "a value or an array of values for Int64OrList")


_TOP_LEVEL_CHECKS: dict[str, Callable[[Any], None]] = {
    "rid": _str_or_list,
    "text": _str_or_list,
    "input_ids": _token_ids_or_list,
    "stream": _bool,
    "return_logprob": _bool_or_list,
    "logprob_start_len": _int_or_list,
    "top_logprobs_num": _int_or_list,
    "return_text_in_logprobs": _bool,
}
"""The `GenerateRequest` fields Dressage models, with their schema types (unknown top-level
keys pass the schema: it ignores them)."""


def schema_error(body: Any, sampling_keys: tuple[str, ...]) -> str | None:
    """The text 0.5.23's `/generate` schema gate refuses `body` with, or None (for the fields
    Dressage models; the decoder reads the body's keys in order and stops at the first
    violation)."""
    try:
        if not isinstance(body, dict):
            raise _invalid(body, "struct GenerateRequest")
        for key, value in body.items():
            if value is None:
                continue
            if key == "sampling_params":
                _sampling_params_or_list(value, sampling_keys)
                continue
            check = _TOP_LEVEL_CHECKS.get(key)
            if check is not None:
                check(value)
    except _SchemaError as exc:
        return str(exc)
    return None
