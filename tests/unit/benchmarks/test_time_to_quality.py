"""The time-to-quality benchmark's pure parts: a run's held-out curve and figures, the time to a
threshold (interpolated), the pass@1 held at a budget, the intervals against sync, the table,
the plot, the generated block, and the jobs each setting runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _ttq_report as report  # noqa: E402
import time_to_quality  # noqa: E402

from dressage.api import AsyncRLJob  # noqa: E402


def _evals(
    values: list[float], *, seconds_per_eval: float, every: int = 10
) -> list[dict[str, Any]]:
    return [
        {
            "version": f"v{i * every}",
            "step": i * every,
            "pass_at": {"1": v},
            "elapsed": 1.0 + i * seconds_per_eval,
        }
        for i, v in enumerate(values)
    ]


def _history(steps: int, lag: float) -> list[dict[str, Any]]:
    return [
        {
            "step": i + 1,
            "staleness/version_lag_mean": lag,
            "staleness/version_lag_max": lag + 2,
            "dropped_groups": {"stale_version": 1} if i == 0 else {},
        }
        for i in range(steps)
    ]


def _seed(seed: int, values: list[float], *, seconds: float, lag: float) -> dict[str, Any]:
    figures = report.seed_figures(_evals(values, seconds_per_eval=seconds), _history(30, lag))
    figures.update(seed=seed, status="ok")
    return figures


def test_time_to_interpolates_between_the_evaluations_around_the_crossing() -> None:
    points = report.curve(_evals([0.1, 0.2, 0.4], seconds_per_eval=10.0))
    assert report.time_to(points, 0.3) == pytest.approx(16.0)  # halfway from 11 s to 21 s
    assert report.time_to(points, 0.3, "step") == pytest.approx(15.0)
    assert report.time_to(points, 0.2) == pytest.approx(11.0)  # reached exactly at an evaluation
    assert report.time_to(points, 0.05) == pytest.approx(1.0)  # v0 already reaches it
    assert report.time_to(points, 0.5) is None


def test_value_at_holds_the_latest_evaluation_before_the_budget() -> None:
    points = report.curve(_evals([0.1, 0.2, 0.4], seconds_per_eval=10.0))
    assert report.value_at(points, 0.5) is None  # before the first evaluation
    assert report.value_at(points, 11.0) == 0.2
    assert report.value_at(points, 20.9) == 0.2
    assert report.value_at(points, 1000.0) == 0.4  # a run that ended sooner holds its last


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),
    st.floats(0.0, 1.0),
)
def test_time_to_is_within_the_bracketing_evaluations(values: list[float], target: float) -> None:
    points = report.curve(_evals(values, seconds_per_eval=3.0))
    t = report.time_to(points, target)
    reached = [i for i, p in enumerate(points) if p["pass1"] >= target]
    if not reached:
        assert t is None
        return
    first = reached[0]
    assert t is not None
    low = points[max(first - 1, 0)]["elapsed"]
    assert low - 1e-9 <= t <= points[first]["elapsed"] + 1e-9


def test_seed_figures_take_the_final_pass_at_1_and_the_lag_from_the_records() -> None:
    figures = report.seed_figures(
        _evals([0.1, 0.3, 0.5, 0.4], seconds_per_eval=5.0), _history(30, 4.5)
    )
    assert figures["initial_pass1"] == 0.1
    assert figures["final_pass1"] == pytest.approx(0.45)  # mean of the last two evaluations
    assert figures["best_pass1"] == 0.5
    assert figures["wall_seconds"] == pytest.approx(16.0)
    assert figures["lag_mean"] == pytest.approx(4.5)
    assert figures["lag_max"] == pytest.approx(6.5)
    assert figures["dropped_groups"] == 1


def _results() -> dict[str, Any]:
    sync = [_seed(s, [0.1, 0.2, 0.4, 0.4], seconds=20.0 + s, lag=0.0) for s in range(5)]
    fast = [_seed(s, [0.1, 0.3, 0.4, 0.4], seconds=8.0 + s, lag=0.6) for s in range(5)]
    bad = [_seed(s, [0.1, 0.15, 0.2, 0.2 + 0.01 * s], seconds=8.0, lag=4.8) for s in range(5)]
    return {
        "job": "examples/local-heldout.yaml",
        "quick": False,
        "date": "2026-12-07 04:00 UTC",
        "revision": "abc1234",
        "steps": 30,
        "seeds": 5,
        "every_steps": 10,
        "prompts": 48,
        "budget_seconds": None,
        "sync_placement": "separate",
        "wall_seconds": 600.0,
        "load_average": {"min": 1.0, "max": 2.0},
        "settings": [
            {"key": "sync", "label": "sync (best placement)", "seeds": sync},
            {"key": "async", "label": "fully async, no staleness control", "seeds": bad},
            {"key": "auto", "label": "staleness.mode: auto", "seeds": fast},
        ],
    }


def test_rows_compare_each_setting_with_sync_seed_by_seed() -> None:
    results = _results()
    assert report.target_of(results) == pytest.approx(0.38)
    assert report.budget_of(results) == pytest.approx(
        0.6 * 67.0
    )  # 0.6 x sync's mean wall (61-73 s)
    rows = report.build_rows(results)
    sync, uncontrolled, auto = rows
    assert sync["reached"] == 5
    assert sync["time_ratio_vs_sync"] is None
    # sync reaches 0.38 at 90 % of the way from its second to third evaluation
    assert sync["seconds_to_target"]["per_seed"][0] == pytest.approx(1.0 + 20.0 * 1.9)
    assert auto["reached"] == 5
    assert auto["time_ratio_vs_sync"]["high"] < 1.0
    assert auto["final_diff_vs_sync"]["mean"] == pytest.approx(0.0)
    assert uncontrolled["reached"] == 0  # censored at its last evaluation
    assert uncontrolled["final_diff_vs_sync"]["high"] < 0
    assert uncontrolled["lag_mean"]["mean"] == pytest.approx(4.8)
    for row in rows[1:]:
        for key in ("time_ratio_vs_sync", "final_diff_vs_sync", "budget_diff_vs_sync"):
            entry = row[key]
            assert entry["low"] <= entry["mean"] <= entry["high"]
    assert report.goal(rows) is True  # auto: ratio about 0.4, final difference 0


def test_an_explicit_budget_is_the_one_used() -> None:
    results = {**_results(), "budget_seconds": 30.0}
    assert report.budget_of(results) == 30.0
    rows = report.build_rows(results)
    assert rows[0]["pass1_at_budget"]["per_seed"] == [0.2, 0.2, 0.2, 0.2, 0.2]


def test_markdown_plot_and_readme_block(tmp_path: Path) -> None:
    results = _results()
    text = report.render_markdown(results, report.build_rows(results))
    assert "| fully async, no staleness control | 0/5 |" in text
    assert "Uncontrolled async (mean lag 4.80" in text
    assert "revision `abc1234`" in text
    assert "load average 1.0-2.0" in text
    assert "Goal (auto" in text
    assert ": met." in text
    report.plot_results(json.loads(json.dumps(results)), tmp_path / "ttq.png")
    assert (tmp_path / "ttq.png").stat().st_size > 0
    page = ROOT / "docs" / "benchmarks.md"
    assert report.BEGIN in page.read_text()
    assert report.END in page.read_text()
    copy = tmp_path / "benchmarks.md"
    copy.write_text(f"before\n{report.BEGIN}\nold\n{report.END}\nafter\n")
    time_to_quality.update_readme(copy, text, begin=report.BEGIN, end=report.END)
    assert copy.read_text().startswith("before\n")
    assert "old" not in copy.read_text()
    assert copy.read_text().endswith(f"{report.END}\nafter\n")


def test_bands_follow_steps_and_the_wall_clock() -> None:
    curves = [
        report.curve(_evals([0.1, 0.3], seconds_per_eval=10.0)),
        report.curve(_evals([0.2, 0.5], seconds_per_eval=20.0)),
    ]
    xs, mean, _, high = report.bands(curves, "step")
    assert xs == [0.0, 10.0]
    assert mean == pytest.approx([0.15, 0.4])
    assert high == [0.2, 0.5]
    xs, mean, _low, high = report.bands(curves, "elapsed", grid=21)
    assert xs[-1] == pytest.approx(21.0)
    assert mean[-1] == 0.5  # only the longer run is still going at its end


def test_run_order_interleaves_seeds() -> None:
    assert time_to_quality.run_order(2, 3) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


@pytest.mark.parametrize("placement", time_to_quality.PLACEMENTS)
def test_every_setting_is_a_valid_job(placement: str) -> None:
    for setting in time_to_quality.SETTINGS:
        job = time_to_quality.job_for(setting, 3, placement=placement, steps=40, every_steps=10)
        spec = AsyncRLJob.model_validate(job).spec
        assert spec.training.seed == 3
        assert spec.training.steps == 40
        assert spec.evaluation is not None
        assert spec.evaluation.every_steps == 10
        if setting.key == "async":
            assert spec.staleness.keep_versions == 0
            assert not spec.staleness.admission
            assert spec.staleness.mode == "fixed"
            assert spec.rollout.concurrency == time_to_quality.ASYNC_DEPTH
        if setting.key == "auto":
            assert spec.staleness.mode == "auto"
        if setting.key == "sync":
            assert spec.rollout.mode == "sync"


def test_the_table_says_when_uncontrolled_async_lags_less_than_the_regime_asks() -> None:
    results = _results()
    for seed in results["settings"][1]["seeds"]:
        seed["lag_mean"] = 1.5
    text = report.render_markdown(results, report.build_rows(results))
    assert "below the 4 versions" in text
    assert "below the 4 versions" not in report.render_markdown(
        _results(), report.build_rows(_results())
    )


def test_a_complete_results_file_carries_its_table_by_setting() -> None:
    results = time_to_quality.with_rows(_results())
    rows = report.build_rows(_results())
    assert list(results["rows"]) == [row["key"] for row in rows]
    assert results["rows"]["sync"]["final_pass1"] == rows[0]["final_pass1"]
