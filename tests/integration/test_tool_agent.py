"""A tool-using blackbox agent on the official `openai` client, through the proxy's chat API.

The tiny model does not call tools by itself, so the engine here is a scripted loopback server
answering SGLang v0.5.2-shaped `/generate` responses (`tests/contract/support.py` lists the
shapes) whose output ids are the tiny tokenizer's encoding of a scripted reply: a Hermes-style
`<tool_call>` first, then the answer once the conversation holds a tool result. The agent
(`examples/agents/tool_solver.py`) gets `tool_calls` back, answers with a `tool` message, and
the recorded segment's tokens are exactly the turns' tokens: the model's own output, then the
template's rendering of the tool message.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from dressage_testkit.proxy import ProxyProcess, start_proxy

from dressage.proxy.openai.chat import ChatTokenizer, load_chat_tokenizer
from tests.scripted_http import scripted_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
TOK: ChatTokenizer = load_chat_tokenizer("builtin:tiny")
EOS = TOK.stop_token_ids[0]
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'

Script = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def generate_answer(text: str, finish: dict[str, Any], *, eos: bool = False) -> dict[str, Any]:
    """An SGLang `/generate` answer whose output ids encode `text` (then eos)."""
    ids = TOK.encode(text) + ([EOS] if eos else [])
    return {
        "text": text,
        "output_ids": ids,
        "meta_info": {
            "id": "r",
            "finish_reason": finish,
            "prompt_tokens": 1,
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "weight_version": "v0",
            "output_token_logprobs": [[-0.5, t, None] for t in ids],
        },
    }


class ScriptedEngine:
    """Answers `/generate` with `script(body)` and every other path with `{}`; records the
    generate bodies and the control commands it got."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.generated: list[dict[str, Any]] = []
        self.received = asyncio.Event()
        self.paused = asyncio.Event()
        self.url = ""

    async def answer(self, path: str, raw: bytes) -> Any:
        if path == "/generate":
            request = json.loads(raw)
            self.generated.append(request)
            self.received.set()
            return await self.script(request)
        if path == "/pause_generation":
            self.paused.set()
            return {"message": "paused", "status": "ok"}
        if path == "/continue_generation":
            self.paused.clear()
            return {"message": "continued", "status": "ok"}
        return {}

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[ScriptedEngine]:
        async with scripted_server(self.answer) as url:
            self.url = url
            yield self


async def calculator_model(request: dict[str, Any]) -> dict[str, Any]:
    """Calls the calculator first, answers with the tool's result once it has one."""
    prompt = TOK.decode(request["input_ids"], skip_special_tokens=False)
    if "<|tool|>" in prompt:
        answer = prompt.rsplit("<|tool|>", 1)[1].split("<|end|>", 1)[0]
        return generate_answer(f"It is {answer}", {"type": "stop", "matched": EOS}, eos=True)
    return generate_answer(CALL, {"type": "stop", "matched": EOS}, eos=True)


