"""`dressage run` logged to experiment trackers (`spec.tracking`), read back by each tracker's
own client, offline: TensorBoard's event files through its `EventAccumulator`, a Weights &
Biases offline run through its transaction log (`wandb_log`), MLflow's file store through
`MlflowClient`. One short run logs to all three at once, stopped after its first step and
resumed from its checkpoint, logging on to the same tracker runs; two more show `onError`:
W&B online without an API key stops the run before its first step (`fail`) or is a warning
while the run trains without it (`warn`). On a cluster, `dressage train`'s rank 0 logs each
step too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dressage_testkit.engine import start_engine
from dressage_testkit.proxy import start_proxy
from dressage_testkit.trainer import small_model

from dressage.api.figures import StepFigures, figures_of
from dressage.runner.report import PLOTS
from tests.engine_forks import run_command
from tests.integration.wandb_log import read_run

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
STEPS = 2


def _manifest(job_dir: Path, name: str, tracking: dict[str, Any], **spec: Any) -> Path:
    manifest = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": name},
        "spec": {
            "model": {"source": str(job_dir / "model"), "dtype": "float32"},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "rollout": {"mode": "sync", "groupSize": 2, "batchSize": 2, "maxNewTokens": 3},
            "training": {"steps": STEPS, "learningRate": 1e-3},
            "local": {"metricsPort": 0, "cacheDir": str(job_dir / "cache")},
            "tracking": tracking,
            **spec,
        },
    }
    path = job_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def _run(job_dir: Path, manifest: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home = job_dir / "home"  # no W&B key or settings of the machine's user
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        HOME=str(home),
        # MLflow 3 refuses a file store unless told it is wanted.
        MLFLOW_ALLOW_FILE_STORE="true",
    )
    return run_command(
        [sys.executable, "-m", "dressage", "run", str(manifest), "--workdir", "runs", *args],
        cwd=job_dir,
        env=env,
        timeout=400,
    )


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("job")
    small_model(out / "model")
    return out


def _history(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _expected(history: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """Every scalar figure of each step, as the trackers must have it, by step."""
    out: dict[str, dict[int, float]] = {}
    for record in history:
        for key, value in record.items():
            if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault(key, {})[int(record["step"])] = float(value)
    return out


def test_one_run_logged_to_tensorboard_wandb_and_mlflow_is_read_back_by_each_client(
    job_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = job_dir / "mlruns"
    manifest = _manifest(
        job_dir,
        "tracked",
        {
            "tensorboard": {},
            "wandb": {"project": "dressage-test", "mode": "offline", "tags": ["tiny", "ci"]},
            "mlflow": {"trackingUri": store.as_uri(), "experimentName": "tiny"},
        },
    )
    for steps in range(1, STEPS + 1):  # step 1, then the run resumed from its checkpoint
        done = _run(job_dir, manifest, "--steps", str(steps))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "tracking: tensorboard, wandb, mlflow" in done.stdout
    assert "resuming at step 2" in done.stdout
    run_dir = job_dir / "runs" / "tracked"
    history = _history(run_dir)
    assert [r["step"] for r in history] == [1, 2]
    expected = _expected(history)
    # Every declared figure the steps measured, whatever the declaration holds today.
    declared = {f.key for f in figures_of(StepFigures)}
    assert declared & set(expected) >= {"reward", "staleness/version_lag_mean"}
    plots = {Path(p).stem for p in PLOTS}

    _check_tensorboard(run_dir / "tensorboard", expected, plots)
    _check_wandb(run_dir / "wandb", expected, plots)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    _check_mlflow(store, expected, plots)


def _close(got: dict[int, float], want: dict[int, float], name: str) -> None:
    assert got.keys() == want.keys(), (name, got, want)
    for step, value in want.items():
        assert got[step] == pytest.approx(value, rel=1e-5, abs=1e-6), (name, step)


def _check_tensorboard(
    log_dir: Path, expected: dict[str, dict[int, float]], plots: set[str]
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    for key, by_step in expected.items():
        _close({e.step: e.value for e in events.Scalars(key)}, by_step, key)
    assert {tag.removeprefix("plots/") for tag in events.Tags()["images"]} == plots
    # Each invocation's report at its last step: the first one's, then the resumed one's.
    assert {e.step for e in events.Images("plots/reward")} == set(range(1, STEPS + 1))
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert yaml.safe_load(config.replace("\n    ", "\n").strip())["metadata"]["name"] == "tracked"


def _check_wandb(wandb_dir: Path, expected: dict[str, dict[int, float]], plots: set[str]) -> None:
    first, resumed = (read_run(f) for f in sorted(wandb_dir.glob("offline-run-*/run-*.wandb")))
    assert first.id == resumed.id  # one W&B run, resumed
    run = first
    run.rows += resumed.rows
    assert run.project == "dressage-test"
    assert run.name == "tracked"
    assert run.tags == ["tiny", "ci"]
    assert run.config["spec"]["rollout"]["groupSize"] == 2
    for key, by_step in expected.items():
        _close(run.history(key), by_step, key)
    logged = {key.removeprefix("plots/").split("/")[0] for key in run.keys if "plots/" in key}
    assert logged == plots


def _check_mlflow(store: Path, expected: dict[str, dict[int, float]], plots: set[str]) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("tiny")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "tracked"
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["spec.rollout.groupSize"] == "2"
    assert params["metadata.name"] == "tracked"
    for key, by_step in expected.items():
        history = client.get_metric_history(run.info.run_id, key)
        _close({m.step: m.value for m in history}, by_step, key)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert artifacts == {f"plots/{p}.png" for p in plots}
    assert "job.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_a_tracker_that_cannot_start_stops_the_run_before_training_on_error_fail(
    job_dir: Path,
) -> None:
    manifest = _manifest(job_dir, "tracked-fail", {"wandb": {"project": "p"}, "onError": "fail"})
    done = _run(job_dir, manifest)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "spec.tracking.wandb: could not start" in done.stderr
    assert "API key" in done.stderr
    run_dir = job_dir / "runs" / "tracked-fail"
    assert _history(run_dir) == []
    assert "engines ready" not in done.stdout
    assert not (run_dir / "report.json").exists()


def test_a_tracker_that_cannot_start_is_a_warning_and_the_run_trains_on_error_warn(
    job_dir: Path,
) -> None:
    manifest = _manifest(
        job_dir,
        "tracked-warn",
        {"wandb": {"project": "p"}, "tensorboard": {"logDir": "tb"}, "onError": "warn"},
    )
    done = _run(job_dir, manifest, "--steps", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    warning = next(line for line in done.stdout.splitlines() if "spec.tracking.wandb" in line)
    assert warning.startswith("warning: spec.tracking.wandb: could not start")
    assert "onError: warn" in warning
    assert "tracking: tensorboard" in done.stdout
    run_dir = job_dir / "runs" / "tracked-warn"
    assert [r["step"] for r in _history(run_dir)] == [1]
    assert any((run_dir / "tb").glob("events.out.tfevents.*"))


def test_dressage_train_rank_0_logs_every_step_to_the_trackers(
    job_dir: Path, tmp_path: Path
) -> None:
    """The trainer pods' entry point, as the operator starts it (here one rank, with a real
    engine and proxy): each step's figures and the config reach the tracker."""
    log_dir = tmp_path / "tb"
    manifest = _manifest(
        job_dir,
        "gang-tracked",
        {"tensorboard": {"logDir": str(log_dir)}},
        proxy={"recordTokenVersions": True},
    )
    model = str(job_dir / "model")
    with (
        start_engine(model=model, weight_version="v0") as engine,
        start_proxy([engine.base_url], "--record-token-versions", "--model", model) as proxy,
    ):
        cmd = [
            sys.executable, "-m", "dressage", "train", "--config", str(manifest),
            "--workdir", str(tmp_path / "run"), "--engine-urls", engine.base_url,
            "--proxy-url", proxy.base_url, "--metrics-port", "0", "--steps", str(STEPS),
        ]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        done = run_command(cmd, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"step {STEPS} version v{STEPS}" in done.stdout

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    for key in ("reward", "samples", "staleness/version_lag_mean"):
        assert [e.step for e in events.Scalars(key)] == list(range(1, STEPS + 1)), key
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "name: gang-tracked" in config
