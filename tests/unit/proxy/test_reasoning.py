"""Reasoning split from the answer, as SGLang 0.5.23's reasoning parsers split it
(`srt/parser/reasoning_parser.py`), whole or in pieces of any size."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.api.chat_formats import REASONING_PARSER_NAMES
from dressage.proxy.openai.reasoning import (
    HARMONY,
    THINK_FORMATS,
    ReasoningSplitter,
    opens_reasoning,
    split_reasoning,
)


def test_every_reasoning_parser_name_of_the_job_model_has_a_format() -> None:
    assert set(REASONING_PARSER_NAMES) - {"auto", "none"} == {*THINK_FORMATS, HARMONY}


@pytest.mark.parametrize(
    ("name", "forced", "text", "expected"),
    [
        # Qwen3Detector: `<think>` opens, `</think>` closes, the answer keeps its spacing.
        ("qwen3", False, "<think>\nplan\n</think>\n\n42", ("\nplan\n", "\n\n42")),
        ("qwen3", False, "42", (None, "42")),
        # Qwen3 calling a tool without closing its thinking: reasoning ends at the call.
        ("qwen3", False, "<think>plan<tool_call>{}", ("plan", "<tool_call>{}")),
        # DeepSeekR1Detector: reasoning from the start, with or without the opening tag.
        ("deepseek-r1", False, "plan</think>42", ("plan", "42")),
        ("deepseek-r1", False, "<think>plan</think>42", ("plan", "42")),
        # A prompt that opened the block (qwen3-thinking's template) forces it too.
        ("qwen3", True, "plan</think>42", ("plan", "42")),
        # Cut by the token budget inside reasoning: all of it is reasoning.
        ("glm45", False, "<think>still thinking", ("still thinking", "")),
        ("kimi", False, "◁think▷plan◁/think▷42", ("plan", "42")),
        ("mistral", False, "[THINK]plan[/THINK]42", ("plan", "42")),
        (
            "kimi_k2",
            False,
            "<think>plan<|tool_calls_section_begin|>x",
            ("plan", "<|tool_calls_section_begin|>x"),
        ),
        # An opening marker later in an unforced reply is text.
        ("qwen3", False, "So <think> is a tag.", (None, "So <think> is a tag.")),
    ],
)
def test_a_reply_is_split_as_sglangs_detector_splits_it(
    name: str, forced: bool, text: str, expected: tuple[str | None, str]
) -> None:
    assert split_reasoning(THINK_FORMATS[name], text, forced=forced) == expected


@pytest.mark.parametrize(
    ("prompt", "opened"),
    [
        ("<|im_start|>assistant\n<think>\n", True),  # Qwen3-thinking-2507's generation prompt
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),  # enable_thinking=false
        ("<|im_start|>assistant\n", False),
        ("<think>a</think>b<|im_start|>assistant\n<think>", True),
    ],
)
def test_whether_the_prompt_leaves_the_reply_inside_reasoning(prompt: str, opened: bool) -> None:
    assert opens_reasoning(THINK_FORMATS["qwen3"], prompt) is opened


_PIECES = st.sampled_from(
    ["<think>", "</think>", "<tool_call>", "◁think▷", "◁/think▷", "[THINK]", "[/THINK]",
     "<|tool_calls_section_begin|>", "<", "</", "[", "x", " ", "\n", "ab"]
)  # fmt: skip


def _cut(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@given(
    st.sampled_from(sorted(THINK_FORMATS)),
    st.booleans(),
    st.lists(_PIECES, max_size=12).map("".join),
    st.lists(st.integers(min_value=0), max_size=8),
)
def test_pieces_of_any_size_split_as_the_whole_reply_does(
    name: str, forced: bool, text: str, cuts: list[int]
) -> None:
    fmt = THINK_FORMATS[name]
    splitter = ReasoningSplitter(fmt, forced=forced)
    parts = [splitter.feed(piece) for piece in _cut(text, cuts)]
    parts.append(splitter.finish())
    reasoning = "".join(r for r, _ in parts)
    answer = "".join(a for _, a in parts)
    assert (reasoning or None, answer) == split_reasoning(fmt, text, forced=forced)
    # The answer is the end of the reply as generated, the reasoning a piece of it.
    assert text.endswith(answer)
    assert reasoning in text
