"""The OpenAI-compatible API over real HTTP, driven by the official `openai` client unchanged.

A five-turn chat keeps one segment whose token prefix never changes (each turn's output sits
exactly where it was generated, user tokens masked); a history rewrite or a tool-schema change
starts a new segment of the same trajectory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import ProxyProcess, start_proxy

from dressage.proxy.openai.chat import load_chat_tokenizer
from dressage.proxy.records import record_to_sample

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    with start_engine(cache_dir=tmp_path_factory.mktemp("cache"), weight_version="v0") as e:
        yield e


@pytest.fixture(scope="module")
def proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    args = ["--model", "builtin:tiny", "--record-token-versions"]
    with start_proxy([engine.base_url], *args) as proxy:
        yield proxy


def _client(proxy: ProxyProcess, session_id: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=proxy.base_url + "/v1",
        api_key="unused",
        default_headers={"X-Session-Id": session_id, "X-Instance-Id": "chat-prompt"},
        max_retries=0,
    )


async def _records(proxy: ProxyProcess, session_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
        done = await client.post(f"/sessions/{session_id}/finalize", json={"reward": 0.5})
        assert done.status_code == 200, done.text
        segments = (await client.get("/segments", params={"drain": "false"})).json()["segments"]
    return [r for r in segments if r["parent_traj_id"] == session_id]


async def test_five_turn_chat_keeps_its_token_prefix(proxy: ProxyProcess) -> None:
    async with _client(proxy, "chat-five") as client:
        await _five_turns(client, proxy)


async def _five_turns(client: openai.AsyncOpenAI, proxy: ProxyProcess) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "2+3="}]
    turns = []
    for turn in range(5):
        reply = await client.chat.completions.create(
            model="builtin:tiny", messages=messages, max_tokens=6, temperature=1.0
        )
        extra = reply.model_extra["dressage"]  # type: ignore[index]
        assert extra["segment_index"] == 0
        assert extra["new_segment"] == ("first_turn" if turn == 0 else None)
        assert reply.usage is not None
        turns.append((reply.usage.prompt_tokens, extra["output_ids"]))
        content = reply.choices[0].message.content
        assert content is not None
        messages += [
            {"role": "assistant", "content": content},
            {"role": "user", "content": f"and {turn}?"},
        ]
    (record,) = await _records(proxy, "chat-five")
    tokens = record["tokens"]
    # The first prompt is the chat template's rendering, tokenized once.
    tok = load_chat_tokenizer("builtin:tiny")
    first_prompt = tok.encode(tok.render(messages[:1], None, add_generation_prompt=True))
    assert record["prompt_tokens"] == first_prompt
    prompt_len = len(first_prompt)
    trained = [0] * (len(tokens) - prompt_len)
    for i, (prompt_tokens, output_ids) in enumerate(turns):
        # Every turn's output sits exactly where it was generated: no earlier token changed.
        assert tokens[prompt_tokens : prompt_tokens + len(output_ids)] == output_ids
        if i + 1 < len(turns):
            assert turns[i + 1][0] > prompt_tokens + len(output_ids)
        for j in range(prompt_tokens, prompt_tokens + len(output_ids)):
            trained[j - prompt_len] = 1
    assert record["loss_mask"] == trained
    assert record["turns"] == 5
    sample = record_to_sample(record)
    assert sample.reward == 0.5
    assert sample.dressage_end_token_version == "v0"


async def test_history_rewrite_and_tool_change_start_new_segments(proxy: ProxyProcess) -> None:
    async with _client(proxy, "chat-rewrite") as client:
        await _rewrite(client, proxy)


async def _rewrite(client: openai.AsyncOpenAI, proxy: ProxyProcess) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "1+1="}]
    first = await client.chat.completions.create(
        model="builtin:tiny", messages=messages, max_tokens=4
    )
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "again"},
    ]
    second = await client.chat.completions.create(
        model="builtin:tiny", messages=messages, max_tokens=4
    )
    assert second.model_extra["dressage"]["segment_index"] == 0  # type: ignore[index]
    rewritten = [{"role": "user", "content": "1+2="}, *messages[1:]]
    third = await client.chat.completions.create(
        model="builtin:tiny", messages=rewritten, max_tokens=4
    )
    extra = third.model_extra["dressage"]  # type: ignore[index]
    assert (extra["segment_index"], extra["new_segment"]) == (1, "history_rewrite")
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {}}}]
    rewritten += [
        {"role": "assistant", "content": third.choices[0].message.content},
        {"role": "user", "content": "use the tool"},
    ]
    fourth = await client.chat.completions.create(
        model="builtin:tiny",
        messages=rewritten,
        max_tokens=4,
        tools=tools,  # type: ignore[arg-type]
    )
    extra = fourth.model_extra["dressage"]  # type: ignore[index]
    assert (extra["segment_index"], extra["new_segment"]) == (2, "tools_changed")
    records = await _records(proxy, "chat-rewrite")
    assert [r["segment_index"] for r in records] == [0, 1, 2]
    assert [r["closed_reason"] for r in records] == [
        "history_rewrite",
        "tools_changed",
        "finalized",
    ]
    assert {r["parent_traj_id"] for r in records} == {"chat-rewrite"}


async def test_streaming_models_and_session_in_the_base_url(proxy: ProxyProcess) -> None:
    # An agent whose only setting is a base URL carries its session in the path.
    async with openai.AsyncOpenAI(
        base_url=proxy.base_url + "/s/chat-stream/v1", api_key="unused", max_retries=0
    ) as client:
        await _stream(client, proxy)


async def _stream(client: openai.AsyncOpenAI, proxy: ProxyProcess) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == ["builtin:tiny"]
    stream = await client.chat.completions.create(
        model="builtin:tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        stream=True,
    )
    finish = None
    async for chunk in stream:
        if chunk.choices:
            finish = chunk.choices[0].finish_reason or finish
    assert finish in ("stop", "length")
    (record,) = await _records(proxy, "chat-stream")
    assert sum(record["loss_mask"]) == len(record["response_tokens"]) <= 5


async def test_missing_session_id_is_a_clear_400(proxy: ProxyProcess) -> None:
    async with openai.AsyncOpenAI(
        base_url=proxy.base_url + "/v1", api_key="x", max_retries=0
    ) as client:
        await _missing(client)


async def _missing(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(
            model="builtin:tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert info.value.code == "missing_session_id"
    with pytest.raises(openai.BadRequestError) as bad:
        await client.chat.completions.create(
            model="builtin:tiny", messages=[{"role": "wizard", "content": "hi"}], user="s-bad"
        )
    assert "messages[0].role" in str(bad.value)


async def test_an_unknown_model_is_404_model_not_found_naming_it(proxy: ProxyProcess) -> None:
    async with _client(proxy, "chat-model") as client:
        with pytest.raises(openai.NotFoundError) as info:
            await client.chat.completions.create(
                model="gpt-9", messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
        assert info.value.code == "model_not_found"
        assert "gpt-9" in str(info.value)
        # The served name and its aliases are accepted.
        for name in ("builtin:tiny", "policy"):
            reply = await client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            assert reply.model == name


def test_tokenizer_is_loaded_without_the_checkpoint(tmp_path: Path) -> None:
    tok = load_chat_tokenizer("builtin:tiny")
    text = tok.render([{"role": "user", "content": "1+1="}], None, add_generation_prompt=True)
    assert text == "<|user|>1+1=<|end|>\n<|assistant|>"
    assert tok.decode(tok.encode(text), skip_special_tokens=False) == text
