"""A `/generate` answer through the proxy carries the engine's whole `meta_info`, the proxy's
turn-wide fields over it.

SGLang 0.5.23 (`python/sglang/srt/managers/tokenizer_manager.py`, `_handle_batch_output`)
builds every answer's `meta_info` as `{"id", "finish_reason", "prompt_tokens",
"weight_version", "num_retractions": recv_obj.retraction_counts[i]}`, then adds
`"reasoning_tokens": recv_obj.reasoning_tokens[i]` with `completion_tokens` and
`cached_tokens`, the time stats (`convert_to_output_meta_info`: `request_received_ts`,
`first_token_latency`, `decode_throughput`, ...) with `--enable-metrics`, `dp_rank`,
`cached_tokens_details` and the logprobs a request asked for. An agent reading any of them
through the proxy reads what the engine sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import ProxyProcess, start_proxy

from tests.integration.proxy_support import wait_for
from tests.scripted_http import scripted_server

pytestmark = pytest.mark.integration

PROMPT = [8, 9, 10, 11, 12]
PARAMS = {"max_new_tokens": 3, "temperature": 0.0}


@pytest.fixture(scope="module")
def engine(cache_dir: Path) -> Iterator[EngineProcess]:
    """The embedded engine playing 0.5.23 (its default release), which sends
    `num_retractions` and `reasoning_tokens` as 0.5.23 does."""
    with start_engine(cache_dir=cache_dir, sglang_release="0.5.23") as e:
        yield e


@pytest.fixture(scope="module")
def proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    with start_proxy([engine.base_url]) as p:
        yield p


async def test_num_retractions_and_reasoning_tokens_of_0_5_23_reach_the_agent(
    proxy: ProxyProcess,
) -> None:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
        answer = await client.post(
            "/generate", json={"input_ids": PROMPT, "sampling_params": PARAMS}
        )
        assert answer.status_code == 200, answer.text
        meta = answer.json()["meta_info"]
    assert meta["num_retractions"] == 0
    assert meta["reasoning_tokens"] == 0
    # The proxy's own fields are over the engine's.
    assert meta["id"].startswith("dressage-")
    assert meta["completion_tokens"] == 3
    assert meta["weight_versions"] == [{"version": "v0", "start": 0, "end": 3}]
    # The proxy asks every turn for logprobs; an agent that did not ask gets none.
    assert "output_token_logprobs" not in meta
    assert "input_token_logprobs" not in meta


class MetricsEngine:
    """An SGLang 0.5.23 engine started with `--enable-metrics` and data parallelism: its
    `meta_info` holds the time stats, `dp_rank` and `cached_tokens_details` beside the keys
    every answer has."""

    EXTRA: dict[str, Any] = {  # noqa: RUF012 - a constant of the scripted engine
        "num_retractions": 2,
        "reasoning_tokens": 1,
        "request_received_ts": 1765000000.5,
        "first_token_latency": 0.012,
        "decode_throughput": 250.0,
        "dp_rank": 1,
        "cached_tokens_details": {"device": 0, "host": 0},
    }

    async def answer(self, path: str, body: bytes) -> object:
        if path != "/generate":
            return {"weight_version": "v0", "version": "0.5.23"}
        request = json.loads(body)
        meta: dict[str, Any] = {
            "id": "engine-rid",
            "finish_reason": {"type": "length", "length": 1},
            "prompt_tokens": len(request["input_ids"]),
            "weight_version": "v0",
            **self.EXTRA,
            "completion_tokens": 1,
            "cached_tokens": 0,
            "weight_versions": [{"version": "v0", "start": 0, "end": 1}],
            "input_token_logprobs": [[None, PROMPT[0], None]],
            "output_token_logprobs": [[-0.5, 7, None]],
            "output_token_logprobs_length": 1,
            "e2e_latency": 0.02,
        }
        return {"text": "a", "output_ids": [7], "meta_info": meta}


async def test_every_key_the_engine_sent_is_answered_and_the_proxys_go_over_them() -> None:
    async with scripted_server(MetricsEngine().answer) as url:
        with start_proxy([url]) as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
                await wait_for(lambda: _release_known(client), what="the engine's release")
                plain = await client.post(
                    "/generate", json={"input_ids": PROMPT, "sampling_params": PARAMS}
                )
                assert plain.status_code == 200, plain.text
                asked = await client.post(
                    "/generate",
                    json={"input_ids": PROMPT, "sampling_params": PARAMS, "return_logprob": True},
                )
                assert asked.status_code == 200, asked.text
    meta = plain.json()["meta_info"]
    assert {key: meta[key] for key in MetricsEngine.EXTRA} == MetricsEngine.EXTRA
    assert meta["id"] != "engine-rid"
    assert meta["e2e_latency"] != 0.02  # the proxy's time for the turn
    assert not {"input_token_logprobs", "output_token_logprobs"} & set(meta)
    meta = asked.json()["meta_info"]
    assert {key: meta[key] for key in MetricsEngine.EXTRA} == MetricsEngine.EXTRA
    assert meta["output_token_logprobs"] == [[-0.5, 7, None]]
    assert meta["output_token_logprobs_length"] == 1
    assert meta["input_token_logprobs"] == [[None, PROMPT[0], None]]


async def _release_known(client: httpx.AsyncClient) -> bool:
    engines = (await client.get("/health")).json()["engines"]
    return all(e["sglang_version"] is not None for e in engines)
