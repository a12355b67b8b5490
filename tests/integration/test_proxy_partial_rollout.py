"""Partial rollout over real HTTP: a real embedded engine process and real proxy processes.

A long generation is interrupted by weight updates (pause, new version, continue through the
proxy) and resumes from its partial output with each token's own version; with
`--max-partial-rollout-preempts 2` the fourth version is refused with HTTP 502; without
partial rollout a trajectory that meets a new version is refused with 409.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import ProxyProcess, start_proxy

from dressage.data.versions import distinct_real_versions
from dressage.proxy.records import record_to_sample
from tests.integration.proxy_support import (
    engine_version,
    metric_value,
    new_label,
    session_busy,
    tiny_checkpoint,
    update_weights,
    wait_for,
)

pytestmark = pytest.mark.integration

PROMPT = [1, 5, 12, 23, 40, 41, 42]
PACE_MS = 4.0
"""Decode pacing of the engine: every token takes at least 4 ms, so a generation of N tokens
lasts at least N * 4 ms however fast or loaded the machine is. Each test sizes its generation
to outlast its rounds of weight updates by seconds (see `_interrupt_until_done`)."""


def _long(max_new_tokens: int) -> dict[str, Any]:
    return {"max_new_tokens": max_new_tokens, "ignore_eos": True, "temperature": 1.0}


@pytest.fixture(scope="module")
def engine(cache_dir: Path) -> Iterator[EngineProcess]:
    with start_engine(
        cache_dir=cache_dir, weight_version="v0", min_step_interval_ms=PACE_MS
    ) as engine:
        yield engine


@pytest.fixture(scope="module")
def partial_proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    args = ["--dressage-partial-rollout", "--record-token-versions"]
    with start_proxy([engine.base_url], *args) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def limited_proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    args = ["--dressage-partial-rollout", "--record-token-versions"]
    with start_proxy([engine.base_url], *args, "--max-partial-rollout-preempts", "2") as proxy:
        yield proxy


@pytest.fixture(scope="module")
def plain_proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    with start_proxy([engine.base_url], "--record-token-versions") as proxy:
        yield proxy


async def _weight_update(client: httpx.AsyncClient, engine: EngineProcess, cache: Path) -> str:
    """The trainer's weight update through the proxy: pause, publish a new version, continue."""
    label = new_label()
    assert (await client.post("/pause_generation")).status_code == 200
    await update_weights(engine.base_url, tiny_checkpoint(cache), label)
    assert (await client.post("/continue_generation")).status_code == 200
    return label


async def _interrupt_until_done(
    client: httpx.AsyncClient,
    engine: EngineProcess,
    cache: Path,
    session_id: str,
    task: asyncio.Task[httpx.Response],
    *,
    max_rounds: int,
) -> list[str]:
    """Up to `max_rounds` weight updates while the generation runs, each after it made
    progress; stops when the generation ends (refused, say). Returns the new labels."""
    await wait_for(lambda: session_busy(client, session_id), what="generation in flight")
    labels = []
    for _ in range(max_rounds):
        # Each version should give the trajectory at least one token before the next update,
        # and nothing observable says it did: the proxy sees a piece's tokens only when the
        # piece ends. So the round waits 0.3 s, ample for the resubmit and a token. It cannot
        # let the generation finish early either: with PACE_MS pacing a round yields at most
        # ~0.3 s / 4 ms = 75 tokens, and each test's max_new_tokens exceeds its rounds' total.
        await asyncio.wait({task}, timeout=0.3)
        if task.done():
            break
        labels.append(await _weight_update(client, engine, cache))
    return labels


def _generate(client: httpx.AsyncClient, session_id: str, params: dict[str, Any]) -> Any:
    return asyncio.create_task(
        client.post(
            "/generate",
            headers={"X-Session-Id": session_id, "X-Instance-Id": "prompt-1"},
            json={"input_ids": PROMPT, "sampling_params": params, "return_logprob": True},
        )
    )


async def test_interrupted_generation_resumes_with_per_token_versions(
    engine: EngineProcess, partial_proxy: ProxyProcess, cache_dir: Path
) -> None:
    first = await engine_version(engine.base_url)
    async with httpx.AsyncClient(base_url=partial_proxy.base_url, timeout=120) as client:
        params = _long(800)  # >= 3.2 s: outlasts two rounds
        task = _generate(client, "resume-1", params)
        labels = await _interrupt_until_done(
            client, engine, cache_dir, "resume-1", task, max_rounds=2
        )
        assert len(labels) == 2
        response = await task
        assert response.status_code == 200, response.text
        body = response.json()
        meta, extra = body["meta_info"], body["dressage"]
        # The budget survives the interruptions: prompt + generated tokens were resubmitted
        # with the remaining max_new_tokens.
        assert meta["completion_tokens"] == len(body["output_ids"]) == params["max_new_tokens"]
        assert meta["finish_reason"]["type"] == "length"
        assert len(meta["output_token_logprobs"]) == len(body["output_ids"])
        versions = extra["versions"]
        assert len(versions) == len(body["output_ids"])
        seen = distinct_real_versions(versions)
        order = [first, *labels]
        assert len(seen) >= 2, f"expected tokens from several versions, got {seen}"
        assert seen == [v for v in order if v in seen], "versions must follow the update order"
        assert extra["preempts"] >= 1
        spans = meta["weight_versions"]
        assert sum(s["end"] - s["start"] for s in spans) == len(versions)

        finalize = await client.post("/sessions/resume-1/finalize", json={"reward": 1.0})
        assert finalize.status_code == 200
        records = (await client.get("/segments", params={"instance_id": "prompt-1"})).json()
        (record,) = records["segments"]
        assert record["parent_traj_id"] == "resume-1"
        assert record["tokens"] == PROMPT + body["output_ids"]
        assert record["response_versions"] == versions
        assert record["preempts"] == extra["preempts"]
        assert record["dressage_end_token_version"] == seen[-1]
        sample = record_to_sample(record)
        assert sample.reward == 1.0
        assert sample.output_version_span == len(seen)
        metrics = (await client.get("/metrics")).text
        assert metric_value(metrics, "dressage_proxy_preempts_total") >= 1


