"""A model's reply read into OpenAI's assistant message: reasoning, content and tool calls.

`ReplyFormat` names the model family's reasoning parser (`dressage.proxy.openai.reasoning`) and
tool-call parser (`dressage.proxy.openai.tool_formats`), SGLang's names, resolved from the job's
settings or, for `auto`, from the chat template (`dressage.proxy.openai.template_detection`).
`ReplyStream` reads a reply in pieces of any size: reasoning is split off first, then tool
calls are read from what remains (the answer), as SGLang's chat serving does; gpt-oss's
harmony channels carry both and are read together. Reading the whole reply at once
(`parse_reply`) gives what streaming it gives, piece for piece.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from dressage.api.chat_formats import REASONING_PARSER_NAMES, TOOL_CALL_PARSER_NAMES
from dressage.proxy.openai.reasoning import (
    HARMONY,
    THINK_FORMATS,
    ReasoningSplitter,
    ThinkFormat,
    opens_reasoning,
)
from dressage.proxy.openai.template_detection import (
    detect_reasoning_parser,
    detect_tool_call_parser,
)
from dressage.proxy.openai.tool_calls import ParsedReply, ToolCallStream, ToolFormat, new_call_id
from dressage.proxy.openai.tool_formats import TOOL_FORMATS
from dressage.proxy.openai.tool_formats.harmony import MARKERS as HARMONY_MARKERS
from dressage.proxy.openai.tool_formats.harmony import HarmonyStream


@dataclass(frozen=True)
class ReplyFormat:
    """The reasoning and tool-call parsers of a model family (SGLang names, `none` for
    none)."""

    reasoning: str = "none"
    tools: str = "hermes"

    @property
    def harmony(self) -> bool:
        return HARMONY in (self.reasoning, self.tools)

    @property
    def think(self) -> ThinkFormat | None:
        return None if self.harmony else THINK_FORMATS.get(self.reasoning)

    @property
    def tool_format(self) -> ToolFormat | None:
        return None if self.harmony else TOOL_FORMATS.get(self.tools)

    @property
    def markers(self) -> frozenset[str]:
        """The markers the reply must be decoded with, special tokens or not."""
        if self.harmony:
            return frozenset(HARMONY_MARKERS)
        think, tools = self.think, self.tool_format
        return frozenset((*(think.markers if think else ()), *(tools.markers if tools else ())))

    def starts_in_reasoning(self, prompt: str) -> bool:
        """Whether a reply to `prompt` (rendered, generation prompt included) starts inside
        reasoning (see `dressage.proxy.openai.reasoning`)."""
        think = self.think
        return think is not None and (think.always_forced or opens_reasoning(think, prompt))


def resolve_reply_format(
    reasoning: str | None, tools: str | None, template: str, vocab: Collection[str]
) -> ReplyFormat:
    """The parsers named by the settings (`auto` or None: implied by `template`, with the
    tokenizer's `vocab`); ValueError naming an unknown one and the known ones."""
    reasoning = reasoning or "auto"
    tools = tools or "auto"
    for setting, value, known in (
        ("reasoning parser", reasoning, REASONING_PARSER_NAMES),
        ("tool call parser", tools, TOOL_CALL_PARSER_NAMES),
    ):
        if value not in known:
            raise ValueError(f"unknown {setting} {value!r}; known: {', '.join(sorted(known))}")
    if reasoning == "auto":
        reasoning = detect_reasoning_parser(template, vocab)
    if tools == "auto":
        tools = detect_tool_call_parser(template, vocab)
    return ReplyFormat(reasoning, tools)


@dataclass
class ReplyDelta:
    """What one piece of a reply adds to the assistant message."""

    reasoning: str = ""
    content: str = ""
    calls: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    """Complete tool calls, each with its index in the reply."""


class ReplyStream:
    """Reads a reply fed in pieces into reasoning, content and tool calls.

    `parse_tools` is False when the request has no tools or `tool_choice` is `none`;
    `forced_reasoning` tells that the prompt left the reply inside reasoning
    (`ReplyFormat.starts_in_reasoning`); `separate_reasoning=False` leaves reasoning in the
    content (SGLang's request field of that name).
    """

    def __init__(
        self,
        fmt: ReplyFormat,
        *,
        tools: Sequence[Any] | None,
        parse_tools: bool,
        forced_reasoning: bool,
        separate_reasoning: bool = True,
        make_id: Callable[[], str] = new_call_id,
    ) -> None:
        self._harmony: HarmonyStream | None = None
        self._splitter: ReasoningSplitter | None = None
        self._tools: ToolCallStream | None = None
        if fmt.harmony:
            self._harmony = HarmonyStream(
                parse_tools=parse_tools, make_id=make_id, separate_reasoning=separate_reasoning
            )
            return
        think, tool_format = fmt.think, fmt.tool_format
        if think is not None and separate_reasoning:
            self._splitter = ReasoningSplitter(think, forced=forced_reasoning)
        if tool_format is not None and parse_tools:
            self._tools = ToolCallStream(tool_format, tools, make_id=make_id)

    def feed(self, text: str) -> ReplyDelta:
        """What the next piece of the reply, `text`, completes."""
        if self._harmony is not None:
            got = self._harmony.feed(text)
            return ReplyDelta(got.reasoning, got.content, got.calls)
        reasoning, answer = self._splitter.feed(text) if self._splitter else ("", text)
        return self._answer(reasoning, answer, final=False)

    def finish(self) -> ReplyDelta:
        """What is still held back at the end of the reply."""
        if self._harmony is not None:
            got = self._harmony.finish()
            return ReplyDelta(got.reasoning, got.content, got.calls)
        reasoning, answer = self._splitter.finish() if self._splitter else ("", "")
        return self._answer(reasoning, answer, final=True)

    def _answer(self, reasoning: str, answer: str, *, final: bool) -> ReplyDelta:
        if self._tools is None:
            return ReplyDelta(reasoning, answer)
        got = self._tools.feed(answer)
        if final:
            last = self._tools.finish()
            got.content += last.content
            got.calls += last.calls
        return ReplyDelta(reasoning, got.content, got.calls)


def parse_reply(
    fmt: ReplyFormat,
    text: str,
    *,
    tools: Sequence[Any] | None = None,
    parse_tools: bool = True,
    forced_reasoning: bool = False,
    separate_reasoning: bool = True,
    make_id: Callable[[], str] = new_call_id,
) -> ParsedReply:
    """The assistant message of a whole reply."""
    stream = ReplyStream(
        fmt,
        tools=tools,
        parse_tools=parse_tools,
        forced_reasoning=forced_reasoning,
        separate_reasoning=separate_reasoning,
        make_id=make_id,
    )
    return assemble([stream.feed(text), stream.finish()])


def assemble(deltas: Sequence[ReplyDelta]) -> ParsedReply:
    """The assistant message that a reply's deltas add up to."""
    reasoning = "".join(d.reasoning for d in deltas)
    content = "".join(d.content for d in deltas)
    calls = [call for d in deltas for _, call in d.calls]
    return ParsedReply(content or (None if calls else ""), calls, reasoning or None)
