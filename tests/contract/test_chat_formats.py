"""The proxy's reasoning and tool-call parsers against SGLang's own, on the same replies.

For every format both sides have, each reply of a corpus (written in the family's syntax,
text around calls, parallel calls, reasoning cut by the budget) is read by SGLang's detector
(`srt/function_call/<name>_detector.py` `detect_and_parse`, `srt/parser/reasoning_parser.py`
`ReasoningParser.parse_non_stream`) and by the proxy (`dressage.proxy.openai.reply`), and the two
must agree: the same calls (name and arguments), the same text before the first call, the
same reasoning and answer. Where the proxy differs on purpose (it keeps text after the calls
and calls of undeclared functions, which SGLang drops) the corpus does not go.

SGLang 0.5.2 strips the whitespace around reasoning and answer; 0.5.23 keeps it, as the proxy
does, so on 0.5.2 the comparison is of stripped text.
"""

from __future__ import annotations

import importlib
import json
import warnings
from typing import Any

import pytest

from dressage.proxy.openai.reasoning import THINK_FORMATS, split_reasoning
from dressage.proxy.openai.reply import ReplyFormat, parse_reply
from dressage.proxy.openai.tool_calls import parse_tool_calls
from dressage.proxy.openai.tool_formats import TOOL_FORMATS

pytestmark = pytest.mark.contract

DETECTORS = {
    "hermes": ("hermes_detector", "HermesDetector"),
    "qwen": ("qwen25_detector", "Qwen25Detector"),
    "qwen25": ("qwen25_detector", "Qwen25Detector"),
    "qwen3_coder": ("qwen3_coder_detector", "Qwen3CoderDetector"),
    "llama3": ("llama32_detector", "Llama32Detector"),
    "mistral": ("mistral_detector", "MistralDetector"),
    "deepseekv3": ("deepseekv3_detector", "DeepSeekV3Detector"),
    "deepseekv31": ("deepseekv31_detector", "DeepSeekV31Detector"),
    "glm": ("glm4_moe_detector", "Glm4MoeDetector"),
    "glm45": ("glm4_moe_detector", "Glm4MoeDetector"),
    "kimi_k2": ("kimik2_detector", "KimiK2Detector"),
    "gpt-oss": ("gpt_oss_detector", "GptOssDetector"),
}
"""SGLang's detector of each tool-call parser name (its `ToolCallParserEnum`)."""


def _import(module: str) -> Any:
    with warnings.catch_warnings():  # SGLang's dependencies warn on import
        warnings.simplefilter("ignore")
        return importlib.import_module(module)


def _detector(name: str) -> Any:
    module, cls = DETECTORS[name]
    try:
        return getattr(_import(f"sglang.srt.function_call.{module}"), cls)()
    except (ImportError, AttributeError):
        pytest.skip(f"this SGLang release has no {cls}")


TOOLS_JSON: list[dict[str, Any]] = [
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
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
        },
    },
]
W = ("get_weather", {"city": "Paris", "days": 3})
T = ("get_time", {"zone": "CET"})


def _j(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments)