async def test_fourth_version_gets_502_with_every_detail(
    engine: EngineProcess, limited_proxy: ProxyProcess, cache_dir: Path
) -> None:
    async with httpx.AsyncClient(base_url=limited_proxy.base_url, timeout=120) as client:
        # >= 8 s: outlasts even all 12 rounds (at most ~900 tokens); refused after 3 updates.
        task = _generate(client, "limit-1", _long(2000))
        await _interrupt_until_done(client, engine, cache_dir, "limit-1", task, max_rounds=12)
        response = await task
        assert response.status_code == 502, response.text
        error = response.json()["error"]
        assert error["type"] == "partial_rollout_staleness_exceeded"
        detail = error["detail"]
        assert len(detail["versions"]) == 4
        assert detail["version_span"] == 4
        assert detail["version_switches"] == 3
        assert detail["max_preempts"] == 2
        assert detail["max_version_span"] == 3
        # The trajectory is stopped: it is not generated any further.
        again = await client.post(
            "/generate",
            headers={"X-Session-Id": "limit-1"},
            json={"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}},
        )
        assert again.status_code == 502
        assert again.json()["error"]["type"] == "partial_rollout_staleness_exceeded"
        metrics = (await client.get("/metrics")).text
        assert (
            'dressage_proxy_refusals_total{reason="partial_rollout_staleness_exceeded"} 1.0'
            in metrics
        )


async def test_without_partial_rollout_a_new_version_is_refused(
    engine: EngineProcess, plain_proxy: ProxyProcess, cache_dir: Path
) -> None:
    async with httpx.AsyncClient(base_url=plain_proxy.base_url, timeout=60) as client:
        headers = {"X-Session-Id": "plain-1"}
        short = {"max_new_tokens": 4, "ignore_eos": True}
        first = await client.post(
            "/generate", headers=headers, json={"input_ids": PROMPT, "sampling_params": short}
        )
        assert first.status_code == 200, first.text
        before = distinct_real_versions(first.json()["dressage"]["versions"])
        label = new_label()
        await update_weights(engine.base_url, tiny_checkpoint(cache_dir), label)
        turn_two = PROMPT + first.json()["output_ids"] + [7, 8]
        second = await client.post(
            "/generate", headers=headers, json={"input_ids": turn_two, "sampling_params": short}
        )
        assert second.status_code == 409, second.text
        error = second.json()["error"]
        assert error["type"] == "version_changed_without_partial_rollout"
        assert error["detail"]["session_versions"] == before
        assert error["detail"]["candidate_versions"] == [label]
        third = await client.post(
            "/generate", headers=headers, json={"input_ids": turn_two, "sampling_params": short}
        )
        assert third.status_code == 409


async def test_without_partial_rollout_an_interrupted_turn_is_generated_again(
    engine: EngineProcess, plain_proxy: ProxyProcess, cache_dir: Path
) -> None:
    async with httpx.AsyncClient(base_url=plain_proxy.base_url, timeout=120) as client:
        params = {"max_new_tokens": 500, "ignore_eos": True}  # >= 2 s: outlasts one round
        task = _generate(client, "plain-2", params)
        labels = await _interrupt_until_done(
            client, engine, cache_dir, "plain-2", task, max_rounds=1
        )
        assert len(labels) == 1
        response = await task
        assert response.status_code == 200, response.text
        body = response.json()
        assert len(body["output_ids"]) == params["max_new_tokens"]
        # Discarded partial output: the whole turn comes from one version, the new one.
        assert distinct_real_versions(body["dressage"]["versions"]) == labels
        assert body["dressage"]["preempts"] == 1


async def test_a_turn_reports_its_time_in_the_proxy_and_in_the_engine(
    plain_proxy: ProxyProcess,
) -> None:
    async with httpx.AsyncClient(base_url=plain_proxy.base_url, timeout=60) as client:
        before = metric_value(
            (await client.get("/metrics")).text, "dressage_proxy_generation_overhead_seconds_count"
        )
        response = await _generate(client, "timed", _long(8))
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 200, response.text
    data = response.json()
    engine_latency = data["dressage"]["engine_latency"]
    # Eight tokens paced PACE_MS apart: the engine's own time is at least seven intervals,
    # and the proxy's time for the request contains the engine's.
    assert engine_latency >= 7 * PACE_MS / 1000
    assert data["meta_info"]["e2e_latency"] >= engine_latency
    after = metric_value(metrics, "dressage_proxy_generation_overhead_seconds_count")
    assert after == before + 1
