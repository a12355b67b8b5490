"""The chat layer's tool calls: parsing the model's output, canonical echoes, exact extension."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.model.tokenizer import build_tokenizer_files
from dressage.proxy.errors import ProxyError
from dressage.proxy.openai.chat import (
    ChatTokenizer,
    after_reply,
    canonical_message,
    canonical_messages,
    load_chat_tokenizer,
    plan_chat_turn,
)
from dressage.proxy.openai.reply import ReplyFormat, parse_reply, resolve_reply_format
from dressage.proxy.openai.tool_calls import ParsedReply, new_call_id, parse_tool_calls, strip_stop
from dressage.proxy.openai.tool_formats import TOOL_FORMATS

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


def _ids() -> Any:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def parse_hermes(text: str, make_id: Any = new_call_id) -> ParsedReply:
    return parse_tool_calls(TOOL_FORMATS["hermes"], text, make_id=make_id)


def test_a_hermes_call_becomes_an_openai_tool_call() -> None:
    text = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>'
    assert parse_hermes(text, _ids()) == ParsedReply(
        None,
        [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'},
            }
        ],
    )


def test_text_around_calls_is_the_content_and_every_call_is_kept_in_order() -> None:
    text = (
        "Let me compute. "
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "b", "arguments": "{\\"x\\": 1}"}</tool_call>\n'
    )
    parsed = parse_hermes(text, _ids())
    assert parsed.content == "Let me compute."
    assert [
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls
    ] == [
        ("call_0", "a", "{}"),
        ("call_1", "b", '{"x": 1}'),
    ]


@pytest.mark.parametrize(
    "block",
    [
        '<tool_call>{"name": "calc", "arguments": {</tool_call>',  # malformed JSON
        "<tool_call>[1, 2]</tool_call>",  # not an object
        '<tool_call>{"arguments": {}}</tool_call>',  # no name
        '<tool_call>{"name": "calc", "arguments": 5}</tool_call>',  # arguments not an object
        '<tool_call>{"name": "calc", "arguments": "not json"}</tool_call>',
        '<tool_call>{"name": "calc", "arguments": {}}',  # cut before the closing tag
    ],
)
def test_a_malformed_block_stays_plain_content(block: str) -> None:
    assert parse_hermes("x " + block) == ParsedReply("x " + block)


def test_a_malformed_block_beside_a_good_one_stays_in_the_content() -> None:
    bad = "<tool_call>{oops}</tool_call>"
    parsed = parse_hermes(bad + '<tool_call>{"name": "a", "arguments": {}}</tool_call>', _ids())
    assert parsed.content == bad
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["a"]


@given(st.text().filter(lambda s: "<tool_call>" not in s))
def test_text_without_a_tool_call_tag_is_returned_unchanged(text: str) -> None:
    assert parse_hermes(text) == ParsedReply(text, [])
    assert parse_reply(ReplyFormat("none", "none"), text) == ParsedReply(text, [])


def test_the_parsers_are_chosen_by_setting_or_template() -> None:
    assert resolve_reply_format(None, None, "{{ '<tool_call>' }}", ()) == ReplyFormat(
        "none", "hermes"
    )
    assert resolve_reply_format("auto", "auto", "plain", ()).tools == "hermes"
    assert resolve_reply_format("qwen3", "none", "{{ '<tool_call>' }}", ()) == ReplyFormat(
        "qwen3", "none"
    )
    with pytest.raises(ValueError, match="unknown tool call parser 'llama9'"):
        resolve_reply_format(None, "llama9", "", ())
    with pytest.raises(ValueError, match="unknown reasoning parser 'deep'"):
        resolve_reply_format("deep", None, "", ())
    tok = load_chat_tokenizer("builtin:tiny", tool_call_parser="none")
    assert tok.reply_format == ReplyFormat("none", "none")


@pytest.mark.parametrize(
    ("finish", "stop", "expected"),
    [
        ({"type": "stop", "matched": "##"}, ["##"], "12"),
        ({"type": "stop", "matched": "##"}, None, "12"),
        ({"type": "stop", "matched": 2}, ["##"], "12##3"),  # a stop token is not text
        ({"type": "length", "length": 5}, ["##"], "12##3"),
        ({"type": "stop", "matched": "zz"}, ["##"], "12##3"),  # not the request's stop
    ],
)
def test_the_matched_stop_string_is_cut_from_the_content(
    finish: dict[str, Any], stop: list[str] | None, expected: str
) -> None:
    assert strip_stop("12##3", finish, stop) == expected


def test_an_echoed_tool_call_compares_equal_to_the_reply_it_came_from() -> None:
    returned = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'},
            }
        ],
    }
    # The agent re-serializes the arguments and the client adds stream bookkeeping.
    echoed = json.loads(json.dumps(returned))
    echoed["tool_calls"][0]["function"]["arguments"] = '{"expression":"2+3"}'
    echoed["tool_calls"][0]["index"] = 0
    assert canonical_message(echoed, 1) == canonical_message(returned, 1)
    assert canonical_message(returned, 1)["tool_calls"][0]["function"]["arguments"] == {
        "expression": "2+3"
    }


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ("x", "messages[1].tool_calls[0]"),
        ({"type": "function"}, "messages[1].tool_calls[0].function"),
        ({"function": {"name": 3}}, "messages[1].tool_calls[0].function.name"),
        (
            {"function": {"name": "a", "arguments": 3}},
            "messages[1].tool_calls[0].function.arguments",
        ),
        ({"id": 3, "function": {"name": "a"}}, "messages[1].tool_calls[0].id"),
    ],
)
def test_a_bad_tool_call_is_a_400_naming_the_field(call: object, field: str) -> None:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]}]
    with pytest.raises(ProxyError) as info:
        canonical_messages(messages)
    assert (info.value.status, info.value.param) == (400, field)


def test_a_tool_call_turn_is_extended_exactly_by_the_tool_answer() -> None:
    tok = load_chat_tokenizer("builtin:tiny")
    first = canonical_messages([{"role": "user", "content": "2+3="}])
    turn = plan_chat_turn(tok, None, None, first, TOOLS)
    generated = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'
    output_ids = tok.encode(generated + "<|end|>")
    parsed = parse_reply(tok.reply_format, tok.decode_reply(output_ids), tools=TOOLS)
    assert parsed.content is None
    assert len(parsed.tool_calls) == 1
    message = {"role": "assistant", "content": None, "tool_calls": parsed.tool_calls}
    state = after_reply(tok, turn, canonical_message(message, 1), output_ids)
    segment = turn.input_ids + output_ids

    call_id = parsed.tool_calls[0]["id"]
    second = canonical_messages(
        [
            *first,
            json.loads(json.dumps(message)),
            {"role": "tool", "tool_call_id": call_id, "content": "5"},
        ]
    )
    nxt = plan_chat_turn(tok, state, segment, second, TOOLS)
    assert nxt.new_segment is None
    assert nxt.input_ids[: len(segment)] == segment
    assert tok.decode(nxt.input_ids[len(segment) :], skip_special_tokens=False) == (
        "\n<|tool|>5<|end|>\n<|assistant|>"
    )


def test_a_reply_cut_by_a_stop_string_is_closed_by_the_template() -> None:
    tok = load_chat_tokenizer("builtin:tiny")
    first = canonical_messages([{"role": "user", "content": "1+1="}])
    turn = plan_chat_turn(tok, None, None, first, None)
    output_ids = tok.encode("2##")
    content = strip_stop(
        tok.decode(output_ids, skip_special_tokens=True), {"type": "stop", "matched": "##"}, ["##"]
    )
    reply = canonical_message({"role": "assistant", "content": content}, 1)
    state = after_reply(tok, turn, reply, output_ids)
    segment = turn.input_ids + output_ids
    second = [*first, reply, {"role": "user", "content": "ok"}]
    nxt = plan_chat_turn(tok, state, segment, second, None)
    assert nxt.input_ids[: len(segment)] == segment
    assert tok.decode(nxt.input_ids[len(segment) :], skip_special_tokens=False) == (
        "<|end|>\n<|user|>ok<|end|>\n<|assistant|>"
    )


HERMES_TEMPLATE = (
    "{% if tools %}<|system|># Tools\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "Call a tool as <tool_call>{json}</tool_call><|end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}<|assistant|>{{ message['content'] }}"
    "{% for call in message.get('tool_calls', []) %}"
    "\n<tool_call>\n{{ {'name': call['function']['name'],"
    " 'arguments': call['function']['arguments']} | tojson }}\n</tool_call>"
    "{% endfor %}<|end|>\n"
    "{% elif message['role'] == 'tool' %}<|user|><tool_response>\n{{ message['content'] }}"
    "\n</tool_response><|end|>\n"
    "{% else %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
"""A Hermes / Qwen-style template: tools in a system block, calls re-rendered in its own JSON
layout, tool results as `<tool_response>` user turns."""


def test_a_template_that_renders_calls_its_own_way_still_extends_the_models_tokens(
    tmp_path: Path,
) -> None:
    build_tokenizer_files(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = HERMES_TEMPLATE
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    tok = ChatTokenizer(tmp_path)
    assert tok.reply_format == ReplyFormat("none", "hermes")
    first = canonical_messages([{"role": "user", "content": "2+3="}])
    turn = plan_chat_turn(tok, None, None, first, TOOLS)
    assert tok.decode(turn.input_ids, skip_special_tokens=False).startswith("<|system|># Tools\n")
    # The model's layout differs from the template's (no newlines, other key spacing).
    generated = 'ok<tool_call>{"name":"calculator","arguments":{"expression":"2+3"}}</tool_call>'
    output_ids = tok.encode(generated + "<|end|>")
    parsed = parse_reply(tok.reply_format, tok.decode_reply(output_ids), tools=TOOLS)
    assert parsed.content == "ok"
    message = {"role": "assistant", "content": parsed.content, "tool_calls": parsed.tool_calls}
    state = after_reply(tok, turn, canonical_message(message, 1), output_ids)
    segment = turn.input_ids + output_ids
    second = canonical_messages(
        [*first, message, {"role": "tool", "tool_call_id": "x", "content": "5"}]
    )
    nxt = plan_chat_turn(tok, state, segment, second, TOOLS)
    assert nxt.new_segment is None
    assert nxt.input_ids[: len(segment)] == segment
    assert tok.decode(nxt.input_ids[len(segment) :], skip_special_tokens=False) == (
        "\n<|user|><tool_response>\n5\n</tool_response><|end|>\n<|assistant|>"
    )
