"""`dressage run` end to end: real engine, proxy and trainer processes on loopback.

A tiny job (one-layer model, 2 groups of 2 samples per step) runs to completion, serves its
figures on /metrics while it runs, advances the engine's weight version, and writes its
report; a run killed with SIGKILL resumes at the next step with the right version; Ctrl-C
stops every child process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from dressage_testkit.engine import weight_version_of
from dressage_testkit.trainer import small_model

from dressage import metrics as names

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
JOB = "tiny-run"


def _manifest(tmp: Path, model_dir: Path) -> Path:
    job = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": JOB},
        "spec": {
            "model": {"source": str(model_dir), "dtype": "float32"},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "proxy": {"recordTokenVersions": True},
            "rollout": {"mode": "sync", "groupSize": 2, "batchSize": 2, "maxNewTokens": 3},
            "training": {"steps": 4, "learningRate": 1e-3},
            "local": {"metricsPort": 0, "cacheDir": str(tmp / "cache")},
        },
    }
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


class Runner:
    """A `dressage run` process whose output lines are collected as they arrive."""

    def __init__(self, manifest: Path, workdir: Path, *args: str) -> None:
        cmd = [sys.executable, "-m", "dressage", "run", str(manifest), "--workdir", str(workdir)]
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        self.process = subprocess.Popen(
            [*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_line(self, prefix: str, timeout_s: float = 240.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if line.startswith(prefix):
                    return line[len(prefix) :].strip()
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line starting {prefix!r}:\n{self.output[-4000:]}")

    def wait(self, timeout_s: float = 300.0) -> int:
        code = self.process.wait(timeout=timeout_s)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.wait()


@pytest.fixture
def job(tmp_path: Path) -> tuple[Path, Path]:
    model_dir = small_model(tmp_path / "model")
    return _manifest(tmp_path, model_dir), tmp_path / "runs"


def _engine_url(runner: Runner) -> str:
    return runner.wait_line("engines ready: ").split(" ")[0]


def _wait_refused(url: str, timeout_s: float = 60.0) -> None:
    """Poll until nothing listens at `url` any more (its process is gone)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/health", timeout=1.0)
        except httpx.TransportError:
            return
        time.sleep(0.1)
    raise AssertionError(f"{url} still answers")


