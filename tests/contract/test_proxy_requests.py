"""What the real proxy (`dressage.proxy.server.create_app`) sends to an SGLang engine, and how
it reads what SGLang answers, against a recording fake SGLang on loopback.

Requests: every `/generate` body the proxy forwards must build SGLang's `GenerateReqInput` and
`SamplingParams` (then `normalize`/`verify`), and every `/pause_generation` body must be one
the release acts on (`managers/io_struct.py`, `sampling/sampling_params.py`,
`entrypoints/http_server.py`, v0.5.2: no `sampling_seed`, and `/pause_generation` reads no
body and always aborts, so `in_place`/`retract` cannot be honoured before v0.5.6).

Responses (shapes from `managers/tokenizer_manager.py` and `managers/schedule_batch.py`
`FINISH_*.to_json()`, v0.5.2): normal stop `{"type": "stop", "matched": id_or_str}`, length
`{"type": "length", "length": n}`, abort of a running request with its partial `output_ids`,
abort of a queued request (`"Abort before prefill"`, no `output_ids`), `output_token_logprobs`
as `[logprob, token_id, text_or_null]`, and the HTTP 503 of a full queue. And 0.5.23's: the
queued abort with `output_ids`, the version and its span and no `prompt_tokens` ("Abort in
waiting queue"), per-token `weight_versions`, the schema gate's 400 `{"error": "<text>"}`, the
version in `/model_info` (no `/get_weight_version`), `stop_regex` and nulls as defaults.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from dressage.engine.protocol import GenerateResponse
from dressage.engine.sglang_support import (
    LATER_SAMPLING_PARAM_KEYS,
    PAUSE_MODES,
    SAMPLING_SEED,
    supports,
)
from tests.contract.proxy_harness import engine_release_known, running_proxy
from tests.contract.support import (
    ABORT_BEFORE_PREFILL,
    QUEUE_FULL_ERROR,
    SGLANG_VERSION,
    check_generate_body,
    fake_sglang,
    finish_abort_running,
    finish_length,
    finish_stop,
    generate_answer,
    http_server_source,
    schema_gate,
    sglang_routes,
)

pytestmark = pytest.mark.contract


def _generate(params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"input_ids": [1, 2, 3], "sampling_params": params, "return_logprob": True, **extra}


@pytest.mark.parametrize(
    "params",
    [
        {"max_new_tokens": 4},
        {
            "max_new_tokens": 4,
            "temperature": 0.7,
            "top_p": 0.9,
            "stop": ["\n"],
            "stop_token_ids": [2],
            "top_k": 5,
            "min_p": 0.05,
        },
        {"max_new_tokens": 4, "sampling_seed": 7},
    ],
    ids=["budget", "full", "seeded"],
)
async def test_forwarded_generate_bodies_fit_sglang(params: dict[str, Any]) -> None:
    with fake_sglang() as fake:
        async with running_proxy(fake.url) as proxy:
            answer = await proxy.post(
                "/generate", json=_generate(params), headers={"X-Session-Id": "s-1"}
            )
        bodies = fake.posted("/generate")
    assert answer.status_code == 200, answer.text
    for body in bodies:
        check_generate_body(body)


@pytest.mark.parametrize("release", [SGLANG_VERSION, "0.5.3", "0.5.19"])
async def test_a_seed_reaches_exactly_the_releases_that_take_it(release: str) -> None:
    """SGLang before 0.5.3 has no `sampling_seed` (TypeError, HTTP 500): the proxy leaves it out
    for such an engine, and forwards it once the engine's release is known to take it. (The
    installed release's classes check the body only for that release; a newer one's answer is
    scripted.)"""
    body = _generate({"max_new_tokens": 4, "sampling_seed": 7})
    with fake_sglang(version=release) as fake:
        if release != SGLANG_VERSION:
            fake.answers.append((200, generate_answer(body, [5], finish_length(1))))
        async with running_proxy(fake.url, health_interval_s=0.05) as proxy:
            assert await engine_release_known(proxy) == release
            answer = await proxy.post("/generate", json=body, headers={"X-Session-Id": "s-1"})
        (sent,) = fake.posted("/generate")
    assert answer.status_code == 200, answer.text
    assert ("sampling_seed" in sent["sampling_params"]) == supports(release, SAMPLING_SEED)
    if release == SGLANG_VERSION:
        check_generate_body(sent)


@pytest.mark.parametrize("release", [SGLANG_VERSION, "0.5.6"])
async def test_a_pause_mode_reaches_exactly_the_releases_that_honour_it(release: str) -> None:
    with fake_sglang(version=release) as fake:
        async with running_proxy(fake.url, health_interval_s=0.05) as proxy:
            await engine_release_known(proxy)
            paused = await proxy.post("/pause_generation", json={"mode": "in_place"})
            await proxy.post("/continue_generation", json={})
        (body,) = fake.posted("/pause_generation")
    assert paused.status_code == 200, paused.text
    assert body == ({"mode": "in_place"} if supports(release, PAUSE_MODES) else {})


@pytest.mark.parametrize(
    "mode",
    [
        "abort",
        pytest.param(
            "in_place",
        ),
    ],
)
async def test_pause_bodies_are_ones_the_release_honours(mode: str) -> None:
    from sglang.srt.managers import io_struct

    with fake_sglang() as fake:
        async with running_proxy(fake.url) as proxy:
            paused = await proxy.post("/pause_generation", json={"mode": mode})
            await proxy.post("/continue_generation", json={})
        bodies = fake.posted("/pause_generation")
    assert paused.status_code == 200, paused.text
    pause_type = getattr(io_struct, "PauseGenerationReqInput", None)
    for body in bodies:
        if pause_type is None:
            assert body in ({}, {"mode": "abort"}), f"SGLang {SGLANG_VERSION} ignores {body}"
        else:
            pause_type(**body)


@pytest.mark.parametrize(
    ("output_ids", "finish", "with_text"),
    [
        ([5, 6, 2], finish_stop(2), False),
        ([5, 6], finish_stop("\n"), True),
        ([5, 6, 7, 8], finish_length(4), False),
    ],
    ids=["stop-token", "stop-string", "length"],
)
async def test_finished_answers_reach_the_agent_as_sglang_sent_them(
    output_ids: list[int], finish: dict[str, Any], with_text: bool
) -> None:
    body = _generate({"max_new_tokens": 4}, return_text_in_logprobs=with_text)
    engine_answer = generate_answer(body, output_ids, finish)
    GenerateResponse.model_validate(engine_answer)
    with fake_sglang() as fake:
        fake.answers.append((200, engine_answer))
        async with running_proxy(fake.url) as proxy:
            answer = await proxy.post("/generate", json=body, headers={"X-Session-Id": "s-1"})
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert data["output_ids"] == output_ids
    assert data["meta_info"]["finish_reason"] == finish
    assert [e[:2] for e in data["meta_info"]["output_token_logprobs"]] == [
        [-0.5, t] for t in output_ids
    ]


async def test_an_abort_with_partial_output_is_an_answer() -> None:
    body = _generate({"max_new_tokens": 4})
    aborted = generate_answer(body, [5, 6], finish_abort_running())
    GenerateResponse.model_validate(aborted)
    with fake_sglang() as fake:
        fake.answers.append((200, aborted))
        async with running_proxy(fake.url) as proxy:
            answer = await proxy.post("/generate", json=body, headers={"X-Session-Id": "s-1"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["meta_info"]["finish_reason"]["type"] == "abort"


async def test_an_abort_before_prefill_is_an_abort_with_no_tokens() -> None:
    assert GenerateResponse.model_validate(ABORT_BEFORE_PREFILL).aborted
    with fake_sglang() as fake:
        fake.answers.append((200, ABORT_BEFORE_PREFILL))
        async with running_proxy(fake.url) as proxy:
            answer = await proxy.post(
                "/generate", json=_generate({"max_new_tokens": 4}), headers={"X-Session-Id": "s"}
            )
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert data["output_ids"] == []
    assert data["meta_info"]["finish_reason"]["type"] == "abort"


async def test_a_full_queue_is_retried_and_the_engine_stays_routable() -> None:
    with fake_sglang() as fake:
        fake.answers.append((503, QUEUE_FULL_ERROR))
        async with running_proxy(fake.url) as proxy:
            answer = await proxy.post(
                "/generate", json=_generate({"max_new_tokens": 4}), headers={"X-Session-Id": "s"}
            )
            engines = (await proxy.get("/health")).json()["engines"]
    assert answer.status_code == 200, answer.text
    assert answer.json()["meta_info"]["finish_reason"]["type"] == "length"
    assert [e["healthy"] for e in engines] == [True]


async def test_a_queue_full_past_the_busy_timeout_reaches_the_agent_as_is() -> None:
    with fake_sglang() as fake:
        fake.answers.extend([(503, QUEUE_FULL_ERROR)] * 1000)
        async with running_proxy(fake.url, engine_busy_timeout_s=0.2) as proxy:
            answer = await proxy.post(
                "/generate", json=_generate({"max_new_tokens": 4}), headers={"X-Session-Id": "s"}
            )
    # SGLang's flat error body (`{"object": "error", "message": ...}`) is read, not lost.
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["type"] == "engine_busy"
    assert "The request queue is full." in answer.json()["error"]["message"]


async def test_junk_sampling_params_are_the_agents_error_not_the_engines() -> None:
    with fake_sglang() as fake:
        async with running_proxy(fake.url) as proxy:
            answer = await proxy.post(
                "/generate",
                json=_generate({"max_new_tokens": 4, "stop": 5}),
                headers={"X-Session-Id": "s"},
            )
    assert answer.status_code == 400, answer.text
    assert "stop" in answer.json()["error"]["message"]


async def test_the_proxy_reads_the_engines_version_where_its_release_reports_it() -> None:
    """0.5.23 has no `/get_weight_version` (the version is in `/model_info`): once the
    publisher names the current version, the proxy still finds the engine serving it and
    routes to it, asking no deprecated alias."""
    with fake_sglang() as fake:
        async with running_proxy(fake.url, health_interval_s=0.05) as proxy:
            await engine_release_known(proxy)
            stated = await proxy.post("/continue_generation", json={"weight_version": "default"})
            answer = await proxy.post(
                "/generate", json=_generate({"max_new_tokens": 4}), headers={"X-Session-Id": "s"}
            )
            engines = (await proxy.get("/dressage/engines")).json()["engines"]
        asked = {r.path for r in fake.requests if r.method == "GET"}
    assert stated.status_code == 200, stated.text
    assert answer.status_code == 200, answer.text
    assert engines[0]["weight_version"] == "default"
    routes = sglang_routes()
    assert not {p for p in asked if ("GET", p) in routes} & deprecated_paths()


def deprecated_paths() -> set[str]:
    """Routes whose handler logs a deprecation warning per call in the release's source."""
    return set(re.findall(r"Endpoint '(/[\w/]+)' is deprecated", http_server_source()))


