"""`dressage run` with `spec.inference.weightSync: distributed`: the embedded engines join the
trainer's weight-update group over gloo and every step's weights are broadcast to them, for
every SGLang release the job may name (the engines play it: 0.5.2 takes one broadcast per
tensor, 0.5.23 flattened buckets inside weight-update sessions).

The trainer's logprob of every rollout token is compared with the engine's
(`train_rollout_logprob_abs_diff`): in a sync run the engines must serve exactly the weights
the trainer holds, so the difference stays at float32 rounding; engines left on older weights
differ by whole nats once the policy moves (the learning rate is large on purpose).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.test_run_local import Runner

pytestmark = pytest.mark.integration
JOB = "tiny-sync"
MATCH = 1e-4
"""Largest train/rollout logprob difference of engines serving the trainer's weights."""


def _manifest(tmp: Path, release: str) -> Path:
    job = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": JOB},
        "spec": {
            # Warm-started so that rewards vary within a group and the policy moves each step.
            "model": {
                "source": "builtin:tiny",
                "dtype": "float32",
                "warmStart": {"targetReward": 0.2, "learningRate": 0.003},
            },
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "inference": {"replicas": 2, "weightSync": "distributed", "sglangVersion": release},
            "proxy": {"recordTokenVersions": True},
            "rollout": {"mode": "sync", "groupSize": 4, "batchSize": 4, "maxNewTokens": 3},
            "training": {"steps": 4, "learningRate": 1e-2, "checkpointEvery": 2},
            "local": {"metricsPort": 0, "cacheDir": str(tmp / "cache")},
        },
    }
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _history(workdir: Path) -> list[dict[str, float]]:
    lines = (workdir / JOB / "history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_a_distributed_sync_run_trains_and_resumes_with_engines_on_the_trainers_weights(
    tmp_path: Path, engine_release: str
) -> None:
    manifest, workdir = _manifest(tmp_path, engine_release), tmp_path / "runs"
    first = Runner(manifest, workdir, "--steps", "3")
    try:
        assert first.wait() == 0, first.output[-4000:]
    finally:
        first.kill()
    assert "weight-update group formed with 2 engines (3 ranks, gloo)" in first.output
    assert f"engines serve SGLang {engine_release}'s HTTP API" in first.output
    # Weights go over the group; only the checkpoint of step 2 wrote them to disk.
    assert sorted(p.name for p in (workdir / JOB / "weights").iterdir()) == ["v2"]

    second = Runner(manifest, workdir, "--steps", "4")
    try:
        assert second.wait_line("resuming at step ").startswith("3 from the checkpoint of step 2")
        assert second.wait_line("engines ready: ").endswith("(weight version v2)")
        assert second.wait() == 0, second.output[-4000:]
    finally:
        second.kill()

    history = _history(workdir)
    assert [h["step"] for h in history] == [1, 2, 3, 4]
    assert [h["version"] for h in history] == ["v1", "v2", "v3", "v4"]
    assert any(h["grad_norm"] > 0 for h in history)  # the policy moved
    for h in history:
        assert h["train_rollout_logprob_abs_diff"] < MATCH, h
