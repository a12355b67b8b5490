"""The tiny model's chat template renders tools, an assistant's `tool_calls` and tool results,
the same way through `transformers` (whitebox prompts) and through the proxy's jinja renderer,
and writes a call exactly as the model generates it, so a tool-call reply needs no bridge
beyond the template's newline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dressage.model import tiny, tokenizer
from dressage.model.tiny import resolve_model_source, tokenizer_revision
from dressage.model.tokenizer import CHAT_TEMPLATE, build_tokenizer_files
from dressage.proxy.openai.chat import (
    ChatTokenizer,
    after_reply,
    canonical_message,
    canonical_messages,
    plan_chat_turn,
)
from dressage.proxy.openai.reply import parse_reply

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}, "base": {"type": "integer"}},
            },
        },
    },
    {"type": "function", "function": {"name": "clock"}},
]
CALL = {"name": "calculator", "arguments": {"expression": "2+3"}}
MESSAGES = [
    {"role": "user", "content": "2+3="},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": CALL}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "5"},
]
EXPECTED = (
    "<|system|>tools: calculator(expression,base) clock()<|end|>\n"
    "<|user|>2+3=<|end|>\n"
    '<|assistant|><tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}'
    "</tool_call><|end|>\n"
    "<|tool|>5<|end|>\n"
    "<|assistant|>"
)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    build_tokenizer_files(out)
    return out


def test_transformers_and_the_proxy_render_tools_calls_and_results_alike(tok_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    rendered = hf.apply_chat_template(
        MESSAGES, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert rendered == EXPECTED
    proxy = ChatTokenizer(tok_dir)
    assert proxy.render(canonical_messages(MESSAGES), TOOLS, add_generation_prompt=True) == (
        EXPECTED
    )
    # Without tools, a plain chat renders as before.
    plain = [{"role": "user", "content": "1+1="}]
    assert hf.apply_chat_template(plain, tokenize=False, add_generation_prompt=True) == (
        "<|user|>1+1=<|end|>\n<|assistant|>"
    )


def test_a_generated_tool_call_is_rendered_back_exactly(tok_dir: Path) -> None:
    tok = ChatTokenizer(tok_dir)
    first = canonical_messages(MESSAGES[:1])
    turn = plan_chat_turn(tok, None, None, first, TOOLS)
    prompt = tok.decode(turn.input_ids, skip_special_tokens=False)
    assert prompt.startswith("<|system|>tools: calculator(expression,base) clock()<|end|>\n")
    output_ids = tok.encode("<tool_call>" + json.dumps(CALL) + "</tool_call><|end|>")
    parsed = parse_reply(tok.reply_format, tok.decode_reply(output_ids), tools=TOOLS)
    assert parsed.content is None
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["calculator"]
    reply = {"role": "assistant", "content": None, "tool_calls": parsed.tool_calls}
    state = after_reply(tok, turn, canonical_message(reply, 1), output_ids)
    assert state.bridge == "\n"
    segment = turn.input_ids + output_ids
    second = canonical_messages([*MESSAGES[:1], reply, MESSAGES[2]])
    nxt = plan_chat_turn(tok, state, segment, second, TOOLS)
    assert nxt.new_segment is None
    assert nxt.input_ids[: len(segment)] == segment
    assert tok.decode(nxt.input_ids, skip_special_tokens=False) == EXPECTED


def test_the_built_model_carries_the_template_and_is_rebuilt_when_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = resolve_model_source("builtin:tiny", tmp_path)
    assert model.name == f"tiny-seed0-{tokenizer_revision()}"
    config = json.loads((model / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT_TEMPLATE
    assert resolve_model_source("builtin:tiny", tmp_path) == model
    other = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
    monkeypatch.setattr(tiny, "CHAT_TEMPLATE", other)
    monkeypatch.setattr(tokenizer, "CHAT_TEMPLATE", other)
    rebuilt = resolve_model_source("builtin:tiny", tmp_path)
    assert rebuilt != model
    assert json.loads((rebuilt / "tokenizer_config.json").read_text())["chat_template"] == other
