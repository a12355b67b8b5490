"""The evaluation-cost benchmark's pure parts: the job each setting runs, a run's figures from
its step history, and the summary against `off` round by round."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_cost  # noqa: E402

from dressage.api import AsyncRLJob  # noqa: E402


def test_off_runs_the_example_without_evaluation() -> None:
    spec = AsyncRLJob.model_validate(eval_cost.job_for("off", 0, steps=30, every_steps=5)).spec
    assert spec.evaluation is None
    assert spec.training.steps == 30
    assert spec.local.engine_cpus == [0]
    assert spec.local.trainer_cpus == spec.local.rollout_cpus == [1]


@pytest.mark.parametrize("share", [1, 4, 16])
def test_a_share_setting_evaluates_with_that_many_groups_in_flight(share: int) -> None:
    job = eval_cost.job_for(f"c{share}", 2, steps=30, every_steps=5)
    assert job["metadata"]["name"] == f"evalcost-c{share}-r2"
    spec = AsyncRLJob.model_validate(job).spec
    assert spec.evaluation is not None
    assert spec.evaluation.max_concurrency == share
    assert spec.evaluation.every_steps == 5


def _step(rollout: float, train: float, publish: float, samples: int = 16) -> dict[str, Any]:
    return {
        "rollout_seconds": rollout,
        "train_seconds": train,
        "publish_seconds": publish,
        "samples": samples,
    }


def test_the_wait_fraction_is_the_share_of_step_time_not_training() -> None:
    history = [_step(1.0, 2.0, 1.0), _step(0.0, 3.0, 1.0)]
    figures = eval_cost.run_figures(history, [{"seconds": 2.0}, {"seconds": 4.0}])
    assert figures["steps"] == 2
    assert figures["step_seconds_mean"] == pytest.approx(4.0)
    assert figures["wait_fraction"] == pytest.approx(3.0 / 8.0)
    assert figures["batch_wait_fraction"] == pytest.approx(1.0 / 8.0)
    assert figures["publish_fraction"] == pytest.approx(2.0 / 8.0)
    assert figures["samples_per_s"] == pytest.approx(32 / 8.0)
    assert figures["evaluations"] == 2
    assert figures["eval_seconds_median"] == pytest.approx(3.0)


def test_a_run_without_steps_has_no_rates() -> None:
    figures = eval_cost.run_figures([], [])
    assert figures["wait_fraction"] is None
    assert figures["samples_per_s"] is None
    assert figures["eval_seconds_median"] is None


def _run(setting: str, round_: int, rate: float, status: str = "ok") -> dict[str, Any]:
    return {
        "setting": setting,
        "round": round_,
        "status": status,
        "samples_per_s": rate,
        **{key: 0.5 for key in eval_cost.FIGURES if key != "samples_per_s"},
    }


def test_the_ratio_to_off_is_taken_within_each_round() -> None:
    # Round 1 ran on a slower machine: both settings halve, and the ratio stays 0.8.
    runs = [
        _run("off", 0, 10.0),
        _run("c4", 0, 8.0),
        _run("off", 1, 5.0),
        _run("c4", 1, 4.0),
        _run("c4", 2, 1.0, status="failed at step 3"),
    ]
    summary = eval_cost.summarise(runs, ["off", "c4"])
    assert summary["c4"]["runs"] == 2
    assert summary["c4"]["samples_per_s_vs_off"] == pytest.approx(0.8)
    assert summary["off"]["samples_per_s_vs_off"] == pytest.approx(1.0)
    assert summary["c4"]["samples_per_s"] == pytest.approx(6.0)
    table = eval_cost.render(summary)
    assert "| c4 |" in table
    assert "| 0.80 |" in table