QUEUED_ABORT_0_5_23 = {
    "text": "",
    "output_ids": [],
    "meta_info": {
        "id": "0123456789abcdef",
        "finish_reason": {"type": "abort", "message": "Abort in waiting queue"},
        "weight_version": "v3",
        "e2e_latency": 0.01,
        "weight_versions": [{"version": "v3", "start": 0, "end": 0}],
        "input_token_logprobs": [],
        "output_token_logprobs": [],
        "output_token_logprobs_length": 0,
        "completion_tokens": 0,
    },
}
"""0.5.23 `tokenizer_manager._handle_abort_req` for a request aborted in the waiting queue:
`output_ids`, the version and its empty span, the latency, no `prompt_tokens`."""


def running_abort_0_5_23(output_ids: list[int], spans: list[dict[str, Any]]) -> dict[str, Any]:
    """0.5.23's answer for a running request aborted mid-generation: the tokens so far, every
    `meta_info` key of `_handle_batch_output`, `FINISH_ABORT().to_json()`, per-token spans."""
    return {
        "text": "t5t6t7",
        "output_ids": output_ids,
        "meta_info": {
            "id": "0123456789abcdef",
            "finish_reason": finish_abort_running("Aborted"),
            "prompt_tokens": 3,
            "weight_version": spans[-1]["version"],
            "num_retractions": 0,
            "output_token_logprobs": [[-0.5, t, None] for t in output_ids],
            "reasoning_tokens": 0,
            "completion_tokens": len(output_ids),
            "cached_tokens": 0,
            "weight_versions": spans,
            "e2e_latency": 0.01,
        },
    }


