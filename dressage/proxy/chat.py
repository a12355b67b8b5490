"""The OpenAI chat layer: messages to tokens, incrementally, with no re-tokenization drift.

A model's chat template turns messages into text; the proxy tokenizes that text only once per
piece and keeps the tokens of every turn. The next turn's input is the previous tokens (the
prompt, the model's own output tokens, the tokens appended after it) followed by the
tokenization of the *new* text only, so each turn's tokens extend the previous turn's exactly.

New text is found by rendering: with `R` the rendering of the conversation so far (the
assistant reply included, no generation prompt) and `F` the rendering of the new request's
messages with the generation prompt, a continuation requires `F` to start with `R`; the new
text is `F[len(R):]`, preceded by the *bridge*: what the template puts after the reply that
the model did not generate itself (for the tiny model, the newline after `<|end|>`; the whole
`<|end|>\\n` when the reply was cut by the token budget).

A history rewrite (earlier messages changed), a different tool schema, or a template that is
not append-only re-renders the whole conversation as the prompt of a new segment.

Only `tokenizers` and `jinja2` are used: no torch, no transformers.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dressage.proxy.errors import invalid
from dressage.proxy.tool_calls import select_tool_parser

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


class ChatTokenizer:
    """A model's tokenizer and chat template, loaded from `tokenizer.json` and
    `tokenizer_config.json` (or `chat_template.jinja`); `tool_parser` names the tool-call
    syntax of the model family (`dressage.proxy.tool_calls.PARSERS`; None picks it from the
    template)."""

    def __init__(self, model_dir: Path, *, tool_parser: str | None = None) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        tokenizer_file = model_dir / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise FileNotFoundError(f"{tokenizer_file} not found: --model needs a tokenizer.json")
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        config_file = model_dir / "tokenizer_config.json"
        config: dict[str, Any] = (
            json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        )
        template = config.get("chat_template")
        template_file = model_dir / "chat_template.jinja"
        if template is None and template_file.is_file():
            template = template_file.read_text(encoding="utf-8")
        if not isinstance(template, str):
            raise ValueError(f"{model_dir} has no chat template (tokenizer_config.json)")
        self.chat_template = template
        # Parses this model family's tool calls out of its output.
        self.tool_parser = select_tool_parser(tool_parser, template)
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))

        def raise_exception(message: str) -> None:
            raise ValueError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        env.filters["tojson"] = lambda v, indent=None: json.dumps(v, indent=indent)
        self.template = env.from_string(template)
        eos_id = self.tokenizer.token_to_id(self.eos_token) if self.eos_token else None
        self.stop_token_ids: list[int] = [] if eos_id is None else [eos_id]

    def render(
        self,
        messages: Sequence[dict[str, Any]],
        tools: list[Any] | None,
        *,
        add_generation_prompt: bool,
    ) -> str:
        try:
            return str(
                self.template.render(
                    messages=list(messages),
                    tools=tools,
                    add_generation_prompt=add_generation_prompt,
                    bos_token=self.bos_token or "",
                    eos_token=self.eos_token or "",
                )
            )
        except Exception as exc:  # a template error is the request's fault (bad messages)
            raise invalid(
                f"messages cannot be rendered by the chat template: {exc}", "messages"
            ) from None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):
        content = value.get("content")
        return content if isinstance(content, str) else None
    return value if isinstance(value, str) else None


def load_chat_tokenizer(model: str, *, tool_parser: str | None = None) -> ChatTokenizer:
    """The tokenizer of `model`: a checkpoint directory, or a built-in model such as
    `builtin:tiny` (the built-in models share one tokenizer, whose files are rebuilt here with
    the `tokenizers` library; the weights are not needed)."""
    if model.startswith("builtin:"):
        from dressage.model.names import parse_builtin
        from dressage.model.tokenizer import build_tokenizer_files

        parse_builtin(model)

        with tempfile.TemporaryDirectory(prefix="dressage-proxy-tok-") as tmp:
            build_tokenizer_files(Path(tmp))
            return ChatTokenizer(Path(tmp), tool_parser=tool_parser)
    return ChatTokenizer(Path(model), tool_parser=tool_parser)


# --- messages ---------------------------------------------------------------------------------


def canonical_message(message: object, index: int) -> dict[str, Any]:
    """A message reduced to what the template renders; None and empty fields dropped so that an
    echoed reply compares equal to the one the proxy returned."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise invalid(f"{where} must be an object", where)
    role = message.get("role")
    if role not in ROLES:
        raise invalid(f"{where}.role must be one of {sorted(ROLES)}, got {role!r}", f"{where}.role")
    content = message.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text"):
                raise invalid(f"{where}.content[{j}]: only text parts are supported", where)
            value = part.get("text")
            if not isinstance(value, str):
                raise invalid(f"{where}.content[{j}].text must be a string", where)
            parts.append(value)
        text = "".join(parts)
    else:
        raise invalid(f"{where}.content must be a string, a list of text parts or null", where)
    out: dict[str, Any] = {"role": role, "content": text}
    for key in ("name", "tool_call_id"):
        value = message.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise invalid(f"{where}.{key} must be a string", f"{where}.{key}")
            out[key] = value
    tool_calls = message.get("tool_calls")
    if tool_calls:
        if not isinstance(tool_calls, list):
            raise invalid(f"{where}.tool_calls must be a list", f"{where}.tool_calls")
        out["tool_calls"] = [
            canonical_tool_call(call, f"{where}.tool_calls[{j}]")
            for j, call in enumerate(tool_calls)
        ]
    return out


