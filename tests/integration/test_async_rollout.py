"""Async rollout over real processes: the proxy client under a pause, and `dressage run` in
both async modes with staleness controls on.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from dressage_testkit.engine import start_engine
from dressage_testkit.proxy import start_proxy
from dressage_testkit.trainer import small_model

from dressage.proxy.client import ProxyRolloutClient, SamplingSettings
from tests.integration.proxy_support import wait_for
from tests.integration.test_run_local import Runner

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

POOL = 100
"""httpx's default connection pool size (the trajectory client's before it moved to aiohttp's
unbounded connections): continue must get out with more generations parked than that."""
PARKED = 130
"""More generations than that pool holds. With 10 ms per decode step and 100 tokens each, a
wave of 32 batched generations lasts at least a second, so the pool is full (every connection
parked at the proxy by the pause) once they are submitted."""


async def test_continue_reaches_the_proxy_while_more_generations_are_parked_than_a_pool_holds(
    tmp_path: Path,
) -> None:
    """A pause parks every in-flight generation at the proxy; continue must still get out."""
    with (
        start_engine(cache_dir=tmp_path, min_step_interval_ms=10) as engine,
        start_proxy(
            [engine.base_url], "--dressage-partial-rollout", "--record-token-versions"
        ) as proxy,
    ):
        client = ProxyRolloutClient(proxy.base_url)
        sampling = SamplingSettings(max_new_tokens=100)
        try:
            tasks = [
                asyncio.create_task(
                    client.generate([1, 5, 6], sampling, session_id=f"s{i}", instance_id="g")
                )
                for i in range(PARKED)
            ]
            async with httpx.AsyncClient(base_url=proxy.base_url) as probe:

                async def all_in_flight() -> bool:
                    health = (await probe.get("/health")).json()
                    return int(health["inflight"]) >= POOL

                await wait_for(all_in_flight, timeout_s=60, what="generations in flight")
            await client.pause("abort")
            await asyncio.wait_for(client.resume(), timeout=30)
            outputs = await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
        finally:
            await client.aclose()
    # Every parked generation resumed and finished (at its budget or at end-of-sequence).
    assert len(outputs) == PARKED
    assert all(1 <= len(o) <= 100 for o in outputs)


def _manifest(tmp: Path, model_dir: Path, name: str, mode: str, **staleness: int) -> Path:
    job = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": name},
        "spec": {
            "model": {"source": str(model_dir), "dtype": "float32"},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "staleness": staleness,
            "rollout": {
                "mode": mode,
                "groupSize": 2,
                "batchSize": 2,
                "concurrency": 4,
                "maxNewTokens": 3,
            },
            "training": {"steps": 3, "learningRate": 1e-3},
            "local": {"metricsPort": 0, "cacheDir": str(tmp / "cache")},
        },
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _run(manifest: Path, runs: Path, name: str) -> tuple[str, list[dict[str, Any]]]:
    """Run the job to completion; its output and per-step history."""
    runner = Runner(manifest, runs)
    try:
        assert runner.wait() == 0, runner.output[-3000:]
    finally:
        runner.kill()
    lines = (runs / name / "history.jsonl").read_text().splitlines()
    return runner.output, [json.loads(line) for line in lines]


def _edited(manifest: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    job = yaml.safe_load(manifest.read_text())
    edit(job["spec"])
    manifest.write_text(yaml.safe_dump(job))
    return manifest


@pytest.mark.parametrize(
    ("mode", "staleness"),
    [
        ("fully_async", {"keepVersions": 1}),
        ("partial_async", {"keepVersions": 2, "maxPartialRolloutPreempts": 1}),
    ],
)
def test_async_job_runs_end_to_end_with_staleness_controls(
    tmp_path: Path, mode: str, staleness: dict[str, int]
) -> None:
    name = mode.replace("_", "-")
    manifest = _manifest(tmp_path, small_model(tmp_path / "model"), name, mode, **staleness)
    output, history = _run(manifest, tmp_path / "runs", name)
    assert f"mode {mode}" in output
    assert [h["step"] for h in history] == [1, 2, 3]
    assert [h["version"] for h in history] == ["v1", "v2", "v3"]
    # Every trained batch carried per-token versions from the proxy.
    assert all(h["staleness/version_span_min"] >= 1 for h in history)
    report = json.loads((tmp_path / "runs" / name / "report.json").read_text())
    assert len(report["steps"]) == 3


def test_multi_turn_environment_trains_with_the_whitebox_agent(tmp_path: Path) -> None:
    """A household job: every trajectory is the agent's episode, one sample each."""
    manifest = _manifest(
        tmp_path,
        small_model(tmp_path / "model"),
        "household",
        "partial_async",
        keepVersions=2,
        maxPartialRolloutPreempts=2,
    )

    def household(spec: dict[str, Any]) -> None:
        spec["task"] = {"name": "household", "params": {"boxes": 2}}
        spec["training"]["steps"] = 2

    _, history = _run(_edited(manifest, household), tmp_path / "runs", "household")
    assert [h["step"] for h in history] == [1, 2]
    assert all(h["samples"] == 4 for h in history)  # 2 groups x 2 trajectories, one sample each


def test_blackbox_agent_program_trains_through_the_proxy(tmp_path: Path) -> None:
    """An unmodified OpenAI-client program is the agent; its chat turns become samples."""
    manifest = _manifest(
        tmp_path,
        small_model(tmp_path / "model"),
        "blackbox",
        "partial_async",
        keepVersions=2,
        maxPartialRolloutPreempts=1,
    )

    def blackbox(spec: dict[str, Any]) -> None:
        spec["task"]["agent"] = "blackbox"
        solver = ROOT / "examples" / "agents" / "chat_solver.py"
        spec["task"]["agentCommand"] = [sys.executable, str(solver)]
        spec["training"]["steps"] = 2

    _, history = _run(_edited(manifest, blackbox), tmp_path / "runs", "blackbox")
    assert [h["step"] for h in history] == [1, 2]
    assert all(h["samples"] >= 4 for h in history)
