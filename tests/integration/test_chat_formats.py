"""Reasoning and tool calls of each model family, through the proxy, on the official `openai`
client.

Each family (`tests/chat_families.py`) is a checkpoint directory: a tokenizer with the
family's markers and a chat template written for its format as its model card documents it.
The proxy is started with `--model` on it and picks the parsers from the template (`auto`).
The engine is a scripted loopback server answering SGLang-shaped `/generate` responses whose
output ids are the family tokenizer's encoding of what the family's model writes: reasoning
and parallel calls in the family's syntax (the syntaxes of SGLang 0.5.23's detectors,
`srt/function_call/*_detector.py`, and reasoning parsers, `srt/parser/reasoning_parser.py`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from dressage_testkit.proxy import ProxyProcess, start_proxy

from dressage.proxy.openai.chat import ChatTokenizer
from tests.chat_families import FAMILIES, GPT_OSS, KIMI_K2, QWEN3, Family, build_family
from tests.scripted_http import scripted_server

pytestmark = pytest.mark.integration

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
        },
    },
]
CALLS = [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {"zone": "CET"})]
REASONING = "The user wants the weather and the time."


@dataclass
class ScriptedModel:
    """An engine whose next reply the test sets: `reply(text, stop)` queues the output the
    family's model writes, ended by its stop token."""

    tok: ChatTokenizer
    replies: list[tuple[str, str]] = field(default_factory=list)
    prompts: list[list[int]] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)

    def reply(self, text: str, stop: str) -> None:
        self.replies.append((text, stop))

    async def answer(self, path: str, raw: bytes) -> Any:
        if path != "/generate":
            return {}
        request = json.loads(raw)
        self.prompts.append(request["input_ids"])
        text, stop = self.replies.pop(0)
        stop_id = self.tok.tokenizer.token_to_id(stop)
        ids = [*self.tok.encode(text), stop_id]
        self.outputs.append(ids)
        return {
            "text": text,
            "output_ids": ids,
            "meta_info": {
                "id": "r",
                "finish_reason": {"type": "stop", "matched": stop_id},
                "prompt_tokens": len(request["input_ids"]),
                "completion_tokens": len(ids),
                "cached_tokens": 0,
                "weight_version": "v0",
                "output_token_logprobs": [[-0.25, t, None] for t in ids],
            },
        }


@dataclass
class Served:
    model: ScriptedModel
    proxy: ProxyProcess
    family: Family

    def client(self, session_id: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.proxy.base_url}/s/{session_id}/v1", api_key="x", max_retries=0
        )

    def write(self, reasoning: str | None, content: str, calls: list[Any]) -> None:
        """Queue the family model's reply (`reasoning` None: it does not think)."""
        family = self.family
        has_reasoning = family.reasoning != "none"
        text = family.write_reply(reasoning if has_reasoning else None, content, calls)
        stop = (family.stop_after_calls if calls else None) or family.eos
        self.model.reply(text, stop)


@asynccontextmanager
async def serve(family: Family, tmp_path: Path) -> AsyncIterator[Served]:
    model_dir = build_family(family, tmp_path / family.name)
    model = ScriptedModel(ChatTokenizer(model_dir))
    async with scripted_server(model.answer) as url:
        with start_proxy([url], "--model", str(model_dir), "--record-token-versions") as proxy:
            yield Served(model, proxy, family)


def _calls(message: Any) -> list[tuple[str, Any]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


async def _stream(client: openai.AsyncOpenAI, **kwargs: Any) -> tuple[dict[str, Any], str]:
    """A streamed answer joined the way OpenAI clients join deltas."""
    reasoning = content = ""
    calls: dict[int, dict[str, Any]] = {}
    finish = ""
    async for chunk in await client.chat.completions.create(stream=True, **kwargs):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        content += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = call.id or entry["id"]
            if call.function is not None:
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
        finish = choice.finish_reason or finish
    joined = {
        "reasoning": reasoning or None,
        "content": content or None,
        "calls": [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())],
    }
    return joined, finish


