"""Data-parallel training: two gloo ranks launched by torchrun stay identical and match one
process training on the whole batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dressage.trainer.grpo import GRPOTrainer, TrainerConfig, load_policy
from dressage.trainer.testing import small_model, synthetic_batch

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


def test_two_gloo_ranks_keep_identical_weights_equal_to_one_process(tmp_path: Path) -> None:
    model = small_model(tmp_path / "model")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "dressage.trainer.testing",
        "--model", str(model), "--out", str(out), "--steps", str(STEPS),
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    rank0 = torch.load(out / "rank0.pt")
    rank1 = torch.load(out / "rank1.pt")
    initial = load_policy(model, torch.device("cpu")).state_dict()
    assert rank0.keys() == rank1.keys()
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), f"{name} differs between ranks"
    assert any(not torch.equal(rank0[n], initial[n]) for n in rank0), "training changed nothing"

    # One process on the whole batch takes the same steps (loss normalised by global tokens).
    torch.set_num_threads(1)
    single = GRPOTrainer(load_policy(model, torch.device("cpu")), TrainerConfig(learning_rate=1e-2))
    history = [single.train_step(synthetic_batch(step)) for step in range(1, STEPS + 1)]
    for name, tensor in single.module.state_dict().items():
        torch.testing.assert_close(rank0[name], tensor, rtol=1e-4, atol=1e-5)
    ddp_history = json.loads((out / "metrics.json").read_text())
    for ours, theirs in zip(ddp_history, history, strict=True):
        for key in ("reward", "loss", "train_rollout_logprob_abs_diff", "clip_fraction", "entropy"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
