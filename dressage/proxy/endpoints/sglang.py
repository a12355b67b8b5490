"""`POST /generate`: SGLang's generate API for whitebox agents, one model turn per request.

The body is SGLang's (`input_ids`, `sampling_params`, `return_logprob`) plus the session's
ids; an unknown field is refused rather than ignored, so that a client never believes a
setting the proxy does not apply. The answer is SGLang's plus a `dressage` object (the
session, segment and per-token versions of the turn).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import ValidationError

from dressage.asgi import Answer, HttpRequest
from dressage.engine.protocol import SamplingParams
from dressage.proxy.answers import json_response
from dressage.proxy.endpoints.fields import check_budget, session_ids
from dressage.proxy.errors import invalid
from dressage.proxy.state import ProxyState
from dressage.proxy.turns import run_turn

_GENERATE_FIELDS = frozenset(
    {
        "input_ids",
        "sampling_params",
        "return_logprob",
        "session_id",
        "instance_id",
        "stream",
        "rid",
        "log_metrics",
        "logprob_start_len",
        "return_text_in_logprobs",
    }
)


async def generate(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    started = time.perf_counter()
    unknown = sorted(set(body) - _GENERATE_FIELDS)
    if unknown:
        raise invalid(f"unknown field {unknown[0]!r} in /generate body", unknown[0])
    input_ids = body.get("input_ids")
    if input_ids is None:
        raise invalid("input_ids is required: the proxy records token ids", "input_ids")
    if not isinstance(input_ids, list) or not input_ids or not _are_token_ids(input_ids):
        raise invalid("input_ids must be a non-empty list of token ids (ints >= 0)", "input_ids")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise invalid("sampling_params must be an object", "sampling_params")
    if body.get("stream"):
        raise invalid("stream is not supported on /generate", "stream")
    check_budget(params.get("max_new_tokens"), "sampling_params.max_new_tokens")
    check_sampling_params(params)
    session_id, instance_id = session_ids(request, body)
    session = state.store.get_or_create(session_id, instance_id, state.clock())
    plan, gen, segment_index = await run_turn(state, session, input_ids, params)
    meta: dict[str, Any] = {
        "id": f"dressage-{uuid.uuid4().hex}",
        "finish_reason": gen.finish_reason,
        "prompt_tokens": len(input_ids),
        "completion_tokens": len(gen.output_ids),
        "cached_tokens": gen.cached_tokens,
        "weight_version": gen.weight_version,
        "weight_versions": gen.version_spans(),
        "e2e_latency": time.perf_counter() - started,
    }
    if body.get("return_logprob"):
        meta["output_token_logprobs"] = gen.raw_logprobs
    return json_response(
        {
            "text": "".join(gen.texts),
            "output_ids": gen.output_ids,
            "meta_info": meta,
            "dressage": {
                "session_id": session.session_id,
                "instance_id": session.instance_id,
                "segment_index": segment_index,
                "new_segment": plan.new_segment,
                "versions": gen.versions,
                "preempts": gen.preempts,
                "engine": gen.engine_url,
                "engine_latency": gen.engine_latency,
            },
        }
    )


def _are_token_ids(values: list[Any]) -> bool:
    """Whether every value is an int >= 0 (a bool is not a token id).

    Two passes in C (the type of every value, then the smallest) instead of a Python loop per
    token: prompts run to thousands of tokens and this runs on every turn.
    """
    return list(map(type, values)).count(int) == len(values) and min(values) >= 0


def check_sampling_params(params: dict[str, Any]) -> None:
    """A 400 naming the field when SGLang would refuse `params` (an unknown key or a value of
    the wrong type is a TypeError in SGLang's `SamplingParams`, answered 500 there), checked
    against the engine contract's model (`dressage.engine.protocol.SamplingParams`)."""
    try:
        SamplingParams.model_validate(params)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in ("sampling_params", *error["loc"]))
        raise invalid(f"{field}: {error['msg']}", field) from None
