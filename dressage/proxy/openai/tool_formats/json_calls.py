"""Tool-call syntaxes whose calls are JSON objects: Hermes / Qwen, Llama 3, Mistral.

Each is taken from SGLang 0.5.23's detector of the family (`srt/function_call/`):

- `HermesFormat` (`hermes_detector.py`, `qwen25_detector.py`; names `hermes`, `qwen`,
  `qwen25`): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call
  (Qwen writes a newline inside each tag; a block may also hold a JSON list of calls).
- `Llama3Format` (`llama32_detector.py`; `llama3`): `<|python_tag|>{"name": ...,
  "parameters": {...}}`, several calls separated by `;`, to the end of the reply; a reply
  that starts with `{` is read the same way (Llama 3.1-3.3 answer custom tools with bare
  JSON).
- `MistralFormat` (`mistral_detector.py`; `mistral`): `[TOOL_CALLS] [{"name": ...,
  "arguments": {...}}, ...]` (v0.3 tokenizers), or `[TOOL_CALLS]name[ARGS]{...}` per call
  (v11+ tokenizers, which may also write `[CALL_ID]id` before `[ARGS]`). A call gets a
  9-character id, the only kind Mistral's templates render back.
"""

from __future__ import annotations

import json
import re
import secrets
import string

from dressage.proxy.openai.tool_calls import (
    Block,
    Call,
    Schemas,
    ToolFormat,
    json_call,
    json_extent,
)


def _json_calls(text: str) -> tuple[Call, ...] | None:
    """The calls of a JSON call object or list of them; None unless every entry is one."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    items = data if isinstance(data, list) else [data]
    calls = tuple(json_call(item) for item in items)
    if not calls or any(call is None for call in calls):
        return None
    return calls  # type: ignore[return-value]


class HermesFormat(ToolFormat):
    name = "hermes"
    openers = ("<tool_call>",)
    extra_markers = ("</tool_call>",)
    closer = "</tool_call>"

    def read_block(self, text: str, schemas: Schemas, *, final: bool) -> Block | None:
        end = text.find(self.closer, len(self.openers[0]))
        if end < 0:
            return None
        return Block(end + len(self.closer), _json_calls(text[len(self.openers[0]) : end]))


class Llama3Format(ToolFormat):
    name = "llama3"
    openers = ("<|python_tag|>",)
    separator = ";"

    def find_opener(self, text: str, *, at_start: bool) -> tuple[int, str]:
        if at_start and text.startswith("{"):
            return 0, "{"
        return super().find_opener(text, at_start=at_start)

    def read_block(self, text: str, schemas: Schemas, *, final: bool) -> Block | None:
        if not final:
            return None  # a block runs to the end of the reply
        at = 0 if text.startswith("{") else len(self.openers[0])
        calls: list[Call] = []
        end = at
        while True:
            start = _skip(text, end, " \t\r\n" + self.separator if calls else " \t\r\n")
            if start >= len(text) or text[start] != "{":
                break
            close = json_extent(text, start)
            call = None
            if close is not None:
                try:
                    call = json_call(json.loads(text[start:close]))
                except ValueError:
                    call = None
            if call is None:
                break
            calls.append(call)
            end = close  # type: ignore[assignment]
        if not calls:
            return Block(len(text), None)
        return Block(end, tuple(calls))


class MistralFormat(ToolFormat):
    name = "mistral"
    openers = ("[TOOL_CALLS]",)
    extra_markers = ("[ARGS]", "[CALL_ID]")

    def new_call_id(self) -> str:
        """Mistral's templates refuse any other tool call id than 9 letters and digits."""
        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))

    _COMPACT = re.compile(r"([A-Za-z0-9_.\-]+)(?:\[CALL_ID\]([A-Za-z0-9]+))?\[ARGS\]")

    def read_block(self, text: str, schemas: Schemas, *, final: bool) -> Block | None:
        at = _skip(text, len(self.openers[0]), " \t\r\n")
        if at >= len(text):
            return Block(len(self.openers[0]), None) if final else None
        if text[at] == "[":
            close = json_extent(text, at)
            if close is None:
                return Block(len(self.openers[0]), None) if final else None
            return Block(close, _json_calls(text[at:close]))
        match = self._COMPACT.match(text, at)
        if match is None:
            if not final and _compact_prefix(text[at:]):
                return None  # may still become `name[ARGS]`
            return Block(len(self.openers[0]), None)
        start = _skip(text, match.end(), " \t\r\n")
        close = json_extent(text, start) if start < len(text) and text[start] == "{" else -1
        if close is None or (close < 0 and start >= len(text)):
            return Block(len(self.openers[0]), None) if final else None
        call = None
        if close > 0:
            try:
                arguments = json.loads(text[start:close])
            except ValueError:
                arguments = None
            call = json_call({"name": match.group(1), "arguments": arguments})
        if call is None:
            return Block(len(self.openers[0]), None)
        if match.group(2):
            call = Call(call.name, call.arguments, match.group(2))
        return Block(close, (call,))


def _compact_prefix(rest: str) -> bool:
    """Whether `rest` may be the beginning of `name[ARGS]` or `name[CALL_ID]id[ARGS]`."""
    tail = rest[re.match(r"[A-Za-z0-9_.\-]*", rest).end() :]  # type: ignore[union-attr]
    if tail.startswith("[CALL_ID]"):
        after = tail[len("[CALL_ID]") :]
        tail = after[re.match(r"[A-Za-z0-9]*", after).end() :]  # type: ignore[union-attr]
        return "[ARGS]".startswith(tail)
    return "[ARGS]".startswith(tail) or "[CALL_ID]".startswith(tail)


def _skip(text: str, at: int, chars: str) -> int:
    while at < len(text) and text[at] in chars:
        at += 1
    return at