def _write(name: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    if name in ("hermes", "qwen", "qwen25"):
        return "\n".join(
            f'<tool_call>\n{{"name": "{n}", "arguments": {_j(a)}}}\n</tool_call>' for n, a in calls
        )
    if name == "qwen3_coder":
        return "\n".join(
            f"<tool_call>\n<function={n}>\n"
            + "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in a.items())
            + "</function>\n</tool_call>"
            for n, a in calls
        )
    if name in ("glm", "glm45"):
        return "\n".join(
            f"<tool_call>{n}\n"
            + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in a.items())
            + "</tool_call>"
            for n, a in calls
        )
    if name == "llama3":
        return "<|python_tag|>" + ";".join(
            f'{{"name": "{n}", "parameters": {_j(a)}}}' for n, a in calls
        )
    if name == "mistral":
        return (
            "[TOOL_CALLS] ["
            + ", ".join(f'{{"name": "{n}", "arguments": {_j(a)}}}' for n, a in calls)
            + "]"
        )
    if name == "deepseekv3":
        return (
            "<｜tool▁calls▁begin｜>"
            + "\n".join(
                f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{_j(a)}\n```<｜tool▁call▁end｜>"
                for n, a in calls
            )
            + "<｜tool▁calls▁end｜>"
        )
    if name == "deepseekv31":
        return (
            "<｜tool▁calls▁begin｜>"
            + "".join(
                f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{_j(a)}<｜tool▁call▁end｜>"
                for n, a in calls
            )
            + "<｜tool▁calls▁end｜>"
        )
    if name == "kimi_k2":
        return (
            "<|tool_calls_section_begin|>"
            + "".join(
                f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{_j(a)}"
                "<|tool_call_end|>"
                for i, (n, a) in enumerate(calls)
            )
            + "<|tool_calls_section_end|>"
        )
    assert name == "gpt-oss"
    return "<|start|>assistant".join(
        f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>{_j(a)}<|call|>"
        for n, a in calls
    )


CASES = [
    ("", [W]),
    ("I will look that up.", [W]),
    ("Both at once.", [W, T]),
    ("", [T, W, T]),
]


@pytest.mark.parametrize("name", sorted(DETECTORS))
@pytest.mark.parametrize(("before", "calls"), CASES)
def test_tool_calls_read_as_sglangs_detector_reads_them(
    name: str, before: str, calls: list[tuple[str, dict[str, Any]]]
) -> None:
    detector = _detector(name)
    protocol = _import("sglang.srt.entrypoints.openai.protocol")
    tools = [protocol.Tool.model_validate(t) for t in TOOLS_JSON]
    if name == "gpt-oss" and len(calls) > 1:
        calls = calls[:1]  # harmony: the model stops after each call
    if name == "gpt-oss":
        # Text before a call is a preamble message; SGLang finds calls by their full header,
        # the first message's included.
        preamble = f"<|channel|>commentary<|message|>{before}<|end|>" if before else ""
        text = "<|start|>assistant" + "<|start|>assistant".join(
            m for m in (preamble, _write(name, calls)) if m
        )
    else:
        text = (before + " " if before else "") + _write(name, calls)
    theirs = detector.detect_and_parse(text, tools)
    their_calls = [(c.name, json.loads(c.parameters)) for c in theirs.calls]
    if name == "gpt-oss":
        ours = parse_reply(ReplyFormat("gpt-oss", "gpt-oss"), text, tools=TOOLS_JSON)
    else:
        ours = parse_tool_calls(TOOL_FORMATS[name], text, TOOLS_JSON)
    our_calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in ours.tool_calls
    ]
    assert our_calls == their_calls == calls
    assert (ours.content or "") == theirs.normal_text.strip()


REASONING_CASES = [
    # (text, prompt opened reasoning)
    ("<think>Plan it.</think>The answer.", False),
    ("<think>\nPlan it.\n</think>\n\nThe answer.", False),
    ("Plan it.</think>The answer.", True),
    ("<think>Cut by the budget", False),
    ("Just the answer.", False),
]
_MARKERS = {"kimi": ("◁think▷", "◁/think▷"), "mistral": ("[THINK]", "[/THINK]")}


@pytest.mark.parametrize("name", sorted(THINK_FORMATS))
@pytest.mark.parametrize(("text", "opened"), REASONING_CASES)
def test_reasoning_split_as_sglangs_parser_splits_it(
    name: str, text: str, opened: bool, sglang_release: str
) -> None:
    parser_module = _import("sglang.srt.parser.reasoning_parser")
    if name not in parser_module.ReasoningParser.DetectorMap:
        pytest.skip(f"SGLang {sglang_release} has no reasoning parser {name!r}")
    start, end = _MARKERS.get(name, ("<think>", "</think>"))
    text = text.replace("<think>", start).replace("</think>", end)
    fmt = THINK_FORMATS[name]
    forced = opened or fmt.always_forced
    if forced and name == "kimi":
        pytest.skip(
            "SGLang's KimiDetector never starts inside reasoning (no Kimi template opens it)"
        )
    parser = parser_module.ReasoningParser(name, stream_reasoning=False, force_reasoning=forced)
    their_reasoning, their_answer = parser.parse_non_stream(text)
    our_reasoning, our_answer = split_reasoning(fmt, text, forced=forced)
    if sglang_release == "0.5.2":  # it strips both, the proxy does not
        our_reasoning = our_reasoning.strip() if our_reasoning else our_reasoning
        our_answer = our_answer.strip()
        their_reasoning = their_reasoning.strip() if their_reasoning else their_reasoning
        their_answer = (their_answer or "").strip()
    assert (our_reasoning or None, our_answer or "") == (
        their_reasoning or None,
        their_answer or "",
    )
