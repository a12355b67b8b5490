"""Tool-call syntaxes framed by dedicated tokens: DeepSeek-V3, DeepSeek-V3.1, Kimi-K2.

Each call sits between a begin and an end token inside a section of calls whose markers are
dropped from the content. From SGLang 0.5.23's detectors (`srt/function_call/`):

- `DeepSeekV3Format` (`deepseekv3_detector.py`; `deepseekv3`):
  `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>`;
- `DeepSeekV31Format` (`deepseekv31_detector.py`; `deepseekv31`):
  `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` in the same section;
- `KimiK2Format` (`kimik2_detector.py`; `kimi_k2`):
  `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>`.
  The id the model writes (`functions.NAME:N`) is the call's OpenAI id: Kimi's template
  writes `tool_call.id` back, so the next turn's prompt repeats the model's own tokens. A
  bare counter id (`N`) names the declared function whose parameters best match the
  arguments, as `KimiK2Detector._infer_tool_name` does.
"""

from __future__ import annotations

import json
import re

from dressage.proxy.openai.tool_calls import Block, Call, Schemas, ToolFormat


def _object_text(text: str) -> str | None:
    """`text` when it is a JSON object, else None."""
    try:
        return text if isinstance(json.loads(text), dict) else None
    except ValueError:
        return None


class _FramedFormat(ToolFormat):
    closer = ""

    def read_block(self, text: str, schemas: Schemas, *, final: bool) -> Block | None:
        end = text.find(self.closer, len(self.openers[0]))
        if end < 0:
            return None
        call = self.read_call(text[len(self.openers[0]) : end], schemas)
        return Block(end + len(self.closer), None if call is None else (call,))

    def read_call(self, body: str, schemas: Schemas) -> Call | None:
        raise NotImplementedError


_DS_SECTION = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")


class DeepSeekV3Format(_FramedFormat):
    name = "deepseekv3"
    openers = ("<｜tool▁call▁begin｜>",)
    wrappers = _DS_SECTION
    extra_markers = ("<｜tool▁call▁end｜>", "<｜tool▁sep｜>")
    closer = "<｜tool▁call▁end｜>"
    _DETAIL = re.compile(r"(.*)<｜tool▁sep｜>(.*)\n```json\n(.*)\n```", re.DOTALL)

    def read_call(self, body: str, schemas: Schemas) -> Call | None:
        match = self._DETAIL.fullmatch(body)
        if match is None or not match.group(2):
            return None
        try:
            arguments = json.loads(match.group(3))
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        return Call(match.group(2), json.dumps(arguments, ensure_ascii=False))


class DeepSeekV31Format(_FramedFormat):
    name = "deepseekv31"
    openers = ("<｜tool▁call▁begin｜>",)
    wrappers = _DS_SECTION
    extra_markers = ("<｜tool▁call▁end｜>", "<｜tool▁sep｜>")
    closer = "<｜tool▁call▁end｜>"
    _DETAIL = re.compile(r"(.*)<｜tool▁sep｜>(.*)", re.DOTALL)

    def read_call(self, body: str, schemas: Schemas) -> Call | None:
        match = self._DETAIL.fullmatch(body)
        if match is None or not match.group(1):
            return None
        try:
            arguments = json.loads(match.group(2))
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        return Call(match.group(1), json.dumps(arguments, ensure_ascii=False))


class KimiK2Format(_FramedFormat):
    name = "kimi_k2"
    openers = ("<|tool_call_begin|>",)
    wrappers = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
    extra_markers = ("<|tool_call_end|>", "<|tool_call_argument_begin|>")
    closer = "<|tool_call_end|>"
    _CALL = re.compile(
        r"\s*(?P<id>[^\s<|]+)\s*<\|tool_call_argument_begin\|>\s*(?P<args>\{.*\})\s*", re.DOTALL
    )
    _ID = re.compile(r"(?:functions\.)?(?P<name>[\w.\-]+):(?P<index>\d+)")

    def read_call(self, body: str, schemas: Schemas) -> Call | None:
        match = self._CALL.fullmatch(body)
        if match is None:
            return None
        arguments = _object_text(match.group("args"))
        if arguments is None:
            return None
        call_id = match.group("id")
        named = self._ID.fullmatch(call_id)
        if named is not None:
            return Call(named.group("name"), arguments, call_id)
        if call_id.isdigit():
            name = _best_matching_function(schemas, json.loads(arguments))
            if name is not None:
                return Call(name, arguments, call_id)
        return None


def _best_matching_function(schemas: Schemas, arguments: dict[str, object]) -> str | None:
    """The declared function whose parameter names best match `arguments` (one function:
    that one)."""
    if len(schemas) == 1:
        return next(iter(schemas))
    best, best_score = None, None
    keys = set(arguments)
    for name, schema in schemas.items():
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(properties, dict) or not properties:
            continue
        score = len(keys & set(properties)) - len(keys - set(properties))
        if best_score is None or score > best_score:
            best, best_score = name, score
    return best