def _scrape(url: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    for line in httpx.get(url, timeout=5.0).text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            figures[name] = float(value)
    return figures


def _history(workdir: Path) -> list[dict[str, object]]:
    path = workdir / JOB / "history.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_tiny_job_runs_end_to_end_serving_metrics_and_advancing_versions(
    job: tuple[Path, Path],
) -> None:
    manifest, workdir = job
    runner = Runner(manifest, workdir, "--steps", "4")
    try:
        engine = _engine_url(runner)
        metrics_url = runner.wait_line("metrics on ")
        deadline = time.monotonic() + 240
        figures: dict[str, float] = {}
        while time.monotonic() < deadline:
            figures = _scrape(metrics_url)
            if figures.get(names.TRAIN_STEP, 0) >= 1:
                break
            time.sleep(0.1)
        version = weight_version_of(engine)
        assert runner.wait() == 0, runner.output[-4000:]
    finally:
        runner.kill()

    assert figures[names.TRAIN_STEP] >= 1
    assert version in {"v1", "v2", "v3", "v4"}
    for name in (
        names.STALENESS_VERSION_SPAN_MEAN,
        names.STALENESS_VERSION_SPAN_MAX,
        names.STALENESS_VERSION_SPAN_MIN,
        names.STALENESS_VERSION_LAG_MEAN,
        names.STALENESS_VERSION_LAG_MAX,
        names.STALENESS_VERSION_LAG_TOKEN_MEAN,
        names.TRAIN_ROLLOUT_LOGPROB_ABS_DIFF,
        names.REWARD_MEAN,
        names.WEIGHT_VERSION,
        names.STALENESS_FAILURES,
        names.ROLLOUT_GROUPS_COMPLETED,
        names.TRAINED_TOKENS,
        names.GENERATED_TOKENS,
        names.TRAINER_PUBLISH_SECONDS,
        names.TRAIN_LOSS,
        names.TRAIN_GRAD_NORM,
    ):
        assert name in figures, f"{name} missing from /metrics"
    assert figures[names.STALENESS_VERSION_SPAN_MAX] == 1.0
    assert figures[f'{names.DROPPED_GROUPS}{{reason="retries_exhausted"}}'] == 0.0
    assert any(k.startswith(names.WEIGHT_VERSION_INFO + '{version="v') for k in figures)

    report = json.loads((workdir / JOB / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [1, 2, 3, 4]
    assert [s["version"] for s in report["steps"]] == ["v1", "v2", "v3", "v4"]
    assert report["summary"]["last_version"] == "v4"
    for plot in report["plots"]:
        assert (workdir / JOB / plot).stat().st_size > 1000
    steps = [line for line in runner.lines if line.startswith("step ")]
    assert len(steps) == 4
    # Sync rollout trains every batch on the weights that generated it: no lag, none unknown.
    assert all("  lag 0.00  lag_max 0  " in line for line in steps), steps
    assert {s["staleness/version_lag_max"] for s in report["steps"]} == {0.0}
    assert report["summary"]["version_lag_unknown_samples"] == 0
    # Sync rollout trains every token its groups generated, nothing else: no waste.
    assert {s["generated_tokens_per_trained_token"] for s in report["steps"]} == {1.0}
    summary = report["summary"]
    assert summary["generated_tokens"] == summary["trained_tokens"] > 0
    assert summary["trained_tokens_per_second"] == pytest.approx(
        summary["trained_tokens"] / summary["step_seconds"]
    )
    assert all("  tok/s " in line and "  wait " in line for line in steps), steps
    _wait_refused(engine)  # the engine was stopped with the run


def test_killed_run_resumes_at_the_next_step_with_the_right_version(
    job: tuple[Path, Path],
) -> None:
    manifest, workdir = job
    first = Runner(manifest, workdir, "--steps", "5")
    try:
        engine = _engine_url(first)
        deadline = time.monotonic() + 240
        while len(_history(workdir)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        first.process.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        first.kill()
    # The children die with their parent, even when it is SIGKILLed.
    _wait_refused(engine)
    pointer = workdir / JOB / "checkpoints" / "latest.json"
    done = json.loads(pointer.read_text())["step"]
    assert done >= 2

    second = Runner(manifest, workdir, "--steps", "5")
    try:
        resumed = second.wait_line("resuming at step ")
        assert resumed.startswith(f"{done + 1} from the checkpoint of step {done} ")
        assert resumed.endswith(f"(weight version v{done})")
        assert second.wait_line("engines ready: ").endswith(f"(weight version v{done})")
        assert second.wait() == 0, second.output[-4000:]
    finally:
        second.kill()

    history = _history(workdir)
    assert [h["step"] for h in history] == [1, 2, 3, 4, 5]
    assert [h["version"] for h in history] == ["v1", "v2", "v3", "v4", "v5"]
    # Before and after the resume, every sample's lag is known, and 0 (sync rollout).
    assert [
        (h["staleness/version_lag_max"], h["version_lag_unknown_samples"]) for h in history
    ] == [(0.0, 0)] * 5
    state = json.loads((workdir / JOB / "checkpoints" / "step-000005" / "state.json").read_text())
    # Two prompt groups per step, none dropped: the data position counts each prompt once.
    assert state["collector"] == {"next_prompt": 10}
    assert state["version_index"] == 5


def test_ctrl_c_stops_every_child_and_still_writes_the_report(job: tuple[Path, Path]) -> None:
    manifest, workdir = job
    runner = Runner(manifest, workdir, "--steps", "200")
    try:
        engine = _engine_url(runner)
        proxy = runner.wait_line("proxy ready: ")
        runner.wait_line("step ")
        runner.process.send_signal(signal.SIGINT)
        assert runner.wait(timeout_s=120) == 130
    finally:
        runner.kill()
    assert "interrupted: stopping child processes" in runner.output
    _wait_refused(engine, timeout_s=5)
    _wait_refused(proxy, timeout_s=5)
    assert (workdir / JOB / "report.json").is_file()
