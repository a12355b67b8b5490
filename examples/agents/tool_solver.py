"""A blackbox agent with a tool: an ordinary OpenAI-client program that offers a calculator.

Like `chat_solver.py`, Dressage does not import, patch or wrap it: the harness starts it once
per trajectory with `OPENAI_BASE_URL` pointing at the rollout proxy and the question on standard
input, and reads the answer from standard output.

Behaviour: ask the model the question with a `calculator` tool (OpenAI function calling). While
the model calls the tool, evaluate each expression, send the result back as a `tool` message
and ask again, for at most `AGENT_MAX_TURNS` model turns. Print the last number seen: in the
model's text or in a tool result.
"""

from __future__ import annotations

import ast
import json
import operator
import os
import re
import sys
from typing import Any

from openai import OpenAI

NUMBER = re.compile(r"(-?\d+)\s*$")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression of integers with + - * and /.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
_OPERATORS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.floordiv,
}


def calculate(expression: str) -> str:
    """The value of an integer arithmetic expression, or an error text the model can read."""
    try:
        return str(_evaluate(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        return f"error: {exc}"


def _evaluate(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return int(_OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    raise ValueError("only integers and + - * / are allowed")


def call_tool(name: str, arguments: str) -> str:
    if name != "calculator":
        return f"error: unknown tool {name}"
    try:
        expression = json.loads(arguments).get("expression")
    except (ValueError, AttributeError):
        return "error: arguments must be a JSON object"
    if not isinstance(expression, str):
        return "error: expression must be a string"
    return calculate(expression)


def main() -> int:
    question = sys.stdin.read().strip()
    client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    model = os.environ.get("OPENAI_MODEL", "policy")
    max_tokens = int(os.environ.get("AGENT_MAX_TOKENS", "64"))
    max_turns = int(os.environ.get("AGENT_MAX_TURNS", "3"))
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    answer = ""
    for _ in range(max_turns):
        reply = client.chat.completions.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=float(os.environ.get("AGENT_TEMPERATURE", "1.0")),
        )
        message = reply.choices[0].message
        match = NUMBER.search((message.content or "").strip())
        if match:
            answer = match.group(1)
        if not message.tool_calls:
            break
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [call.model_dump() for call in message.tool_calls],
            }
        )
        for call in message.tool_calls:
            if call.type != "function":
                result = f"error: unsupported tool call type {call.type}"
            else:
                result = call_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            match = NUMBER.search(result)
            if match:
                answer = match.group(1)
    print(answer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
