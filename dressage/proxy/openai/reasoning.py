"""Reasoning in a model's reply, split from its answer: OpenAI's `reasoning_content`.

Reasoning models write their thinking between two markers before the answer
(`<think>...</think>answer` for Qwen3, DeepSeek-R1, GLM-4.5, Kimi-K2; `◁think▷...◁/think▷` for
Kimi; `[THINK]...[/THINK]` for Mistral). The formats and their names are SGLang's reasoning
parsers (0.5.23 `srt/parser/reasoning_parser.py`, `ReasoningParser.DetectorMap`); gpt-oss's
harmony channels are read with its tool calls (`dressage.proxy.openai.tool_formats.harmony`).

The split follows SGLang's `BaseReasoningFormatDetector`:

- the reply is reasoning from its start when the prompt left it inside a reasoning block, or
  when the parser always assumes so (`always_forced`: DeepSeek-R1 and Qwen3-thinking models
  think without writing the opening marker); otherwise only when the reply begins with the
  opening marker, after whitespace if any (repeated opening markers are skipped);
- reasoning ends at the closing marker (dropped) or at the format's tool-call opening (kept:
  Qwen3 and GLM-4.5 sometimes call a tool without closing their thinking), whichever comes
  first;
- a reply cut before reasoning ended (the token budget ran out) is all reasoning.

One difference from SGLang: an opening marker that does not begin an unforced reply is text
(SGLang's one-shot parse treats the whole reply as reasoning then, and its streaming parse does
not). `ReasoningSplitter` takes the reply in pieces of any size and gives the same split as the
whole text at once: pieces that may be the start of a marker are held back until the next piece
tells.

Whether the prompt left the reply inside reasoning is read from the rendered prompt itself
(`opens_reasoning`): a template that opens the block in its generation prompt (Qwen3-thinking,
DeepSeek-R1, DeepSeek-V3.1 with `thinking`) makes the model start inside it, one that writes an
empty block (Qwen3 with `enable_thinking: false`) makes it start outside. SGLang decides the
same from per-parser defaults and `chat_template_kwargs`; reading the prompt needs neither.
The tokens are never changed: only the answer to the client is shaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class ThinkFormat:
    """One marker-delimited reasoning format."""

    name: str
    start: str
    end: str
    tool_start: str | None = None
    """Text that ends reasoning when it appears before `end` (kept as part of the answer)."""
    always_forced: bool = False
    """The reply is reasoning from its start whatever the prompt (SGLang: `force_reasoning`
    fixed to True)."""

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker of the format (kept when the reply is decoded)."""
        return tuple(m for m in (self.start, self.end, self.tool_start) if m)


_QWEN3 = ("<think>", "</think>", "<tool_call>")
"""SGLang `Qwen3Detector`: also `dots`, `interns1`, `nanbeige`, `mimo`, `poolside_v1`
(`_MimoDetector`, `_PoolsideV1Detector` change only the default of `enable_thinking`)."""


def _think(
    name: str, start: str, end: str, tool_start: str | None = None, *, forced: bool = False
) -> ThinkFormat:
    return ThinkFormat(name, start, end, tool_start, forced)


THINK_FORMATS: dict[str, ThinkFormat] = {
    f.name: f
    for f in (
        # `DeepSeekR1Detector` (force_reasoning always True): also `step3`, `step3p5`,
        # `gigachat35`.
        _think("deepseek-r1", "<think>", "</think>", forced=True),
        _think("step3", "<think>", "</think>", forced=True),
        _think("step3p5", "<think>", "</think>", forced=True),
        _think("gigachat35", "<think>", "</think>", forced=True),
        # `Qwen3Detector` and its subclasses; `qwen3-thinking` and `minimax` are forced in
        # `ReasoningParser.__init__`.
        _think("qwen3", *_QWEN3),
        _think("qwen3-thinking", *_QWEN3, forced=True),
        _think("minimax", *_QWEN3, forced=True),
        _think("dots", *_QWEN3),
        _think("interns1", *_QWEN3),
        _think("nanbeige", *_QWEN3),
        _think("mimo", *_QWEN3),
        _think("poolside_v1", *_QWEN3),
        _think("deepseek-v3", *_QWEN3),  # `_DeepSeekV3Detector(Qwen3Detector)`
        _think("glm45", "<think>", "</think>", "<tool_call>"),  # `Glm45Detector`
        _think("nemotron_3", "<think>", "</think>", "<tool_call>"),  # `Nemotron3Detector`
        _think("kimi", "◁think▷", "◁/think▷"),  # `KimiDetector`
        _think("kimi_k2", "<think>", "</think>", "<|tool_calls_section_begin|>"),
        _think("mistral", "[THINK]", "[/THINK]"),  # `MistralDetector`
    )
}
"""Marker-delimited reasoning formats by SGLang name."""

