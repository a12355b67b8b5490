"""The local run's results file: window means and the summary from a run's `report.json`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import learning_run  # noqa: E402


def _steps(n: int) -> list[dict[str, Any]]:
    return [
        {"step": i + 1, "reward": i / 100, "train_rollout_logprob_abs_diff": 0.01}
        for i in range(n)
    ]


def test_the_windows_are_those_the_pages_quote() -> None:
    means = learning_run.window_means(_steps(150), "reward")
    assert list(means) == ["1-10", "41-50", "91-100", "141-150"]
    assert means["1-10"] == pytest.approx(0.045)
    assert means["141-150"] == pytest.approx(1.445)


def test_a_short_run_keeps_its_first_and_last_window() -> None:
    assert list(learning_run.window_means(_steps(30), "reward")) == ["1-10", "21-30"]
    assert list(learning_run.window_means(_steps(10), "reward")) == ["1-10"]
    with pytest.raises(ValueError, match="9 steps"):
        learning_run.window_means(_steps(9), "reward")


def test_the_results_file_holds_the_run_s_figures_and_the_given_ones(tmp_path: Path) -> None:
    report = {
        "job": {"name": "local-tiny", "mode": "fully_async"},
        "steps": _steps(20),
        "summary": {
            "dropped_groups": {"stale": 2, "window": 1},
            "staleness_failures": 0,
            "admissions_held": 7,
            "budget_exceeded_steps": 0,
            "staleness/version_lag_mean": 0.68693,
            "staleness/version_lag_max": 1.0,
            "step_seconds": 239.476,
        },
    }
    (tmp_path / "report.json").write_text(json.dumps(report))
    out = tmp_path / "r.json"
    args = [str(tmp_path), "--date", "2026-12-07", "--load", "5.0-12.6", "--out", str(out)]
    assert learning_run.main(args) == 0
    results = json.loads(out.read_text())
    assert results["date"] == "2026-12-07"
    assert results["load_average"] == {"min": 5.0, "max": 12.6}
    assert results["dropped_groups"] == 3
    assert results["version_lag_mean"] == 0.687
    assert results["step_seconds_total"] == 239.5
    assert list(results["mean_reward"]) == ["1-10", "11-20"]