@pytest.mark.parametrize(
    "aborted",
    [
        ABORT_BEFORE_PREFILL,
        QUEUED_ABORT_0_5_23,
        running_abort_0_5_23([5, 6, 7], [{"version": "v3", "start": 0, "end": 3}]),
    ],
    ids=["queued-0.5.2", "queued-0.5.23", "running-0.5.23"],
)
async def test_every_abort_shape_is_an_abort_with_its_tokens(aborted: dict[str, Any]) -> None:
    GenerateResponse.model_validate(aborted)
    with fake_sglang() as fake:
        fake.answers.append((200, aborted))
        async with running_proxy(fake.url) as proxy:
            answer = await proxy.post(
                "/generate", json=_generate({"max_new_tokens": 4}), headers={"X-Session-Id": "s"}
            )
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert data["meta_info"]["finish_reason"]["type"] == "abort"
    assert data["output_ids"] == aborted.get("output_ids", [])
    assert len(data["dressage"]["versions"]) == len(data["output_ids"])


async def test_per_token_versions_come_from_the_engine_when_it_sends_them() -> None:
    """A response whose tokens came from two weight versions (0.5.23 `weight_versions`, the
    update landed mid-generation) keeps both; the proxy infers nothing."""
    spans = [{"version": "v3", "start": 0, "end": 2}, {"version": "v4", "start": 2, "end": 3}]
    engine_answer = running_abort_0_5_23([5, 6, 7], spans)
    engine_answer["meta_info"]["finish_reason"] = finish_length(3)
    with fake_sglang() as fake:
        fake.answers.append((200, engine_answer))
        async with running_proxy(fake.url, partial_rollout=True) as proxy:
            answer = await proxy.post(
                "/generate", json=_generate({"max_new_tokens": 3}), headers={"X-Session-Id": "s"}
            )
    assert answer.status_code == 200, answer.text
    assert answer.json()["dressage"]["versions"] == ["v3", "v3", "v4"]
    assert answer.json()["meta_info"]["weight_versions"] == spans


