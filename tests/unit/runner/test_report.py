"""Run history, report summary, progress line and collector selection by rollout mode."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dressage.api.figures import StepFigures
from dressage.api.job import AsyncRLJobSpec
from dressage.orchestrator.collectors import make_collector, weight_update_pause_mode
from dressage.orchestrator.loop import StepRecord
from dressage.proxy.client import ProxyRolloutClient
from dressage.runner.local import progress_line
from dressage.runner.report import History, moving_average, summarize, write_report
from dressage.tasks.base import Scored


def _record(step: int, reward: float) -> StepRecord:
    return StepRecord(
        step=step,
        version=f"v{step}",
        figures=StepFigures(
            reward=reward,
            train_rollout_logprob_abs_diff=0.01,
            entropy=0.5,
            clip_fraction=0.0,
            version_span_mean=1.0,
            dropped_groups=Counter({"retries_exhausted": 1} if step == 2 else {}),
        ),
        rollout_seconds=1.0,
        train_seconds=0.5,
        publish_seconds=0.1,
    )


def test_history_truncates_to_the_resumed_checkpoint(tmp_path: Path) -> None:
    history = History(tmp_path)
    for step in range(1, 5):
        history.append(_record(step, 0.1 * step).to_dict())
    history.truncate(2)  # killed after step 4's history line but before its checkpoint
    history.append(_record(3, 0.9).to_dict())
    assert [r["step"] for r in history.read()] == [1, 2, 3]
    assert history.read()[-1]["reward"] == 0.9


def test_resume_restores_the_checkpoints_record_when_its_line_was_never_written(
    tmp_path: Path,
) -> None:
    history = History(tmp_path)
    for step in range(1, 3):
        history.append(_record(step, 0.1 * step).to_dict())
    # Killed after step 3's checkpoint, before its history line.
    history.resume(3, _record(3, 0.3).to_dict())
    assert [r["step"] for r in history.read()] == [1, 2, 3]
    # Resuming again, or with the line already written, adds nothing.
    history.resume(3, _record(3, 0.3).to_dict())
    assert [r["step"] for r in history.read()] == [1, 2, 3]
    # Killed after step 4's line but before its checkpoint: back to step 3.
    history.append(_record(4, 0.4).to_dict())
    history.resume(3, _record(3, 0.3).to_dict())
    assert [r["step"] for r in history.read()] == [1, 2, 3]
    # A fresh run (no record) only truncates.
    history.resume(0, None)
    assert history.read() == []


def test_summary_and_report_files(tmp_path: Path) -> None:
    history = History(tmp_path)
    for step in range(1, 13):
        history.append(_record(step, 0.0 if step <= 10 else 1.0).to_dict())
    summary = summarize(history.read(), window=2)
    assert summary["reward_first"] == 0.0
    assert summary["reward_last"] == 1.0
    assert summary["dropped_groups"] == {"retries_exhausted": 1}
    assert summary["last_version"] == "v12"
    assert summary["step_seconds_mean"] == pytest.approx(1.6)
    path = write_report(tmp_path, {"name": "j"})
    report = json.loads(path.read_text())
    assert report["job"] == {"name": "j"}
    assert len(report["steps"]) == 12
    for plot in report["plots"]:
        assert (tmp_path / plot).read_bytes().startswith(b"\x89PNG")


def test_the_report_sums_up_and_plots_the_version_lag(tmp_path: Path) -> None:
    """The run's mean lag weighs each step's mean by its samples of known lag; its max is the
    largest step's; `version_lag.png` draws the steps' mean, max and token mean."""
    history = History(tmp_path)
    for step, (mean, most, samples, unknown) in enumerate(
        [(0.0, 0, 4, 0), (1.0, 2, 8, 4), (2.0, 3, 2, 0)], start=1
    ):
        figures = StepFigures(
            version_lag_mean=mean,
            version_lag_max=float(most),
            version_lag_token_mean=mean / 2,
            samples=samples,
            version_lag_unknown_samples=unknown,
        )
        history.append(StepRecord(step=step, version=f"v{step}", figures=figures).to_dict())
    summary = summarize(history.read())
    # (0 * 4 + 1 * 4 + 2 * 2) / (4 + 4 + 2)
    assert summary["staleness/version_lag_mean"] == pytest.approx(0.8)
    assert summary["staleness/version_lag_max"] == 3.0
    assert summary["version_lag_unknown_samples"] == 4
    report = json.loads(write_report(tmp_path, {"name": "j"}).read_text())
    assert "version_lag.png" in report["plots"]
    assert (tmp_path / "version_lag.png").stat().st_size > 1000
    assert summarize([])["staleness/version_lag_max"] is None


def test_moving_average_is_trailing() -> None:
    assert moving_average([1.0, 3.0, 5.0], 2) == [1.0, 2.0, 4.0]


def test_progress_line_shows_step_reward_version_drops_diff_span() -> None:
    line = progress_line(_record(2, 0.25), 10, [0.5, 0.25])
    assert line.startswith("step    2/10  reward 0.250 (last 2: 0.375)  version v2  drops 1")
    assert "logprob_diff 1.0e-02" in line
    assert "span 1.00" in line
    assert "lag -  lag_max -" in line  # not measured in this record


@pytest.mark.parametrize(
    ("mode", "pause", "filtered"),
    [("sync", "in_place", False), ("fully_async", "abort", True), ("partial_async", "abort", True)],
)
def test_each_mode_gets_its_pause_mode_and_the_async_modes_the_staleness_window(
    mode: str, pause: str, filtered: bool
) -> None:
    spec = AsyncRLJobSpec.model_validate(
        {"model": {"source": "x"}, "rollout": {"mode": mode}, "staleness": {"keepVersions": 2}}
    )
    proxy = ProxyRolloutClient("http://127.0.0.1:9")
    made = make_collector(spec, source=_NoPrompts(), proxy=proxy, run_tag="t")
    assert weight_update_pause_mode(spec) == pause
    window = getattr(made, "filter", None)
    assert (window is not None) == filtered
    if window is not None:
        assert window.config.keep_versions == 2


class _NoPrompts:
    def prompt_ids(self, index: int) -> list[int]:
        raise AssertionError("not called")

    async def ascored(self, index: int, output_ids: object) -> Scored:
        raise AssertionError("not called")


def test_run_metrics_export_the_step_figures_and_counters() -> None:
    from prometheus_client import generate_latest

    from dressage import metrics as names
    from dressage.orchestrator.metrics import RunMetrics

    run = RunMetrics("j")
    figures = StepFigures(
        dropped_groups=Counter({"retries_exhausted": 2}),
        staleness_failures=1,
        failed_attempts=Counter({"partial_rollout_staleness_exceeded": 1, "engine_unavailable": 5}),
        admissions_held=6,
        admission_wait_seconds=1.5,
    ).with_trainer_figures(
        {
            "reward": 0.5,
            "train_rollout_logprob_abs_diff": 0.02,
            "staleness/version_span_mean": 1.5,
            "staleness/version_span_max": 2.0,
            "staleness/version_span_min": 1.0,
            "groups": 4.0,
            "samples": 16.0,
            "mismatch_kl_k1": 0.25,
            "mismatch_kl_k3": 0.125,
            "off_policy_clipped_fraction": 0.5,
            "off_policy_masked_fraction": 0.375,
            "is_ess_fraction": 0.75,
            "loss": 7.0,  # not a declared figure: not taken
        }
    )
    assert figures.reward == 0.5
    assert figures.groups == 4
    record = StepRecord(step=3, version="v3", figures=figures)
    run.observe(record, version_ordinal=3)
    text = generate_latest(run.registry).decode()
    expected = [
        f"{names.TRAIN_STEP} 3.0",
        f"{names.WEIGHT_VERSION} 3.0",
        f'{names.WEIGHT_VERSION_INFO}{{version="v3"}} 1.0',
        f"{names.REWARD_MEAN} 0.5",
        f"{names.TRAIN_ROLLOUT_LOGPROB_ABS_DIFF} 0.02",
        f"{names.STALENESS_VERSION_SPAN_MEAN} 1.5",
        f"{names.STALENESS_VERSION_SPAN_MAX} 2.0",
        f"{names.STALENESS_VERSION_SPAN_MIN} 1.0",
        f'{names.DROPPED_GROUPS}{{reason="retries_exhausted"}} 2.0',
        f"{names.STALENESS_FAILURES} 1.0",
        f'{names.ROLLOUT_FAILED_ATTEMPTS}{{reason="engine_unavailable"}} 5.0',
        f"{names.ROLLOUT_GROUPS_COMPLETED} 4.0",
        f"{names.TRAINED_SAMPLES} 16.0",
        f"{names.MISMATCH_KL_K1} 0.25",
        f"{names.MISMATCH_KL_K3} 0.125",
        f"{names.OFF_POLICY_CLIPPED_FRACTION} 0.5",
        f"{names.OFF_POLICY_MASKED_FRACTION} 0.375",
        f"{names.IS_ESS_FRACTION} 0.75",
        f"{names.ROLLOUT_ADMISSIONS_HELD} 6.0",
        f"{names.ROLLOUT_ADMISSION_WAIT_SECONDS} 1.5",
    ]
    lines = text.splitlines()
    for line in expected:
        assert line in lines, line


def test_a_short_runs_first_and_last_reward_come_from_separate_steps() -> None:
    """With 3 steps the windows are 1 step each (min(10, 3 // 2)): the first and the last
    reward differ as the steps' rewards do, instead of both averaging all three steps."""
    steps = [_record(step, reward).to_dict() for step, reward in enumerate([0.1, 0.5, 0.9], 1)]
    summary = summarize(steps)
    assert summary["reward_window"] == 1
    assert summary["reward_first"] == pytest.approx(0.1)
    assert summary["reward_last"] == pytest.approx(0.9)
    long = [_record(step, 0.0).to_dict() for step in range(1, 31)]
    assert summarize(long)["reward_window"] == 10
    assert summarize(long[:1])["reward_window"] == 1


def test_plots_have_human_titles_units_and_whole_step_ticks() -> None:
    """No title is a raw metric key, every plot names its y unit, and a 3-step run's x ticks
    are whole steps."""
    from matplotlib.figure import Figure

    from dressage.runner.report import PLOTS, plot_axes

    steps = [_record(step, 0.1 * step).to_dict() for step in range(1, 4)]
    keys = {key for plot in PLOTS.values() for key, _ in plot.series}
    for plot in PLOTS.values():
        assert plot.title not in keys
        assert "_" not in plot.title
        assert "/" not in plot.title
        assert plot.title[0].isupper()
        assert plot.ylabel
    for filename, plot in PLOTS.items():
        ax = Figure().add_subplot()
        plot_axes(ax, plot, steps)
        ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
        assert ticks, filename
        assert all(float(t).is_integer() for t in ticks), (filename, ticks)
        assert ax.get_title() == plot.title
        labels = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
        assert not keys & set(labels), filename


def test_the_report_plots_the_token_ledger_stacked_with_the_runs_end(tmp_path: Path) -> None:
    """`token_ledger.png` stacks each step's accounts, and the whole run's as read at its end;
    the summary sums the steps' ledger entries."""
    history = History(tmp_path)
    for step in (1, 2):
        figures = StepFigures(
            ledger_tokens=Counter({"trained": 10 * step, "dropped.stale_version": step})
        )
        history.append(StepRecord(step=step, version=f"v{step}", figures=figures).to_dict())
    assert summarize(history.read())["ledger_tokens"] == {
        "trained": 30,
        "dropped.stale_version": 3,
    }
    end = {"accounts": {"trained": 30, "dropped": 3, "surplus": 5}, "engines_generated": 38}
    report = json.loads(write_report(tmp_path, {"name": "j"}, {"token_ledger": end}).read_text())
    assert "token_ledger.png" in report["plots"]
    assert report["token_ledger"] == end
    assert (tmp_path / "token_ledger.png").stat().st_size > 1000
