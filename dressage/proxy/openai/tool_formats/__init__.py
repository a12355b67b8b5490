"""The tool-call syntaxes the proxy reads, by SGLang's `--tool-call-parser` names.

`TOOL_FORMATS` maps each name to its `ToolFormat`; `gpt-oss` (harmony) is read with its
reasoning by `dressage.proxy.openai.tool_formats.harmony` and has no entry here.
"""

from __future__ import annotations

from dressage.proxy.openai.tool_calls import ToolFormat
from dressage.proxy.openai.tool_formats.json_calls import HermesFormat, Llama3Format, MistralFormat
from dressage.proxy.openai.tool_formats.token_calls import (
    DeepSeekV3Format,
    DeepSeekV31Format,
    KimiK2Format,
)
from dressage.proxy.openai.tool_formats.xml_calls import Glm45Format, Qwen3CoderFormat

HARMONY = "gpt-oss"

_HERMES = HermesFormat()
_GLM45 = Glm45Format()

TOOL_FORMATS: dict[str, ToolFormat] = {
    "hermes": _HERMES,
    "qwen": _HERMES,  # SGLang `Qwen25Detector`: the same blocks, with newlines inside
    "qwen25": _HERMES,
    "qwen3_coder": Qwen3CoderFormat(),
    "llama3": Llama3Format(),
    "mistral": MistralFormat(),
    "deepseekv3": DeepSeekV3Format(),
    "deepseekv31": DeepSeekV31Format(),
    "glm": _GLM45,
    "glm45": _GLM45,
    "kimi_k2": KimiK2Format(),
}
"""Tool-call syntaxes by SGLang name (besides `gpt-oss` and `none`)."""
