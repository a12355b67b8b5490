"""The staleness stress benchmark's pure parts: a run's figures from its history, the bootstrap
intervals of a control against the baseline, the tables and the plot."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _stress_report as report  # noqa: E402
import staleness_stress  # noqa: E402


def _history(rewards: list[float], *, diff: float, lag: float) -> list[dict[str, Any]]:
    return [
        {
            "step": i + 1,
            "reward": r,
            "train_rollout_logprob_abs_diff": diff,
            "mismatch_kl_k3": diff / 2,
            "staleness/version_lag_mean": lag * (i + 1) / len(rewards),
            "staleness/version_lag_max": float(round(lag * 2)),
            "rollout_seconds": 1.5,
            "train_seconds": 0.4,
            "publish_seconds": 0.1,
            "dropped_groups": {"stale_version": 1} if i == 1 else {},
            "admissions_held": 1,
        }
        for i, r in enumerate(rewards)
    ]


def _seed(seed: int, rewards: list[float], *, diff: float, lag: float) -> dict[str, Any]:
    figures = report.seed_figures(_history(rewards, diff=diff, lag=lag), 0.6)
    figures.update(seed=seed, status="ok")
    return figures


def test_seed_figures_censor_a_run_that_never_reaches_the_threshold() -> None:
    reached = report.seed_figures(_history([0.1, 0.5, 1.0, 1.0], diff=0.1, lag=4.0), 0.6)
    assert reached["steps_to_threshold"] == 4  # 3-step trailing means 0.533 then 0.833
    assert reached["steps_to_threshold_censored"] == 4
    assert reached["seconds_to_threshold"] == pytest.approx(8.0)
    assert reached["dropped_groups"] == 1
    assert reached["admissions_held"] == 4
    assert reached["lag_mean"] == pytest.approx(2.5)
    assert reached["lag_max"] == 8.0
    assert report.steps_to_threshold([0.9, 0.1, 0.1, 0.9, 0.9], 0.6) == 5  # full windows only
    never = report.seed_figures(_history([0.1, 0.2], diff=0.1, lag=1.0), 0.6)
    assert never["steps_to_threshold"] is None
    assert not never["reached"]
    assert never["steps_to_threshold_censored"] == 3
    assert never["seconds_to_threshold"] == pytest.approx(4.0)  # every step's seconds


@pytest.mark.parametrize("seed", range(20))
def test_bootstrap_interval_contains_its_estimate(seed: int) -> None:
    rng = np.random.default_rng(seed)
    data = list(rng.exponential(2.0, size=int(rng.integers(1, 9))) - 1.0)
    point, low, high = report.bootstrap_interval(data, rng_seed=seed)
    assert point == pytest.approx(float(np.mean(data)))
    assert low <= point <= high


def test_bootstrap_interval_shrinks_with_more_seeds() -> None:
    rng = np.random.default_rng(7)
    population = rng.normal(1.0, 2.0, size=400)

    def width(n: int) -> float:
        widths = []
        for k in range(10):
            _, low, high = report.bootstrap_interval(list(population[k * 40 : k * 40 + n]))
            widths.append(high - low)
        return float(np.mean(widths))

    assert width(40) < width(10) < width(5)


def test_bootstrap_interval_is_deterministic_and_checks_its_input() -> None:
    data = [1.0, -2.0, 0.5, 3.0, 0.0]
    assert report.bootstrap_interval(data) == report.bootstrap_interval(data)
    assert report.bootstrap_interval([2.0, 2.0]) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="no differences"):
        report.bootstrap_interval([])
    with pytest.raises(ValueError, match="level"):
        report.bootstrap_interval([1.0], level=1.0)


def _results() -> dict[str, Any]:
    slow = [0.3, 0.4, 0.5, 0.5, 0.7, 0.7]  # reaches 0.6 at step 6
    fast = [0.5, 0.7, 0.7, 0.8, 0.8, 0.8]  # at step 3
    return {
        "quick": False,
        "threshold": 0.6,
        "steps": 6,
        "seeds": 5,
        "wall_seconds": 600.0,
        "load_average": {"min": 0.5, "max": 2.0},
        "settings": [
            {
                "key": "baseline",
                "label": "no control",
                "seeds": [_seed(s, slow, diff=0.5 + 0.01 * s, lag=5.0) for s in range(5)],
            },
            {
                "key": "kv2",
                "label": "keepVersions 2",
                "seeds": [_seed(s, fast, diff=0.1 + 0.01 * s, lag=1.0) for s in range(5)],
            },
            {
                "key": "tis",
                "label": "baseline + TIS",
                "seeds": [_seed(s, slow, diff=0.5 + 0.02 * (s - 2), lag=5.0) for s in range(5)],
            },
        ],
    }


def test_rows_compare_each_control_with_the_baseline_seed_by_seed(tmp_path: Path) -> None:
    rows = report.build_rows(_results())
    assert [r["key"] for r in rows] == ["baseline", "kv2", "tis"]
    assert rows[0]["comparison"] is None
    kv2 = rows[1]["comparison"]
    assert kv2["steps_to_threshold"]["mean_difference"] == pytest.approx(-3.0)
    assert kv2["steps_to_threshold"]["excludes_zero"]
    assert kv2["logprob_diff_lower_every_seed"]
    assert kv2["claim_holds"]
    tis = rows[2]["comparison"]
    assert tis["steps_to_threshold"]["mean_difference"] == 0.0
    assert not tis["logprob_diff_lower_every_seed"]
    assert not tis["claim_holds"]
    text = report.render_markdown(_results(), rows)
    assert "| keepVersions 2 | 3/3/3/3/3 |" in text
    assert "-3.0 [-3.0, -3.0] *" in text
    assert "| yes | holds |" in text
    png = tmp_path / "stress.png"
    report.plot_results(_results(), png)
    assert png.stat().st_size > 0


def test_jobs_differ_only_in_their_control_and_seed() -> None:
    base = staleness_stress.job_for(staleness_stress.SETTINGS[0], 3)["spec"]
    assert base["rollout"]["concurrency"] == 48
    assert base["rollout"]["batchSize"] == 4
    assert base["staleness"]["keepVersions"] == 0
    assert "maxPartialRolloutPreempts" not in base["staleness"]
    assert base["training"]["seed"] == 3
    adm = staleness_stress.job_for(staleness_stress.SETTINGS[2], 3)["spec"]
    assert adm["staleness"] == {"keepVersions": 2, "admission": True}
    tis = staleness_stress.job_for(staleness_stress.SETTINGS[4], 0)["spec"]
    assert tis["training"]["offPolicyCorrection"]["mode"] == "tis"


def test_only_the_smoke_test_warms_the_model_to_less_than_the_jobs_own_target() -> None:
    """The job's warm start (0.45) costs minutes on a machine that has not cached it; the
    smoke test's runs start from the 0.2 one, every other setting of the job unchanged."""
    own = staleness_stress.base_job(staleness_stress.JOB)["spec"]["model"]["warmStart"]
    full = staleness_stress.job_for(staleness_stress.SETTINGS[2], 1)
    quick = staleness_stress.job_for(staleness_stress.SETTINGS[2], 1, quick=True)
    assert full["spec"]["model"]["warmStart"] == own
    assert own["targetReward"] == 0.45
    assert quick["spec"]["model"]["warmStart"] == {**own, "targetReward": 0.2}
    quick["spec"]["model"]["warmStart"] = own
    assert quick == full


def test_seeds_run_outermost_so_every_setting_meets_the_same_minutes() -> None:
    order = staleness_stress.run_order(3, 2)
    assert order == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert staleness_stress.run_order(1, 4) == [(0, 0), (0, 1), (0, 2), (0, 3)]


def test_the_benchmarks_page_quotes_the_committed_results_json() -> None:
    """`docs/benchmarks.md`'s generated block is what `--render
    benchmarks/results/staleness_stress.json --update-readme` writes: a figure typed in by hand,
    or a rerun not rendered, fails here."""
    results_path = ROOT / "benchmarks" / "results" / "staleness_stress.json"
    results = json.loads(results_path.read_text())
    text = report.render_markdown(results, report.build_rows(results))
    shown = results_path.relative_to(ROOT)
    block = text + f"\nResults: `{shown}`; plot: `{shown.with_suffix('.png')}`.\n"
    assert staleness_stress.README == ROOT / "docs" / "benchmarks.md"
    page = staleness_stress.README.read_text()
    start, end = page.index(report.BEGIN) + len(report.BEGIN), page.index(report.END)
    assert page[start:end] == "\n\n" + block + "\n"
    assert results_path.with_suffix(".png").is_file()
