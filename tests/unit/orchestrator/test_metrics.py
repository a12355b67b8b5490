"""The job's `/metrics`: the reward's parts as a gauge labelled `part`, the failures named by
what they count, the dataset's skipped rows by reason, and the figures the engines' autoscaler
reads (the wall seconds of the trainer's steps and, of those, the seconds it waited for
batches, summed over steps)."""

from __future__ import annotations

from collections import Counter

from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.api.figures import StepFigures, figure
from dressage.orchestrator.loop import StepRecord
from dressage.orchestrator.metrics import RunMetrics


def _lines(run: RunMetrics) -> list[str]:
    return generate_latest(run.registry).decode().splitlines()


def test_reward_parts_are_a_gauge_labelled_by_part() -> None:
    assert names.REWARD_PART == "dressage_reward_part"
    assert figure("reward_parts").label == "part"
    run = RunMetrics("j")
    for step, parts in ((1, {"correct": 0.25, "short": 1.0}), (2, {"correct": 0.75})):
        figures = StepFigures(reward_parts=parts, samples=4)
        run.observe(StepRecord(step=step, version=f"v{step}", figures=figures), step)
    lines = _lines(run)
    assert 'dressage_reward_part{part="correct"} 0.75' in lines
    assert 'dressage_reward_part{part="short"} 1.0' in lines
    help_line = next(x for x in lines if x.startswith("# HELP dressage_reward_part "))
    assert "over the batch's samples" in help_line
    assert help_line.endswith(", by part (reward)")


def test_failures_are_exported_per_attempt_per_group_and_per_trained_sample() -> None:
    run = RunMetrics("j")
    figures = StepFigures(
        failed_attempts=Counter({"reward_raised": 8}),
        failed_groups=Counter({"reward_raised": 2}),
        reward_failed_samples=Counter({"reward_timeout": 3}),
        samples=16,
    )
    run.observe(StepRecord(step=1, version="v1", figures=figures), 1)
    lines = _lines(run)
    assert names.ROLLOUT_FAILED_ATTEMPTS == "dressage_rollout_failed_attempts_total"
    assert f'{names.ROLLOUT_FAILED_ATTEMPTS}{{reason="reward_raised"}} 8.0' in lines
    assert f'{names.ROLLOUT_FAILED_GROUPS}{{reason="reward_raised"}} 2.0' in lines
    assert f'{names.REWARD_FAILED_SAMPLES}{{reason="reward_timeout"}} 3.0' in lines
    helps = {x.split()[2]: x for x in lines if x.startswith("# HELP")}
    assert "each retry counting one" in helps[names.ROLLOUT_FAILED_ATTEMPTS]
    assert "once per reason" in helps[names.ROLLOUT_FAILED_GROUPS]
    assert "at most the batch's samples" in helps[names.REWARD_FAILED_SAMPLES]


def test_the_datasets_bad_rows_are_counted_by_reason() -> None:
    run = RunMetrics("j")
    run.set_dataset_bad_rows({"missing_column": 2, "not_json": 1})
    lines = _lines(run)
    assert f'{names.DATASET_BAD_ROWS}{{reason="missing_column"}} 2.0' in lines
    assert f'{names.DATASET_BAD_ROWS}{{reason="not_json"}} 1.0' in lines


def _record(step: int, wait: float, train: float, publish: float) -> StepRecord:
    return StepRecord(
        step=step,
        version=f"v{step}",
        rollout_seconds=wait,
        train_seconds=train,
        publish_seconds=publish,
    )


def test_step_and_batch_wait_seconds_add_up_over_steps() -> None:
    run = RunMetrics("j")
    text = generate_latest(run.registry).decode()
    # Exported at 0 before the first step: the autoscaler sees the series from the start.
    assert f"{names.TRAINER_STEP_SECONDS} 0.0" in text
    run.observe(_record(1, wait=3.0, train=1.5, publish=0.5), version_ordinal=1)
    run.observe(_record(2, wait=0.25, train=1.5, publish=0.25), version_ordinal=2)
    text = generate_latest(run.registry).decode()
    assert f"{names.TRAINER_STEP_SECONDS} 7.0" in text
    assert f"{names.TRAINER_BATCH_WAIT_SECONDS} 3.25" in text
