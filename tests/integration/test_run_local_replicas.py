"""`dressage run` with two proxy replicas (`spec.proxy.replicas: 2`): the run starts both, the
rollout spreads its prompt groups over them, and every publish reaches both."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import yaml

from dressage.trainer.testing import small_model
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
