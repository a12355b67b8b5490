"""`dressage run` in `staleness.mode: auto`: a short local run stays within its staleness
budget and shows the controller's decisions on the step line, in the history and on
/metrics (real engine, proxy and trainer processes on loopback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from dressage_testkit.trainer import small_model

from tests.integration.test_run_local import Runner

pytestmark = pytest.mark.integration
JOB = "budget-run"
MAX_LAG = 1
STEPS = 6


def _manifest(tmp: Path, separate: bool) -> Path:
    job = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": JOB},
        "spec": {
            "model": {"source": str(small_model(tmp / "model")), "dtype": "float32"},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "proxy": {"recordTokenVersions": True},
            "staleness": {"mode": "auto", "budget": {"maxLagVersions": MAX_LAG}},
            "rollout": {
                "mode": "fully_async",
                "groupSize": 2,
                "batchSize": 2,
                "concurrency": 8,
                "maxNewTokens": 3,
                "separateProcess": separate,
            },
            "training": {"steps": STEPS, "learningRate": 1e-3},
            # Paced decode steps: rollout slower than training, so the trainer waits and the
            # controller raises the depth.
            "local": {
                "metricsPort": 0,
                "cacheDir": str(tmp / "cache"),
                "engineMinStepIntervalMs": 100,
            },
        },
    }
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


@pytest.mark.parametrize("separate", [False, True], ids=["in-process", "rollout-process"])
def test_an_auto_run_stays_within_its_budget_and_shows_its_decisions(
    tmp_path: Path, separate: bool
) -> None:
    """In the trainer's process and in a rollout process of its own (the decision then
    travels over the pipe as a `steer` command)."""
    workdir = tmp_path / "runs"
    runner = Runner(_manifest(tmp_path, separate), workdir)
    try:
        assert runner.wait() == 0, runner.output[-4000:]
    finally:
        runner.kill()
    start = next(line for line in runner.lines if "staleness budget: version lag at most" in line)
    assert "depth 2 of at most 8 groups, keepVersions 2" in start, start
    steps = [line for line in runner.lines if line.startswith("step ")]
    assert len(steps) == STEPS, runner.output[-4000:]
    assert all("  depth " in line and "  keep " in line for line in steps), steps
    history = [
        json.loads(line) for line in (workdir / JOB / "history.jsonl").read_text().splitlines()
    ]
    for record in history:
        assert record["staleness/version_lag_max"] <= MAX_LAG, record
        assert 1 <= record["staleness/budget_concurrency"] <= 8
        assert 1 <= record["staleness/budget_keep_versions"] <= MAX_LAG + 1
        assert record["staleness/budget_max_lag"] == MAX_LAG
        assert record["budget_exceeded_steps"] == 0
    report = json.loads((workdir / JOB / "report.json").read_text())
    assert report["summary"]["budget_exceeded_steps"] == 0
    # The trainer waited for its batches, so the depth went up: decided after a step, said
    # in the log, and applied to the collector (over the pipe with a rollout process).
    assert report["summary"]["budget_changes"] >= 1
    raised = [line for line in runner.lines if line.startswith("staleness budget: depth 2 -> ")]
    assert raised, runner.output[-4000:]
    assert max(r["staleness/budget_concurrency"] for r in history) > 2
