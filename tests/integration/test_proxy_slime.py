"""The proxy as slime's router: slime's requests, as its source builds them, are served.

The payloads are built the way THUDM/slime builds them (read at its main branch):

- `slime/rollout/sglang_rollout.py` `GenerateState.__init__` (the sampling params) and
  `generate` (`{"sampling_params", "return_logprob": True, "input_ids"}`, plus
  `"return_routed_experts": True` with `--use-rollout-routing-replay`, and the header
  `{"X-SMG-Routing-Key": sample.session_id}` with `--router-policy consistent_hashing`); it
  reads `meta_info.output_token_logprobs` as `[logprob, token_id, ...]` and `text`;
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
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dressage.engine.testing import EngineProcess, start_engine
from dressage.proxy.testing import ProxyProcess, start_proxy
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
    `managers/tokenizer_manager.py` puts them in `meta_info` as it gets them)."""

    ROUTED = "AAAAAAEAAAA="  # what the engine sends, passed on unchanged

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def answer(self, path: str, body: bytes) -> object:
        if path != "/generate":
            return {"weight_version": "v0", "version": "0.5.23"}
        request = json.loads(body)
        self.bodies.append(request)
        meta: dict[str, Any] = {
            "id": "r",
            "finish_reason": {"type": "length", "length": 1},
            "prompt_tokens": len(request["input_ids"]),
            "completion_tokens": 1,
            "cached_tokens": 0,
            "weight_version": "v0",
            "output_token_logprobs": [[-0.5, 7, None]],
        }
        if request.get("return_routed_experts"):
            meta["routed_experts"] = self.ROUTED
        return {"text": "a", "output_ids": [7], "meta_info": meta}


async def test_return_routed_experts_passes_through_to_the_engine_and_back() -> None:
    engine = RoutingEngine()
    async with scripted_server(engine.answer) as url:
        with start_proxy([url]) as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
                body = slime_payload(PROMPT, 1, return_routed_experts=True)
                routed = await client.post("/generate", json=body)
                assert routed.status_code == 200, routed.text
                assert routed.json()["meta_info"]["routed_experts"] == RoutingEngine.ROUTED
                plain = await client.post("/generate", json=slime_payload(PROMPT, 1))
                assert "routed_experts" not in plain.json()["meta_info"]
    assert [b.get("return_routed_experts") for b in engine.bodies] == [True, None]
