"""The chat formats a job may select for its proxy: reasoning and tool-call parsers by name.

The names are SGLang's (`--reasoning-parser` and `--tool-call-parser`; SGLang 0.5.23 lists them
in `srt/parser/reasoning_parser_names.py` and `srt/function_call/parser_names.py`), restricted
to the formats the proxy reads (`dressage.proxy.openai.reasoning`,
`dressage.proxy.openai.tool_formats`),
plus `auto` (chosen from the model's chat template, as SGLang's `auto` is) and `none` (the
output is left as it is). The proxy's registries are checked against these lists by a test.
"""

from __future__ import annotations

from typing import Literal, get_args

ReasoningParserName = Literal[
    "auto",
    "none",
    "deepseek-r1",
    "deepseek-v3",
    "dots",
    "gigachat35",
    "glm45",
    "gpt-oss",
    "interns1",
    "kimi",
    "kimi_k2",
    "mimo",
    "minimax",
    "mistral",
    "nanbeige",
    "nemotron_3",
    "poolside_v1",
    "qwen3",
    "qwen3-thinking",
    "step3",
    "step3p5",
]
"""How a reply's reasoning is told from its answer (`reasoning_content` vs `content`)."""

ToolCallParserName = Literal[
    "auto",
    "none",
    "deepseekv3",
    "deepseekv31",
    "glm",
    "glm45",
    "gpt-oss",
    "hermes",
    "kimi_k2",
    "llama3",
    "mistral",
    "qwen",
    "qwen25",
    "qwen3_coder",
]
"""How a reply's tool calls are read (`tool_calls`)."""

REASONING_PARSER_NAMES: tuple[str, ...] = get_args(ReasoningParserName)
TOOL_CALL_PARSER_NAMES: tuple[str, ...] = get_args(ToolCallParserName)
