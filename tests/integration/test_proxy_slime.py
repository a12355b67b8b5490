"""The proxy as slime's router: slime's requests, as its source builds them, are served.

The payloads are built the way THUDM/slime builds them (read at its main branch):

- `slime/rollout/sglang_rollout.py` `GenerateState.__init__` (the sampling params) and
  `generate` (`{"sampling_params", "return_logprob": True, "input_ids"}`, plus
  `"return_routed_experts": True` with `--use-rollout-routing-replay`, and the header
  `{"X-SMG-Routing-Key": sample.session_id}` with `--router-policy consistent_hashing`); it
  reads `meta_info.output_token_logprobs` as `[logprob, token_id, ...]` and `text`, and
  `meta_info.routed_experts` as int32 `[len(sample.tokens) - 1, num_layers, moe_router_topk]`;
- `slime/rollout/sglang_streaming_rollout.py` `generate_streaming` (the same with
  `"stream": True`, read line by line: `data: {...}` cumulative chunks, then `data: [DONE]`);
- `slime/rollout/sglang_rollout.py` `abort` (`GET /workers`, `workers[*].url`) and
  `slime/backends/sglang_utils/server_control.py` (`POST /abort_request {"abort_all": true}`);
- `slime/backends/sglang_utils/sglang_engine.py` `_register_to_router` (`POST /workers
  {"url", "worker_type"}`) and `shutdown` (`DELETE /workers/{id}`).

miles (radixark/miles, main) builds its body in
`miles/rollout/generate_utils/generate_endpoint_utils.py` `compute_request_payload`: slime's,
with `return_routed_experts` and `return_indexer_topk` always present (false unless replayed).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import ProxyProcess, start_proxy

from dressage.engine.embedded.model import ModelWeights, full_logits, load_weights, new_routes
from dressage.model import BUILTIN_TINY_MOE, resolve_model_source
from tests.integration.proxy_support import session_busy, wait_for
from tests.scripted_http import scripted_server

pytestmark = pytest.mark.integration

PACE_MS = 20.0


def slime_sampling_params(max_new_tokens: int) -> dict[str, Any]:
    """`GenerateState.sampling_params` with slime's defaults (`--rollout-temperature 1.0`,
    `--rollout-top-p 1.0`, `--rollout-top-k -1`, no stop strings or ids)."""
    return {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": max_new_tokens,
        "stop": None,
        "stop_token_ids": None,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
    }


def slime_payload(prompt_ids: list[int], max_new_tokens: int, **extra: Any) -> dict[str, Any]:
    """The body of slime's `generate` for a text-only sample."""
    return {
        "sampling_params": slime_sampling_params(max_new_tokens),
        "return_logprob": True,
        "input_ids": prompt_ids,
        **extra,
    }


PROMPT = [8, 9, 10, 11, 12]


@pytest.fixture(scope="module")
def engine(cache_dir: Path) -> Iterator[EngineProcess]:
    with start_engine(cache_dir=cache_dir, min_step_interval_ms=PACE_MS) as e:
        yield e


@pytest.fixture(scope="module")
def proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    with start_proxy([engine.base_url], "--record-token-versions") as p:
        yield p


