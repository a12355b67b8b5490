"""Tool calls read out of each family's syntax, as SGLang 0.5.23's detector of that family
reads them (`srt/function_call/<name>_detector.py`), whole or in pieces of any size."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.api.chat_formats import TOOL_CALL_PARSER_NAMES
from dressage.proxy.openai.reply import ReplyFormat, ReplyStream, assemble, parse_reply
from dressage.proxy.openai.tool_calls import ParsedReply, ToolCallStream, parse_tool_calls
from dressage.proxy.openai.tool_formats import HARMONY, TOOL_FORMATS

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


def _ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def _calls(parsed: ParsedReply) -> list[tuple[str, Any]]:
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls
    ]


def test_every_tool_call_parser_name_of_the_job_model_has_a_format() -> None:
    assert set(TOOL_CALL_PARSER_NAMES) - {"auto", "none"} == {*TOOL_FORMATS, HARMONY}


PARIS = {"city": "Paris", "days": 3}
EXAMPLES = [
    # hermes_detector.py / qwen25_detector.py: one JSON object per `<tool_call>` block.
    (
        "qwen",
        'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
        '\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        "Sure.",
        [("get_weather", PARIS), ("get_time", {})],
    ),
    # qwen3_coder_detector.py: XML parameters, typed by the declared schema.
    (
        "qwen3_coder",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        None,
        [("get_weather", PARIS)],
    ),
    # llama32_detector.py: `<|python_tag|>` JSON, `;`-separated; bare JSON at the start.
    (
        "llama3",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}; '
        '{"name": "get_time", "parameters": {}}',
        None,
        [("get_weather", PARIS), ("get_time", {})],
    ),
    ("llama3", '{"name": "get_time", "parameters": {}}', None, [("get_time", {})]),
    # mistral_detector.py: the JSON-array form and the compact `[ARGS]` form.
    (
        "mistral",
        'Let me check. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", '
        '"days": 3}}, {"name": "get_time", "arguments": {}}]',
        "Let me check.",
        [("get_weather", PARIS), ("get_time", {})],
    ),
    (
        "mistral",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]get_time[ARGS]{}',
        None,
        [("get_weather", PARIS), ("get_time", {})],
    ),
    # deepseekv3_detector.py: `function<｜tool▁sep｜>NAME` and a fenced JSON block.
    (
        "deepseekv3",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function'
        "<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        None,
        [("get_weather", PARIS), ("get_time", {})],
    ),
    # deepseekv31_detector.py: `NAME<｜tool▁sep｜>{json}`.
    (
        "deepseekv31",
        "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city": "Paris", "days": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        "Checking.",
        [("get_weather", PARIS)],
    ),
    # glm4_moe_detector.py: `<arg_key>`/`<arg_value>` pairs, typed by the schema.
    (
        "glm45",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n"
        "<tool_call>get_time\n</tool_call>",
        None,
        [("get_weather", PARIS), ("get_time", {})],
    ),
    # kimik2_detector.py: `functions.NAME:N` ids inside a section.
    (
        "kimi_k2",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|>'
        "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|>",
        None,
        [("get_weather", PARIS), ("get_time", {})],
    ),
]


@pytest.mark.parametrize(("name", "text", "content", "calls"), EXAMPLES)
def test_each_familys_calls_are_read_as_its_sglang_detector_reads_them(
    name: str, text: str, content: str | None, calls: list[tuple[str, Any]]
) -> None:
    parsed = parse_tool_calls(TOOL_FORMATS[name], text, TOOLS, make_id=_ids())
    assert (parsed.content, _calls(parsed)) == (content, calls)


def test_kimi_k2_calls_keep_the_id_the_model_wrote() -> None:
    text = "<|tool_call_begin|>functions.get_time:4<|tool_call_argument_begin|>{}<|tool_call_end|>"
    (call,) = parse_tool_calls(TOOL_FORMATS["kimi_k2"], text, TOOLS).tool_calls
    assert call["id"] == "functions.get_time:4"
    # A bare counter names the declared function whose parameters match best.
    text = '<|tool_call_begin|>7<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|>'
    (call,) = parse_tool_calls(TOOL_FORMATS["kimi_k2"], text, TOOLS).tool_calls
    assert (call["id"], call["function"]["name"]) == ("7", "get_weather")


def test_gpt_oss_harmony_channels_are_reasoning_preamble_and_calls() -> None:
    """gpt_oss_detector.py and the reasoning parser's GptOssDetector (harmony_parser.py)."""
    text = (
        "<|channel|>analysis<|message|>Need the weather.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris", "days": 3}<|call|>'
    )
    parsed = parse_reply(ReplyFormat(HARMONY, HARMONY), text, tools=TOOLS, make_id=_ids())
    assert parsed.reasoning_content == "Need the weather."
    assert parsed.content == "Checking."
    assert _calls(parsed) == [("get_weather", PARIS)]
    final = (
        "<|channel|>analysis<|message|>Easy.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>4<|return|>"
    )
    answer = parse_reply(ReplyFormat(HARMONY, HARMONY), final, tools=TOOLS)
    assert (answer.reasoning_content, answer.content, answer.tool_calls) == ("Easy.", "4", [])


