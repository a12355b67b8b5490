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

Reasoning across turns. A reply's reasoning is answered as `reasoning_content`
(`dressage.proxy.openai.reply`) and kept with the reply the agent is expected to echo. Templates
treat
past reasoning differently: Qwen3's renders an assistant turn's reasoning only for turns after
the last user message (the current tool loop) and drops it from earlier ones; DeepSeek-R1's
drops it always; Kimi-K2's and GLM-4.5's render what the message carries. The proxy never
rewrites tokens already generated, so:

- in a tool loop, an agent that sends the reply back with its `reasoning_content` gets the
  template's rendering of the new messages appended to the model's own tokens (one segment);
- when the template renders the earlier turns differently from then on (a new user message
  after a Qwen3 reasoning turn, or a reply echoed without the reasoning the template would
  have shown), the messages still match but `F` no longer starts with `R`: the turn opens a
  new segment (`template_not_append_only`) whose prompt is the template's rendering, exactly
  what the engine is given. Each segment stays a prefix-consistent record of its engine's
  input and output; the trajectory's segments share its id.

An echoed assistant message without `reasoning_content` matches the reply it came from (most
clients drop the field); the rendering decides, as above. A template that never shows past
reasoning (DeepSeek-R1's) continues the segment: what follows the reply is the rendering of
the new messages only, after the model's own tokens, reasoning included.

Only `tokenizers` and `jinja2` are used: no torch, no transformers.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from dressage.proxy.errors import invalid
from dressage.proxy.openai.reply import ReplyFormat, resolve_reply_format

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
RESERVED_TEMPLATE_VARIABLES = frozenset(
    {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"}
)
"""Template variables the proxy sets itself, which `chat_template_kwargs` may not replace."""


class ChatTokenizer:
    """A model's tokenizer and chat template, loaded from `tokenizer.json` and
    `tokenizer_config.json` (or `chat_template.jinja`), with `generation_config.json`'s stop
    tokens when the checkpoint has one. `reasoning_parser` and `tool_call_parser` name the
    family's reply syntax (SGLang's names, `dressage.api.chat_formats`; None or `auto`:
    implied by the template)."""

    def __init__(
        self,
        model_dir: Path,
        *,
        reasoning_parser: str | None = None,
        tool_call_parser: str | None = None,
    ) -> None:
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
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        added = self.tokenizer.get_added_tokens_decoder()
        self._special_ids = frozenset(i for i, t in added.items() if t.special)
        self.reply_format: ReplyFormat = resolve_reply_format(
            reasoning_parser,
            tool_call_parser,
            template,
            self.tokenizer.get_vocab(with_added_tokens=True),
        )
        """How this family's replies are read into reasoning, content and tool calls."""
        keep = self.reply_format.markers
        self._kept_ids = frozenset(i for i in self._special_ids if added[i].content in keep)

        self.template = _template_environment().from_string(template)
        stop: list[int] = []
        eos_id = self.tokenizer.token_to_id(self.eos_token) if self.eos_token else None
        for token_id in [eos_id, *_generation_stop_ids(model_dir)]:
            if token_id is not None and token_id not in stop:
                stop.append(token_id)
        self.stop_token_ids: list[int] = stop
        """The eos token and `generation_config.json`'s `eos_token_id` (Llama 3 and gpt-oss
        end turns with more than one token)."""

    def render(
        self,
        messages: Sequence[dict[str, Any]],
        tools: list[Any] | None,
        *,
        add_generation_prompt: bool,
        template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """The template's rendering; `template_kwargs` (the request's
        `chat_template_kwargs`, such as `enable_thinking`) are further template variables.
        An assistant message's `reasoning_content` is also given as `thinking`, the name
        gpt-oss's template reads."""
        shown = [
            m
            if "reasoning_content" not in m or "thinking" in m
            else {**m, "thinking": m["reasoning_content"]}
            for m in messages
        ]
        try:
            return str(
                self.template.render(
                    **(template_kwargs or {}),
                    messages=shown,
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

    def reply_ids(self, ids: Sequence[int]) -> list[int]:
        """`ids` without the special tokens that are not markers of the reply syntax (the
        eos token, role markers): what a reply is read from."""
        special, kept = self._special_ids, self._kept_ids
        return [i for i in ids if i not in special or i in kept]

    def decode_reply(self, ids: Sequence[int]) -> str:
        """The text a reply is read from: special tokens skipped, except the syntax's own
        markers (gpt-oss's channels, Mistral's `[TOOL_CALLS]`, Kimi's call tokens)."""
        return self.decode(self.reply_ids(ids), skip_special_tokens=False)

    def reply_pieces(self, ids: Sequence[int]) -> list[str]:
        """`decode_reply(ids)` cut at token boundaries: one piece per token that completes
        text (a token ending inside a multi-byte character waits for the next). The pieces
        always add up to `decode_reply(ids)`."""
        kept = self.reply_ids(ids)
        pieces: list[str] = []
        prefix = read = 0  # the window decoded before the newest token, as vLLM detokenizes
        for end in range(1, len(kept) + 1):
            before = self.decode(kept[prefix:read], skip_special_tokens=False)
            text = self.decode(kept[prefix:end], skip_special_tokens=False)
            if len(text) > len(before) and not text.endswith("\ufffd"):
                pieces.append(text[len(before) :])
                prefix, read = read, end
        whole = self.decode(kept, skip_special_tokens=False)
        done = "".join(pieces)
        if not whole.startswith(done):  # a decoder whose windows do not add up: one piece
            return [whole] if whole else []
        if len(whole) > len(done):
            pieces.append(whole[len(done) :])
        return pieces


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """`tojson` as transformers' `apply_chat_template` defines it (no HTML escaping, text
    kept as it is unless `ensure_ascii`), which is what SGLang renders with."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _template_environment() -> Any:
    """A sandboxed Jinja environment as transformers sets one up for chat templates:
    `trim_blocks`, `lstrip_blocks`, `{% break %}`/`{% continue %}`, `{% generation %}` blocks,
    `raise_exception`, `strftime_now` and its `tojson`."""
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` marks assistant text for masking in
        transformers; here it renders its body."""

        tags = {"generation"}  # noqa: RUF012 (jinja2 declares it an instance variable)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body).set_lineno(lineno)

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, Generation]
    )
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = _tojson
    return env


def _generation_stop_ids(model_dir: Path) -> list[int]:
    path = model_dir / "generation_config.json"
    if not path.is_file():
        return []
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
    except (ValueError, AttributeError):
        return []
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):
        content = value.get("content")
        return content if isinstance(content, str) else None
    return value if isinstance(value, str) else None


def load_chat_tokenizer(
    model: str, *, reasoning_parser: str | None = None, tool_call_parser: str | None = None
) -> ChatTokenizer:
    """The tokenizer of `model`: a checkpoint directory, or a built-in model such as
    `builtin:tiny` (the built-in models share one tokenizer, whose files are rebuilt here with
    the `tokenizers` library; the weights are not needed)."""
    settings = {"reasoning_parser": reasoning_parser, "tool_call_parser": tool_call_parser}
    if model.startswith("builtin:"):
        from dressage.model.names import parse_builtin
        from dressage.model.tokenizer import build_tokenizer_files

        parse_builtin(model)

        with tempfile.TemporaryDirectory(prefix="dressage-proxy-tok-") as tmp:
            build_tokenizer_files(Path(tmp))
            return ChatTokenizer(Path(tmp), **settings)
    return ChatTokenizer(Path(model), **settings)


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
    reasoning = message.get("reasoning_content")
    if reasoning is not None:
        if not isinstance(reasoning, str):
            raise invalid(
                f"{where}.reasoning_content must be a string", f"{where}.reasoning_content"
            )
        if reasoning and role == "assistant":
            out["reasoning_content"] = reasoning
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
    """None to continue the segment, else why a new one starts: `tools_changed`,
    `history_rewrite` (the earlier messages differ from the conversation so far) or
    `template_not_append_only` (they match, but the template renders them differently now,
    as Qwen3's does with the reasoning of turns before the last user message). The session
    decides about the first turn."""
    messages: list[dict[str, Any]]
    tools_key: str
    rendered: str
    tools: list[Any] | None = None
    """The request's tools as sent: the reply is rendered with them, key order included (a
    template writes them with `tojson`, so the order is part of the text)."""
    template_kwargs: dict[str, Any] | None = None
    """The request's `chat_template_kwargs`; the reply is rendered with them too."""


def plan_chat_turn(
    tok: ChatTokenizer,
    state: ChatState | None,
    segment_tokens: list[int] | None,
    messages: list[dict[str, Any]],
    tools: list[Any] | None,
    template_kwargs: dict[str, Any] | None = None,
) -> ChatTurn:
    """The input tokens of a chat request given the session's state (pure but for tokenizing)."""
    key = tools_key(tools)
    full = tok.render(
        messages, tools or None, add_generation_prompt=True, template_kwargs=template_kwargs
    )

    def turn(input_ids: list[int], reason: str | None) -> ChatTurn:
        return ChatTurn(input_ids, reason, messages, key, full, tools or None, template_kwargs)

    if state is None or segment_tokens is None:
        return turn(tok.encode(full), "history_rewrite" if segment_tokens is not None else None)
    if key != state.tools_key:
        return turn(tok.encode(full), "tools_changed")
    k = len(state.messages)
    if len(messages) <= k or not _same_history(messages[:k], state.messages):
        return turn(tok.encode(full), "history_rewrite")
    if not full.startswith(state.rendered):
        return turn(tok.encode(full), "template_not_append_only")
    new_text = state.bridge + full[len(state.rendered) :]
    return turn(segment_tokens + tok.encode(new_text), None)


def _same_history(sent: list[dict[str, Any]], kept: list[dict[str, Any]]) -> bool:
    """Whether the agent's earlier messages are the conversation so far. An assistant message
    sent back without its `reasoning_content` still is (most clients drop the field): the
    template's rendering then decides whether the segment continues."""
    return all(
        a == b or ("reasoning_content" not in a and a == _without_reasoning(b))
        for a, b in zip(sent, kept, strict=True)
    )


def _without_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k != "reasoning_content"}


def after_reply(
    tok: ChatTokenizer, turn: ChatTurn, reply: dict[str, Any], output_ids: Sequence[int]
) -> ChatState:
    """The state after the model replied `reply` with `output_ids` to `turn`."""
    messages = [*turn.messages, reply]
    rendered = tok.render(
        messages, turn.tools, add_generation_prompt=False, template_kwargs=turn.template_kwargs
    )
    bridge = ""
    if rendered.startswith(turn.rendered):
        reply_text = rendered[len(turn.rendered) :]
        generated = tok.decode(output_ids, skip_special_tokens=False)
        if reply_text.startswith(generated):
            bridge = reply_text[len(generated) :]
        elif tok.eos_token and tok.eos_token in reply_text:
            # The reply as rendered differs from the generated text (special tokens dropped from
            # the content, reasoning spaced otherwise): close the reply the way the template
            # does, unless the model closed it with a stop token itself.
            after_eos = reply_text.rsplit(tok.eos_token, 1)[1]
            ended = bool(output_ids) and output_ids[-1] in tok.stop_token_ids
            bridge = after_eos if ended else tok.eos_token + after_eos
    return ChatState(messages, turn.tools_key, rendered, bridge)
