"""The fields of an OpenAI chat request that shape its prompt and its answer, checked.

Each check answers 400 `invalid_request` naming the field at fault:

- `tools`: a list of `{"type": "function", "function": {"name": ..., "parameters": {...}}}`;
- `tool_choice`: `none`, `auto`, `required` or `{"type": "function", "function": {"name": N}}`
  naming a declared function (the default is `auto` with tools, `none` without). The proxy
  reads the calls the model wrote but never constrains its decoding: a constrained sampler
  would make the rollout's tokens come from another distribution than the policy the
  trainer scores. A reply that does not meet a `required` or named choice is answered as it
  was written, and `dressage.tool_choice_met` says whether it met it;
- `chat_template_kwargs`: an object of further template variables (`enable_thinking`,
  `thinking`, ...), which may not replace the ones the proxy sets; `reasoning_effort` (a
  string) is also given to the template under that name unless `chat_template_kwargs` sets it;
- `separate_reasoning`: SGLang's switch (default true) for splitting reasoning out of the
  content.
"""

from __future__ import annotations

from typing import Any

from dressage.proxy.errors import invalid
from dressage.proxy.openai.chat import RESERVED_TEMPLATE_VARIABLES

TOOL_CHOICES = ("none", "auto", "required")


def check_tools(value: object) -> list[dict[str, Any]] | None:
    """The request's `tools` (None for none)."""
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise invalid("tools must be a list", "tools")
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise invalid(f'{where} must be a function tool ({{"type": "function", ...}})', where)
        function = tool.get("function")
        if not isinstance(function, dict):
            raise invalid(f"{where}.function must be an object", f"{where}.function")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise invalid(f"{where}.function.name must be a string", f"{where}.function.name")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise invalid(
                f"{where}.function.parameters must be a JSON schema object",
                f"{where}.function.parameters",
            )
    return value


def check_tool_choice(value: object, tools: list[dict[str, Any]] | None) -> str | dict[str, Any]:
    """The request's `tool_choice`: one of `TOOL_CHOICES`, or `{"name": N}` for a named
    function."""
    if value is None:
        return "auto" if tools else "none"
    if isinstance(value, str):
        if value not in TOOL_CHOICES:
            raise invalid(
                f"tool_choice must be one of {', '.join(TOOL_CHOICES)} or a named function, "
                f"got {value!r}",
                "tool_choice",
            )
        if value == "required" and not tools:
            raise invalid("tool_choice 'required' needs tools", "tool_choice")
        return value
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if (
        not isinstance(name, str)
        or not isinstance(value, dict)
        or value.get("type")
        not in (
            None,
            "function",
        )
    ):
        raise invalid(
            'tool_choice must be a string or {"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    declared = [t["function"]["name"] for t in tools or ()]
    if name not in declared:
        raise invalid(
            f"tool_choice names function {name!r}, which is not in tools "
            f"({', '.join(map(repr, declared)) or 'none declared'})",
            "tool_choice",
        )
    return {"name": name}


def tool_choice_met(choice: str | dict[str, Any], calls: list[dict[str, Any]]) -> bool | None:
    """Whether a reply's calls meet a `required` or named `tool_choice` (None for others)."""
    if choice == "required":
        return bool(calls)
    if isinstance(choice, dict):
        return any(call["function"]["name"] == choice["name"] for call in calls)
    return None


def template_kwargs(body: dict[str, Any]) -> dict[str, Any] | None:
    """The variables `chat_template_kwargs` and `reasoning_effort` give the template."""
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise invalid("chat_template_kwargs must be an object", "chat_template_kwargs")
        reserved = sorted(RESERVED_TEMPLATE_VARIABLES & set(kwargs))
        if reserved:
            raise invalid(
                f"chat_template_kwargs may not set {reserved[0]!r}: the proxy renders it from "
                "the request",
                f"chat_template_kwargs.{reserved[0]}",
            )
    out = dict(kwargs or {})
    effort = body.get("reasoning_effort")
    if effort is not None:
        if not isinstance(effort, str):
            raise invalid("reasoning_effort must be a string", "reasoning_effort")
        out.setdefault("reasoning_effort", effort)
    return out or None


def separate_reasoning(body: dict[str, Any]) -> bool:
    value = body.get("separate_reasoning", True)
    if not isinstance(value, bool):
        raise invalid("separate_reasoning must be a boolean", "separate_reasoning")
    return value
