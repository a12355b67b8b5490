"""The embedded engine's `/metrics` serves SGLang's own metrics (`dressage.metrics.sglang`) with
the labels of the release it plays, for every release of the matrix: what the dashboard's SGLang
engine row queries is there, filled, on a real engine process after real generations."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dressage_testkit.engine import EngineProcess, start_engine
from prometheus_client.parser import text_string_to_metric_families

from dressage.api.sglang import SGLANG_TESTED_RELEASES
from dressage.engine import EngineClient
from dressage.metrics import sglang
from tests.integration.engine_support import greedy, prompt_for

pytestmark = pytest.mark.integration

REQUESTS = 3
NEW_TOKENS = 5


@pytest.fixture(scope="module", params=SGLANG_TESTED_RELEASES)
def engine(request: pytest.FixtureRequest, cache_dir: Path) -> Iterator[EngineProcess]:
    with start_engine(cache_dir=cache_dir, sglang_release=request.param) as process:
        yield process


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of the exposition by its sample name (a histogram's `_bucket`, `_count`...;
    a counter's `_total`)."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


async def test_every_declared_sglang_metric_is_served_with_the_release_labels(
    engine: EngineProcess, request: pytest.FixtureRequest
) -> None:
    release = request.node.callspec.params["engine"]
    async with EngineClient(engine.base_url) as client:
        await asyncio.gather(
            *(client.generate(greedy(prompt_for(i), NEW_TOKENS)) for i in range(REQUESTS))
        )
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(f"{engine.base_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = _samples(response.text)
    for metric in sglang.METRICS:
        sample = metric.name + ("_count" if metric.kind == "histogram" else "")
        assert sample in samples, f"{metric.name} not served by the {release} engine"
        labels, _ = samples[sample][0]
        assert tuple(sorted(labels)) == tuple(sorted(sglang.labels_of(metric, release))), sample
        if metric.per_request:
            assert sum(v for _, v in samples[sample]) >= REQUESTS, sample
    labels, prompts = samples[sglang.PROMPT_TOKENS][0]
    assert prompts == sum(len(prompt_for(i)) for i in range(REQUESTS))
    assert samples[sglang.GENERATION_TOKENS][0][1] == REQUESTS * NEW_TOKENS
    assert labels["model_name"] == "builtin:tiny"
    if "is_streaming" in labels:
        assert labels["is_streaming"] == "false"
    # Idle after the requests: nothing running, queued or holding the KV cache.
    for gauge in (sglang.NUM_RUNNING_REQS, sglang.NUM_QUEUE_REQS, sglang.TOKEN_USAGE):
        assert samples[gauge][0][1] == 0.0, gauge
    (gauge_labels, _), *_ = samples[sglang.NUM_RUNNING_REQS]
    assert gauge_labels["engine_type"] == "unified"
    assert gauge_labels["tp_rank"] == "0"


async def test_running_requests_fill_the_scheduler_gauges(
    cache_dir: Path,
) -> None:
    """While generations run (paced), the running count, KV-cache use and throughput move."""
    with start_engine(cache_dir=cache_dir, min_step_interval_ms=40, max_batch_size=2) as engine:
        async with EngineClient(engine.base_url) as client:
            running = [
                asyncio.create_task(client.generate(greedy(prompt_for(i), 60))) for i in range(3)
            ]
            deadline = asyncio.get_running_loop().time() + 30
            seen: dict[str, float] = {}
            async with httpx.AsyncClient(timeout=10) as http:
                while asyncio.get_running_loop().time() < deadline:
                    samples = _samples((await http.get(f"{engine.base_url}/metrics")).text)
                    for gauge in (
                        sglang.NUM_RUNNING_REQS,
                        sglang.NUM_QUEUE_REQS,
                        sglang.TOKEN_USAGE,
                        sglang.GEN_THROUGHPUT,
                    ):
                        seen[gauge] = max(seen.get(gauge, 0.0), samples[gauge][0][1])
                    if all(
                        seen.get(g, 0.0) > 0 for g in (sglang.NUM_QUEUE_REQS, sglang.GEN_THROUGHPUT)
                    ):
                        break
                    await asyncio.sleep(0.2)
            await asyncio.gather(*running)
    assert seen[sglang.NUM_RUNNING_REQS] in (1.0, 2.0)  # at most max_batch_size
    assert seen[sglang.NUM_QUEUE_REQS] == 1.0
    assert 0.0 < seen[sglang.TOKEN_USAGE] <= 1.0
    assert seen[sglang.GEN_THROUGHPUT] > 0.0
