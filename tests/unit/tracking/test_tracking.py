"""The experiment trackers' shared part: what a step logs (every declared figure, read from the
declaration, and the record's other numbers), `spec.tracking` in the job model, a tracker whose
package is missing (an error naming the field and the extra, or a warning), and a tracker that
fails while logging, under each `onError`. Each tracker's own client is exercised by
tests/integration/test_run_tracking.py."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import ValidationError

from dressage.api.figures import StepFigures, counter, gauge
from dressage.api.job import AsyncRLJob
from dressage.tracking import RunContext, TrackerFailed, Trackers, TrackingError
from dressage.tracking.base import step_scalars
from dressage.tracking.mlflow import flatten, mlflow_names


def _job(tracking: dict[str, object]) -> AsyncRLJob:
    return AsyncRLJob.model_validate(
        {
            "metadata": {"name": "tiny"},
            "spec": {"model": {"source": "builtin:tiny"}, "tracking": tracking},
        }
    )


@dataclass
class WithGizmos(StepFigures):
    """The declaration plus a counter and a gauge, declared after the trackers were written."""

    gizmos: int = counter("gizmos", "Gizmos counted")
    gizmo_ratio: float | None = gauge("ratio", "Gizmos per sample")
    gizmo_seconds: float | None = gauge("seconds", "Seconds spent on gizmos")


def test_a_step_logs_every_declared_figure_flattened_then_the_records_other_numbers() -> None:
    figures = WithGizmos(
        samples=4,
        reward=0.5,
        reward_parts={"format": 1.0, "answer": 0.25},
        failed_attempts=Counter({"timeout": 2, "http_500": 1}),
        gizmos=3,
        gizmo_seconds=0.12345,
    )
    scalars = step_scalars(
        figures,
        {"step": 7, "version": "v7", "loss": 0.25, "finite": True, "gizmos": 99.0},
    )
    assert scalars["samples"] == 4.0
    assert scalars["reward"] == 0.5
    assert scalars["reward_parts/format"] == 1.0
    assert scalars["reward_parts/answer"] == 0.25
    assert scalars["failed_attempts"] == 3.0
    assert scalars["failed_attempts/timeout"] == 2.0
    assert scalars["gizmos"] == 3.0  # the declared figure, not the record's number
    assert scalars["gizmo_seconds"] == 0.123  # as the step record writes it
    assert scalars["loss"] == 0.25
    assert "gizmo_ratio" not in scalars  # not measured this step
    assert {"step", "version", "finite"}.isdisjoint(scalars)
    assert all(isinstance(v, float) for v in scalars.values())


def test_spec_tracking_is_off_by_default_and_refuses_unknown_settings() -> None:
    tracking = _job({}).spec.tracking
    assert (tracking.tensorboard, tracking.wandb, tracking.mlflow) == (None, None, None)
    assert tracking.on_error == "fail"
    job = _job(
        {
            "wandb": {"project": "p", "mode": "offline", "tags": ["a"]},
            "mlflow": {"trackingUri": "http://mlflow:5000", "experimentName": "e"},
            "tensorboard": {"logDir": "tb"},
            "onError": "warn",
        }
    )
    assert job.to_wire()["spec"]["tracking"]["mlflow"]["trackingUri"] == "http://mlflow:5000"
    for wrong in (
        {"wandb": {"project": "p", "mode": "disabled"}},
        {"wandb": {}},
        {"onError": "ignore"},
        {"mlflow": {"uri": "x"}},
    ):
        with pytest.raises(ValidationError, match="tracking"):
            _job(wrong)


def test_no_tracker_opens_nothing(tmp_path: Path) -> None:
    trackers = Trackers.open(RunContext(_job({}), tmp_path))
    assert trackers.names == []
    trackers.log_step(StepFigures(), {"step": 1})
    trackers.close()


@pytest.mark.parametrize(
    ("field", "hidden"),
    [("wandb", "wandb"), ("mlflow", "mlflow"), ("tensorboard", "torch.utils.tensorboard")],
)
def test_a_missing_package_names_the_field_and_the_extra_or_is_a_warning(
    field: str, hidden: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = {"wandb": {"project": "p"}, "mlflow": {}, "tensorboard": {}}[field]
    # `import` of the package or any of its modules raises ImportError, imported before or not.
    for name in [hidden, *(m for m in sys.modules if m.startswith(f"{hidden}."))]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(TrackingError) as failed:
        Trackers.open(RunContext(_job({field: settings}), tmp_path))
    message = str(failed.value)
    assert message.startswith(f"spec.tracking.{field}: the ")
    assert "pip install 'dressage[tracking]'" in message

    warnings: list[str] = []
    job = _job({field: settings, "onError": "warn"})
    trackers = Trackers.open(RunContext(job, tmp_path), warn=warnings.append)
    assert trackers.names == []
    (warning,) = warnings
    assert warning.startswith(f"warning: spec.tracking.{field}: the ")
    assert warning.endswith("the run goes on without it (onError: warn)")


class Broken:
    """A tracker whose service went away after it started."""

    def __init__(self) -> None:
        self.closed = False

    def log_step(self, step: int, scalars: Mapping[str, float]) -> None:
        raise ConnectionError("connection refused")

    def log_plots(self, step: int, plots: Sequence[Path]) -> None:
        raise ConnectionError("connection refused")

    def close(self) -> None:
        self.closed = True


def test_a_tracker_failing_while_logging_stops_the_run_or_is_dropped_with_a_warning() -> None:
    broken = Broken()
    warnings: list[str] = []
    trackers = Trackers({"mlflow": broken}, on_error="fail", warn=warnings.append)
    trackers.log_step(StepFigures(), {"step": 1})  # in the background: raises at the next call
    with pytest.raises(TrackerFailed, match=r"spec\.tracking\.mlflow: could not log a step"):
        trackers.log_step(StepFigures(), {"step": 2})
    assert trackers.names == []  # closed, and not called again as the run winds down
    assert broken.closed
    assert warnings == []
    trackers.close()

    broken = Broken()
    trackers = Trackers({"mlflow": broken}, on_error="fail", warn=warnings.append)
    trackers.log_step(StepFigures(), {"step": 1})
    with pytest.raises(TrackerFailed, match="connection refused"):
        trackers.flush()
    trackers.log_step(StepFigures(), {"step": 2})  # raised once; the tracker is gone
    trackers.close()
    assert warnings == []

    broken = Broken()
    trackers = Trackers({"mlflow": broken}, on_error="warn", warn=warnings.append)
    trackers.log_step(StepFigures(), {"step": 1})
    trackers.log_step(StepFigures(), {"step": 2})
    trackers.flush()
    assert trackers.names == []
    assert broken.closed
    trackers.close()
    (warning,) = warnings
    assert "spec.tracking.mlflow: could not log a step: connection refused" in warning


def test_plots_a_tracker_fails_to_log_at_the_end_are_a_warning_even_on_error_fail(
    tmp_path: Path,
) -> None:
    plot = tmp_path / "reward.png"
    plot.write_bytes(b"png")
    warnings: list[str] = []
    trackers = Trackers({"wandb": Broken()}, on_error="fail", warn=warnings.append)
    trackers.log_plots(2, [plot, tmp_path / "missing.png"])
    trackers.close()
    (warning,) = warnings
    assert warning.startswith("warning: spec.tracking.wandb: could not log the plots")


def test_mlflow_params_are_the_manifest_flattened_to_dotted_names() -> None:
    config = {"spec": {"rollout": {"groupSize": 2}, "tags": ["a", "b"], "empty": {}}, "k:x": "v"}
    assert dict(flatten(config)) == {
        "spec.rollout.groupSize": "2",
        "spec.tags": '["a", "b"]',
        "spec.empty": "{}",
        "k_x": "v",
    }


def test_a_run_directory_remembers_its_tracker_runs_for_a_resumed_run(tmp_path: Path) -> None:
    context = RunContext(_job({}), tmp_path / "run")
    assert context.recall("wandb") is None
    context.remember("wandb", "abc123")
    context.remember("mlflow", "f00d")
    again = RunContext(_job({}), tmp_path / "run")
    assert (again.recall("wandb"), again.recall("mlflow")) == ("abc123", "f00d")
    (tmp_path / "run" / "tracking.json").write_text("{not json")
    assert again.recall("wandb") is None


def test_a_last_step_that_failed_to_log_is_a_warning_when_the_trackers_close() -> None:
    warnings: list[str] = []
    trackers = Trackers({"wandb": Broken()}, on_error="fail", warn=warnings.append)
    trackers.log_step(StepFigures(), {"step": 3})
    trackers.close()
    assert warnings == ["warning: spec.tracking.wandb: could not log a step: connection refused"]


def test_mlflow_logs_a_counters_total_beside_its_reasons_as_total() -> None:
    # MLflow's file store keeps a metric in a file at its name's path: `x` and `x/reason` cannot
    # both be files, and a clash fails the batch from there on (every later figure lost).
    named = mlflow_names(
        {
            "generated_samples_by_length": 4.0,
            "generated_samples_by_length/le16": 4.0,
            "staleness/version_lag_mean": 1.5,
            "a/b": 1.0,
            "a/b/c": 2.0,
            "loss (x)": 0.5,
        }
    )
    assert named == {
        "generated_samples_by_length/total": 4.0,
        "generated_samples_by_length/le16": 4.0,
        "staleness/version_lag_mean": 1.5,
        "a/b/total": 1.0,
        "a/b/c": 2.0,
        "loss _x_": 0.5,
    }
    files = set(named)
    assert not any(name.startswith(other + "/") for name in files for other in files)


class Recording:
    """A tracker that keeps what it was asked to log."""

    def __init__(self) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []

    def log_step(self, step: int, scalars: Mapping[str, float]) -> None:
        self.logged.append((step, dict(scalars)))

    def log_plots(self, step: int, plots: Sequence[Path]) -> None:
        return None

    def close(self) -> None:
        return None


def test_an_evaluation_is_logged_at_the_step_that_made_its_version() -> None:
    from dressage.evaluation.figures import Evaluation

    recording = Recording()
    trackers = Trackers({"tensorboard": recording}, on_error="fail", warn=lambda line: None)
    evaluation = Evaluation("v50", 50, 16, 8, 0.71, {1: 0.68, 8: 0.93}, 12.3)
    trackers.log_evaluation(evaluation.step, evaluation.tracker_figures())
    trackers.flush()
    assert recording.logged == [
        (
            50,
            {
                "eval/reward_mean": 0.71,
                "eval/prompts": 16.0,
                "eval/pass@1": 0.68,
                "eval/pass@8": 0.93,
                "eval/seconds": 12.3,
            },
        )
    ]
