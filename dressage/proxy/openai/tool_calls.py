"""Tool calls in a model's reply, read into OpenAI's `tool_calls`, whole or in pieces.

A model family writes its tool calls in its own syntax (`dressage.proxy.openai.tool_formats` holds
one `ToolFormat` per family, each taken from SGLang's detector of that family). Every format
here is a sequence of *blocks* in the answer text: a block starts at one of the format's
openers and holds one or more calls; text outside blocks is the answer's `content`. The
generated tokens are never changed: reading calls only shapes the API answer.

`ToolCallStream` reads a reply fed in pieces of any size and gives exactly what reading the
whole text at once gives (`parse_tool_calls`):

- a block is answered as calls once it is complete; text that may be the start of an opener
  waits for the next piece;
- a block that is malformed (bad JSON, no function name) stays in `content` as the text it
  is, and so does a block the reply ended inside (the token budget ran out mid-call);
- whitespace next to a block is dropped (models put newlines around their calls), and with
  at least one call an empty `content` is None, as OpenAI answers.

Unlike SGLang, which keeps only the text before the first call and drops calls of functions
the request did not declare, every call and all the text outside the calls are answered: an
agent under training should see what its policy wrote.

Each call is `{id, type: "function", function: {name, arguments}}`, `arguments` a JSON
string. Its id is the one the model wrote when the format has one (Kimi-K2's
`functions.NAME:N`, which its template writes back), else a new one in the form the family's
template accepts (Mistral's 9 letters and digits), else a new `call_...` id.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dressage.proxy.openai.reasoning import held_prefix


@dataclass(frozen=True)
class ParsedReply:
    """A whole reply split into reasoning, content and tool calls."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning_content: str | None = None


def new_call_id() -> str:
    """An OpenAI-style tool call id (`call_` and 24 hex digits)."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(frozen=True)
class Call:
    """One call as a format reads it."""

    name: str
    arguments: str
    """The arguments as a JSON object's text."""
    id: str | None = None
    """The id the model wrote for the call, when its format has one."""


@dataclass(frozen=True)
class Block:
    """A complete block at the start of the text given to `ToolFormat.read_block`."""

    end: int
    """Where the block ends (> 0)."""
    calls: tuple[Call, ...] | None
    """Its calls; None when it is malformed (its text stays content)."""


Schemas = Mapping[str, Any]
"""Function name -> its `parameters` JSON schema, from the request's `tools`."""