async def _records(client: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    segments = (await client.get("/segments", params={"drain": "false"})).json()["segments"]
    return [r for r in segments if r["parent_traj_id"] == session_id]


async def test_the_plain_slime_payload_is_a_trajectory_of_its_own(proxy: ProxyProcess) -> None:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
        response = await client.post("/generate", json=slime_payload(PROMPT, 4))
        assert response.status_code == 200, response.text
        output = response.json()
        # What slime reads.
        tokens = [item[1] for item in output["meta_info"]["output_token_logprobs"]]
        assert tokens == output["output_ids"]
        assert len(tokens) == 4
        assert isinstance(output["text"], str)
        # A trajectory of its own, finalized at once: its record waits at /segments.
        session_id = output["dressage"]["session_id"]
        assert session_id.startswith("req-")
        (record,) = await _records(client, session_id)
        assert record["prompt_tokens"] == PROMPT
        assert record["response_tokens"] == tokens
        assert record["closed_reason"] == "finalized"
        assert record["response_versions"] == ["v0"] * 4
        again = await client.post("/generate", json=slime_payload(PROMPT, 2))
        assert again.json()["dressage"]["session_id"] != session_id


async def test_the_miles_payload_with_its_false_replay_flags_is_served(
    proxy: ProxyProcess,
) -> None:
    body = slime_payload(PROMPT, 2, return_routed_experts=False, return_indexer_topk=False)
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
        response = await client.post("/generate", json=body, headers={"X-SMG-Routing-Key": "m1"})
        assert response.status_code == 200, response.text
        meta = response.json()["meta_info"]
        assert "routed_experts" not in meta
        assert len(meta["output_token_logprobs"]) == 2


async def test_the_routing_key_names_a_multi_turn_session(proxy: ProxyProcess) -> None:
    headers = {"X-SMG-Routing-Key": "slime-sample-7"}
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
        first = (
            await client.post("/generate", json=slime_payload(PROMPT, 3), headers=headers)
        ).json()
        assert first["dressage"]["session_id"] == "slime-sample-7"
        # slime's multi-turn sample: the next request extends the tokens so far.
        tokens = PROMPT + first["output_ids"] + [13, 14]
        second = (
            await client.post("/generate", json=slime_payload(tokens, 3), headers=headers)
        ).json()
        assert (second["dressage"]["segment_index"], second["dressage"]["new_segment"]) == (0, None)
        session = (await client.get("/sessions/slime-sample-7")).json()
        assert session["turns"] == 2


async def test_a_streamed_generate_is_sglangs_event_stream_with_versions_recorded(
    proxy: ProxyProcess,
) -> None:
    headers = {"X-SMG-Routing-Key": "slime-stream"}
    body = slime_payload(PROMPT, 5, stream=True)
    chunks = []
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
        async with client.stream("POST", "/generate", json=body, headers=headers) as response:
            response.raise_for_status()
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = [line async for line in response.aiter_lines()]
        # `generate_streaming`'s reading: `data:` lines, JSON chunks, `[DONE]` last.
        data = [line[len("data:") :].strip() for line in lines if line.startswith("data:")]
        assert data[-1] == "[DONE]"
        chunks = [json.loads(d) for d in data[:-1]]
        last = chunks[-1]
        meta = last["meta_info"]
        assert meta["finish_reason"]["type"] == "length"
        tokens = [item[1] for item in meta["output_token_logprobs"]]
        assert tokens == last["output_ids"]
        assert len(tokens) == 5
        assert last["dressage"]["versions"] == ["v0"] * 5
        await client.post("/sessions/slime-stream/finalize", json={"reward": 1.0})
        (record,) = await _records(client, "slime-stream")
        assert record["response_tokens"] == tokens
        assert record["response_versions"] == ["v0"] * 5


async def test_workers_lists_the_engines_and_abort_request_reaches_them(
    proxy: ProxyProcess, engine: EngineProcess
) -> None:
    async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
        listed = (await client.get("/workers")).json()
        # slime's `abort`: `[worker["url"] for worker in response["workers"]]`.
        assert [w["url"] for w in listed["workers"]] == [engine.base_url]
        assert listed["total"] == 1
        assert listed["workers"][0]["worker_type"] == "regular"
        # A long generation in flight, aborted through the proxy as slime aborts its engines.
        headers = {"X-SMG-Routing-Key": "slime-abort"}
        long = asyncio.create_task(
            client.post("/generate", json=slime_payload(PROMPT, 2000), headers=headers)
        )
        await wait_for(lambda: session_busy(client, "slime-abort"), what="the generation")
        aborted = await client.post("/abort_request", json={"abort_all": True})
        assert aborted.status_code == 200, aborted.text
        assert aborted.json() == {"engines": {engine.base_url: "ok"}}
        output = (await long).json()
        assert output["meta_info"]["finish_reason"]["type"] == "abort"
        assert output["meta_info"]["completion_tokens"] < 2000


async def test_workers_register_and_deregister_as_slimes_engines_do(
    engine: EngineProcess,
) -> None:
    other = "http://127.0.0.1:9"  # never healthy: registered, listed, not routed to
    with start_proxy([engine.base_url]) as proxy:
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
            added = await client.post("/workers", json={"url": other, "worker_type": "regular"})
            assert added.status_code == 200, added.text
            listed = (await client.get("/workers")).json()["workers"]
            assert [w["url"] for w in listed] == [engine.base_url, other]
            assert [w["is_healthy"] for w in listed] == [True, False]
            refused = await client.post("/workers", json={"url": other, "worker_type": "prefill"})
            assert refused.status_code == 400
            # slime's `shutdown`: find the worker by url, delete it by id.
            (worker,) = [w for w in listed if w["url"] == other]
            gone = await client.delete(f"/workers/{worker['id']}")
            assert gone.status_code == 200, gone.text
            assert [w["url"] for w in (await client.get("/workers")).json()["workers"]] == [
                engine.base_url
            ]


class RoutingEngine:
    """An SGLang engine started with `--enable-return-routed-experts`: it answers
    `meta_info.routed_experts` when a request asks for them (0.5.23
    `managers/tokenizer_manager.py` puts them in `meta_info` as it gets them): the base64 of
    int32 `[prompt + output - 1, layers, top_k]`, here 1 layer of top-2."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    @staticmethod
    def routes(rows: int) -> str:
        values = np.arange(rows * 2, dtype="<i4")
        return base64.b64encode(values.tobytes()).decode("ascii")

    async def answer(self, path: str, body: bytes) -> object:
        if path != "/generate":
            return {"weight_version": "v0", "version": "0.5.23"}
        request = json.loads(body)
        self.bodies.append(request)
        prompt = len(request["input_ids"])
        meta: dict[str, Any] = {
            "id": "r",
            "finish_reason": {"type": "length", "length": 1},
            "prompt_tokens": prompt,
            "completion_tokens": 1,
            "cached_tokens": 0,
            "weight_version": "v0",
            "output_token_logprobs": [[-0.5, 7, None]],
        }
        if request.get("return_routed_experts"):
            meta["routed_experts"] = self.routes(prompt)
        return {"text": "a", "output_ids": [7], "meta_info": meta}


async def releases_known(client: httpx.AsyncClient) -> bool:
    """Whether the proxy has read every engine's release (`/get_server_info`): until then it
    takes an engine for the oldest supported release, which has no `return_routed_experts`."""
    engines = (await client.get("/health")).json()["engines"]
    return all(e["sglang_version"] is not None for e in engines)


async def test_return_routed_experts_reaches_the_engine_only_when_asked() -> None:
    engine = RoutingEngine()
    async with scripted_server(engine.answer) as url:
        with start_proxy([url]) as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
                await wait_for(lambda: releases_known(client), what="the engine's release")
                body = slime_payload(PROMPT, 1, return_routed_experts=True)
                routed = await client.post("/generate", json=body)
                assert routed.status_code == 200, routed.text
                sent = RoutingEngine.routes(len(PROMPT))
                assert routed.json()["meta_info"]["routed_experts"] == sent
                plain = await client.post("/generate", json=slime_payload(PROMPT, 1))
                assert "routed_experts" not in plain.json()["meta_info"]
    assert [b.get("return_routed_experts") for b in engine.bodies] == [True, None]


# --- routing replay with a real MoE engine ------------------------------------------------------


@pytest.fixture(scope="module")
def moe_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("moe-cache")
    resolve_model_source(BUILTIN_TINY_MOE, path)
    return path


@pytest.fixture(scope="module")
def moe_weights(moe_cache: Path) -> ModelWeights:
    return load_weights(resolve_model_source(BUILTIN_TINY_MOE, moe_cache))


@pytest.fixture(scope="module")
def moe_proxy(moe_cache: Path) -> Iterator[ProxyProcess]:
    """The tiny MoE behind a proxy that records nothing of its own accord (no
    `--record-routed-experts`): what slime asks for is what gets recorded."""
    with (
        start_engine(model=BUILTIN_TINY_MOE, cache_dir=moe_cache) as moe,
        start_proxy([moe.base_url], "--record-token-versions") as proxy,
    ):
        yield proxy


def slime_routes(meta_info: dict[str, Any], tokens: list[int], weights: ModelWeights) -> np.ndarray:
    """`meta_info.routed_experts` read as slime reads it (`sglang_rollout.py` `generate`:
    `np.frombuffer(pybase64.b64decode(...), dtype=np.int32).reshape(len(sample.tokens) - 1,
    args.num_layers, args.moe_router_topk)`, `sample.tokens` being prompt + response)."""
    moe = weights.shape.moe
    assert moe is not None
    raw = base64.b64decode(meta_info["routed_experts"].encode("ascii"))
    return np.frombuffer(raw, dtype=np.int32).reshape(
        len(tokens) - 1, weights.shape.num_layers, moe.top_k
    )


def engine_routes(weights: ModelWeights, tokens: list[int]) -> np.ndarray:
    """The routing of `tokens[:-1]` by a full forward in this process."""
    routes = new_routes(weights.shape, len(tokens) - 1)
    full_logits(weights, tokens[:-1], routes)
    return routes.numpy()


def recorded_routes(record: dict[str, Any], weights: ModelWeights) -> np.ndarray:
    moe = weights.shape.moe
    assert moe is not None
    raw = base64.b64decode(record["routed_experts"])
    rows = record["routed_experts_rows"]
    return np.frombuffer(raw, dtype="<i4").reshape(rows, weights.shape.num_layers, moe.top_k)


async def test_slimes_routing_replay_payload_gets_sglangs_routes_and_the_session_records_them(
    moe_proxy: ProxyProcess, moe_weights: ModelWeights
) -> None:
    async with httpx.AsyncClient(base_url=moe_proxy.base_url, timeout=60) as client:
        await wait_for(lambda: releases_known(client), what="the engine's release")
        body = slime_payload(PROMPT, 6, return_routed_experts=True)
        response = await client.post("/generate", json=body)
        assert response.status_code == 200, response.text
        output = response.json()
        tokens = PROMPT + [item[1] for item in output["meta_info"]["output_token_logprobs"]]
        answered = slime_routes(output["meta_info"], tokens, moe_weights)
        np.testing.assert_array_equal(answered, engine_routes(moe_weights, tokens))
        # The one-off trajectory's record carries the very same routes.
        (record,) = await _records(client, output["dressage"]["session_id"])
        assert record["prompt_tokens"] + record["response_tokens"] == tokens
        np.testing.assert_array_equal(recorded_routes(record, moe_weights), answered)
        # Without the flag: no routes answered, none recorded.
        plain = (await client.post("/generate", json=slime_payload(PROMPT, 2))).json()
        assert "routed_experts" not in plain["meta_info"]
        (record,) = await _records(client, plain["dressage"]["session_id"])
        assert record["routed_experts"] is None


async def test_a_multi_turn_slime_sample_gets_the_routes_of_its_whole_sequence_streamed_or_not(
    moe_proxy: ProxyProcess, moe_weights: ModelWeights
) -> None:
    headers = {"X-SMG-Routing-Key": "slime-moe"}
    async with httpx.AsyncClient(base_url=moe_proxy.base_url, timeout=60) as client:
        await wait_for(lambda: releases_known(client), what="the engine's release")
        body = slime_payload(PROMPT, 4, return_routed_experts=True)
        first = (await client.post("/generate", json=body, headers=headers)).json()
        context = PROMPT + first["output_ids"] + [13, 14]
        body = slime_payload(context, 3, return_routed_experts=True, stream=True)
        async with client.stream("POST", "/generate", json=body, headers=headers) as response:
            response.raise_for_status()
            lines = [line async for line in response.aiter_lines()]
        data = [line[len("data:") :].strip() for line in lines if line.startswith("data:")]
        assert data[-1] == "[DONE]"
        second = json.loads(data[-2])
        tokens = context + second["output_ids"]
        answered = slime_routes(second["meta_info"], tokens, moe_weights)
        np.testing.assert_array_equal(answered, engine_routes(moe_weights, tokens))
        await client.post("/sessions/slime-moe/finalize", json={"reward": 1.0})
        (record,) = await _records(client, "slime-moe")
    assert record["prompt_tokens"] + record["response_tokens"] == tokens
    np.testing.assert_array_equal(recorded_routes(record, moe_weights), answered)
