"""The simulated engine fleet (`dressage_testkit.sim_fleet`, the benchmarks' stand-in for a
thousand SGLang servers) serves the release imported as that release's own code does, as far as
the proxy and the publishers use it:

- its routes are exactly the embedded engine's profile of the release (every one routed by the
  release's `entrypoints/http_server.py`), and any other route of the matrix is 404;
- a finished answer has the profile's `meta_info` keys and decodes with the release's API
  schema (0.5.23 `api/v1/api_types.GenerateResponse.from_json_value`); a running abort's finish
  reason is the release's `FINISH_ABORT().to_json()`;
- its server info reports the release, its version route the label, and its `/metrics` the
  declared SGLang names with the release's label keys (`dressage.metrics.sglang`).

The profile itself is held to the release in `test_release_profiles.py`; so a simulation that
drifted from the profile, or a profile that drifted from SGLang, turns this tier red.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import warnings
from typing import Any

import httpx
import pytest
from dressage_testkit.sim_engine import SimSettings, uniform_lengths
from dressage_testkit.sim_fleet import SimFleet

from dressage.engine.embedded.release_profiles import PROFILES, ReleaseProfile
from dressage.metrics import sglang as declared
from tests.contract.support import sglang_routes

pytestmark = [pytest.mark.contract, pytest.mark.integration]


@pytest.fixture(scope="module")
def profile(sglang_release: str) -> ReleaseProfile:
    if sglang_release not in PROFILES:
        pytest.skip(f"no profile for SGLang {sglang_release} (not tested)")
    return PROFILES[sglang_release]


def decode(answer: dict[str, Any]) -> Any:
    """`answer` decoded by the release's API schema (0.5.23), None without one."""
    try:
        from sglang.api.v1.api_types import GenerateResponse
    except ImportError:
        return None
    return GenerateResponse.from_json_value(answer)


async def test_the_sim_serves_exactly_the_release_routes(profile: ReleaseProfile) -> None:
    routed = sglang_routes()
    assert profile.routes <= routed
    every = {route for p in PROFILES.values() for route in p.routes}
    settings = SimSettings(release=profile.release, token_latency_s=0.0)
    async with SimFleet(1, settings) as fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as http:
        for method, path in sorted(every):
            if method != "GET" or path in {"/flush_cache"}:
                continue  # POST routes are exercised below, with their bodies
            status = (await http.get(path)).status_code
            assert (status != 404) is profile.serves(method, path), (path, status)


async def test_answers_have_the_release_shapes(profile: ReleaseProfile) -> None:
    settings = SimSettings(
        release=profile.release, token_latency_s=0.02, lengths=uniform_lengths(40, 40)
    )
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 40}, "return_logprob": True}
    async with SimFleet(1, settings) as fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as http:
        short = {**body, "sampling_params": {"max_new_tokens": 3}}
        finished = (await http.post("/generate", json=short)).json()
        assert set(finished["meta_info"]) == {*profile.meta_info_keys, "output_token_logprobs"}
        decoded = decode(finished)
        if decoded is not None:
            assert decoded.meta_info.completion_tokens == 3
        running = asyncio.create_task(http.post("/generate", json=body))
        await fleet.engines[0].progressed()  # admitted: its abort is a running one's
        assert (await http.post("/abort_request", json={"abort_all": True})).status_code == 200
        aborted = (await running).json()
        assert aborted["meta_info"]["finish_reason"] == profile.aborts.running_finish
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            schedule_batch = importlib.import_module("sglang.srt.managers.schedule_batch")
        assert schedule_batch.FINISH_ABORT().to_json() == aborted["meta_info"]["finish_reason"]
        if decode(aborted) is not None:
            assert decode(aborted).meta_info.finish_reason is not None
        info = (await http.get(profile.server_info_route)).json()
        assert info["version"] == profile.release
        version = (await http.get(profile.weight_version_route)).json()
        assert version["weight_version"] == settings.weight_version
        text = (await http.get("/metrics")).text
    for metric in declared.METRICS:
        if metric.kind == "histogram":
            continue
        found = re.search(re.escape(metric.name) + r"\{([^}]*)\}", text)
        assert found is not None, metric.name
        keys = tuple(part.split("=")[0] for part in found.group(1).split(","))
        assert keys == declared.labels_of(metric, profile.release), metric.name