class ToolFormat:
    """A tool-call syntax. Subclasses set `name`, `openers` (and `wrappers`, markers that
    frame blocks and are dropped from the content) and implement `read_block`."""

    name: str = ""
    openers: tuple[str, ...] = ()
    wrappers: tuple[str, ...] = ()
    extra_markers: tuple[str, ...] = ()
    """Other markers of the syntax (inside blocks), kept when the reply is decoded."""

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker of the syntax: the reply is decoded with these kept even when the
        tokenizer calls them special tokens."""
        return (*self.openers, *self.wrappers, *self.extra_markers)

    def new_call_id(self) -> str | None:
        """An id for a call the model wrote without one, in the form the family's template
        requires (None: any, a `call_...` id)."""
        return None

    def find_opener(self, text: str, *, at_start: bool) -> tuple[int, str]:
        """(index, marker) of the first opener or wrapper in `text`, (-1, "") if none;
        `at_start` tells that `text` starts the answer."""
        best, found = -1, ""
        for marker in (*self.openers, *self.wrappers):
            at = text.find(marker)
            if at >= 0 and (best < 0 or at < best):
                best, found = at, marker
        return best, found

    def read_block(self, text: str, schemas: Schemas, *, final: bool) -> Block | None:
        """The block at the start of `text` (which starts with an opener), or None when it is
        not complete yet (`final`: the reply ends with `text`)."""
        raise NotImplementedError


@dataclass
class ToolCallDelta:
    """What one piece of a reply adds: content text and complete calls (with their index)."""

    content: str = ""
    calls: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


class ToolCallStream:
    """Reads tool calls out of answer text fed in pieces (see the module doc)."""

    def __init__(
        self,
        fmt: ToolFormat,
        tools: Sequence[Any] | None,
        *,
        make_id: Callable[[], str] = new_call_id,
    ) -> None:
        self.fmt = fmt
        self.schemas = tool_schemas(tools)
        self.make_id = make_id
        self.count = 0
        """Calls read so far."""
        self._buffer = ""
        self._at_start = True
        self._held_space = ""
        self._after_block = False
        self._out: ToolCallDelta = ToolCallDelta()

    def feed(self, text: str) -> ToolCallDelta:
        self._buffer += text
        return self._drain(final=False)

    def finish(self) -> ToolCallDelta:
        out = self._drain(final=True)
        if not self.count:
            out.content += self._held_space
        self._held_space = ""
        return out

    def _drain(self, *, final: bool) -> ToolCallDelta:
        fmt = self.fmt
        self._out = ToolCallDelta()
        while self._buffer:
            buf = self._buffer
            at, marker = fmt.find_opener(buf, at_start=self._at_start)
            if at < 0:
                hold = 0 if final else held_prefix(buf, (*fmt.openers, *fmt.wrappers))
                self._content(buf[: len(buf) - hold])
                self._buffer = buf[len(buf) - hold :]
                break
            if at:
                self._content(buf[:at])
                buf = self._buffer = buf[at:]
            if marker in fmt.wrappers:
                self._buffer = buf[len(marker) :]
                self._boundary()
                continue
            block = fmt.read_block(buf, self.schemas, final=final)
            if block is None:
                if final:  # the reply ended inside the block: it stays text
                    self._content(buf)
                    self._buffer = ""
                break
            assert block.end > 0, f"{fmt.name}: an empty block"
            if block.calls is None:
                self._content(buf[: block.end])
            else:
                self._boundary()
                for call in block.calls:
                    self._out.calls.append((self.count, self._openai_call(call)))
                    self.count += 1
            self._buffer = buf[block.end :]
        return self._out

    def _content(self, text: str) -> None:
        if not text:
            return
        self._at_start = False
        if self._after_block:
            text = text.lstrip()
            if not text:
                return
            self._after_block = False
        text = self._held_space + text
        kept = text.rstrip()
        self._held_space = text[len(kept) :]
        self._out.content += kept

    def _boundary(self) -> None:
        """A block or a wrapper: the whitespace around it is dropped."""
        self._at_start = False
        self._held_space = ""
        self._after_block = True

    def _openai_call(self, call: Call) -> dict[str, Any]:
        return {
            "id": call.id or self.fmt.new_call_id() or self.make_id(),
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }


def parse_tool_calls(
    fmt: ToolFormat,
    text: str,
    tools: Sequence[Any] | None = None,
    *,
    make_id: Callable[[], str] = new_call_id,
) -> ParsedReply:
    """The content and tool calls of a whole answer."""
    stream = ToolCallStream(fmt, tools, make_id=make_id)
    first, last = stream.feed(text), stream.finish()
    calls = [call for _, call in first.calls + last.calls]
    content = first.content + last.content
    return ParsedReply(content or (None if calls else ""), calls)


def tool_schemas(tools: Sequence[Any] | None) -> dict[str, Any]:
    """Function name -> `parameters` schema of the request's `tools` (entries that are not
    function tools are left out: the endpoint has checked their shape)."""
    out: dict[str, Any] = {}
    for tool in tools or ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            out[function["name"]] = function.get("parameters")
    return out


def json_call(data: object) -> Call | None:
    """A call from a `{"name": ..., "arguments" | "parameters": {...}}` object; None when
    `data` is not one. Arguments given as a JSON string are kept as written."""
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
        return Call(name, arguments)
    if not isinstance(arguments, dict):
        return None
    return Call(name, json.dumps(arguments, ensure_ascii=False))


def json_extent(text: str, start: int) -> int | None:
    """The end of the JSON object or array that starts at `text[start]` (`{` or `[`), found by
    matching brackets outside strings; None when the text ends before it closes. Whether
    the span is valid JSON is for `json.loads` to say."""
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


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
