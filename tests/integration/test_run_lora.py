"""`dressage run examples/local-lora.yaml`, briefly: every step publishes the adapter alone,
every token is stamped with a known version, and where the trained data came from the
trainer's own version the rollout logprobs equal the trainer's (the engine served exactly the
adapter the tokens are stamped with). The full learning run is measured in docs/lora.md."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.engine_forks import run_command

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


def test_the_lora_example_publishes_adapters_and_stamps_tokens_exactly(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "dressage", "run", str(ROOT / "examples" / "local-lora.yaml")]
    cmd += ["--workdir", str(tmp_path / "runs"), "--metrics-port", "0", "--steps", str(STEPS)]
    done = run_command(cmd, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    run = tmp_path / "runs" / "local-lora"
    published = [run / "weights" / f"v{step}" for step in range(1, STEPS + 1)]
    assert published[-1].is_dir()
    for version in (p for p in published if p.is_dir()):  # older ones may be pruned
        files = {p.name for p in version.iterdir()}
        assert files == {"adapter_config.json", "adapter_model.safetensors"}, version
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in history] == list(range(1, STEPS + 1))
    for record in history:
        assert record["version_lag_unknown_samples"] == 0
        if record["staleness/version_lag_max"] == 0:
            assert record["train_rollout_logprob_abs_diff"] < 1e-3, record["step"]
    assert history[0]["staleness/version_lag_max"] == 0  # step 1 trains v0's (the base's) data
