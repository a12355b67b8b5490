"""`dressage train` as a process stops before training, naming the field, when the job's code
directory (`spec.code.path`) is not on its storage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dressage_train_stops_before_training_when_the_code_dir_is_missing(
    tmp_path: Path,
) -> None:
    storage = tmp_path / "storage"
    storage.mkdir()
    manifest = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "code-dir"},
        "spec": {
            "model": {"source": "builtin:tiny"},
            "storage": {"persistentVolumeClaim": "shared", "mountPath": str(storage)},
            "code": {"path": "jobs/missing"},
            "task": {
                "name": "dataset",
                "dataset": {"path": "data/qa.jsonl", "promptColumn": "q", "answerColumn": "a"},
                "reward": "unused:score",
            },
        },
    }
    config = tmp_path / "job.json"
    config.write_text(json.dumps(manifest))
    done = subprocess.run(
        [
            *(sys.executable, "-m", "dressage", "train", "--config", str(config)),
            *("--engine-urls", "http://127.0.0.1:9", "--proxy-url", "http://127.0.0.1:9"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "spec.code.path:" in done.stderr
    assert "jobs/missing is not a directory" in done.stderr
