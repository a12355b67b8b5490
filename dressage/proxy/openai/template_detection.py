"""Which reasoning and tool-call parsers a chat template implies (the `auto` setting).

The rules are SGLang 0.5.23's (`srt/parser/template_detection.py`: `REASONING_MODE_RULES`,
`REASONING_PARSER_RULES`, `TOOL_CALL_PARSER_RULES`), in its order, restricted to the formats
the proxy reads. Three rules are added where SGLang has none: a template that writes
`[TOOL_CALLS]` is Mistral's, one that writes `<|python_tag|>` is Llama 3's, and one that writes
`<tool_call>` is Hermes style; a DeepSeek template whose calls carry a fenced ```` ```json ````
block is V3's, otherwise V3.1's (SGLang reads both as V3.1). With no rule matching, reasoning
is left in the content (`none`) and tool calls are read Hermes style (so a template that does
not render tools, as the built-in tiny model's, still gets them parsed).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class ReasoningToggle:
    """How a template switches reasoning on and off (SGLang `ReasoningToggleConfig`)."""

    toggle_param: str | None = None
    default_enabled: bool | None = None
    special_case: str | None = None
    """`always` (the template always opens reasoning) or `mistral` (`reasoning_effort`)."""


_ENABLE_ON = ReasoningToggle("enable_thinking", True)
_ENABLE_OFF = ReasoningToggle("enable_thinking", False)
_THINKING_ON = ReasoningToggle("thinking", True)
_THINKING_OFF = ReasoningToggle("thinking", False)
_ALWAYS = ReasoningToggle(special_case="always")


def _defaults(template: str, param: str, value: bool) -> bool:
    """Whether the template gives `param` the default `value` (`if not P is defined ... set P
    = value`, `P if P is defined else value`, `P | default(value)`, and the like)."""
    v = "(?:true|True)" if value else "(?:false|False)"
    patterns = [
        rf"{{%-?\s*if\s+not\s+{param}\s+is\s+defined\s*-?%}}.*?{{%-?\s*set\s+{param}\s*=\s*{v}\s*-?%}}",
        rf"{param}\s*\|\s*(?:default|d)\(\s*{v}\s*\)",
    ]
    if value:
        patterns += [
            rf"set\s+{param}\s*=\s*{param}\s+if\s+{param}\s+is\s+defined\s+else\s+{v}",
            rf"{param}\s+is\s+defined\s+and\s+(?:{param}\s+is\s+false|not\s+{param})",
            rf"{param}\s+is\s+not\s+defined\s+or\s+{param}",
            rf"namespace\([^)]*{param}\s*=\s*true",
        ]
    return any(re.search(p, template, re.DOTALL) for p in patterns)


def reasoning_toggle(template: str) -> ReasoningToggle | None:
    """The template's reasoning switch (SGLang `detect_reasoning_pattern`), None if none."""
    if "<|channel|>" in template:
        return _ALWAYS
    if (
        re.search(r"<\|im_start\|>assistant\\n<think>\\n", template)
        and "enable_thinking" not in template
        and "thinking" not in template
    ):
        return _ALWAYS
    if "reasoning_effort" in template and "[THINK]" in template:
        return ReasoningToggle(special_case="mistral")
    for param, default, config in (
        ("enable_thinking", False, _ENABLE_OFF),
        ("enable_thinking", True, _ENABLE_ON),
        ("thinking", False, _THINKING_OFF),
        ("thinking", True, _THINKING_ON),
    ):
        if _defaults(template, param, default):
            return config
    return None


def _is_glm45(template: str, vocab: Collection[str], toggle: ReasoningToggle | None) -> bool:
    return (
        ("[gMASK]<sop>" in template or bool(re.search(r"(?<!<)/(?:no)?think", template)))
        and "<tool_call>" in vocab
        and toggle == _ENABLE_ON
        and ("<|user|>" in vocab or "<|endoftext|>" in vocab)
    )


def detect_reasoning_parser(template: str, vocab: Collection[str]) -> str:
    """The reasoning parser a template implies (`none` when none does)."""
    toggle = reasoning_toggle(template)
    rules: tuple[tuple[str, bool], ...] = (
        ("kimi", "◁think▷" in template),
        ("mistral", toggle is not None and toggle.special_case == "mistral"),
        ("gpt-oss", "<|channel|>" in template),
        ("kimi_k2", "<|tool_calls_section_begin|>" in vocab),
        ("nemotron_3", "truncate_history_thinking" in template and toggle == _ENABLE_ON),
        ("glm45", _is_glm45(template, vocab, toggle)),
        ("mimo", toggle == _ENABLE_OFF),
        ("minimax", "<minimax:tool_call>" in template),
        ("step3p5", bool(re.search(r"Step-?3(?:\.|p)?[57]", template, re.IGNORECASE))),
        ("step3", "<steptml:invoke" in template),
        ("qwen3", toggle == _ENABLE_ON),
        ("deepseek-v3", toggle == _THINKING_OFF),
        ("deepseek-r1", toggle == _ALWAYS),
        ("deepseek-r1", "<think>" in template or "</think>" in template),
    )
    return next((name for name, matches in rules if matches), "none")


def detect_tool_call_parser(template: str, vocab: Collection[str]) -> str:
    """The tool-call parser a template implies (`hermes` when none does)."""
    toggle = reasoning_toggle(template)
    deepseek = "<｜tool▁calls▁begin｜>" in template and "<｜tool▁sep｜>" in template
    rules: tuple[tuple[str, bool], ...] = (
        ("gpt-oss", "<|channel|>" in template),
        ("kimi_k2", "<|tool_calls_section_begin|>" in vocab),
        ("mistral", toggle is not None and toggle.special_case == "mistral"),
        ("mistral", "[TOOL_CALLS]" in template),
        ("deepseekv3", deepseek and "```json" in template),
        ("deepseekv31", deepseek),
        ("glm45", _is_glm45(template, vocab, toggle)),
        ("glm45", "<arg_key>" in vocab and "<arg_value>" in vocab),
        ("qwen3_coder", "<function=" in template and "<parameter=" in template),
        ("qwen", toggle == _ENABLE_ON),
        ("deepseekv3", toggle in (_THINKING_OFF, _ALWAYS)),
        ("llama3", "<|python_tag|>" in template),
        ("hermes", "<tool_call>" in template),
    )
    return next((name for name, matches in rules if matches), "hermes")