async def test_a_schema_refusal_reaches_the_agent_as_invalid_request_naming_the_field() -> None:
    """0.5.23 refuses a body its schema does not admit with 400 `{"error": "<text>"}`: the
    agent gets `invalid_request` with that text as the message (not the JSON) and the field."""
    gate = schema_gate()
    body = _generate({"max_new_tokens": 4, "temperature": 0.5})
    refusal = {"error": "unknown field `temperatur`, expected one of `max_new_tokens`"}
    if gate is not None:
        refusal = {"error": gate(_generate({"max_new_tokens": 4, "temperatur": 0.5}))}
    with fake_sglang() as fake:
        fake.answers.append((400, refusal))
        async with running_proxy(fake.url) as proxy:
            answer = await proxy.post("/generate", json=body, headers={"X-Session-Id": "s"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request"
    assert error["message"].endswith(refusal["error"])
    assert error["param"] == "sampling_params.temperatur"


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"max_new_tokens": 4, "stop_regex": "[0-9]{3}"}, "stop_regex"),
        ({"max_new_tokens": 4, "top_k": None, "temperature": None}, None),
    ],
    ids=["stop_regex", "nulls"],
)
async def test_newer_keys_and_nulls_reach_the_release_as_it_takes_them(
    params: dict[str, Any], key: str | None
) -> None:
    """A key the engine's release has is forwarded (and fits its classes); one it lacks is
    refused naming it; a null that means the default is left out for a release that cannot
    take it (0.5.2 compares it: TypeError, HTTP 500)."""
    with fake_sglang() as fake:
        async with running_proxy(fake.url, health_interval_s=0.05) as proxy:
            await engine_release_known(proxy)
            answer = await proxy.post(
                "/generate", json=_generate(params), headers={"X-Session-Id": "s"}
            )
        bodies = fake.posted("/generate")
    takes = key is None or supports(SGLANG_VERSION, LATER_SAMPLING_PARAM_KEYS[key])
    if not takes:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == f"sampling_params.{key}"
        assert bodies == []
        return
    assert answer.status_code == 200, answer.text
    (body,) = bodies
    check_generate_body(body)
