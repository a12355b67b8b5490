"""OpenAI-compatible chat for blackbox agents: `/v1/chat/completions` and `/v1/models`, also
under `/s/{session_id}/v1/...` for agents whose only setting is a base URL.

Messages are rendered with the model's chat template incrementally (`dressage.proxy.chat`), so
each turn extends the session's tokens exactly; the turn itself runs like any other
(`dressage.proxy.turns`). A streamed answer is the whole reply as one content chunk once the
turn is generated (a turn may be resumed across weight updates before it is complete).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

from dressage.asgi import Answer, HttpRequest
from dressage.proxy import errors
from dressage.proxy.answers import json_response
from dressage.proxy.chat import ChatState, after_reply, canonical_messages, plan_chat_turn
from dressage.proxy.endpoints.fields import check_budget, session_ids
from dressage.proxy.errors import ProxyError, invalid
from dressage.proxy.state import ProxyState
from dressage.proxy.turns import run_turn

DEFAULT_MAX_TOKENS = 256
"""The completion budget of a request that sets neither `max_completion_tokens` nor
`max_tokens`."""
_SESSION_FIELDS = (("metadata", "session_id"), ("user",))
_INSTANCE_FIELDS = (("metadata", "instance_id"),)


async def chat_completions(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    tok = state.tokenizer
    if tok is None:
        raise ProxyError(
            404, errors.NOT_FOUND, "/v1/chat/completions needs the proxy to be started with --model"
        )
    messages = canonical_messages(body.get("messages"))
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise invalid("tools must be a list", "tools")
    n = body.get("n", 1)
    if n not in (1, None):
        raise invalid("n must be 1: one trajectory per session", "n")
    params = chat_sampling_params(body, tok.stop_token_ids)
    stream = bool(body.get("stream", False))
    session_id, instance_id = session_ids(
        request, body, session_fields=_SESSION_FIELDS, instance_fields=_INSTANCE_FIELDS
    )
    session = state.store.get_or_create(session_id, instance_id, state.clock())
    session.check_can_generate()
    chat = session.chat if isinstance(session.chat, ChatState) else None
    current = session.current.tokens() if session.current is not None else None
    turn = plan_chat_turn(tok, chat, current, messages, tools)
    plan, gen, segment_index = await run_turn(
        state, session, turn.input_ids, params, force_new_segment=turn.new_segment
    )
    content = tok.decode(gen.output_ids, skip_special_tokens=True)
    reply = {"role": "assistant", "content": content}
    session.chat = after_reply(tok, turn, reply, gen.output_ids)
    finish = "length" if gen.finish_reason.get("type") == "length" else "stop"
    created = int(time.time())
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    model = body.get("model") or state.config.served_model_name
    usage = {
        "prompt_tokens": len(turn.input_ids),
        "completion_tokens": len(gen.output_ids),
        "total_tokens": len(turn.input_ids) + len(gen.output_ids),
    }
    extra = {
        "session_id": session.session_id,
        "segment_index": segment_index,
        "new_segment": plan.new_segment,
        "versions": gen.versions,
        "preempts": gen.preempts,
        "output_ids": gen.output_ids,
    }
    logprobs: dict[str, Any] | None = None
    if body.get("logprobs"):
        logprobs = {
            "content": [
                {"token": tok.decode([t], skip_special_tokens=False), "logprob": lp,
                 "bytes": None, "top_logprobs": []}
                for t, lp in zip(gen.output_ids, gen.logprobs, strict=True)
            ]
        }  # fmt: skip
    if not stream:
        return json_response(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "message": reply, "finish_reason": finish, "logprobs": logprobs}
                ],
                "usage": usage,
                "dressage": extra,
            }
        )
    base = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
            "model": model}  # fmt: skip
    chunks = [
        base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                             "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {"content": content}, "logprobs": logprobs,
                             "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                "usage": usage, "dressage": extra},
    ]  # fmt: skip
    payload = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    return Answer(payload, content_type="text/event-stream; charset=utf-8", stream=True)


async def models(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    model = {
        "id": state.config.served_model_name,
        "object": "model",
        "created": 0,
        "owned_by": "dressage",
    }
    return json_response({"object": "list", "data": [model]})


def chat_sampling_params(body: dict[str, Any], stop_token_ids: list[int]) -> dict[str, Any]:
    """SGLang sampling params of an OpenAI chat request (400 naming the field at fault)."""
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    check_budget(max_tokens, "max_tokens")
    params: dict[str, Any] = {"max_new_tokens": max_tokens}
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise invalid(f"{name} must be a number", name)
            params[name] = float(value)
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(x, str) for x in stop):
            raise invalid("stop must be a string or a list of strings", "stop")
        params["stop"] = stop
    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise invalid("seed must be an integer", "seed")
        params["sampling_seed"] = seed
    if stop_token_ids:
        params["stop_token_ids"] = list(stop_token_ids)
    return params
