"""The trainer's figures the engines' autoscaler reads: the wall seconds of its steps and, of
those, the seconds it waited for batches, summed over steps."""

from __future__ import annotations

from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.orchestrator.loop import StepRecord
from dressage.orchestrator.metrics import RunMetrics


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
