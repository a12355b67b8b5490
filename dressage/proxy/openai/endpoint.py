"""OpenAI-compatible chat for blackbox agents: `/v1/chat/completions` and `/v1/models`, also
under `/s/{session_id}/v1/...` for agents whose only setting is a base URL.

Messages are rendered with the model's chat template incrementally (`dressage.proxy.openai.chat`),
so
each turn extends the session's tokens exactly; the turn itself runs like any other
(`dressage.proxy.turns`). `chat_template_kwargs` (such as `enable_thinking`) reach the
template (`dressage.proxy.openai.fields`).

The reply is read by the model family's parsers (`dressage.proxy.openai.reply`): reasoning into
`reasoning_content`, tool calls (with `tools` in the request and `tool_choice` not `none`)
into `tool_calls` with `finish_reason: "tool_calls"`. Reading shapes the answer only: the
session keeps the model's own tokens, so the agent's next request (the assistant message
with its reasoning and calls, then the `tool` messages) extends them exactly. A matched stop
string is cut from `content` as OpenAI does; the recorded tokens stay as generated. An
unknown `model` is 404 `model_not_found`.

Streaming (`stream: true`) answers once the turn is generated (a turn may be resumed across
weight updates before it is complete): the reply is read token by token into OpenAI chunk
deltas, `reasoning_content` and `content` text, and per tool call a first delta with its
`id`, `type` and `function.name` and a second with its `function.arguments`; then the finish
chunk, and a usage chunk when `stream_options.include_usage` asks for it. The deltas add up
to the message a non-streamed request gets.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

from dressage.asgi import Answer, HttpRequest
from dressage.proxy import errors
from dressage.proxy.answers import json_response
from dressage.proxy.endpoints.fields import check_budget, session_ids
from dressage.proxy.errors import ProxyError, invalid
from dressage.proxy.openai import fields as chat_fields
from dressage.proxy.openai.chat import (
    ChatState,
    ChatTokenizer,
    after_reply,
    canonical_message,
    canonical_messages,
    plan_chat_turn,
)
from dressage.proxy.openai.reply import ReplyDelta, ReplyStream, assemble
from dressage.proxy.openai.tool_calls import strip_stop
from dressage.proxy.state import ProxyState
from dressage.proxy.turns import run_turn

DEFAULT_MAX_TOKENS = 256
"""The completion budget of a request that sets neither `max_completion_tokens` nor
`max_tokens`."""
POLICY_ALIAS = "policy"
"""A model name always accepted: the policy the proxy serves, whatever its checkpoint."""
_SESSION_FIELDS = (("metadata", "session_id"), ("user",))
_INSTANCE_FIELDS = (("metadata", "instance_id"),)


async def chat_completions(
    tok: ChatTokenizer | None, state: ProxyState, request: HttpRequest, body: dict[str, Any]
) -> Answer:
    """`/v1/chat/completions` with the chat template's tokenizer `tok` (None without
    `--model`), which the app binds when it mounts the route."""
    if tok is None:
        raise ProxyError(
            404, errors.NOT_FOUND, "/v1/chat/completions needs the proxy to be started with --model"
        )
    model = requested_model(state, body)
    messages = canonical_messages(body.get("messages"))
    tools = chat_fields.check_tools(body.get("tools"))
    tool_choice = chat_fields.check_tool_choice(body.get("tool_choice"), tools)
    template_kwargs = chat_fields.template_kwargs(body)
    separate_reasoning = chat_fields.separate_reasoning(body)
    n = body.get("n", 1)
    if n not in (1, None):
        raise invalid("n must be 1: one trajectory per session", "n")
    params = chat_sampling_params(body, tok.stop_token_ids)
    stream = bool(body.get("stream", False))
    include_usage = _include_usage(body) if stream else True
    session_id, instance_id = session_ids(
        request, body, session_fields=_SESSION_FIELDS, instance_fields=_INSTANCE_FIELDS
    )
    session = state.store.get_or_create(session_id, instance_id, state.clock())
    session.check_can_generate()
    chat = session.chat if isinstance(session.chat, ChatState) else None
    current = session.current.tokens() if session.current is not None else None
    turn = plan_chat_turn(tok, chat, current, messages, tools, template_kwargs)
    plan, gen, segment_index = await run_turn(
        state, session, turn.input_ids, params, force_new_segment=turn.new_segment
    )
    fmt = tok.reply_format
    reader = ReplyStream(
        fmt,
        tools=tools,
        parse_tools=bool(tools) and tool_choice != "none",
        forced_reasoning=fmt.starts_in_reasoning(turn.rendered),
        separate_reasoning=separate_reasoning,
    )
    # Streamed, the reply is read token by token; whole, at once (the same message).
    text = tok.reply_pieces(gen.output_ids) if stream else [tok.decode_reply(gen.output_ids)]
    pieces = _cut(text, gen.finish_reason, params.get("stop"))
    deltas = [reader.feed(piece) for piece in pieces]
    deltas.append(reader.finish())
    parsed = assemble(deltas)
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning_content is not None:
        message["reasoning_content"] = parsed.reasoning_content
    if parsed.tool_calls:
        message["tool_calls"] = parsed.tool_calls
    # The conversation continues from the model's own tokens; the reply is remembered in the
    # canonical form the agent's echo of it is compared in.
    reply = canonical_message(message, len(messages))
    session.chat = after_reply(tok, turn, reply, gen.output_ids)
    if parsed.tool_calls:
        finish = "tool_calls"
    else:
        finish = "length" if gen.finish_reason.get("type") == "length" else "stop"
    created = int(time.time())
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    usage = {
        "prompt_tokens": len(turn.input_ids),
        "completion_tokens": len(gen.output_ids),
        "total_tokens": len(turn.input_ids) + len(gen.output_ids),
    }
    extra: dict[str, Any] = {
        "session_id": session.session_id,
        "segment_index": segment_index,
        "new_segment": plan.new_segment,
        "versions": gen.versions,
        "preempts": gen.preempts,
        "output_ids": gen.output_ids,
    }
    met = chat_fields.tool_choice_met(tool_choice, parsed.tool_calls)
    if met is not None:
        extra["tool_choice_met"] = met
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
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": logprobs}
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
    ]  # fmt: skip
    for i, delta in enumerate(d for reply_delta in deltas for d in _openai_deltas(reply_delta)):
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
        if i == 0:
            choice["logprobs"] = logprobs
            logprobs = None
        chunks.append(base | {"choices": [choice]})
    last: dict[str, Any] = {"index": 0, "delta": {}, "finish_reason": finish}
    if logprobs is not None:
        last["logprobs"] = logprobs
    chunks.append(base | {"choices": [last], "dressage": extra})
    if include_usage:
        # OpenAI's `stream_options.include_usage`: one more chunk, with no choices.
        chunks.append(base | {"choices": [], "usage": usage})
    payload = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    return Answer(payload, content_type="text/event-stream; charset=utf-8", stream=True)


def _openai_deltas(delta: ReplyDelta) -> list[dict[str, Any]]:
    """The OpenAI chunk deltas of one piece of the reply: reasoning, content, then for each
    completed call its header and its arguments."""
    out: list[dict[str, Any]] = []
    if delta.reasoning:
        out.append({"reasoning_content": delta.reasoning})
    if delta.content:
        out.append({"content": delta.content})
    for index, call in delta.calls:
        function = call["function"]
        out.append(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        out.append(
            {"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]}
        )
    return out


def _cut(pieces: list[str], finish_reason: dict[str, Any], stop: list[str] | None) -> list[str]:
    """`pieces` of the reply up to the matched stop string (`strip_stop`)."""
    whole = "".join(pieces)
    keep = len(strip_stop(whole, finish_reason, stop))
    if keep == len(whole):
        return pieces
    out: list[str] = []
    for piece in pieces:
        if keep <= 0:
            break
        out.append(piece[:keep])
        keep -= len(piece)
    return out


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise invalid("stream_options must be an object", "stream_options")
    value = options.get("include_usage", False)
    if not isinstance(value, bool):
        raise invalid("stream_options.include_usage must be a boolean", "stream_options")
    return value


def model_names(state: ProxyState) -> list[str]:
    """The model names chat requests may ask for: the served name first, then its aliases
    (`--model` as given, `--model-name`, and `policy`, the name an agent uses for whatever
    policy is being trained)."""
    config = state.config
    names = [config.served_model_name]
    for alias in (config.model, config.model_name, POLICY_ALIAS):
        if alias and alias not in names:
            names.append(alias)
    return names


def requested_model(state: ProxyState, body: dict[str, Any]) -> str:
    """The request's `model` (the served name when it has none); 404 `model_not_found` naming
    it when the proxy does not serve it, as OpenAI answers."""
    model = body.get("model")
    if model is None:
        return state.config.served_model_name
    if not isinstance(model, str):
        raise invalid("model must be a string", "model")
    names = model_names(state)
    if model not in names:
        raise ProxyError(
            404,
            errors.MODEL_NOT_FOUND,
            f"The model `{model}` does not exist: this proxy serves {', '.join(map(repr, names))}",
            param="model",
        )
    return model


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
