"""`dressage run` with an MoE policy and routing replay, end to end: the job's
`rollout.routingReplay` turns on the proxy's recording, the embedded engine returns the routed
experts, the records carry them to the trainer, and every step reports its routing figures.

A small Qwen3-MoE (2 layers, 4 experts, top-2) and a tiny sync job keep it to about a minute.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from dressage_testkit.trainer import small_moe_model

from tests.engine_forks import run_command

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["record", "replay"])
def test_every_step_reports_routing_from_the_rollouts_routes(mode: str, tmp_path: Path) -> None:
    model = small_moe_model(tmp_path / "moe")
    job = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "moe-run"},
        "spec": {
            "model": {"source": str(model), "dtype": "float32"},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "inference": {"sglangVersion": "0.5.23"},
            "proxy": {"recordTokenVersions": True},
            "rollout": {
                "mode": "sync",
                "groupSize": 2,
                "batchSize": 2,
                "maxNewTokens": 3,
                "routingReplay": mode,
            },
            "training": {"steps": 3, "learningRate": 1e-3},
            "local": {"metricsPort": 0, "cacheDir": str(tmp_path / "cache")},
        },
    }
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "dressage", "run", str(manifest), "--workdir", str(tmp_path)]
    done = run_command(cmd, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    history = [
        json.loads(line)
        for line in (tmp_path / "moe-run" / "history.jsonl").read_text().splitlines()
    ]
    assert [h["step"] for h in history] == [1, 2, 3]
    for step in history:
        # Every token but each sample's last was routed by the rollout.
        assert 0.5 < step["routed_token_fraction"] < 1.0, step
        # Sync rollout, float32 engine and trainer: the same weights route alike (but for a
        # near-tie that rounding could split, about one pair in 10^5).
        assert step["routing_agreement"] > 0.98, step
        assert step["train_rollout_logprob_abs_diff"] < 1e-4, step
