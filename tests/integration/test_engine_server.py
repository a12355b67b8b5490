"""The embedded engine as a real process on loopback, driven by the real client: generation,
logprobs, batching, abort and request validation.

Reference outputs come from the same checkpoint run through `dressage.engine.embedded.model` in the
test
process (its parity with `transformers` is pinned in tests/unit/engine/test_model.py).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from dressage_testkit.engine import EngineProcess, start_engine

from dressage.engine import EngineClient, EngineRequestError, GenerateRequest, SamplingParams
from dressage.engine.embedded.model import ModelWeights, full_logits
from dressage.engine.embedded.sampling import SamplingSpec, filtered_logprobs
from dressage.engine.protocol import error_message
from tests.integration.engine_support import (
    LONG,
    PACE_MS,
    greedy,
    greedy_reference,
    prompt_for,
    stream_until,
)

pytestmark = pytest.mark.integration
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def engine(cache_dir: Path) -> Iterator[EngineProcess]:
    """One engine for the whole module: these tests do not change its weights or pause it.
    Paced so that a LONG generation is still running when the abort test aborts it."""
    with start_engine(
        cache_dir=cache_dir, weight_version="v0", min_step_interval_ms=PACE_MS
    ) as process:
        yield process


async def test_generate_returns_logprobs_of_the_sampling_distribution(
    engine: EngineProcess, weights: ModelWeights
) -> None:
    prompt = prompt_for(1)
    async with EngineClient(engine.base_url) as client:
        out = await client.generate(greedy(prompt, 12, return_logprob=True))
        assert out.output_ids == greedy_reference(weights, prompt, 12)
        assert out.meta_info.finish_reason is not None
        assert out.meta_info.finish_reason.type == "length"
        assert out.meta_info.prompt_tokens == len(prompt)
        assert out.meta_info.completion_tokens == 12
        assert out.token_versions() == ["v0"] * 12
        assert [e[1] for e in out.meta_info.output_token_logprobs or []] == out.output_ids
        reference = full_logits(weights, prompt + out.output_ids)
        pairs = zip(out.output_logprobs(), out.output_ids, strict=True)
        for i, (logprob, token) in enumerate(pairs):
            expected = torch.log_softmax(reference[len(prompt) - 1 + i], -1)[token]
            assert math.isclose(logprob, float(expected), abs_tol=1e-4)

        params = SamplingParams(max_new_tokens=16, temperature=0.7, top_k=20, top_p=0.9)
        sampled = await client.generate(
            GenerateRequest(input_ids=prompt, sampling_params=params, return_logprob=True)
        )
        spec = SamplingSpec(temperature=0.7, top_k=20, top_p=0.9)
        reference = full_logits(weights, prompt + sampled.output_ids)
        pairs = zip(sampled.output_logprobs(), sampled.output_ids, strict=True)
        for i, (logprob, token) in enumerate(pairs):
            expected = filtered_logprobs(reference[len(prompt) - 1 + i], spec)[token]
            assert math.isclose(logprob, float(expected), abs_tol=1e-4)


async def test_stop_token_ends_generation_at_its_first_occurrence(
    engine: EngineProcess, weights: ModelWeights
) -> None:
    prompt = prompt_for(2)
    reference = greedy_reference(weights, prompt, 30)
    stop = reference[5]
    first = reference.index(stop)
    req = greedy(prompt, 30)
    req.sampling_params = SamplingParams(max_new_tokens=30, temperature=0.0, stop_token_ids=[stop])
    async with EngineClient(engine.base_url) as client:
        out = await client.generate(req)
    assert out.output_ids == reference[: first + 1]
    assert out.meta_info.finish_reason is not None
    assert out.meta_info.finish_reason.model_dump(exclude_none=True) == {
        "type": "stop",
        "matched": stop,
    }


async def test_32_concurrent_requests_match_their_single_request_outputs(
    engine: EngineProcess,
) -> None:
    prompts = [prompt_for(i) for i in range(32)]
    async with EngineClient(engine.base_url) as client:
        alone = [await client.generate(greedy(p, 24, return_logprob=True)) for p in prompts]
        together = await asyncio.gather(
            *(client.generate(greedy(p, 24, return_logprob=True)) for p in prompts)
        )
    for single, batched in zip(alone, together, strict=True):
        assert batched.output_ids == single.output_ids
        assert batched.output_logprobs() == pytest.approx(single.output_logprobs(), abs=1e-4)


async def test_sampling_is_reproducible_with_a_sampling_seed(engine: EngineProcess) -> None:
    params = SamplingParams(max_new_tokens=20, temperature=1.0, sampling_seed=42)
    req = GenerateRequest(input_ids=prompt_for(3), sampling_params=params)
    async with EngineClient(engine.base_url) as client:
        first, second = [await client.generate(req) for _ in range(2)]
        reseeded = params.model_copy(update={"sampling_seed": 7})
        other = await client.generate(req.model_copy(update={"sampling_params": reseeded}))
    assert first.output_ids == second.output_ids
    assert first.output_ids != other.output_ids


async def test_abort_mid_generation_returns_the_partial_tokens(
    engine: EngineProcess, weights: ModelWeights
) -> None:
    prompt = prompt_for(4)
    async with EngineClient(engine.base_url) as client:
        # The non-streaming request is admitted first; once the streaming one has produced
        # tokens, both are mid-generation, and pacing keeps them so for seconds (PACE_MS).
        blocking = asyncio.create_task(client.generate(greedy(prompt, LONG, rid="victim")))
        watched, reached = await stream_until(client, greedy(prompt, LONG, rid="watched"), 5)
        await asyncio.wait_for(reached.wait(), 60)
        await client.abort_request(rid="victim")
        await client.abort_request(rid="watched")
        victim = await asyncio.wait_for(blocking, 60)
        stream_last = await asyncio.wait_for(watched, 60)
    for out in (victim, stream_last):
        assert out.aborted
        n = len(out.output_ids)
        assert 1 <= n < LONG
        assert out.meta_info.completion_tokens == n
        assert out.output_ids == greedy_reference(weights, prompt, n)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/generate", {"sampling_params": {"max_new_tokens": 2}}, "text or input_ids"),
        ("/generate", {"input_ids": [1], "sampling_params": {"temperature": -1}}, "temperature"),
        ("/generate", {"input_ids": [1], "sampling_params": {"top_k": 0}}, "top_k"),
        ("/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}, "max_new"),
        ("/generate", {"input_ids": [1], "sampling_params": {"n": 2}}, "sampling_params.n"),
        ("/generate", {"input_ids": [1, 99999]}, "input_ids[1]"),
        # 0.5.23's schema gate says what the value should have been (`for TokenIdsOrList`).
        ("/generate", {"input_ids": "1 2"}, "TokenIdsOrList"),
        ("/generate", {"input_ids": [[1], [2]]}, "input_ids"),
        ("/generate", {"input_ids": [1], "stream": "maybe"}, 'string "maybe"'),
        ("/generate", {"input_ids": [1], "rid": 5}, "StringOrList"),
        ("/generate", {"input_ids": [1] * 5000}, "context length"),
        ("/generate", [1, 2], "JSON object"),
        ("/generate", "{not json", "not valid JSON"),
        ("/update_weights_from_disk", {}, "model_path"),
        ("/update_weights_from_disk", {"model_path": "/nonexistent/ckpt"}, "/nonexistent/ckpt"),
        ("/pause_generation", {"mode": "sideways"}, "mode"),
        ("/abort_request", {"rid": ["a"]}, "rid"),
    ],
)
async def test_bad_requests_get_sglang_style_400_naming_the_field(
    engine: EngineProcess, path: str, body: object, field: str
) -> None:
    content = body if isinstance(body, str) else json.dumps(body)
    async with httpx.AsyncClient() as http:
        response = await http.post(engine.base_url + path, content=content)
        assert response.status_code == 400
        assert field in error_message(response.content)
        assert (await http.get(engine.base_url + "/health")).status_code == 200


@pytest.mark.parametrize(
    ("params", "refused"),
    [
        ({"bogus": 1}, {"0.5.2": "Internal Server Error", "0.5.23": "unknown field `bogus`"}),
        (
            {"temperature": "0.5"},
            {"0.5.2": "Internal Server Error", "0.5.23": 'string "0.5", expected f64'},
        ),
        ({"sampling_seed": 3}, {"0.5.2": "Internal Server Error", "0.5.23": None}),
        ({"top_k": None}, {"0.5.2": "Internal Server Error", "0.5.23": None}),
    ],
    ids=["unknown-key", "wrong-type", "later-key", "null"],
)
async def test_sampling_params_the_release_cannot_take_get_its_status(
    cache_dir: Path, engine_release: str, params: dict[str, object], refused: dict[str, str]
) -> None:
    """0.5.2 raises TypeError for these (an unknown keyword, a str or None compared with a
    number), which its /generate handler does not turn into a 400: HTTP 500, plain text.
    0.5.23's schema gate refuses the unknown key and the wrong type with 400 in its own words,
    and takes `sampling_seed` and a null `top_k` (the default)."""
    expected = refused[engine_release]
    body = {"input_ids": [1], "sampling_params": {**params, "max_new_tokens": 2}}
    with start_engine(cache_dir=cache_dir, sglang_release=engine_release) as engine:
        async with httpx.AsyncClient(base_url=engine.base_url, timeout=60) as http:
            response = await http.post("/generate", json=body)
            healthy = (await http.get("/health_generate")).status_code
    if expected is None:
        assert response.status_code == 200, response.text
    elif expected == "Internal Server Error":
        assert (response.status_code, response.text) == (500, expected)
    else:
        assert response.status_code == 400
        assert expected in response.json()["error"]
    assert healthy == 200


async def test_unknown_paths_and_methods_get_404_and_405_naming_them(
    engine: EngineProcess,
) -> None:
    async with httpx.AsyncClient() as http:
        missing = await http.post(engine.base_url + "/v1/nothing", content="{}")
        wrong = await http.get(engine.base_url + "/generate")
        head = await http.head(engine.base_url + "/health")
    assert missing.status_code == 404
    assert "/v1/nothing" in missing.json()["error"]["message"]
    assert wrong.status_code == 405
    assert "GET" in wrong.json()["error"]["message"]
    assert (head.status_code, head.content) == (200, b"")


async def test_client_surfaces_400_as_engine_request_error(engine: EngineProcess) -> None:
    async with EngineClient(engine.base_url) as client:
        with pytest.raises(EngineRequestError, match=r"input_ids\[0\]") as caught:
            await client.generate(GenerateRequest(input_ids=[10**6]))
        assert caught.value.status_code == 400
        with pytest.raises(EngineRequestError, match="nonexistent"):
            await client.update_weights_from_disk("/nonexistent", "v9")
        assert await client.get_weight_version() == "v0"


async def test_stop_string_is_matched_and_trimmed(engine: EngineProcess) -> None:
    prompt = prompt_for(8)
    async with EngineClient(engine.base_url) as client:
        full = await client.generate(greedy(prompt, 30))
        stop = full.text[6:8]
        cut = full.text.index(stop)
        req = greedy(prompt, 30)
        req.sampling_params = SamplingParams(max_new_tokens=30, temperature=0.0, stop=[stop])
        out = await client.generate(req)
    assert out.meta_info.finish_reason is not None
    assert out.meta_info.finish_reason.model_dump(exclude_none=True) == {
        "type": "stop",
        "matched": stop,
    }
    assert out.text == full.text[:cut]
    assert out.output_ids == full.output_ids[: len(out.output_ids)]
