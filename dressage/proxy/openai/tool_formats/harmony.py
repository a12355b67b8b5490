"""gpt-oss replies: OpenAI's harmony format, whose channels carry reasoning, answer and calls.

A harmony reply is a sequence of messages, each a header and a body:
`[<|start|>assistant]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>BODY`
ended by `<|end|>`, `<|call|>` or `<|return|>` (the first message's `<|start|>assistant` is in
the generation prompt). The recipient may also stand in the header before the channel.
As SGLang 0.5.23 reads them (`srt/parser/harmony_parser.py`, `srt/parser/reasoning_parser.py`
`GptOssDetector`, `srt/function_call/gpt_oss_detector.py`):

- the `analysis` channel is reasoning;
- the `final` channel is the answer, and so is a `commentary` message with no recipient (a
  preamble the model shows the user before calling tools);
- a message to `functions.NAME` is a call of NAME with the JSON body as its arguments (another
  recipient, such as a built-in `browser.search`, is a call of that name).

Text before any header is answer text. A call whose body is not a JSON object, or that the
reply ended inside, stays in the content as the text it is; with tool parsing off every call
message does. `HarmonyStream` takes the reply in pieces of any size and gives the same result
as the whole text at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dressage.proxy.openai.reasoning import held_prefix

MESSAGE = "<|message|>"
TERMINATORS = ("<|end|>", "<|call|>", "<|return|>")
START = "<|start|>"
CHANNEL = "<|channel|>"
MARKERS = (START, CHANNEL, MESSAGE, "<|constrain|>", *TERMINATORS)
"""Every harmony marker (kept when the reply is decoded)."""
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL_NAME = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")


@dataclass
class HarmonyDelta:
    reasoning: str = ""
    content: str = ""
    calls: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True)
class _Header:
    raw: str
    channel: str | None
    recipient: str | None


def _header(raw: str) -> _Header:
    channel = _CHANNEL_NAME.search(raw)
    recipient = _RECIPIENT.search(raw)
    return _Header(
        raw, channel.group(1) if channel else None, recipient.group(1) if recipient else None
    )


class HarmonyStream:
    """Reads a harmony reply fed in pieces (see the module doc)."""

    def __init__(
        self,
        *,
        parse_tools: bool,
        make_id: Callable[[], str],
        separate_reasoning: bool = True,
    ) -> None:
        self.parse_tools = parse_tools
        self.make_id = make_id
        self.separate_reasoning = separate_reasoning
        self.count = 0
        """Calls read so far."""
        self._buffer = ""
        self._header: _Header | None = None
        """The header of the message whose body is being read (None between messages)."""
        self._out = HarmonyDelta()

    def feed(self, text: str) -> HarmonyDelta:
        self._buffer += text
        return self._drain(final=False)

    def finish(self) -> HarmonyDelta:
        return self._drain(final=True)

    def _drain(self, *, final: bool) -> HarmonyDelta:
        self._out = HarmonyDelta()
        while self._buffer:
            if self._header is None:
                if not self._read_header(final=final):
                    break
            elif not self._read_body(final=final):
                break
        return self._out

    def _read_header(self, *, final: bool) -> bool:
        buf = self._buffer
        if not buf.startswith("<|"):
            # Text outside any message: answer text up to the next marker.
            at = buf.find("<|")
            text = buf if at < 0 else buf[:at]
            hold = 0 if final or at >= 0 else held_prefix(text, MARKERS)
            self._out.content += text[: len(text) - hold]
            self._buffer = buf[len(text) - hold :]
            return at >= 0
        at = buf.find(MESSAGE)
        if at < 0:
            if final:  # a header the reply ended in: its text is kept
                self._out.content += buf
                self._buffer = ""
            return False
        self._header = _header(buf[:at])
        self._buffer = buf[at + len(MESSAGE) :]
        return True

    def _read_body(self, *, final: bool) -> bool:
        header = self._header
        assert header is not None
        buf = self._buffer
        ends = [(buf.find(t), t) for t in (*TERMINATORS, START) if t in buf]
        is_call = header.recipient is not None
        if not ends:
            if is_call:
                if final:  # the reply ended inside the call
                    self._out.content += header.raw + MESSAGE + buf
                    self._buffer = ""
                return False
            hold = 0 if final else held_prefix(buf, (*TERMINATORS, START))
            self._body_text(header, buf[: len(buf) - hold])
            self._buffer = buf[len(buf) - hold :]
            return False
        at, terminator = min(ends)
        body = buf[:at]
        self._buffer = buf[at + (0 if terminator == START else len(terminator)) :]
        self._header = None
        if is_call:
            self._call(header, body, buf[: at + (0 if terminator == START else len(terminator))])
        else:
            self._body_text(header, body)
        return True

    def _body_text(self, header: _Header, text: str) -> None:
        if header.channel == "analysis" and self.separate_reasoning:
            self._out.reasoning += text
        else:
            self._out.content += text

    def _call(self, header: _Header, body: str, raw: str) -> None:
        arguments = body.strip()
        try:
            valid = isinstance(json.loads(arguments), dict)
        except ValueError:
            valid = False
        if not (self.parse_tools and valid) or header.recipient is None:
            self._out.content += header.raw + MESSAGE + raw
            return
        name = header.recipient.removeprefix("functions.")
        call = {
            "id": self.make_id(),
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        self._out.calls.append((self.count, call))
        self.count += 1
