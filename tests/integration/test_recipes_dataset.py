"""`dressage run` on the dataset task end to end: prompts from a JSONL file through the chat
template, scored by a reward function imported from the job's directory that receives the
row's columns, for two training steps over real processes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from dressage_testkit.trainer import small_model

from tests.engine_forks import run_command

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

REWARD = """
import json, os

def score(completion, row):
    with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
        f.write(json.dumps({"completion": completion, "row": row}) + "\\n")
    return {"correct": float(completion.strip() == row["answer"]), "tried": 1.0}
"""


def test_a_dataset_job_with_a_user_reward_trains(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "job_reward.py").write_text(REWARD)
    rows = [
        {"question": f"{a}+{b}=", "answer": str(a + b), "unit": a}
        for a in range(3)
        for b in range(3)
    ]
    (job_dir / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = job_dir / "job.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "dressage.io/v1alpha1",
                "kind": "AsyncRLJob",
                "metadata": {"name": "sums"},
                "spec": {
                    "model": {"source": str(small_model(tmp_path / "model")), "dtype": "float32"},
                    "task": {
                        "name": "dataset",
                        "dataset": {
                            "path": "sums.jsonl",
                            "promptColumn": "question",
                            "answerColumn": "answer",
                            "rewardColumns": ["unit"],
                            "systemPrompt": "Add.",
                        },
                        "reward": "job_reward:score",
                        "rewardWeights": {"correct": 1.0},
                    },
                    "rollout": {
                        "mode": "sync",
                        "groupSize": 2,
                        "batchSize": 2,
                        "maxNewTokens": 3,
                    },
                    "training": {"steps": 2, "learningRate": 1e-3},
                    "local": {"metricsPort": 0, "cacheDir": str(tmp_path / "cache")},
                },
            }
        )
    )
    # Run from the job's directory, as a user would: its modules and files are found there.
    done = run_command(
        [
            sys.executable,
            "-m",
            "dressage",
            "run",
            str(manifest),
            "--workdir",
            str(tmp_path / "runs"),
        ],
        cwd=job_dir,
        env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1"),
        timeout=400,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    history = [
        json.loads(line)
        for line in (tmp_path / "runs" / "sums" / "history.jsonl").read_text().splitlines()
    ]
    assert [h["step"] for h in history] == [1, 2]
    calls = [json.loads(line) for line in (job_dir / "calls.jsonl").read_text().splitlines()]
    assert len(calls) >= 8  # 2 steps x 2 groups x 2 samples
    expected = {json.dumps({"unit": r["unit"], "answer": r["answer"]}) for r in rows}
    assert {json.dumps(c["row"]) for c in calls} <= expected
    assert all(isinstance(c["completion"], str) for c in calls)
