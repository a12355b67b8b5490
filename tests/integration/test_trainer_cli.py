"""`dressage train` as the operator launches it: torchrun, two gloo ranks, a real engine and
proxy. Rank 0 collects and publishes; both ranks train; the engine ends at the last version
and a rerun of the same command resumes at the next step."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from dressage_testkit.engine import start_engine, weight_version_of
from dressage_testkit.proxy import start_proxy
from dressage_testkit.trainer import small_model

from tests.engine_forks import run_command

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _job(tmp: Path, model_dir: Path) -> Path:
    job = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "gang"},
        "spec": {
            "model": {"source": str(model_dir)},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "trainer": {"nodes": 2, "gpusPerNode": 0},
            "proxy": {"recordTokenVersions": True},
            "rollout": {"mode": "sync", "groupSize": 2, "batchSize": 3, "maxNewTokens": 3},
            "training": {"steps": 2, "learningRate": 1e-3},
        },
    }
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _torchrun(job: Path, workdir: Path, engine: str, proxy: str, steps: int) -> str:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "dressage", "train", "--config", str(job), "--workdir", str(workdir),
        "--engine-urls", engine, "--proxy-url", proxy, "--metrics-port", "0",
        "--steps", str(steps),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = run_command(cmd, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_torchrun_gang_trains_publishes_and_resumes(tmp_path: Path) -> None:
    model_dir = small_model(tmp_path / "model")
    job = _job(tmp_path, model_dir)
    workdir = tmp_path / "run"
    with (
        start_engine(model=str(model_dir), weight_version="v0") as engine,
        start_proxy([engine.base_url], "--record-token-versions", "--model", str(model_dir)) as px,
    ):
        out = _torchrun(job, workdir, engine.base_url, px.base_url, steps=2)
        assert "rank 0/2: step 0, version v0" in out
        assert "step 2 version v2" in out
        version = {"weight_version": weight_version_of(engine.base_url)}
        assert version["weight_version"] == "v2"

        out = _torchrun(job, workdir, engine.base_url, px.base_url, steps=3)
        assert "rank 0/2: step 2, version v2" in out
        assert "step 3 version v3" in out
        assert "step 2 version" not in out
        version = {"weight_version": weight_version_of(engine.base_url)}
        assert version["weight_version"] == "v3"

    state = json.loads((workdir / "checkpoints" / "step-000003" / "state.json").read_text())
    assert state["collector"] == {"next_prompt": 9}
