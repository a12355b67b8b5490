"""`POST /generate`: SGLang's generate API for whitebox agents, one model turn per request.

The body is SGLang's (`input_ids`, `sampling_params`, `return_logprob`, `stream`,
`return_routed_experts`, `return_indexer_topk`) plus the session's ids; an unknown field is
refused rather than ignored, so that a client never believes a setting the proxy does not
apply. The answer is
SGLang's plus a `dressage` object (the session, segment and per-token versions of the turn).

Whose trajectory a request extends: `X-Session-Id` (or the body's `session_id`); without it
the `X-SMG-Routing-Key` header, which slime sends with a sample's session id when it routes
by consistent hashing (SGLang Model Gateway's header); without either, the request is a
trajectory of its own, finalized as soon as its turn is recorded (its records wait at
`/segments`), which is how slime's plain single-turn payload arrives
(`slime/rollout/sglang_rollout.py` `generate`).

`stream: true` answers in SGLang's server-sent events shape, once the turn is generated and
recorded (a turn may be resumed across weight updates, and its per-token versions are
checked and recorded as for any other turn): `data: {"text", "output_ids", "meta_info"}`
with the whole output so far (SGLang's default, non-incremental streaming; what slime's
`sglang_streaming_rollout.py` reads), then `data: [DONE]`.

`return_routed_experts: true` asks the engines for the routed experts (SGLang needs
`--enable-return-routed-experts`; an engine whose release lacks the field is not sent it) and
answers them in SGLang's shape, `meta_info.routed_experts`: the base64 of int32
`[prompt + output - 1, layers, top_k]`. They are the routes the session records too (the proxy
records them for every turn with `--record-routed-experts`, and for a turn that asks): for a
turn resumed across a weight update, each position keeps its first report, as in the
segment. `return_indexer_topk` (which miles always sends, false unless it replays
DeepSeek-V3.2's indexer) is passed through: sent to the engine, and the last piece's
`meta_info.indexer_topk` answered as the engine sent it. A false flag is not sent on.

The answer's `meta_info` is the engine's (its last piece's, for a turn resumed across pauses)
with the proxy's fields over it: every key the engine sent reaches the agent (0.5.23 adds
`num_retractions` and `reasoning_tokens`, the time stats with `--enable-metrics`, ...), while
the turn-wide ones (`id`, `finish_reason`, token counts, `weight_version(s)`, `e2e_latency`,
the logprobs and routes of the whole turn) are the proxy's. What the proxy asked the engine
for of its own accord (logprobs, routes) is answered only when the agent asked too.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
from pydantic import ValidationError

from dressage.asgi import Answer, HttpRequest
from dressage.engine.protocol import SamplingParams
from dressage.proxy.answers import json_response
from dressage.proxy.endpoints.fields import check_budget, generate_session_ids
from dressage.proxy.endpoints.sessions import finalize_session
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
        "return_routed_experts",
        "return_indexer_topk",
    }
)
PASSED_THROUGH = ("return_indexer_topk",)
"""Request flags sent on to the engine as they are when true; what each brings back
(`meta_info.indexer_topk`) reaches the agent with the rest of the engine's `meta_info`
(`return_routed_experts` is the proxy's own: it records the routes)."""
_LOGPROB_KEYS = ("input_token_logprobs", "output_token_logprobs", "output_token_logprobs_length")
"""`meta_info` keys the engine sends because the proxy asks every turn for logprobs, whatever
the agent asked (0.5.23 `tokenizer_manager.add_logprob_to_meta_info`)."""
_PIECE_ONLY = ("routed_experts",)
"""Keys of one piece that the proxy answers for the whole turn itself, when asked (the
engine sends the routes when the proxy records them, whatever the agent asked)."""
_INPUT_SIDE = ("input_token_logprobs",)
"""Keys about a piece's own input: for a turn resumed across pauses the last piece's input
holds the earlier pieces' output, so they are not the turn's and are left out."""


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
    stream = _flag(body, "stream")
    passed = [name for name in PASSED_THROUGH if _flag(body, name)]
    routed_experts = _flag(body, "return_routed_experts")
    check_budget(params.get("max_new_tokens"), "sampling_params.max_new_tokens")
    check_sampling_params(params)
    session_id, instance_id, one_off = generate_session_ids(request, body)
    session = state.store.get_or_create(session_id, instance_id, state.clock())
    try:
        plan, gen, segment_index = await run_turn(
            state,
            session,
            input_ids,
            params,
            routed_experts=routed_experts,
            extra_body=dict.fromkeys(passed, True) or None,
        )
    except BaseException:
        if one_off:
            state.store.delete(session_id)
        raise
    if one_off:
        finalize_session(state, session, None)
    meta = _engine_meta_info(gen.meta_info, body, resumed=gen.pieces > 1)
    meta |= {
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
        if "output_token_logprobs_length" in meta:
            meta["output_token_logprobs_length"] = len(gen.raw_logprobs)
    if routed_experts and gen.routed_experts is not None:
        meta["routed_experts"] = gen.routed_experts.to_base64()
    answer = {
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
    if not stream:
        return json_response(answer)
    payload = b"data: " + orjson.dumps(answer) + b"\n\ndata: [DONE]\n\n"
    return Answer(payload, content_type="text/event-stream", stream=True)


def _engine_meta_info(
    sent: dict[str, Any], body: dict[str, Any], *, resumed: bool
) -> dict[str, Any]:
    """The engine's `meta_info` as the agent gets it, before the proxy's fields go over it:
    whole, less the piece-only keys, the logprobs unless the agent asked for them and, for a
    resumed turn, the last piece's input-side keys."""
    drop: tuple[str, ...] = _PIECE_ONLY
    if not body.get("return_logprob"):
        drop += _LOGPROB_KEYS
    elif resumed:
        drop += _INPUT_SIDE
    return {key: value for key, value in sent.items() if key not in drop}


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(f"{name} must be a boolean", name)
    return value


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