@pytest.mark.parametrize(
    ("name", "block"),
    [
        ("hermes", "<tool_call>{oops}</tool_call>"),
        ("hermes", '<tool_call>{"arguments": {}}</tool_call>'),
        ("qwen3_coder", "<tool_call>no function here</tool_call>"),
        ("mistral", "[TOOL_CALLS] not json"),
        ("deepseekv3", "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{bad}<｜tool▁call▁end｜>"),
        (
            "kimi_k2",
            "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>[1]<|tool_call_end|>",
        ),
        ("glm45", "<tool_call></tool_call>"),
        # Cut before the block closed (the token budget ran out): it stays text.
        ("hermes", '<tool_call>{"name": "get_time", "arguments": {}}'),
        ("llama3", '<|python_tag|>{"name": "get_time", "parameters": {'),
    ],
)
def test_a_malformed_or_unfinished_block_stays_in_the_content(name: str, block: str) -> None:
    parsed = parse_tool_calls(TOOL_FORMATS[name], "x " + block, TOOLS)
    assert parsed == ParsedReply("x " + block, [])


def _write(name: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """`calls` in the family's syntax, as its model writes them."""

    def xml_value(v: Any) -> str:
        return v if isinstance(v, str) else json.dumps(v)

    if name in ("hermes", "qwen", "qwen25"):
        return "".join(
            f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>"
            for n, a in calls
        )
    if name == "qwen3_coder":
        return "".join(
            f"<tool_call>\n<function={n}>\n"
            + "".join(f"<parameter={k}>\n{xml_value(v)}\n</parameter>\n" for k, v in a.items())
            + "</function>\n</tool_call>"
            for n, a in calls
        )
    if name in ("glm", "glm45"):
        return "".join(
            f"<tool_call>{n}\n"
            + "".join(
                f"<arg_key>{k}</arg_key>\n<arg_value>{xml_value(v)}</arg_value>\n"
                for k, v in a.items()
            )
            + "</tool_call>"
            for n, a in calls
        )
    if name == "llama3":
        return "<|python_tag|>" + "; ".join(
            json.dumps({"name": n, "parameters": a}) for n, a in calls
        )
    if name == "mistral":
        return "".join(f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a)}" for n, a in calls)
    if name == "deepseekv3":
        body = "".join(
            f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{json.dumps(a)}\n```<｜tool▁call▁end｜>"
            for n, a in calls
        )
        return f"<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"
    if name == "deepseekv31":
        body = "".join(
            f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{json.dumps(a)}<｜tool▁call▁end｜>"
            for n, a in calls
        )
        return f"<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"
    assert name == "kimi_k2"
    body = "".join(
        f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{json.dumps(a)}<|tool_call_end|>"
        for i, (n, a) in enumerate(calls)
    )
    return f"<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"


_TEXT = st.text(alphabet="abc .,!?\n\t0123456789", max_size=20)
_CALL = st.tuples(
    st.just("get_weather"),
    st.fixed_dictionaries(
        {"city": st.text(alphabet="abcXYZ", min_size=1, max_size=6), "days": st.integers(0, 99)}
    ),
)


def _cut(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@given(
    st.sampled_from(sorted(TOOL_FORMATS)),
    _TEXT,
    st.lists(_CALL, min_size=1, max_size=3),
    _TEXT,
    st.lists(st.integers(min_value=0), max_size=10),
)
def test_calls_between_text_are_read_whole_or_in_any_pieces(
    name: str, before: str, calls: list[tuple[str, dict[str, Any]]], after: str, cuts: list[int]
) -> None:
    fmt = TOOL_FORMATS[name]
    if name == "llama3":
        after = ""  # a Llama 3 call block runs to the end of the reply
    text = before + _write(name, calls) + after
    whole = parse_tool_calls(fmt, text, TOOLS, make_id=_ids())
    assert _calls(whole) == calls
    # Whitespace next to the calls, and at the end of a reply with calls, is dropped.
    assert whole.content == ((before.rstrip() + after.strip()) or None)
    stream = ToolCallStream(fmt, TOOLS, make_id=_ids())
    pieces = [stream.feed(piece) for piece in _cut(text, cuts)]
    pieces.append(stream.finish())
    content = "".join(p.content for p in pieces)
    assert content == (whole.content or "")
    streamed = [call for p in pieces for _, call in p.calls]
    assert _calls(ParsedReply(None, streamed)) == calls
    if name == "mistral":  # Mistral's templates take 9 letters and digits only
        assert all(len(c["id"]) == 9 and c["id"].isalnum() for c in streamed)
    else:
        assert streamed == whole.tool_calls


_NOISE = st.lists(
    st.sampled_from(
        ["<tool_call>", "</tool_call>", "<function=f>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]",
         "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<|tool_call_begin|>", "<|tool_call_end|>",
         "<|channel|>", "<|message|>", "<|end|>", "<think>", "</think>", '{"name": "f"}', "{", "}",
         "<", "[", "x", " ", "\n"]
    ),
    max_size=14,
).map("".join)  # fmt: skip


@given(
    st.sampled_from(["none", "qwen3", "deepseek-r1", HARMONY]),
    st.sampled_from(sorted(TOOL_FORMATS)),
    _NOISE,
    st.lists(st.integers(min_value=0), max_size=10),
    st.booleans(),
)
def test_any_reply_streams_to_what_it_reads_whole(
    reasoning: str, tools: str, text: str, cuts: list[int], forced: bool
) -> None:
    fmt = ReplyFormat(reasoning, tools)
    whole = parse_reply(fmt, text, tools=TOOLS, forced_reasoning=forced, make_id=_ids())
    stream = ReplyStream(
        fmt, tools=TOOLS, parse_tools=True, forced_reasoning=forced, make_id=_ids()
    )
    deltas = [stream.feed(piece) for piece in _cut(text, cuts)]
    deltas.append(stream.finish())
    streamed = assemble(deltas)
    assert (streamed.content, streamed.reasoning_content) == (
        whole.content,
        whole.reasoning_content,
    )
    assert _calls(streamed) == _calls(whole)
