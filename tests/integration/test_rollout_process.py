"""Rollout orchestration in a process of its own (`spec.rollout.separateProcess`) under
`dressage run`: the job trains as with the in-process collector, the checkpoint's data position
still counts every started prompt at most once, the rollout process ends with the run, and it
dies with a runner killed by SIGKILL; a rollout process that cannot start fails the next batch
with its exit code.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml
from dressage_testkit.trainer import small_model

from tests.integration.test_run_local import Runner

pytestmark = pytest.mark.integration


def _manifest(tmp: Path, mode: str, steps: int) -> Path:
    name = f"rollout-process-{mode.replace('_', '-')}"
    job = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": name},
        "spec": {
            "model": {"source": str(small_model(tmp / "model")), "dtype": "float32"},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "staleness": {"keepVersions": 2},
            "rollout": {
                "mode": mode,
                "groupSize": 2,
                "batchSize": 2,
                "concurrency": 4,
                "maxNewTokens": 3,
                "separateProcess": True,
            },
            "training": {"steps": steps, "learningRate": 1e-3},
            "local": {"metricsPort": 0, "cacheDir": str(tmp / "cache")},
        },
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _gone(pid: int) -> bool:
    """Whether `pid` no longer runs (exited, or a zombie waiting for its new parent)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in {"Z", "X"}


def _wait_gone(pid: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"rollout process {pid} still runs")


@pytest.mark.parametrize("mode", ["sync", "fully_async"])
def test_job_trains_with_rollout_in_its_own_process(tmp_path: Path, mode: str) -> None:
    manifest = _manifest(tmp_path, mode, steps=3)
    runs = tmp_path / "runs"
    runner = Runner(manifest, runs)
    try:
        pid = int(runner.wait_line("rollout in process "))
        assert pid != runner.process.pid
        assert not _gone(pid)
        assert runner.wait() == 0, runner.output[-4000:]
    finally:
        runner.kill()
    _wait_gone(pid)  # closed with the run, not left behind

    root = runs / yaml.safe_load(manifest.read_text())["metadata"]["name"]
    history = [json.loads(x) for x in (root / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [1, 2, 3]
    assert [h["version"] for h in history] == ["v1", "v2", "v3"]
    assert all(h["groups"] == 2 and h["samples"] == 4 for h in history)
    state = json.loads((root / "checkpoints" / "step-000003" / "state.json").read_text())
    # The position the rollout process reported with the last batch: at least every trained
    # prompt, and exactly those in sync mode (nothing starts ahead of the trainer).
    position = state["collector"]["next_prompt"]
    assert position == 6 if mode == "sync" else position >= 6


def test_rollout_process_dies_with_a_killed_runner(tmp_path: Path) -> None:
    runner = Runner(_manifest(tmp_path, "fully_async", steps=200), tmp_path / "runs")
    try:
        pid = int(runner.wait_line("rollout in process "))
        runner.wait_line("step ")
        assert not _gone(pid)
        os.kill(runner.process.pid, signal.SIGKILL)
        runner.wait()
    finally:
        runner.kill()
    _wait_gone(pid)


async def test_a_rollout_process_that_cannot_start_fails_next_batch_with_its_exit_code() -> None:
    from dressage.orchestrator.rollout_process import (
        RolloutProcessCollector,
        RolloutProcessFailed,
        RolloutRecipe,
    )

    # Not a job manifest: the child refuses it and exits before serving a batch.
    collector = RolloutProcessCollector(
        RolloutRecipe(job={"kind": "AsyncRLJob"}, model_dir="/nonexistent", proxy_url="http://x")
    )
    try:
        with pytest.raises(RolloutProcessFailed, match=r"exited \(exit code 1\)"):
            await collector.next_batch()
    finally:
        await collector.aclose()
    assert collector.pid is not None
    _wait_gone(collector.pid)