HARMONY = "gpt-oss"
"""gpt-oss's reasoning is its `analysis` channel, read by the harmony reply parser."""


def opens_reasoning(fmt: ThinkFormat, prompt: str) -> bool:
    """Whether `prompt` (the rendered prompt, generation prompt included) leaves the model's
    reply inside a reasoning block: its last opening marker comes after its last closing
    one."""
    opened = prompt.rfind(fmt.start)
    return opened >= 0 and opened > prompt.rfind(fmt.end)


class _State(Enum):
    START = "start"
    """Nothing read yet: an opening marker here starts reasoning, anything else is answer."""
    OPEN = "open"
    """In reasoning, before any reasoning text: further opening markers are skipped."""
    REASONING = "reasoning"
    ANSWER = "answer"


def held_prefix(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that is a proper prefix of one of `markers` (what
    must wait for the next piece before it can be told from text)."""
    longest = 0
    for marker in markers:
        for n in range(min(len(text), len(marker) - 1), longest, -1):
            if marker.startswith(text[-n:]):
                longest = n
                break
    return longest


class ReasoningSplitter:
    """Splits a reply, fed in pieces, into reasoning and answer text (see the module doc)."""

    def __init__(self, fmt: ThinkFormat, *, forced: bool) -> None:
        self.fmt = fmt
        self._state = _State.OPEN if forced or fmt.always_forced else _State.START
        self._buffer = ""

    @property
    def in_reasoning(self) -> bool:
        return self._state in (_State.OPEN, _State.REASONING)

    def feed(self, text: str) -> tuple[str, str]:
        """`(reasoning, answer)` text that `text` (the next piece of the reply) completes."""
        self._buffer += text
        return self._drain(final=False)

    def finish(self) -> tuple[str, str]:
        """`(reasoning, answer)` text still held back, at the end of the reply."""
        return self._drain(final=True)

    def _drain(self, *, final: bool) -> tuple[str, str]:
        fmt = self.fmt
        reasoning: list[str] = []
        answer: list[str] = []
        while True:
            buf = self._buffer
            if self._state in (_State.START, _State.OPEN):
                # A reply may open with whitespace before the marker (GLM-4.5 writes
                # `\n<think>`); once reasoning is open, only markers are skipped.
                head = buf.lstrip() if self._state is _State.START else buf
                if head.startswith(fmt.start):
                    self._buffer = head[len(fmt.start) :]
                    self._state = _State.OPEN
                    continue
                if not final and fmt.start.startswith(head):
                    break  # may still become the opening marker
                self._state = _State.REASONING if self._state is _State.OPEN else _State.ANSWER
                continue
            if self._state is _State.REASONING:
                cut, resume = _reasoning_end(buf, fmt)
                if cut >= 0:
                    reasoning.append(buf[:cut])
                    self._buffer = buf[resume:]
                    self._state = _State.ANSWER
                    continue
                hold = 0 if final else held_prefix(buf, fmt.markers[1:])
                reasoning.append(buf[: len(buf) - hold])
                self._buffer = buf[len(buf) - hold :]
                break
            answer.append(buf)
            self._buffer = ""
            break
        return "".join(reasoning), "".join(answer)


def _reasoning_end(text: str, fmt: ThinkFormat) -> tuple[int, int]:
    """(where reasoning ends in `text`, where the answer starts), (-1, -1) if not yet: at the
    closing marker (dropped) or the tool-call opening (kept), the earlier one."""
    end = text.find(fmt.end)
    tool = text.find(fmt.tool_start) if fmt.tool_start else -1
    if tool >= 0 and (end < 0 or tool < end):
        return tool, tool
    if end >= 0:
        return end, end + len(fmt.end)
    return -1, -1


def split_reasoning(fmt: ThinkFormat, text: str, *, forced: bool) -> tuple[str | None, str]:
    """`(reasoning or None, answer)` of a whole reply."""
    splitter = ReasoningSplitter(fmt, forced=forced)
    r1, a1 = splitter.feed(text)
    r2, a2 = splitter.finish()
    return (r1 + r2) or None, a1 + a2