async def _segments(proxy: ProxyProcess, session_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
        done = await client.post(f"/sessions/{session_id}/finalize", json={"reward": 1.0})
        assert done.status_code == 200, done.text
        segments = (await client.get("/segments", params={"drain": "false"})).json()["segments"]
    return [r for r in segments if r["parent_traj_id"] == session_id]


async def test_a_tool_agent_gets_tool_calls_and_its_segment_is_the_turns_tokens() -> None:
    engine = ScriptedEngine(calculator_model)
    async with engine.serving():
        with start_proxy([engine.url], "--model", "builtin:tiny") as proxy:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(ROOT / "examples" / "agents" / "tool_solver.py"),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(
                    os.environ,
                    OPENAI_BASE_URL=proxy.base_url + "/s/tool-agent/v1",
                    OPENAI_API_KEY="unused",
                ),
            )
            out, err = await asyncio.wait_for(process.communicate(b"2+3="), 60)
            assert process.returncode == 0, err.decode()
            (record,) = await _segments(proxy, "tool-agent")
    assert out.decode().strip() == "5"
    first, second = engine.generated
    out1 = [*TOK.encode(CALL), EOS]
    out2 = [*TOK.encode("It is 5"), EOS]
    # Turn two extends turn one exactly: the model's own tool-call tokens, then the template's
    # rendering of the tool message and the generation prompt.
    assert second["input_ids"][: len(first["input_ids"]) + len(out1)] == first["input_ids"] + out1
    bridge = second["input_ids"][len(first["input_ids"]) + len(out1) :]
    assert TOK.decode(bridge, skip_special_tokens=False) == "\n<|tool|>5<|end|>\n<|assistant|>"
    assert record["tokens"] == second["input_ids"] + out2
    assert record["turns"] == 2
    trained = [0] * (len(record["tokens"]) - len(first["input_ids"]))
    for start, n in ((len(first["input_ids"]), len(out1)), (len(second["input_ids"]), len(out2))):
        trained[start - len(first["input_ids"]) : start - len(first["input_ids"]) + n] = [1] * n
    assert record["loss_mask"] == trained


def _client(proxy: ProxyProcess, session_id: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=proxy.base_url + f"/s/{session_id}/v1", api_key="unused", max_retries=0
    )


TOOLS: Any = [{"type": "function", "function": {"name": "calculator", "parameters": {}}}]


async def test_streamed_tool_calls_and_usage_only_when_asked() -> None:
    engine = ScriptedEngine(calculator_model)
    async with engine.serving():
        with start_proxy([engine.url], "--model", "builtin:tiny") as proxy:
            async with _client(proxy, "tool-stream") as client:
                chunks = [
                    c
                    async for c in await client.chat.completions.create(
                        model="builtin:tiny",
                        messages=[{"role": "user", "content": "2+3="}],
                        tools=TOOLS,
                        max_tokens=100,
                        stream=True,
                    )
                ]
                deltas = [
                    call
                    for c in chunks
                    if c.choices
                    for call in c.choices[0].delta.tool_calls or []
                ]
                # OpenAI's streamed call: a first delta with its id, type and name, then its
                # arguments; a client joins them by index.
                assert [(c.index, c.type) for c in deltas] == [(0, "function"), (0, None)]
                assert deltas[0].function is not None
                assert deltas[0].function.name == "calculator"
                assert deltas[1].function is not None
                arguments = "".join((d.function.arguments or "") for d in deltas if d.function)
                assert json.loads(arguments) == {"expression": "2+3"}
                assert deltas[0].id
                calls = deltas[:1]
                assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == (
                    "tool_calls"
                )
                assert all(c.usage is None for c in chunks)
                # Asked for, usage comes as one more chunk with no choices.
                messages: Any = [
                    {"role": "user", "content": "2+3="},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": calls[0].id,
                                "type": "function",
                                "function": {
                                    "name": "calculator",
                                    "arguments": arguments,
                                },
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": calls[0].id, "content": "5"},
                ]
                chunks = [
                    c
                    async for c in await client.chat.completions.create(
                        model="builtin:tiny",
                        messages=messages,
                        tools=TOOLS,
                        max_tokens=100,
                        stream=True,
                        stream_options={"include_usage": True},
                    )
                ]
                assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
                    "It is 5"
                )
                usage = [c for c in chunks if c.usage is not None]
                assert len(usage) == 1
                assert usage[0].choices == []
                assert usage[0] is chunks[-1]
                assert usage[0].usage is not None
                assert usage[0].usage.completion_tokens == len(TOK.encode("It is 5")) + 1
                assert usage[0].model_extra is not None
            (record,) = await _segments(proxy, "tool-stream")
    assert record["turns"] == 2  # the echoed tool call continued the segment


