"""The README's main job learns: `dressage run examples/local-tiny.yaml` raises the reward.

This is the full run (about two to four minutes on two CPU cores), hence `slow`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.engine_forks import run_command

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_local_tiny_reward_rises_clearly(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        DRESSAGE_CACHE_DIR=str(tmp_path / "cache"),
        OMP_NUM_THREADS="1",
    )
    cmd = [sys.executable, "-m", "dressage", "run", str(ROOT / "examples" / "local-tiny.yaml")]
    cmd += ["--workdir", str(tmp_path / "runs"), "--metrics-port", "0"]
    done = run_command(cmd, env=env, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    report = json.loads((tmp_path / "runs" / "local-tiny" / "report.json").read_text())
    summary = report["summary"]
    assert summary["steps"] == 150
    # Mean reward of the first and the last ten steps (docs/benchmarks.md: 0.32 -> 0.76).
    assert summary["reward_first"] < 0.45
    assert summary["reward_last"] > 0.6
    assert summary["reward_last"] - summary["reward_first"] > 0.25
    assert (tmp_path / "runs" / "local-tiny" / "reward.png").stat().st_size > 1000
    # Held-out evaluation: the starting weights, every 25th step and the final version, each
    # one version's greedy pass@1 on the same 16 prompts; the report names the best.
    evaluated = [e["version"] for e in report["evaluations"]]
    assert evaluated == [f"v{step}" for step in range(0, 151, 25)]
    assert all(e["prompts"] == 16 and "1" in e["pass_at"] for e in report["evaluations"])
    assert report["best_evaluation"]["version"] in evaluated
