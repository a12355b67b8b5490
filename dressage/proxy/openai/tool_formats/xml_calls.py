"""Tool-call syntaxes that write each argument in its own tags: Qwen3-Coder and GLM-4.5.

Both come from SGLang 0.5.23's detectors (`srt/function_call/`) and write argument values as
text, which the declared parameter type turns back into JSON:

- `Qwen3CoderFormat` (`qwen3_coder_detector.py`; `qwen3_coder`):
  `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`
  (values converted as `Qwen3CoderDetector._convert_param_value` does);
- `Glm45Format` (`glm4_moe_detector.py`; `glm45`, `glm`):
  `<tool_call>NAME\\n<arg_key>KEY</arg_key>\\n<arg_value>VALUE</arg_value>\\n</tool_call>`
  (values read as `parse_arguments` and `Glm4MoeDetector._parse_argument_pairs` do).
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

from dressage.proxy.openai.tool_calls import Block, Call, Schemas, ToolFormat


def parameter_type(schemas: Schemas, function: str, key: str) -> str | None:
    """The JSON-schema type declared for argument `key` of `function` (SGLang
    `infer_type_from_json_schema`, for the common shapes), None when undeclared."""
    schema = schemas.get(function)
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or key not in properties:
        return None
    return _schema_type(properties[key])


def _schema_type(schema: object) -> str | None:
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    if isinstance(kind, list) and kind:
        return next((k for k in kind if k != "null"), "string")
    for keyword in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list):
            for branch in branches:
                found = _schema_type(branch)
                if found is not None:
                    return found
    if "enum" in schema:
        return "string"
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def literal(text: str) -> Any:
    """`ast.literal_eval` of model output, quietly (a bad escape warns; deep nesting fails);
    ValueError when it is not a Python literal."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.literal_eval(text)
        except (SyntaxError, TypeError, MemoryError, RecursionError) as exc:
            raise ValueError(str(exc)) from None


_STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")
_INT_PREFIXES = ("int", "uint", "long", "short", "unsigned")


def coder_value(value: str, kind: str | None) -> Any:
    """A Qwen3-Coder parameter value as its declared type (`_convert_param_value`)."""
    if value.lower() == "null":
        return None
    if kind is None:
        return value
    kind = kind.strip().lower()
    if kind in _STRING_TYPES:
        return value
    if kind.startswith(_INT_PREFIXES):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
        except ValueError:
            return value
        if "." not in value and "e" not in value.lower() and number.is_integer():
            return int(number)
        return number
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except ValueError:
            pass
    try:
        return literal(value)
    except ValueError:
        return value


class Qwen3CoderFormat(ToolFormat):
    name = "qwen3_coder"
    openers = ("<tool_call>",)
    extra_markers = ("</tool_call>",)
    closer = "</tool_call>"
    _FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
    _PARAMETER = re.compile(
        r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL
    )

    def read_block(self, text: str, schemas: Schemas, *, final: bool) -> Block | None:
        end = text.find(self.closer, len(self.openers[0]))
        if end < 0:
            return None
        calls = []
        for match in self._FUNCTION.finditer(text[len(self.openers[0]) : end]):
            body = match.group(1) if match.group(1) is not None else match.group(2)
            if ">" not in body:
                continue
            name, params = body[: body.index(">")], body[body.index(">") + 1 :]
            arguments: dict[str, Any] = {}
            for param in self._PARAMETER.findall(params):
                if ">" not in param:
                    continue
                key, value = param[: param.index(">")], param[param.index(">") + 1 :]
                value = value.removeprefix("\n").removesuffix("\n")
                arguments[key] = coder_value(value, parameter_type(schemas, name, key))
            if name:
                calls.append(Call(name, json.dumps(arguments, ensure_ascii=False)))
        return Block(end + len(self.closer), tuple(calls) or None)


def glm_value(value: str, kind: str | None) -> tuple[Any, bool]:
    """A GLM-4.5 argument value and whether it read as JSON (`parse_arguments`)."""
    for unescape in (False, True):
        try:
            parsed = json.loads(json.loads(f'"{value}"') if unescape else value)
        except (ValueError, TypeError):
            continue
        if kind == "number" and isinstance(parsed, str):
            parsed = _number(parsed)
        return parsed, True
    if kind == "string":
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            return value[1:-1], True
        return value, True
    try:
        return literal(value), True
    except ValueError:
        return value, True


def _number(value: str) -> Any:
    try:
        return float(value) if "." in value or "e" in value.lower() else int(value)
    except ValueError:
        return value


class Glm45Format(ToolFormat):
    name = "glm45"
    openers = ("<tool_call>",)
    extra_markers = ("</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
    closer = "</tool_call>"
    _NAME = re.compile(r"(.*?)(?:\\n|\n)(.*)", re.DOTALL)
    _ARG = re.compile(r"<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>", re.DOTALL)

    def read_block(self, text: str, schemas: Schemas, *, final: bool) -> Block | None:
        end = text.find(self.closer, len(self.openers[0]))
        if end < 0:
            return None
        body = text[len(self.openers[0]) : end]
        match = self._NAME.fullmatch(body)
        name, args = (match.group(1), match.group(2)) if match else (body, "")
        name = name.strip()
        if not name or "<" in name:
            return Block(end + len(self.closer), None)
        arguments: dict[str, Any] = {}
        for key, raw in self._ARG.findall(args):
            key = key.strip()
            kind = parameter_type(schemas, name, key)
            value, _ = glm_value(raw, kind)
            if kind == "string" and not isinstance(value, str):
                value = (
                    json.dumps(value, ensure_ascii=False)
                    if isinstance(value, dict | list)
                    else str(value)
                )
            arguments[key] = value
        return Block(
            end + len(self.closer), (Call(name, json.dumps(arguments, ensure_ascii=False)),)
        )