async def test_stop_strings_are_cut_from_content_but_not_from_the_tokens() -> None:
    async def stop_model(request: dict[str, Any]) -> dict[str, Any]:
        assert request["sampling_params"]["stop"] == ["##"]
        return generate_answer("12##", {"type": "stop", "matched": "##"})

    engine = ScriptedEngine(stop_model)
    async with engine.serving():
        with start_proxy([engine.url], "--model", "builtin:tiny") as proxy:
            async with _client(proxy, "tool-stop") as client:
                reply = await client.chat.completions.create(
                    model="builtin:tiny",
                    messages=[{"role": "user", "content": "7+5="}],
                    stop="##",
                    max_tokens=8,
                )
            (record,) = await _segments(proxy, "tool-stop")
    assert reply.choices[0].message.content == "12"
    assert reply.choices[0].finish_reason == "stop"
    assert record["response_tokens"] == TOK.encode("12##")


@pytest.mark.parametrize(
    ("final", "expected"),
    [
        (generate_answer("3", {"type": "stop", "matched": EOS}, eos=True), "stop"),
        (generate_answer("34", {"type": "length", "length": 2}), "length"),
    ],
    ids=["eos", "budget"],
)
async def test_the_finish_reason_of_a_preempted_turn_is_how_its_last_piece_ended(
    final: dict[str, Any], expected: str
) -> None:
    async def preempted_once(request: dict[str, Any]) -> dict[str, Any]:
        if len(engine.generated) == 1:
            await engine.paused.wait()  # aborted by the weight-update pause
            answer = generate_answer("12", {"type": "abort", "message": "paused"})
            return answer
        return final

    engine = ScriptedEngine(preempted_once)
    async with engine.serving():
        with start_proxy(
            [engine.url], "--model", "builtin:tiny", "--dressage-partial-rollout"
        ) as proxy:
            async with (
                _client(proxy, f"tool-preempt-{expected}") as client,
                httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as control,
            ):
                turn = asyncio.create_task(
                    client.chat.completions.create(
                        model="builtin:tiny",
                        messages=[{"role": "user", "content": "1234"}],
                        max_tokens=4,
                    )
                )
                await engine.received.wait()
                paused = await control.post("/pause_generation", json={"mode": "abort"})
                assert paused.status_code == 200, paused.text
                resumed = await control.post("/continue_generation", json={})
                assert resumed.status_code == 200, resumed.text
                reply = await turn
    assert reply.model_extra is not None
    assert reply.model_extra["dressage"]["preempts"] == 1
    assert engine.generated[1]["sampling_params"]["max_new_tokens"] == 2
    assert reply.choices[0].finish_reason == expected


async def test_calls_are_parsed_only_when_tools_are_offered_and_malformed_ones_stay_text() -> None:
    malformed = '<tool_call>{"name": "calculator", "arguments": {</tool_call>'

    async def model(request: dict[str, Any]) -> dict[str, Any]:
        prompt = TOK.decode(request["input_ids"], skip_special_tokens=False)
        text = malformed if "bad" in prompt else CALL
        return generate_answer(text, {"type": "stop", "matched": EOS}, eos=True)

    engine = ScriptedEngine(model)
    async with engine.serving():
        with start_proxy([engine.url], "--model", "builtin:tiny") as proxy:
            cases: list[tuple[str, dict[str, Any], str]] = [
                ("bad", {"tools": TOOLS}, malformed),
                ("2+3=", {}, CALL),  # no tools offered
                ("2+3=", {"tools": TOOLS, "tool_choice": "none"}, CALL),
            ]
            for i, (question, options, content) in enumerate(cases):
                async with _client(proxy, f"tool-plain-{i}") as client:
                    reply = await client.chat.completions.create(
                        model="builtin:tiny",
                        messages=[{"role": "user", "content": question}],
                        max_tokens=100,
                        **options,
                    )
                choice = reply.choices[0]
                assert (choice.message.content, choice.message.tool_calls) == (content, None)
                assert choice.finish_reason == "stop"
