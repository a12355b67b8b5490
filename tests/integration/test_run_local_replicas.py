"""`dressage run` with two proxy replicas (`spec.proxy.replicas: 2`): the run starts both, the
rollout spreads its prompt groups over them, and every publish reaches both."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from dressage_testkit.trainer import small_model

from tests.integration.test_async_rollout import ROOT, _edited, _run
from tests.integration.test_async_rollout import _manifest as _async_manifest
from tests.integration.test_run_local import JOB, Runner

pytestmark = pytest.mark.integration


def _generates(proxy: str) -> float:
    total = 0.0
    for line in httpx.get(proxy + "/metrics", timeout=10.0).text.splitlines():
        if line.startswith("dressage_proxy_requests_total{") and 'endpoint="generate"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_local_run_with_two_proxy_replicas_uses_both_and_trains_every_step(
    tmp_path: Path,
) -> None:
    model_dir = small_model(tmp_path / "model")
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "dressage.io/v1alpha1",
                "kind": "AsyncRLJob",
                "metadata": {"name": JOB},
                "spec": {
                    "model": {"source": str(model_dir), "dtype": "float32"},
                    "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
                    "proxy": {"replicas": 2, "recordTokenVersions": True},
                    "rollout": {
                        "mode": "partial_async",
                        "groupSize": 2,
                        "batchSize": 4,
                        "maxNewTokens": 3,
                    },
                    "training": {"steps": 4, "learningRate": 1e-3},
                    "local": {"metricsPort": 0, "cacheDir": str(tmp_path / "cache")},
                },
            }
        )
    )
    workdir = tmp_path / "runs"
    runner = Runner(manifest, workdir, "--steps", "4")
    try:
        proxies = [runner.wait_line("proxy ready: "), runner.wait_line("proxy-1 ready: ")]
        deadline = time.monotonic() + 240
        seen = [0.0, 0.0]
        while time.monotonic() < deadline and not all(seen):
            try:
                seen = [_generates(p) for p in proxies]
            except httpx.TransportError:
                break  # the run ended meanwhile
            time.sleep(0.2)
        assert runner.wait() == 0, runner.output[-4000:]
    finally:
        runner.kill()
    assert all(n > 0 for n in seen), seen
    report = json.loads((workdir / JOB / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [1, 2, 3, 4]
    assert report["summary"]["last_version"] == "v4"
    # The steps read both replicas' lost tokens, the end only what each counted since.
    ledger = report["token_ledger"]
    assert ledger["overcounted"] == 0, ledger
    lost = ledger["proxy_lost"]
    assert lost["in_steps"] + lost["at_end"] == lost["counted"], lost


def test_a_blackbox_agents_chat_calls_reach_its_groups_replica(tmp_path: Path) -> None:
    """An unmodified OpenAI-client program gets its session's replica as `OPENAI_BASE_URL`:
    its chat turns land on the replica whose segment read collects the group, so every group
    comes back whole (a turn on the other replica would leave its trajectory out)."""
    manifest = _async_manifest(
        tmp_path,
        small_model(tmp_path / "model"),
        "blackbox-replicas",
        "partial_async",
        keepVersions=2,
        maxPartialRolloutPreempts=1,
    )

    def blackbox(spec: dict[str, object]) -> None:
        spec["task"]["agent"] = "blackbox"  # type: ignore[index]
        solver = ROOT / "examples" / "agents" / "chat_solver.py"
        spec["task"]["agentCommand"] = [sys.executable, str(solver)]  # type: ignore[index]
        spec["training"]["steps"] = 2  # type: ignore[index]
        spec["proxy"] = {**spec.get("proxy", {}), "replicas": 2}  # type: ignore[dict-item]

    output, history = _run(_edited(manifest, blackbox), tmp_path / "runs", "blackbox-replicas")
    assert "proxy-1 ready: " in output
    assert [h["step"] for h in history] == [1, 2]
    assert all(h["samples"] >= 4 for h in history)
    # No group came back short, as it does when its turns went to another replica.
    lost = [r for h in history for r in h["failed_attempts"] if "segments of" in r]
    assert not lost, history
