"""The long-tail benchmark's figures, from histories alone: what each run's figures mean."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _long_tail_report as report  # noqa: E402
import long_tail  # noqa: E402
from _runs import EngineSample, engine_utilisation, percentile  # noqa: E402


def _step(
    step: int, seconds: float, *, spans: dict[int, int], reward: float = 0.5
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "step": step,
        "reward": reward,
        "samples": float(sum(spans.values())),
        "trained_tokens": 10.0 * sum(spans.values()),
        "train_rollout_logprob_abs_diff": 0.01 * step,
        "rollout_seconds": seconds - 1.0,
        "train_seconds": 0.75,
        "publish_seconds": 0.25,
        "dropped_groups": {"stale_version": 1} if step == 2 else {},
        "staleness_failures": 1,
        "failed_groups": 0,
        "admissions_held": 2,
    }
    for span, n in spans.items():
        record[f"staleness/version_span_samples/{span}"] = float(n)
    return record


def test_run_figures_cover_the_steps_after_the_warm_up_and_the_reward_curve_every_step() -> None:
    history = [
        _step(1, 10.0, spans={1: 8}),
        _step(2, 2.0, spans={1: 6, 2: 2}, reward=0.25),
        _step(3, 4.0, spans={1: 5, 3: 3}, reward=0.75),
    ]
    engine = {"engine_tokens": 320.0, "engine_prefill_tokens": 64.0, "cpu_s_engine": 0.16}
    figures = long_tail.run_figures(history, engine, warmup=1)
    assert figures["samples_per_s"] == pytest.approx(16 / 6.0)
    assert figures["median_step_s"] == pytest.approx(3.0)
    assert figures["version_spans"] == {"1": 11, "2": 2, "3": 3}
    assert figures["multi_version_share"] == pytest.approx(5 / 16)
    assert figures["max_version_span"] == 3
    assert figures["dropped_total"] == 1
    assert figures["staleness_failures"] == 2
    assert figures["logprob_abs_diff"] == pytest.approx(0.025)
    assert figures["trained_mean_response_tokens"] == pytest.approx(10.0)
    assert figures["engine_tokens_per_trained_token"] == pytest.approx(320 / 160)
    assert figures["prefill_tokens_per_trained_sample"] == pytest.approx(64 / 16)
    assert figures["cpu_ms_per_sample_engine"] == pytest.approx(10.0)
    assert figures["reward_curve"] == [(10.0, 0.5), (12.0, 0.25), (16.0, 0.75)]
    assert figures["reward_late"] == pytest.approx(0.5)  # steps ending at >= 8 s: all three
    later = long_tail.run_figures(history, engine, warmup=2)
    assert later["samples_per_s"] == pytest.approx(8 / 4.0)
    assert later["dropped_total"] == 0


def test_length_bias_is_trained_against_generated_mean_length_after_the_warm_up() -> None:
    """Generated 20 samples of 16 tokens in the measured steps (long ones among them, two of
    those dropped at the sink), trained 16 of 10 tokens: a bias of 10 / 16."""
    history = [
        _step(1, 10.0, spans={1: 8}),
        _step(2, 2.0, spans={1: 8}),
        _step(3, 2.0, spans={1: 8}),
    ]
    for record in history[1:]:
        record.update(
            generated_tokens=160.0,
            generated_samples=10.0,
            generated_samples_by_length={"le16": 8, "le256": 1, "gt256": 1},
            dropped_samples_by_length={"le256": 1},
        )
    figures = long_tail.run_figures(history, {}, warmup=1)
    assert figures["generated_mean_response_tokens"] == pytest.approx(16.0)
    assert figures["trained_mean_response_tokens"] == pytest.approx(10.0)
    assert figures["length_bias"] == pytest.approx(10 / 16)
    assert (figures["long_samples_generated"], figures["long_samples_dropped"]) == (4, 2)
    block = report.length_lines(
        {
            "stated_mean_response_tokens": 20.0,
            "summary": {"x": {"label": "x", **long_tail.summarize([figures])}},
        }
    )
    assert "| x | 16.0 | 10.0 | 0.625 | 0.500 | 2 of 4 | - |" in block


def test_the_ledger_per_trained_token_sits_beside_the_length_bias() -> None:
    """The steady steps' ledger: 160 trained, 40 dropped, 20 refused; the engine generated 240
    tokens over them, 20 more than the records hold (the proxy's side, in flight)."""
    history = [_step(1, 10.0, spans={1: 8}), _step(2, 2.0, spans={1: 8})]
    history[0]["ledger_tokens"] = {"trained": 999}  # the warm-up: left out
    history[1]["ledger_tokens"] = {
        "trained": 160,
        "dropped.stale_version": 40,
        "refused.partial_rollout_staleness_exceeded": 20,
    }
    figures = long_tail.run_figures(history, {"engine_tokens": 240.0}, warmup=1)
    per = figures["ledger_per_trained_token"]
    assert per == pytest.approx(
        {
            "trained": 1.0,
            "masked": 0.0,
            "dropped": 0.25,
            "refused": 0.125,
            "aborted": 0.0,
            "evaluation": 0.0,
            "surplus": 0.0,
            "unseen": 0.125,
        }
    )
    block = report.length_lines(
        {"stated_mean_response_tokens": 20.0, "summary": {"x": {
            "label": "x", **long_tail.summarize([figures])
        }}}
    )
    assert any(line.endswith("| 0.00 / 0.25 / 0.12 / 0.00 / 0.12 |") for line in block)


def test_engine_utilisation_is_the_share_of_decode_slots_and_of_time_used() -> None:
    def sample(step: int, at: float, slot_s: float, active_s: float) -> EngineSample:
        stats = {
            "slot_seconds": slot_s,
            "active_seconds": active_s,
            "tokens": 0,
            "prefill_tokens": 0,
        }
        return EngineSample(step, at, stats, max_batch_size=4)

    samples = [sample(0, 0.0, 0.0, 0.0), sample(1, 10.0, 3.0, 2.0), sample(3, 20.0, 23.0, 7.0)]
    figures = engine_utilisation(samples)
    assert figures["engine_busy_fraction"] == pytest.approx(20.0 / (10.0 * 4))
    assert figures["engine_active_fraction"] == pytest.approx(0.5)
    assert engine_utilisation(samples[:2])["engine_busy_fraction"] is None


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    assert percentile([], 99) is None


def test_each_setting_gets_the_jobs_mode_staleness_and_placement() -> None:
    assert long_tail.BY_KEY["sync"].warmup_steps == 1
    assert long_tail.BY_KEY["partial1+adm"].warmup_steps == 3
    job = long_tail.job_for(long_tail.BY_KEY["partial1+adm"], "separate", 0, max_steps=50)
    spec = job["spec"]
    assert spec["rollout"]["mode"] == "partial_async"
    assert spec["staleness"] == {
        "keepVersions": 3,
        "maxPartialRolloutPreempts": 1,
        "admission": True,
    }
    assert spec["local"]["engineCpus"] == [0]
    assert spec["local"]["trainerCpus"] == [1]
    sync = long_tail.job_for(long_tail.BY_KEY["sync"], "unpinned", 0, max_steps=50)["spec"]
    assert sync["rollout"]["mode"] == "sync"
    assert not sync["proxy"]["partialRollout"]
    assert "maxPartialRolloutPreempts" not in sync["staleness"]
    assert "engineCpus" not in sync["local"]
    assert "trainerCpus" not in sync["local"]
    beside = long_tail.job_for(long_tail.BY_KEY["async"], "trainer-core", 0, max_steps=50)
    assert beside["spec"]["rollout"]["separateProcess"] is True
    assert beside["spec"]["local"]["rolloutCpus"] == spec["local"]["trainerCpus"] == [1]
    assert spec["local"]["rolloutCpus"] == spec["local"]["engineCpus"] == [0]
    inline = long_tail.job_for(long_tail.BY_KEY["async"], "inline", 0, max_steps=50)["spec"]
    assert inline["rollout"]["separateProcess"] is False
    assert inline["staleness"]["admission"] is False


@pytest.mark.parametrize("key", ["sync", "partial2+adm+mask"])
def test_the_balanced_job_is_the_async_speedup_ones_with_each_settings_staleness(key: str) -> None:
    from dressage.api.job import AsyncRLJob

    job = long_tail.job_for(long_tail.BY_KEY[key], "trainer-core", 0, max_steps=50, job="balanced")
    spec = AsyncRLJob.model_validate(job).spec  # a job `dressage run` takes
    assert spec.task.name == "arithmetic"
    assert spec.rollout.max_new_tokens == 4
    assert spec.evaluation is None
    assert spec.training.max_tokens_per_micro_batch == 16
    assert spec.local.engine_min_step_interval_ms == 100.0
    assert (spec.local.engine_cpus, spec.local.trainer_cpus) == ([0], [1])
    assert not spec.staleness.auto  # the setting's window, not the example's budget
    assert spec.staleness.keep_versions == 3
    partial = key != "sync"
    assert spec.proxy.partial_rollout is partial
    assert (spec.staleness.span_limit_policy.value == "mask_old_tokens") is partial
    assert long_tail.stated_mean_length("balanced") is None
    assert long_tail.stated_mean_length() == pytest.approx(16.24, abs=0.01)


def test_more_groups_in_flight_raise_the_proxys_admission_to_hold_them() -> None:
    from dressage.api.job import AsyncRLJob

    setting = long_tail.BY_KEY["partial2+adm+mask"]
    default = long_tail.job_for(setting, "trainer-core", 0, max_steps=50)["spec"]
    assert "maxConcurrency" not in default["proxy"]  # 32 groups of 8 fit the default 256
    job = long_tail.job_for(setting, "trainer-core", 0, max_steps=50, concurrency=64)
    spec = AsyncRLJob.model_validate(job).spec  # the job's own check admits it
    assert spec.rollout.concurrency == 64
    assert spec.proxy.max_concurrency == 64 * 8


def _entry(label: str, rate: float, over: float, span: int, limit: int) -> dict[str, Any]:
    return {
        "label": label,
        "samples_per_s": rate,
        "over_best_sync": over,
        "engine_busy_fraction": 0.5,
        "engine_active_fraction": 0.9,
        "median_step_s": 1.0,
        "p99_step_s": 2.0,
        "version_spans": {"1": 90, str(span): 10} if span > 1 else {"1": 100},
        "max_version_span": span,
        "version_limit": limit,
        "logprob_abs_diff": 0.01,
        "dropped_per_run": 2,
        "staleness_failures": 1,
        "trained_mean_response_tokens": 12.0,
        "reward_late": 0.4,
        "repeats": 3,
    }


def _results(summary: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "quick": False,
        "repeats": 3,
        "seconds_per_run": 16,
        "elapsed_s": 600,
        "load_average": {"min": 0.5, "max": 2.0},
        "machine": {"cpus": 2},
        "best_sync_placement": "separate",
        "sync_search": {"separate": {"samples_per_s": 20.0}, "inline": {"samples_per_s": 18.0}},
        "target_speedup": 2.5,
        "keep_versions": 2,
        "concurrency": 32,
        "stated_mean_response_tokens": 16.24,
        "summary": summary,
    }


def test_the_verdict_names_the_fastest_async_setting_and_checks_its_span() -> None:
    results = _results(
        {
            "sync": _entry("sync", 20.0, 1.0, 1, 1),
            "partial2": _entry("partial, preempts 2", 60.0, 3.0, 3, 3),
            "async": _entry("fully async", 30.0, 1.5, 1, 1),
        }
    )
    assert "partial, preempts 2, 3.00x" in report.verdict(results)
    assert "target met" in report.verdict(results)
    results["summary"]["partial2"]["max_version_span"] = 4  # over its limit
    assert "target not met" in report.verdict(results)
    block = report.render_markdown(results, "plot.png")
    assert block.startswith(report.BEGIN)
    assert block.rstrip().endswith(report.END)
    assert "| partial, preempts 2 | 60.0 | 3.00x | 0.50 | 0.90 |" in block
    assert "90.0 / 0.0 / 10.0 / 0.0" in block
    assert "separate 20.0, inline 18.0" in block


def test_update_readme_replaces_only_the_generated_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{report.BEGIN}\nold\n{report.END}\nafter\n")
    report.update_readme(readme, f"{report.BEGIN}\nnew\n{report.END}\n")
    assert readme.read_text() == f"before\n{report.BEGIN}\nnew\n{report.END}\nafter\n"
    readme.write_text("no block")
    with pytest.raises(ValueError, match="no long-tail block"):
        report.update_readme(readme, "x")


def test_the_longer_runs_report_reward_in_wall_clock_windows() -> None:
    results = _results({"sync": _entry("sync", 20.0, 1.0, 1, 1)})
    results["learning_seconds"] = 60
    results["learning"] = {
        "sync": {
            "steps": 4,
            "reward_curve": [(10.0, 0.2), (25.0, 0.4), (40.0, 0.5), (61.0, 0.9)],
            "logprob_abs_diff": 0.0,
            "trained_mean_response_tokens": 16.0,
        }
    }
    lines = report.learning_lines(results)
    assert "| setting | steps | 0-30 s | 30-60 s | 60-90 s | logprob diff |" in lines[3]
    assert lines[-1] == "| sync | 4 | 0.300 (2) | 0.500 (1) | 0.900 (1) | 0.0000 | 16.0 |"
    assert report.learning_lines(_results({})) == []


def test_another_keep_versions_run_is_tabulated_setting_by_setting() -> None:
    ours = _results(
        {"sync": _entry("sync", 20.0, 1.0, 1, 1), "p": _entry("partial", 50.0, 2.5, 3, 3)}
    )
    ours["keep_versions"] = 3
    ours["compare_with"] = "benchmarks/results/long_tail_keep2.json"
    other = _results({"p": _entry("partial", 30.0, 1.5, 2, 3), "q": _entry("q", 1, 1, 1, 1)})
    lines = report.compare_lines(ours, other)
    assert "`keepVersions: 2` (`benchmarks/results/long_tail_keep2.json`" in lines[1]
    assert lines[5].startswith("| partial | 1.50x / 2.50x | ")
    assert len([x for x in lines if x.startswith("| ") and "---" not in x]) == 2  # head, p
    assert report.compare_lines(ours, _results({})) == []


def test_the_benchmarks_page_quotes_the_committed_results_json() -> None:
    """`docs/benchmarks.md`'s generated block is what `--render
    benchmarks/results/long_tail.json` writes: an edit of either alone (a figure typed in by
    hand, a rerun not rendered) fails, and the plot it names exists."""
    results = json.loads(long_tail.RESULTS.read_text())
    other = None
    if results.get("compare_with"):
        other = json.loads((ROOT / results["compare_with"]).read_text())
    block = report.render_markdown(
        results, "benchmarks/results/long_tail.png", compare=other
    ).rstrip("\n")
    assert long_tail.README == ROOT / "docs" / "benchmarks.md"
    readme = long_tail.README.read_text()
    start, end = readme.index(report.BEGIN), readme.index(report.END) + len(report.END)
    assert readme[start:end] == block
    assert (ROOT / "benchmarks" / "results" / "long_tail.png").is_file()


def test_the_staleness_cost_compares_equal_steps_and_equal_wall_clock() -> None:
    results = _results({"sync": _entry("sync", 20.0, 1.0, 1, 1)})
    results["summary"]["p1"] = _entry("partial, preempts 1", 40.0, 2.0, 2, 2)
    results["learning_seconds"] = 8
    results["learning"] = {
        "sync": {
            "steps": 2,
            "reward_curve": [(5.0, 0.2), (10.0, 0.6)],
            "logprob_abs_diff": 0.0,
            "trained_mean_response_tokens": 16.0,
        },
        "p1": {
            "steps": 4,
            "reward_curve": [(2.0, 0.1), (4.0, 0.1), (6.0, 0.4), (8.0, 0.6)],
            "logprob_abs_diff": 0.002,
            "trained_mean_response_tokens": 15.0,
        },
    }
    line = report.staleness_cost(results)
    assert "(partial, preempts 1 against sync" in line
    assert "over the first 2 steps of each, the same number of updates, 0.100 against 0.400" in line
    # two standard errors: 2 * sqrt((0 + 0.08) / 2) = 0.4
    assert "a difference of -0.300, within the batch-to-batch noise (+-0.400)" in line
    assert "4 steps against 2, 0.300 against 0.400" in line
    assert "difference, 0.0020 against 0.0000" in line
    assert line in report.render_markdown(results, "plot.png")
    results["learning"]["sync"]["reward_curve"] = [(5.0, 0.6), (10.0, 0.6)]
    assert "beyond the batch-to-batch noise" in report.staleness_cost(results)
    assert "each update learned less" in report.staleness_cost(results)
    assert report.staleness_cost(_results({})) == ""
