"""Tool calls in a model's output, parsed into the OpenAI chat shape.

A model family writes its tool calls in its own syntax; a parser turns the generated text into
OpenAI's `content` (the text outside the calls, None when nothing else is left) and
`tool_calls` (`{id, type: "function", function: {name, arguments}}`, `arguments` a JSON
string). The generated tokens are never changed: parsing only shapes the API answer.

Parsers (`PARSERS`):
- `hermes` (also `qwen`): Hermes / Qwen 2.5+ style, one JSON object per call between
  `<tool_call>` and `</tool_call>`: `{"name": ..., "arguments": {...}}`. A block whose JSON is
  malformed, is not such an object, or is not closed stays in `content` as plain text.
- `none`: no parsing; the whole text is content.

`select_tool_parser` picks the parser from a setting, else from the chat template (a template
that writes `<tool_call>` is Hermes style); Hermes is also the default, so a template that
does not render tools at all (the built-in tiny model's) still gets calls parsed.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ParsedReply:
    """A reply's text split into content and tool calls."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def new_call_id() -> str:
    """An OpenAI-style tool call id (`call_` and 24 hex digits)."""
    return "call_" + uuid.uuid4().hex[:24]


_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_hermes(text: str, make_id: Callable[[], str] = new_call_id) -> ParsedReply:
    """Split Hermes-style `<tool_call>{json}</tool_call>` blocks out of `text`.

    Text without a well-formed block is returned unchanged as content; with at least one call,
    the remaining text is stripped of surrounding whitespace and is None when empty.
    """
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    at = 0
    for match in _HERMES_BLOCK.finditer(text):
        call = _hermes_call(match.group(1))
        if call is None:
            continue  # malformed: the block stays in the content
        kept.append(text[at : match.start()])
        at = match.end()
        name, arguments = call
        calls.append(
            {
                "id": make_id(),
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
    if not calls:
        return ParsedReply(text)
    kept.append(text[at:])
    content = "".join(kept).strip()
    return ParsedReply(content or None, calls)


def _hermes_call(body: str) -> tuple[str, str] | None:
    """`(name, arguments as a JSON string)` of one block's JSON, or None when it is not a
    call object."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            json.loads(arguments)
        except ValueError:
            return None
        return name, arguments
    if not isinstance(arguments, dict):
        return None
    return name, json.dumps(arguments, ensure_ascii=False)


def parse_none(text: str, make_id: Callable[[], str] = new_call_id) -> ParsedReply:
    """No tool-call syntax: all of `text` is content."""
    return ParsedReply(text)


ToolParser = Callable[..., ParsedReply]

PARSERS: dict[str, ToolParser] = {"hermes": parse_hermes, "qwen": parse_hermes, "none": parse_none}
"""Tool-call parsers by name."""

_TEMPLATE_MARKERS: tuple[tuple[str, ToolParser], ...] = (("<tool_call>", parse_hermes),)
"""What a chat template writes for tool calls, and the parser of that syntax."""


def select_tool_parser(setting: str | None, chat_template: str) -> ToolParser:
    """The parser named by `setting` (`auto` or None: chosen from `chat_template`)."""
    if setting is None or setting == "auto":
        for marker, parser in _TEMPLATE_MARKERS:
            if marker in chat_template:
                return parser
        return parse_hermes
    try:
        return PARSERS[setting]
    except KeyError:
        known = ", ".join(sorted([*PARSERS, "auto"]))
        raise ValueError(f"unknown tool call parser {setting!r}; known: {known}") from None


def strip_stop(text: str, finish_reason: dict[str, Any], stop: list[str] | None) -> str:
    """`text` cut before the stop string that ended the generation, as OpenAI answers it.

    The engine reports the matched stop string in `finish_reason.matched`; only a string the
    request asked for is cut (a stop token id is not text)."""
    matched = finish_reason.get("matched")
    if finish_reason.get("type") != "stop" or not isinstance(matched, str) or not matched:
        return text
    if stop is not None and matched not in stop:
        return text
    at = text.find(matched)
    return text if at < 0 else text[:at]