def canonical_tool_call(call: object, where: str) -> dict[str, Any]:
    """A tool call reduced to `{id, type, function: {name, arguments}}`.

    `arguments` arrives as a JSON string (OpenAI's shape); it is kept parsed when it is valid
    JSON, since chat templates render it as an object (`arguments | tojson`), and so that an
    agent that re-serializes it with other spacing still continues the conversation. Stream
    bookkeeping such as `index` is dropped.
    """
    if not isinstance(call, dict):
        raise invalid(f"{where} must be an object", where)
    function = call.get("function")
    if not isinstance(function, dict):
        raise invalid(f"{where}.function must be an object", f"{where}.function")
    name = function.get("name")
    if not isinstance(name, str):
        raise invalid(f"{where}.function.name must be a string", f"{where}.function.name")
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # not JSON: rendered as the string it is
            arguments = json.loads(arguments)
    elif arguments is None:
        arguments = {}
    elif not isinstance(arguments, dict):
        raise invalid(
            f"{where}.function.arguments must be a JSON string", f"{where}.function.arguments"
        )
    out: dict[str, Any] = {
        "type": call.get("type") or "function",
        "function": {"name": name, "arguments": arguments},
    }
    call_id = call.get("id")
    if call_id is not None:
        if not isinstance(call_id, str):
            raise invalid(f"{where}.id must be a string", f"{where}.id")
        out["id"] = call_id
    return out


def canonical_messages(messages: object) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise invalid("messages must be a non-empty list", "messages")
    return [canonical_message(m, i) for i, m in enumerate(messages)]


def tools_key(tools: object) -> str:
    """A stable key of a tool schema (None and [] mean no tools)."""
    if tools is None or tools == []:
        return ""
    if not isinstance(tools, list):
        raise invalid("tools must be a list", "tools")
    return json.dumps(tools, sort_keys=True, separators=(",", ":"))


# --- incremental rendering --------------------------------------------------------------------


@dataclass
class ChatState:
    """What the chat layer remembers of a session's current segment."""

    messages: list[dict[str, Any]]
    """Messages covered by the segment's tokens (the last reply included after a turn)."""
    tools_key: str
    rendered: str
    """The template's rendering of `messages` (generation prompt included before a reply)."""
    bridge: str = ""
    """Text after the last reply that the model did not generate."""


@dataclass(frozen=True)
class ChatTurn:
    """The token input of one chat turn and the state it leaves pending the reply."""

    input_ids: list[int]
    new_segment: str | None
    """None to continue the segment; `tools_changed` / `history_rewrite` to start a new one
    (the session decides about the first turn)."""
    messages: list[dict[str, Any]]
    tools_key: str
    rendered: str
    tools: list[Any] | None = None
    """The request's tools as sent: the reply is rendered with them, key order included (a
    template writes them with `tojson`, so the order is part of the text)."""


def plan_chat_turn(
    tok: ChatTokenizer,
    state: ChatState | None,
    segment_tokens: list[int] | None,
    messages: list[dict[str, Any]],
    tools: list[Any] | None,
) -> ChatTurn:
    """The input tokens of a chat request given the session's state (pure but for tokenizing)."""
    key = tools_key(tools)
    full = tok.render(messages, tools or None, add_generation_prompt=True)

    def fresh(reason: str | None) -> ChatTurn:
        return ChatTurn(tok.encode(full), reason, messages, key, full, tools or None)

    if state is None or segment_tokens is None:
        return fresh("history_rewrite" if segment_tokens is not None else None)
    if key != state.tools_key:
        return fresh("tools_changed")
    k = len(state.messages)
    if len(messages) <= k or messages[:k] != state.messages or not full.startswith(state.rendered):
        return fresh("history_rewrite")
    new_text = state.bridge + full[len(state.rendered) :]
    return ChatTurn(segment_tokens + tok.encode(new_text), None, messages, key, full, tools or None)


def after_reply(
    tok: ChatTokenizer, turn: ChatTurn, reply: dict[str, Any], output_ids: Sequence[int]
) -> ChatState:
    """The state after the model replied `reply` with `output_ids` to `turn`."""
    messages = [*turn.messages, reply]
    rendered = tok.render(messages, turn.tools, add_generation_prompt=False)
    bridge = ""
    if rendered.startswith(turn.rendered):
        reply_text = rendered[len(turn.rendered) :]
        generated = tok.decode(output_ids, skip_special_tokens=False)
        if reply_text.startswith(generated):
            bridge = reply_text[len(generated) :]
        elif tok.eos_token and tok.eos_token in reply_text:
            # The reply as rendered differs from the generated text (special tokens dropped from
            # the content): close the reply the way the template does.
            after_eos = reply_text.rsplit(tok.eos_token, 1)[1]
            ended = bool(output_ids) and generated.endswith(tok.eos_token)
            bridge = after_eos if ended else tok.eos_token + after_eos
    return ChatState(messages, turn.tools_key, rendered, bridge)