async def _records(proxy: ProxyProcess, session_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
        done = await client.post(f"/sessions/{session_id}/finalize", json={"reward": 1.0})
        assert done.status_code == 200, done.text
        segments = (await client.get("/segments", params={"drain": "false"})).json()["segments"]
    return [r for r in segments if r["parent_traj_id"] == session_id]


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
async def test_each_family_gets_reasoning_and_parallel_calls_streamed_or_not(
    family: Family, tmp_path: Path
) -> None:
    calls = CALLS[:1] if family is GPT_OSS else CALLS  # harmony: one call per message
    reasoning = REASONING if family.reasoning != "none" else None
    messages: list[Any] = [{"role": "user", "content": "Weather and time in Paris?"}]
    async with serve(family, tmp_path) as served:
        served.write(REASONING, "", calls)
        async with served.client("whole") as client:
            reply = await client.chat.completions.create(
                model="policy", messages=messages, tools=TOOLS, tool_choice="auto"
            )
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert _calls(choice.message) == calls
        # SGLang's split: the text between the markers, the model's newlines included.
        said = (choice.message.model_extra or {}).get("reasoning_content")
        assert (said and said.strip("\n")) == reasoning
        assert choice.message.content is None
        extra = reply.model_extra["dressage"]  # type: ignore[index]
        # The tokens are the engine's, untouched.
        assert extra["output_ids"] == served.model.outputs[0]

        served.write(REASONING, "", calls)
        async with served.client("streamed") as client:
            streamed, finish = await _stream(
                client, model="policy", messages=messages, tools=TOOLS, tool_choice="auto"
            )
        assert finish == "tool_calls"
        assert streamed == {"reasoning": said, "content": None, "calls": calls}

        # The agent answers the calls: the next turn extends the model's own tokens.
        echoed = choice.message.model_dump(exclude_none=True)
        results = [
            {"role": "tool", "tool_call_id": c.id, "name": c.function.name, "content": "sunny"}
            for c in choice.message.tool_calls or []
        ]
        served.write(REASONING, "It is sunny in Paris.", [])
        async with served.client("whole") as client:
            final = await client.chat.completions.create(
                model="policy", messages=[*messages, echoed, *results], tools=TOOLS
            )
        assert (final.choices[0].message.content or "").strip() == "It is sunny in Paris."
        assert final.choices[0].finish_reason == "stop"
        # Every family's template renders the echoed reply as the model wrote it, so the
        # second turn extends the first's tokens: its prompt is the first prompt, then the
        # model's own output, in one segment.
        assert final.model_extra["dressage"]["new_segment"] is None  # type: ignore[index]
        (first_prompt, second_prompt) = served.model.prompts[0], served.model.prompts[2]
        assert second_prompt[: len(first_prompt)] == first_prompt
        assert (
            second_prompt[len(first_prompt) :][: len(served.model.outputs[0])]
            == served.model.outputs[0]
        )
        records = await _records(served.proxy, "whole")
    assert sum(r["turns"] for r in records) == 2
    for record in records:
        assert record["tokens"][: len(record["prompt_tokens"])] == record["prompt_tokens"]


async def test_tool_choice_none_auto_required_and_named(tmp_path: Path) -> None:
    messages: Any = [{"role": "user", "content": "Weather?"}]
    async with serve(QWEN3, tmp_path) as served:
        async with served.client("choices") as client:
            # `none`: calls are not read; the model's text is the content.
            served.write(None, "", CALLS[:1])
            none = await client.chat.completions.create(
                model="policy", messages=messages, tools=TOOLS, tool_choice="none"
            )
            assert none.choices[0].message.tool_calls is None
            assert "<tool_call>" in (none.choices[0].message.content or "")
            assert none.choices[0].finish_reason == "stop"
        for session, choice, calls, met in [
            ("required-met", "required", CALLS[:1], True),
            ("required-missed", "required", [], False),
            ("named-met", {"type": "function", "function": {"name": "get_time"}}, CALLS[1:], True),
            (
                "named-missed",
                {"type": "function", "function": {"name": "get_time"}},
                CALLS[:1],
                False,
            ),
        ]:
            served.write(None, "" if calls else "No tools needed.", calls)
            async with served.client(session) as client:
                reply = await client.chat.completions.create(
                    model="policy", messages=messages, tools=TOOLS, tool_choice=choice
                )
            # Decoding is never constrained: the reply is what the model wrote.
            assert _calls(reply.choices[0].message) == calls
            assert reply.model_extra["dressage"]["tool_choice_met"] is met  # type: ignore[index]
        async with served.client("bad-choice") as client:
            with pytest.raises(openai.BadRequestError, match="not in tools"):
                await client.chat.completions.create(
                    model="policy",
                    messages=messages,
                    tools=TOOLS,
                    tool_choice={"type": "function", "function": {"name": "launch"}},
                )
            with pytest.raises(openai.BadRequestError, match="needs tools"):
                await client.chat.completions.create(
                    model="policy", messages=messages, tool_choice="required"
                )


async def test_chat_template_kwargs_reach_the_template(tmp_path: Path) -> None:
    async with serve(QWEN3, tmp_path) as served:
        served.model.reply("Paris is sunny.", QWEN3.eos)
        async with served.client("no-think") as client:
            reply = await client.chat.completions.create(
                model="policy",
                messages=[{"role": "user", "content": "Weather?"}],
                extra_body={"chat_template_kwargs": {"enable_thinking": False}},
            )
        prompt = served.model.tok.decode(served.model.prompts[0], skip_special_tokens=False)
        assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        message = reply.choices[0].message
        assert (message.content, (message.model_extra or {}).get("reasoning_content")) == (
            "Paris is sunny.",
            None,
        )
        async with served.client("bad-kwargs") as client:
            with pytest.raises(openai.BadRequestError, match="messages"):
                await client.chat.completions.create(
                    model="policy",
                    messages=[{"role": "user", "content": "x"}],
                    extra_body={"chat_template_kwargs": {"messages": []}},
                )


async def test_qwen3_multi_turn_reasoning_stays_token_consistent(tmp_path: Path) -> None:
    """Qwen3's template keeps the reasoning of the assistant turns after the last user
    message and drops it from earlier ones. Within a tool loop the agent echoes the reply
    with its `reasoning_content` and the conversation continues the segment, token for token;
    a new user message re-renders the earlier turn without its reasoning, which the segment's
    tokens (the model's own, reasoning included) no longer are: the proxy starts a new
    segment whose prompt is the template's rendering (`template_not_append_only`), so every
    segment stays a record of exactly what its engine was given and generated."""
    user: Any = {"role": "user", "content": "Weather in Paris?"}
    async with serve(QWEN3, tmp_path) as served, served.client("loop") as client:
        served.write(REASONING, "", CALLS[:1])
        first = await client.chat.completions.create(model="policy", messages=[user], tools=TOOLS)
        echoed = first.choices[0].message.model_dump(exclude_none=True)
        assert echoed["reasoning_content"] == f"\n{REASONING}\n"
        call_id = echoed["tool_calls"][0]["id"]
        tool = {"role": "tool", "tool_call_id": call_id, "content": "sunny"}
        served.write("The tool says sunny.", "Sunny.", [])
        second = await client.chat.completions.create(
            model="policy", messages=[user, echoed, tool], tools=TOOLS
        )
        assert second.model_extra["dressage"]["new_segment"] is None  # type: ignore[index]
        prompts, outputs = served.model.prompts, served.model.outputs
        assert prompts[1][: len(prompts[0]) + len(outputs[0])] == prompts[0] + outputs[0]
        # A new question: the template drops the earlier reasoning from its rendering.
        answer = second.choices[0].message.model_dump(exclude_none=True)
        follow = [user, echoed, tool, answer, {"role": "user", "content": "And tomorrow?"}]
        served.write("Check again.", "Still sunny.", [])
        third = await client.chat.completions.create(model="policy", messages=follow, tools=TOOLS)
        extra = third.model_extra["dressage"]  # type: ignore[index]
        assert (extra["segment_index"], extra["new_segment"]) == (1, "template_not_append_only")
        rendered = served.model.tok.decode(prompts[2], skip_special_tokens=False)
        assert REASONING not in rendered  # the earlier turns' reasoning is gone
        assert "<think>\nThe tool says sunny.\n</think>" not in rendered
        # An agent that does not send reasoning back: the template renders that turn without
        # it, which is not what the model generated, so a new segment starts as well.
        served.write(REASONING, "", CALLS[:1])
        async with served.client("dropped") as dropped:
            reply = await dropped.chat.completions.create(
                model="policy", messages=[user], tools=TOOLS
            )
            bare = reply.choices[0].message.model_dump(exclude_none=True)
            del bare["reasoning_content"]
            tool = {"role": "tool", "tool_call_id": bare["tool_calls"][0]["id"], "content": "x"}
            served.write(None, "Done.", [])
            after = await dropped.chat.completions.create(
                model="policy", messages=[user, bare, tool], tools=TOOLS
            )
            assert after.model_extra["dressage"]["new_segment"] == "template_not_append_only"  # type: ignore[index]
        records = await _records(served.proxy, "loop")
    assert [r["closed_reason"] for r in records] == ["template_not_append_only", "finalized"]
    # Segment 0 holds both turns of the tool loop exactly as generated.
    assert records[0]["tokens"][: len(prompts[1]) + len(outputs[1])] == prompts[1] + outputs[1]
    assert records[1]["prompt_tokens"] == prompts[2]


async def test_kimi_k2_call_ids_are_the_models_own_so_the_next_prompt_repeats_them(
    tmp_path: Path,
) -> None:
    """Kimi-K2's template writes each call's id back (`functions.NAME:N`); the proxy answers
    the id the model wrote, so the echoed call renders as the model's own tokens."""
    user: Any = {"role": "user", "content": "Weather?"}
    async with serve(KIMI_K2, tmp_path) as served, served.client("kimi") as client:
        served.write(REASONING, "", CALLS)
        reply = await client.chat.completions.create(model="policy", messages=[user], tools=TOOLS)
        ids = [c.id for c in reply.choices[0].message.tool_calls or []]
        assert ids == ["functions.get_weather:0", "functions.get_time:1"]
        echoed = reply.choices[0].message.model_dump(exclude_none=True)
        results = [{"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids]
        served.write(None, "Done.", [])
        after = await client.chat.completions.create(
            model="policy", messages=[user, echoed, *results], tools=TOOLS
        )
        assert after.model_extra["dressage"]["new_segment"] is None  # type: ignore[index]
        await asyncio.sleep(0)
