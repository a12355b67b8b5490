"""The end of a run: its failures by reason, each named by what it counts; the warnings that
were counted but not logged; and a run in which no trained sample got a real reward."""

from __future__ import annotations

from collections import Counter

from dressage.api.figures import StepFigures
from dressage.orchestrator.loop import StepRecord
from dressage.runner.report import no_real_reward, run_summary, summarize, with_unrecorded


def _steps(*figures: StepFigures) -> list[dict[str, object]]:
    return [
        StepRecord(step=i + 1, version=f"v{i + 1}", figures=f).to_dict()
        for i, f in enumerate(figures)
    ]


def test_the_summary_counts_failures_by_reason_and_says_what_each_count_counts() -> None:
    steps = _steps(
        StepFigures(
            samples=16,
            failed_attempts=Counter({"no_healthy_engine": 6}),
            failed_groups=Counter({"no_healthy_engine": 2}),
            dropped_groups=Counter({"retries_exhausted": 1, "shutdown": 9}),
            reward_failed_samples=Counter({"reward_raised": 3}),
        ),
        StepFigures(samples=16, reward_failed_samples=Counter({"reward_raised": 1})),
    )
    lines = run_summary(
        summarize(steps),
        bad_rows={"missing_column": 25, "not_json": 2},
        suppressed={"repeated user-code failures": 3, "bad dataset rows": 7},
    )
    assert lines == [
        "run summary (2 steps, 32 samples trained):",
        "  samples trained with reward 0 because their reward call failed: 4 of 32 "
        "(reward_raised 4)",
        "  failed prompt-group attempts (each retry counts one): 6 (no_healthy_engine 6)",
        "  prompt groups with a failed attempt: 2 (no_healthy_engine 2)",
        "  prompt groups dropped: 1 (retries_exhausted 1)",
        "  dataset rows skipped as unusable: 27 (missing_column 25, not_json 2)",
        "  not logged, counted only: 3 repeated user-code failures",
        "  not logged, counted only: 7 bad dataset rows",
    ]


def test_a_clean_run_has_no_summary() -> None:
    # Groups still in flight when the run ends are dropped at shutdown: not a failure.
    summary = summarize(_steps(StepFigures(samples=16, dropped_groups=Counter({"shutdown": 4}))))
    assert run_summary(summary, bad_rows={}, suppressed={"anything": 0}) == []


def test_a_run_whose_every_reward_call_failed_got_no_real_reward() -> None:
    every = _steps(
        StepFigures(samples=8, reward_failed_samples=Counter({"reward_raised": 8})),
        StepFigures(samples=8, reward_failed_samples=Counter({"reward_timeout": 8})),
    )
    assert no_real_reward(summarize(every))
    one_real = _steps(
        StepFigures(samples=8, reward_failed_samples=Counter({"reward_raised": 8})),
        StepFigures(samples=8, reward_failed_samples=Counter({"reward_raised": 7})),
    )
    assert not no_real_reward(summarize(one_real))
    assert not no_real_reward(summarize([]))  # nothing trained: nothing to judge


def test_failures_counted_after_the_last_step_reach_the_summary() -> None:
    # The breaker stopped the run before its first step: the collector's counts are all
    # there is, and the summary says them.
    unrecorded = StepFigures(
        failed_attempts=Counter({"environment_raised": 125}),
        failed_groups=Counter({"environment_raised": 32}),
        dropped_groups=Counter({"retries_exhausted": 16, "rollout_broken": 16}),
        samples=-4,  # a trainer figure: not the collector's, left out
    )
    summary = with_unrecorded(summarize([]), unrecorded)
    assert run_summary(summary) == [
        "run summary (0 steps, 0 samples trained):",
        "  failed prompt-group attempts (each retry counts one): 125 (environment_raised 125)",
        "  prompt groups with a failed attempt: 32 (environment_raised 32)",
        "  prompt groups dropped: 32 (retries_exhausted 16, rollout_broken 16)",
    ]
    steps = _steps(StepFigures(samples=8, failed_attempts=Counter({"engine_error": 2})))
    added = with_unrecorded(summarize(steps), StepFigures(failed_attempts=Counter({"x": 1})))
    assert added["failed_attempts"] == {"engine_error": 2, "x": 1}
    assert added["samples"] == 8
